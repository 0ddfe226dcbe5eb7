/* The GPU timer's C side: see gpu_timer.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gpu_timer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_timer.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
    GpuTraceSettings settings;
    char cupti_paths[2048];
    const char *problem;
    CuptiActivity cupti;     /* the records of either source, CUPTI's or the Vulkan layer's */
    int device;              /* the device kind timed (GPU_DEVICE_*): the first traced compute's */
    uint32_t n_computes;      /* computes begun, traced or not */
    uint32_t traced_computes; /* of them, in windows */
    int window_open, window_reason;
    int window_left;          /* computes the open window still traces */
    uint32_t since_window;    /* computes since the last window closed */
    int64_t overhead_ns;      /* attaching, flushing, detaching: for the window being gathered */
    Array computes, node_calls; /* the window being gathered */
    /* the windows closed and not yet taken */
    Array taken_computes, taken_calls, taken_activities, taken_api, taken_names, taken_name_lengths;
    uint32_t taken_first_name, next_name_id;
    int64_t taken_overhead_ns;
    uint64_t taken_dropped, taken_invalid;
    int taken_reason, waiting;
} timer = {.settings = {.mode = GPU_TRACE_OFF}};

/* The traced compute in flight on this thread: its nodes by address, and the calls noted. */
typedef struct {
    int active;
    uint32_t compute;
    uint64_t *keys;
    uint32_t *values; /* node index + 1 (0: empty slot) */
    size_t capacity;
    Array calls;
    int call_open; /* a traced compute of the call in flight here waits for the call's end */
} ThreadCompute;
static __thread ThreadCompute current;
/* Traced computes running now, in any thread: ggml_is_empty is called for every node of every
   compute, and while nothing is traced a node call costs this one load. */
static int traced_running;

/* ---- settings and state ------------------------------------------------------------------- */

static void before_fork(void);
static void after_fork_in_parent(void);
static void after_fork_in_child(void);

void gpu_configure(const GpuTraceSettings *settings) {
    pthread_mutex_lock(&lock);
    timer.settings = *settings;
    snprintf(timer.cupti_paths, sizeof timer.cupti_paths, "%s", settings->cupti_paths ? settings->cupti_paths : "");
    timer.settings.cupti_paths = timer.cupti_paths;
    if (timer.settings.window < 1) timer.settings.window = 1;
    if (timer.settings.period < 1) timer.settings.period = 1;
    if (!timer.computes.item_size) {
        array_init(&timer.computes, sizeof(GpuComputeRecord));
        array_init(&timer.node_calls, sizeof(GpuNodeCall));
        array_init(&timer.taken_computes, sizeof(GpuComputeRecord));
        array_init(&timer.taken_calls, sizeof(GpuNodeCall));
        array_init(&timer.taken_activities, sizeof(GpuActivityRecord));
        array_init(&timer.taken_api, sizeof(GpuApiRecord));
        array_init(&timer.taken_names, 1);
        array_init(&timer.taken_name_lengths, sizeof(uint32_t));
        cupti_records_init(&timer.cupti);
        timer.next_name_id = 1;
        pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    }
    pthread_mutex_unlock(&lock);
}

int gpu_mode(void) {
    return timer.settings.mode;
}

const char *gpu_cupti_path(void) {
    return timer.cupti.path;
}

uint32_t gpu_cupti_version(void) {
    return timer.cupti.version;
}

int gpu_own_clock(void) {
    return timer.cupti.own_clock;
}

const char *gpu_problem(void) {
    return timer.problem;
}

int gpu_device(void) {
    return timer.device;
}

int gpu_device_named(const char *name) {
    if (name && strncmp(name, "CUDA", 4) == 0) return GPU_DEVICE_CUDA;
    if (name && strncmp(name, "Vulkan", 6) == 0) return GPU_DEVICE_VULKAN;
    return GPU_DEVICE_NONE;
}

const char *gpu_vulkan_layer_path(void) {
    return vulkan_layer_path();
}

/* ---- the source of the records: CUPTI, or the Vulkan layer -------------------------------- */

