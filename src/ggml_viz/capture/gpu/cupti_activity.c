/* CUPTI's activity records: see cupti_activity.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cupti_activity.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_abi.h"

static CuptiFunctions cupti;
/* The driver's calls too: a kernel launched with cuLaunchKernelEx (cuBLAS's) has no runtime call. */
static const int RECORD_KINDS[] = {CUPTI_ABI_KIND_CONCURRENT_KERNEL, CUPTI_ABI_KIND_RUNTIME, CUPTI_ABI_KIND_DRIVER,
                                   CUPTI_ABI_KIND_MEMCPY, CUPTI_ABI_KIND_MEMSET};
#define N_RECORD_KINDS (sizeof RECORD_KINDS / sizeof RECORD_KINDS[0])
static CuptiActivity *receiver; /* whose arrays CUPTI's buffers are emptied into */
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- kernel names, each stored once for the process ------------------------------------ */

/* Every name seen, by content: ids are their order of first sight, from 1. */
static struct {
    Array text;     /* the names, NUL-terminated, back to back */
    Array starts;   /* uint32 offset of name id-1 in text */
    uint32_t *slots; /* open addressing: id per slot (0 empty) */
    size_t capacity;
} known_names;

static uint64_t hash_text(const char *text) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *text; text++) h = (h ^ (uint8_t)*text) * 1099511628211ULL;
    return h;
}

static const char *name_of_id(uint32_t id) {
    return (const char *)known_names.text.items + ARRAY_AT(known_names.starts, uint32_t, id - 1);
}

static int grow_name_slots(void) {
    size_t capacity = known_names.capacity ? known_names.capacity * 2 : 1024;
    uint32_t *slots = calloc(capacity, sizeof *slots);
    if (!slots) return -1;
    for (uint32_t id = 1; id <= known_names.starts.count; id++) {
        size_t i = hash_text(name_of_id(id)) & (capacity - 1);
        while (slots[i]) i = (i + 1) & (capacity - 1);
        slots[i] = id;
    }
    free(known_names.slots);
    known_names.slots = slots;
    known_names.capacity = capacity;
    return 0;
}

uint32_t gpu_name_id(CuptiActivity *a, const char *name) {
    if (!name) name = "?";
    if ((known_names.starts.count + 1) * 2 > known_names.capacity && grow_name_slots() != 0) return 0;
    size_t i = hash_text(name) & (known_names.capacity - 1);
    for (; known_names.slots[i]; i = (i + 1) & (known_names.capacity - 1)) {
        if (strcmp(name_of_id(known_names.slots[i]), name) == 0) return known_names.slots[i];
    }
    size_t length = strlen(name);
    uint32_t *start = array_push(&known_names.starts), *new_length = array_push(&a->name_lengths);
    if (!start || !new_length || array_reserve(&known_names.text, length + 1) != 0 ||
        array_reserve(&a->names, length) != 0) {
        return 0;
    }
    *start = (uint32_t)known_names.text.count;
    memcpy(known_names.text.items + known_names.text.count, name, length + 1);
    known_names.text.count += length + 1;
    memcpy(a->names.items + a->names.count, name, length);
    a->names.count += length;
    *new_length = (uint32_t)length;
    known_names.slots[i] = (uint32_t)known_names.starts.count;
    return known_names.slots[i];
}

/* ---- records ------------------------------------------------------------------------------ */

static uint64_t u64_at(const uint8_t *record, size_t offset) {
    uint64_t value;
    memcpy(&value, record + offset, sizeof value);
    return value;
}

static uint32_t u32_at(const uint8_t *record, size_t offset) {
    uint32_t value;
    memcpy(&value, record + offset, sizeof value);
    return value;
}

void cupti_records_init(CuptiActivity *a) {
    array_init(&a->activities, sizeof(GpuActivityRecord));
    array_init(&a->api_calls, sizeof(GpuApiRecord));
    array_init(&a->names, 1);
    array_init(&a->name_lengths, sizeof(uint32_t));
    if (!known_names.text.item_size) {
        array_init(&known_names.text, 1);
        array_init(&known_names.starts, sizeof(uint32_t));
    }
}

void cupti_records_free(CuptiActivity *a) {
    array_free(&a->activities);
    array_free(&a->api_calls);
    array_free(&a->names);
    array_free(&a->name_lengths);
}