static const char *source_attach(void) {
    if (timer.device == GPU_DEVICE_VULKAN) {
        const char *problem = vulkan_load();
        return problem ? problem : vulkan_attach(&timer.cupti);
    }
    const char *problem = cupti_load(&timer.cupti, timer.cupti_paths);
    return problem ? problem : cupti_attach(&timer.cupti);
}

static const char *source_flush(void) {
    return timer.device == GPU_DEVICE_VULKAN ? vulkan_flush(&timer.cupti) : cupti_flush(&timer.cupti);
}

static const char *source_detach(void) {
    return timer.device == GPU_DEVICE_VULKAN ? vulkan_detach(&timer.cupti)
                                             : cupti_detach(&timer.cupti, timer.settings.finalize);
}

static void source_stop(void) {
    if (timer.device == GPU_DEVICE_VULKAN) {
        vulkan_stop(&timer.cupti);
    } else {
        cupti_stop(&timer.cupti);
    }
}

/* GPU times stop for good (the program goes on), CUPTI's records with them: nothing is left
   recording, whatever failed (an attach half done, a detach refused, memory); lock held. */
static void give_up(const char *problem) {
    static char kept[768];
    if (timer.problem) return;
    snprintf(kept, sizeof kept, "%s", problem);
    timer.problem = kept;
    source_stop();
    timer.window_open = 0;
    timer.computes.count = timer.node_calls.count = 0; /* the window being gathered: never whole now */
}

/* fork: the lock and CUPTI's records lock are taken around it, so the child's copies are whole. */
static void before_fork(void) {
    pthread_mutex_lock(&lock);
    cupti_lock(&timer.cupti);
}

static void after_fork_in_parent(void) {
    cupti_unlock(&timer.cupti);
    pthread_mutex_unlock(&lock);
}

/* The child runs none of CUPTI's threads and does not own the parent's device or records:
   its timer is off, the records it inherited dropped (the parent hands them over). */
static void after_fork_in_child(void) {
    cupti_forget_after_fork(&timer.cupti);
    if (!timer.problem) timer.problem = "a forked child process: its GPU is not timed";
    timer.window_open = timer.waiting = 0;
    timer.computes.count = timer.node_calls.count = 0;
    timer.taken_computes.count = timer.taken_calls.count = timer.taken_activities.count = 0;
    timer.taken_api.count = timer.taken_names.count = timer.taken_name_lengths.count = 0;
    current.active = current.call_open = 0;
    traced_running = 0;
    cupti_unlock(&timer.cupti);
    pthread_mutex_unlock(&lock);
}

/* ---- windows -------------------------------------------------------------------------------- */

/* Whether a new structure may open a window, or extend the open one: only while the computes
   traced stay within a tenth of all, plus a window (lock held). */
static int within_new_structure_cap(void) {
    return timer.traced_computes <= timer.n_computes / 10 + (uint32_t)timer.settings.window;
}

/* Whether the compute about to begin is traced, opening a window if one is due (lock held). */
static int traced_now(int new_structure) {
    GpuTraceSettings *s = &timer.settings;
    if (s->mode == GPU_TRACE_OFF || timer.problem) return 0;
    if (timer.window_open) {
        if (new_structure && s->mode == GPU_TRACE_WINDOWS && timer.window_left < s->window &&
            within_new_structure_cap()) {
            timer.window_left = s->window; /* a structure seen first inside the window: trace its start too */
        }
        return 1;
    }
    int reason = 0;
    if (s->mode == GPU_TRACE_EVERY) {
        reason = WINDOW_EVERY;
    } else if (timer.since_window >= (uint32_t)s->period) {
        reason = WINDOW_PERIODIC;
    } else if (new_structure && within_new_structure_cap()) {
        reason = WINDOW_NEW_STRUCTURE;
    }
    if (!reason) return 0;
    int64_t began = now_ns();
    const char *problem = source_attach();
    timer.overhead_ns += now_ns() - began;
    if (problem) {
        give_up(problem);
        return 0;
    }
    timer.window_open = 1;
    timer.window_reason = reason;
    timer.window_left = s->mode == GPU_TRACE_EVERY ? s->period : s->window;
    return 1;
}

static int add_node(ThreadCompute *c, uint64_t address, uint32_t index) {
    size_t i = (address * 0x9E3779B97F4A7C15ULL >> 20) & (c->capacity - 1);
    while (c->values[i] && c->keys[i] != address) i = (i + 1) & (c->capacity - 1);
    c->keys[i] = address;
    c->values[i] = index + 1;
    return 0;
}

static int64_t node_index_of(const ThreadCompute *c, uint64_t address) {
    if (!c->capacity) return -1;
    size_t i = (address * 0x9E3779B97F4A7C15ULL >> 20) & (c->capacity - 1);
    for (; c->values[i]; i = (i + 1) & (c->capacity - 1)) {
        if (c->keys[i] == address) return (int64_t)c->values[i] - 1;
    }
    return -1;
}

/* The thread's node table for this graph: every node by its address. 0, or -1 out of memory. */
static int index_nodes(ThreadCompute *c, void *graph, int n_nodes, void *(*node_at)(void *, int)) {
    size_t capacity = 1024;
    while (capacity < (size_t)n_nodes * 2) capacity *= 2;
    if (capacity > c->capacity) {
        uint64_t *keys = realloc(c->keys, capacity * sizeof *keys);
        if (keys) c->keys = keys;
        uint32_t *values = realloc(c->values, capacity * sizeof *values);
        if (values) c->values = values;
        if (!keys || !values) return -1;
        c->capacity = capacity;
    }
    memset(c->values, 0, c->capacity * sizeof *c->values);
    for (int i = 0; i < n_nodes; i++) add_node(c, (uint64_t)(uintptr_t)node_at(graph, i), (uint32_t)i);
    if (!c->calls.item_size) array_init(&c->calls, sizeof(GpuNodeCall));
    c->calls.count = 0;
    return 0;
}

int gpu_compute_begin(int device, uint32_t context_id, void *graph, int n_nodes, void *(*node_at)(void *, int),
                      int new_structure, int64_t start_ns) {
    pthread_mutex_lock(&lock);
    if (!timer.device) timer.device = device; /* one timer per process: the first GPU's */
    uint32_t compute = timer.n_computes++;
    int traced = device == timer.device && traced_now(new_structure);
    GpuComputeRecord *record = traced ? array_push(&timer.computes) : NULL;
    if (traced && !record) {
        give_up("out of memory");
        traced = 0;
    }
    if (traced) {
        *record = (GpuComputeRecord){start_ns,
                                     start_ns,
                                     0,
                                     compute,
                                     context_id,
                                     (uint32_t)pthread_self(),
                                     (uint32_t)n_nodes,
                                     new_structure ? COMPUTE_NEW_STRUCTURE : 0,
                                     0};
        current.call_open = 1;
        timer.traced_computes++;
        timer.window_left--;
    } else {
        timer.since_window++;
    }
    pthread_mutex_unlock(&lock);
    current.active = traced && index_nodes(&current, graph, n_nodes, node_at) == 0;
    current.compute = compute;
    if (current.active) __atomic_add_fetch(&traced_running, 1, __ATOMIC_RELAXED);
    return current.active;
}

void gpu_node_call(const void *tensor, void *return_address) {
    if (!__atomic_load_n(&traced_running, __ATOMIC_RELAXED) || !current.active) return;
    int64_t index = node_index_of(&current, (uint64_t)(uintptr_t)tensor);
    if (index < 0) return;
    GpuNodeCall *call = array_push(&current.calls);
    if (call) {
        *call = (GpuNodeCall){
            now_ns(), (uint64_t)(uintptr_t)return_address, current.compute, (uint32_t)index, (uint32_t)pthread_self(),
            0};
    }
}

static void split_mark(const void *first_node, uint32_t flags) {
    if (!__atomic_load_n(&traced_running, __ATOMIC_RELAXED) || !current.active) return;
    int64_t index = node_index_of(&current, (uint64_t)(uintptr_t)first_node);
    if (index < 0) return;
    GpuNodeCall *call = array_push(&current.calls);
    if (call) *call = (GpuNodeCall){now_ns(), 0, current.compute, (uint32_t)index, (uint32_t)pthread_self(), flags};
}

void gpu_split_call(const void *first_node, int on_cpu) {
    split_mark(first_node, NODE_CALL_SPLIT | (on_cpu ? NODE_CALL_CPU : 0));
}