int cupti_convert_record(CuptiActivity *a, const uint8_t *record) {
    uint32_t kind = u32_at(record, 0);
    int64_t offset = a->own_clock ? 0 : a->clock_offset_ns; /* CUPTI's clock to the recorder's */
    if (kind == CUPTI_ABI_KIND_RUNTIME || kind == CUPTI_ABI_KIND_DRIVER) {
        int64_t start = (int64_t)u64_at(record, CUPTI_ABI_API_START), end = (int64_t)u64_at(record, CUPTI_ABI_API_END);
        if (!start || end < start) {
            a->invalid++;
            return 0;
        }
        GpuApiRecord *call = array_push(&a->api_calls);
        if (!call) return -1;
        *call = (GpuApiRecord){start - offset,
                               end - offset,
                               u32_at(record, CUPTI_ABI_API_CORRELATION),
                               u32_at(record, CUPTI_ABI_API_CBID),
                               u32_at(record, CUPTI_ABI_API_THREAD),
                               kind == CUPTI_ABI_KIND_DRIVER ? GPU_API_DRIVER : GPU_API_RUNTIME};
        return 1;
    }
    GpuActivityRecord out;
    memset(&out, 0, sizeof out);
    if (kind == CUPTI_ABI_KIND_CONCURRENT_KERNEL || kind == CUPTI_ABI_KIND_KERNEL) {
        out.kind = GPU_KERNEL;
        out.start_ns = (int64_t)u64_at(record, CUPTI_ABI_KERNEL_START);
        out.end_ns = (int64_t)u64_at(record, CUPTI_ABI_KERNEL_END);
        out.device = u32_at(record, CUPTI_ABI_KERNEL_DEVICE);
        out.stream = u32_at(record, CUPTI_ABI_KERNEL_STREAM);
        out.correlation_id = u32_at(record, CUPTI_ABI_KERNEL_CORRELATION);
        out.graph_node_id = u64_at(record, CUPTI_ABI_KERNEL_GRAPH_NODE);
        out.graph_id = u32_at(record, CUPTI_ABI_KERNEL_GRAPH);
        const char *name = (const char *)(uintptr_t)u64_at(record, CUPTI_ABI_KERNEL_NAME);
        out.name_id = gpu_name_id(a, name);
        if (!out.name_id) return -1;
    } else if (kind == CUPTI_ABI_KIND_MEMCPY || kind == CUPTI_ABI_KIND_MEMSET) {
        out.kind = kind == CUPTI_ABI_KIND_MEMCPY ? GPU_MEMCPY : GPU_MEMSET;
        out.copy_kind = kind == CUPTI_ABI_KIND_MEMCPY ? record[CUPTI_ABI_COPY_KIND] : 0;
        out.bytes = u64_at(record, CUPTI_ABI_COPY_BYTES);
        out.start_ns = (int64_t)u64_at(record, CUPTI_ABI_COPY_START);
        out.end_ns = (int64_t)u64_at(record, CUPTI_ABI_COPY_END);
        out.device = u32_at(record, CUPTI_ABI_COPY_DEVICE);
        out.stream = u32_at(record, CUPTI_ABI_COPY_STREAM);
        out.correlation_id = u32_at(record, CUPTI_ABI_COPY_CORRELATION);
        out.graph_node_id = u64_at(record, CUPTI_ABI_COPY_GRAPH_NODE);
        out.graph_id = u32_at(record, CUPTI_ABI_COPY_GRAPH);
    } else {
        return 0;
    }
    /* A record CUPTI could not complete (the device was reset, the process is ending) has no times. */
    if (!out.start_ns || out.end_ns < out.start_ns) {
        a->invalid++;
        return 0;
    }
    out.start_ns -= offset;
    out.end_ns -= offset;
    GpuActivityRecord *slot = array_push(&a->activities);
    if (!slot) return -1;
    *slot = out;
    return 1;
}

/* ---- CUPTI's buffers ----------------------------------------------------------------------- */

enum { BUFFER_BYTES = 8 << 20 };

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void buffer_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    pthread_mutex_lock(&records_lock);
    CuptiActivity *a = receiver;
    void *record = NULL;
    while (a && valid && cupti.next_record(buffer, valid, &record) == CUPTI_ABI_SUCCESS) {
        if (cupti_convert_record(a, record) < 0) a->dropped++;
    }
    size_t dropped = 0;
    if (a && cupti.dropped && cupti.dropped(context, stream, &dropped) == CUPTI_ABI_SUCCESS) a->dropped += dropped;
    pthread_mutex_unlock(&records_lock);
    free(buffer);
}

static uint64_t recorder_clock(void) {
    return (uint64_t)now_ns();
}

/* ---- loading, attaching, detaching --------------------------------------------------------- */

static int find_cudart(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (name && strncmp(name + 1, "libcudart.so", 12) == 0) {
        snprintf(data, 512, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* Where a libcupti matching the program's CUDA runtime would be: the runtime's own folder
   (the toolkit's lib64, or a wheel's lib), and CUPTI's folders in a toolkit around it. */
static int cupti_beside_cudart(char paths[][512], int limit) {
    char cudart[512] = "";
    dl_iterate_phdr(find_cudart, cudart);
    char *slash = strrchr(cudart, '/');
    if (!slash) return 0;
    *slash = 0;
    const char *major = strstr(slash + 1, ".so.");
    char suffix[16] = "";
    if (major) {
        int version = atoi(major + 4);
        if (version > 0) snprintf(suffix, sizeof suffix, ".%d", version);
    }
    const char *folders[] = {"%s/libcupti.so%s", "%s/../extras/CUPTI/lib64/libcupti.so%s",
                             "%s/../../cuda_cupti/lib/libcupti.so%s", "%s/libcupti.so"};
    int n = 0;
    for (int i = 0; i < 4 && n < limit; i++) snprintf(paths[n++], 512, folders[i], cudart, suffix);
    return n;
}

#define CUPTI_SYMBOL(field, symbol) (*(void **)&cupti.field = dlsym(handle, symbol))

const char *cupti_load(CuptiActivity *a, const char *candidates) {
    static char problem[700];
    if (a->loaded) return NULL;
    char paths[16][512];
    int n = 0;
    char *copy = strdup(candidates ? candidates : ""), *save = NULL;
    for (char *item = strtok_r(copy, ":", &save); item && n < 8; item = strtok_r(NULL, ":", &save)) {
        snprintf(paths[n++], 512, "%s", item);
    }
    free(copy);
    n += cupti_beside_cudart(paths + n, 16 - n - 4);
    /* a CUDA toolkit's, then the loader's search */
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    for (int i = 0; i < 3 && n < 15; i++) {
        if (homes[i] && *homes[i]) snprintf(paths[n++], 512, "%s/extras/CUPTI/lib64/libcupti.so", homes[i]);
        if (homes[i] && *homes[i] && n < 15) snprintf(paths[n++], 512, "%s/lib64/libcupti.so", homes[i]);
    }
    snprintf(paths[n++], 512, "libcupti.so");
    void *handle = NULL;
    for (int i = 0; i < n && !handle; i++) {
        handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (handle) snprintf(a->path, sizeof a->path, "%s", paths[i]);
    }
    if (!handle) {
        snprintf(problem, sizeof problem, "no libcupti found (%s); name one with GGML_VIZ_CUPTI=PATH", dlerror());
        return problem;
    }
    CUPTI_SYMBOL(register_callbacks, "cuptiActivityRegisterCallbacks");
    CUPTI_SYMBOL(register_timestamp, "cuptiActivityRegisterTimestampCallback");
    CUPTI_SYMBOL(enable, "cuptiActivityEnable");
    CUPTI_SYMBOL(disable, "cuptiActivityDisable");
    CUPTI_SYMBOL(flush_all, "cuptiActivityFlushAll");
    CUPTI_SYMBOL(next_record, "cuptiActivityGetNextRecord");
    CUPTI_SYMBOL(dropped, "cuptiActivityGetNumDroppedRecords");
    CUPTI_SYMBOL(finalize, "cuptiFinalize");
    CUPTI_SYMBOL(get_timestamp, "cuptiGetTimestamp");
    CUPTI_SYMBOL(result_string, "cuptiGetResultString");
    CUPTI_SYMBOL(get_version, "cuptiGetVersion");
    if (!cupti.register_callbacks || !cupti.enable || !cupti.disable || !cupti.flush_all || !cupti.next_record ||
        !cupti.get_timestamp) {
        snprintf(problem, sizeof problem, "%s lacks CUPTI's activity functions", a->path);
        return problem;
    }
    if (cupti.get_version) cupti.get_version(&a->version);
    a->loaded = 1;
    return NULL;
}

static const char *cupti_failed(const char *what, cupti_result result) {
    static char problem[256];
    const char *text = NULL;
    if (cupti.result_string) cupti.result_string(result, &text);
    snprintf(problem, sizeof problem, "CUPTI refused %s: %s (%d)", what, text ? text : "?", result);
    return problem;
}

/* CUPTI's clock against the recorder's: the reading between two of ours, the tightest of a few. */
static void measure_clock_offset(CuptiActivity *a) {
    int64_t best = -1;
    for (int i = 0; i < 16; i++) {
        uint64_t theirs = 0;
        int64_t before = now_ns();
        cupti.get_timestamp(&theirs);
        int64_t after = now_ns();
        if (best < 0 || after - before < best) {
            best = after - before;
            a->clock_offset_ns = (int64_t)theirs - (before + (after - before) / 2);
        }
    }
    a->clock_uncertainty_ns = best / 2;
}

const char *cupti_attach(CuptiActivity *a) {
    if (!a->loaded) return "libcupti is not loaded";
    if (a->attached) return NULL;
    pthread_mutex_lock(&records_lock);
    receiver = a;
    pthread_mutex_unlock(&records_lock);
    cupti_result r;
    if (!a->in_session) { /* CUPTI starts (again, after a detach) */
        r = cupti.register_callbacks(buffer_requested, (cupti_buffer_completed)buffer_completed);
        if (r != CUPTI_ABI_SUCCESS) return cupti_failed("its activity buffers", r);
        /* Asked before any record kind is on: CUPTI then stamps records with the recorder's clock. */
        a->own_clock = cupti.register_timestamp && cupti.register_timestamp(recorder_clock) == CUPTI_ABI_SUCCESS;
        if (!a->own_clock) measure_clock_offset(a);
        a->in_session = 1;
    }
    for (size_t i = 0; i < N_RECORD_KINDS; i++) {
        r = cupti.enable(RECORD_KINDS[i]);
        if (r != CUPTI_ABI_SUCCESS) return cupti_failed("kernel records", r);
        a->enabled_kinds |= 1u << RECORD_KINDS[i];
    }
    a->attached = 1;
    return NULL;
}

static void switch_kinds_off(CuptiActivity *a) {
    for (size_t i = 0; i < N_RECORD_KINDS; i++) {
        if (a->enabled_kinds & (1u << RECORD_KINDS[i])) cupti.disable(RECORD_KINDS[i]);
    }
    a->enabled_kinds = 0;
}

const char *cupti_flush(CuptiActivity *a) {
    if (!a->attached) return NULL;
    cupti_result r = cupti.flush_all(CUPTI_ABI_FLUSH_FORCED);
    return r == CUPTI_ABI_SUCCESS ? NULL : cupti_failed("a flush", r);
}

const char *cupti_detach(CuptiActivity *a, int finalize) {
    if (!a->attached) return NULL;
    const char *problem = cupti_flush(a);
    if (problem) return problem;
    cupti_result r;
    if (finalize && cupti.finalize) {
        r = cupti.finalize();
        if (r != CUPTI_ABI_SUCCESS) return cupti_failed("to detach", r);
        a->in_session = 0;
        a->enabled_kinds = 0;
    } else {
        /* Switched off, CUPTI stays: its records are whole only when flushed before. */
        switch_kinds_off(a);
    }
    a->attached = 0;
    return NULL;
}

void cupti_stop(CuptiActivity *a) {
    switch_kinds_off(a);
    /* only a session of ours: CUPTI may be another profiler's too */
    if (a->in_session && cupti.finalize) cupti.finalize();
    a->in_session = a->attached = 0;
    pthread_mutex_lock(&records_lock);
    receiver = NULL;
    cupti_forget_taken(a);
    pthread_mutex_unlock(&records_lock);
}

void cupti_forget_after_fork(CuptiActivity *a) {
    receiver = NULL;
    cupti_forget_taken(a);
    a->in_session = a->attached = 0;
    a->enabled_kinds = 0;
}

void cupti_lock(CuptiActivity *a) {
    (void)a;
    pthread_mutex_lock(&records_lock);
}

void cupti_unlock(CuptiActivity *a) {
    (void)a;
    pthread_mutex_unlock(&records_lock);
}

void cupti_forget_taken(CuptiActivity *a) {
    a->activities.count = a->api_calls.count = 0;
    a->names.count = a->name_lengths.count = 0;
    a->dropped = a->invalid = 0;
}