void gpu_split_done(const void *first_node, int on_cpu) {
    split_mark(first_node, NODE_CALL_SPLIT | NODE_CALL_SPLIT_END | (on_cpu ? NODE_CALL_CPU : 0));
}

void gpu_compute_end(int64_t end_ns) {
    if (!current.active) return;
    current.active = 0;
    __atomic_sub_fetch(&traced_running, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lock);
    for (size_t i = timer.computes.count; i-- > 0;) {
        GpuComputeRecord *record = &ARRAY_AT(timer.computes, GpuComputeRecord, i);
        if (record->compute == current.compute) {
            record->end_ns = end_ns;
            break;
        }
    }
    size_t n = current.calls.count;
    if (n && array_reserve(&timer.node_calls, n) == 0) {
        memcpy(timer.node_calls.items + timer.node_calls.count * sizeof(GpuNodeCall), current.calls.items,
               n * sizeof(GpuNodeCall));
        timer.node_calls.count += n;
    }
    pthread_mutex_unlock(&lock);
}

/* Append all of `from` to `to` and empty `from`. */
static int move_items(Array *to, Array *from) {
    if (from->count && array_reserve(to, from->count) != 0) return -1;
    memcpy(to->items + to->count * to->item_size, from->items, from->count * from->item_size);
    to->count += from->count;
    from->count = 0;
    return 0;
}

/* The window's records join the ones waiting to be taken (lock held). */
static void hand_over(int reason) {
    CuptiActivity *a = &timer.cupti;
    cupti_lock(a);
    if (!timer.waiting) {
        timer.taken_first_name = timer.next_name_id;
        timer.taken_reason = reason;
    }
    timer.next_name_id += (uint32_t)a->name_lengths.count;
    int failed = move_items(&timer.taken_computes, &timer.computes) ||
                 move_items(&timer.taken_calls, &timer.node_calls) ||
                 move_items(&timer.taken_activities, &a->activities) || move_items(&timer.taken_api, &a->api_calls) ||
                 move_items(&timer.taken_names, &a->names) || move_items(&timer.taken_name_lengths, &a->name_lengths);
    timer.taken_dropped += a->dropped;
    timer.taken_invalid += a->invalid;
    a->dropped = a->invalid = 0;
    cupti_unlock(a); /* before giving up: CUPTI's last buffers come back under that lock */
    if (failed) give_up("out of memory");
    timer.taken_overhead_ns += timer.overhead_ns;
    timer.overhead_ns = 0;
    timer.waiting = 1;
}

/* Hand the open window's records over: CUPTI flushes them and stays (`stay`: the window goes
   on), or detaches (the window closes). */
static int hand_over_window(int stay, void (*synchronize)(void *), void *data) {
    int64_t began = now_ns();
    if (synchronize) synchronize(data);
    const char *problem = stay ? source_flush() : source_detach();
    timer.overhead_ns += now_ns() - began;
    hand_over(timer.window_reason);
    timer.window_open = stay && !timer.problem;
    if (!stay) timer.window_left = 0;
    timer.since_window = 0;
    if (problem) give_up(problem);
    return 1;
}

/* Whether the open window holds as much as one take may (lock held). */
static int window_full(void) {
    cupti_lock(&timer.cupti);
    size_t activities = timer.cupti.activities.count;
    cupti_unlock(&timer.cupti);
    return timer.computes.count >= WINDOW_MAX_COMPUTES || activities >= WINDOW_MAX_ACTIVITIES;
}

/* The call on this thread ended: its traced computes learn when (lock held). */
static void end_call_of_computes(int64_t now) {
    uint32_t thread = (uint32_t)pthread_self();
    for (size_t i = timer.computes.count; i-- > 0;) {
        GpuComputeRecord *record = &ARRAY_AT(timer.computes, GpuComputeRecord, i);
        if (record->thread != thread) continue;
        if (record->call_end_ns) break;
        record->call_end_ns = now;
    }
    current.call_open = 0;
}

int gpu_call_done(void (*synchronize)(void *), void *data) {
    int64_t now = now_ns();
    pthread_mutex_lock(&lock);
    if (current.call_open) end_call_of_computes(now);
    int waiting = timer.waiting;
    if (timer.window_open && timer.window_left <= 0) {
        int every = timer.settings.mode == GPU_TRACE_EVERY; /* every: hand over, go on */
        waiting = hand_over_window(every, synchronize, data);
        if (every) timer.window_left = timer.settings.period;
    } else if (timer.window_open && window_full()) {
        waiting = hand_over_window(1, synchronize, data);
    }
    pthread_mutex_unlock(&lock);
    return waiting;
}

int gpu_finish(void) {
    pthread_mutex_lock(&lock);
    int waiting = timer.waiting;
    if (timer.window_open) waiting = hand_over_window(0, NULL, NULL);
    pthread_mutex_unlock(&lock);
    return waiting;
}

/* ---- taking --------------------------------------------------------------------------------- */

int gpu_take(GpuTake *out) {
    pthread_mutex_lock(&lock); /* held until gpu_take_done */
    if (!timer.waiting) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    if (timer.device == GPU_DEVICE_VULKAN) { /* the layer put its times on the recorder's clock */
        timer.cupti.own_clock = vulkan_clock(&timer.cupti.clock_uncertainty_ns);
        timer.cupti.clock_offset_ns = 0;
    }
    *out = (GpuTake){
        .computes = (const GpuComputeRecord *)timer.taken_computes.items,
        .n_computes = timer.taken_computes.count,
        .node_calls = (const GpuNodeCall *)timer.taken_calls.items,
        .n_node_calls = timer.taken_calls.count,
        .api_calls = (const GpuApiRecord *)timer.taken_api.items,
        .n_api_calls = timer.taken_api.count,
        .activities = (const GpuActivityRecord *)timer.taken_activities.items,
        .n_activities = timer.taken_activities.count,
        .name_lengths = (const uint32_t *)timer.taken_name_lengths.items,
        .n_names = timer.taken_name_lengths.count,
        .names = (const char *)timer.taken_names.items,
        .name_bytes = timer.taken_names.count,
        .first_name_id = timer.taken_first_name,
        .clock_offset_ns = timer.cupti.own_clock ? 0 : timer.cupti.clock_offset_ns,
        .clock_uncertainty_ns = timer.cupti.own_clock ? 0 : timer.cupti.clock_uncertainty_ns,
        .dropped = timer.taken_dropped,
        .invalid = timer.taken_invalid,
        .overhead_ns = timer.taken_overhead_ns,
        .reason = timer.taken_reason,
    };
    return 1;
}

void gpu_take_done(void) {
    timer.taken_computes.count = timer.taken_calls.count = timer.taken_activities.count = 0;
    timer.taken_api.count = timer.taken_names.count = timer.taken_name_lengths.count = 0;
    timer.taken_dropped = timer.taken_invalid = 0;
    timer.taken_overhead_ns = 0;
    timer.waiting = 0;
    pthread_mutex_unlock(&lock);
}

static int append(Array *out, const void *data, size_t size) {
    if (!size) return 0;
    if (array_reserve(out, size) != 0) return -1;
    memcpy(out->items + out->count, data, size);
    out->count += size;
    return 0;
}

int gpu_serialize(const GpuTake *t, Array *out) {
    GpuWindowHead head = {t->n_computes,      t->n_node_calls, t->n_api_calls,     t->n_activities,
                          t->n_names,         t->name_bytes,   t->clock_offset_ns, t->clock_uncertainty_ns,
                          t->first_name_id,   t->dropped,      t->invalid,         (uint64_t)t->overhead_ns,
                          (uint64_t)t->reason};
    return append(out, &head, sizeof head) || append(out, t->computes, t->n_computes * sizeof *t->computes) ||
                   append(out, t->node_calls, t->n_node_calls * sizeof *t->node_calls) ||
                   append(out, t->api_calls, t->n_api_calls * sizeof *t->api_calls) ||
                   append(out, t->activities, t->n_activities * sizeof *t->activities) ||
                   append(out, t->name_lengths, t->n_names * sizeof *t->name_lengths) ||
                   append(out, t->names, t->name_bytes)
               ? -1
               : 0;
}

int gpu_take_serialized(Array *out) {
    GpuTake take;
    if (!gpu_take(&take)) return 0;
    int failed = gpu_serialize(&take, out);
    gpu_take_done();
    return failed ? -1 : 1;
}
