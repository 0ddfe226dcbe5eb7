/* The Vulkan timer layer: see vulkan_layer.h. A plain shared library (no Python, no libvulkan:
   every Vulkan function it calls comes from the dispatch chain). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define VK_NO_PROTOTYPES
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vulkan_layer.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_INSTANCES 8
#define MAX_DEVICES 16
#define BUCKETS 4096
#define POOL_QUERIES 512 /* timestamps per query pool: a command buffer chains as many as it needs */
#define MAX_FAMILIES 32

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t host_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *dispatch_key(const void *handle) {
    return *(void *const *)handle;
}

/* A growable array of fixed-size items (lock held by its users). */
typedef struct {
    void *items;
    size_t count, capacity, size;
} List;

static void *list_push(List *l) {
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? l->capacity * 2 : 64;
        void *items = realloc(l->items, capacity * l->size);
        if (!items) return NULL;
        l->items = items;
        l->capacity = capacity;
    }
    return (char *)l->items + l->size * l->count++;
}

#define LIST_AT(list, type, i) (((type *)(list).items)[i])

/* ---- instances and devices ---------------------------------------------------------------- */

typedef struct {
    void *key;
    VkInstance handle;
    PFN_vkGetInstanceProcAddr next_gipa;
    PFN_vkDestroyInstance destroy;
    PFN_vkGetPhysicalDeviceProperties properties;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties families;
    PFN_vkEnumerateDeviceExtensionProperties extensions;
    PFN_vkGetPhysicalDeviceCalibrateableTimeDomainsEXT time_domains;
} Instance;

typedef struct {
    void *key;
    VkDevice handle;
    uint32_t index; /* order of creation */
    Instance *instance;
    PFN_vkGetDeviceProcAddr next_gdpa;
    PFN_vkDestroyDevice destroy;
    PFN_vkGetDeviceQueue get_queue;
    PFN_vkGetDeviceQueue2 get_queue2;
    PFN_vkCreateQueryPool create_query_pool;
    PFN_vkDestroyQueryPool destroy_query_pool;
    PFN_vkGetQueryPoolResults query_results;
    PFN_vkCmdResetQueryPool cmd_reset_query_pool;
    PFN_vkCmdWriteTimestamp cmd_write_timestamp;
    PFN_vkBeginCommandBuffer begin;
    PFN_vkResetCommandBuffer reset;
    PFN_vkResetCommandPool reset_pool;
    PFN_vkFreeCommandBuffers free_buffers;
    PFN_vkDestroyCommandPool destroy_pool;
    PFN_vkAllocateCommandBuffers allocate;
    PFN_vkCreateCommandPool create_pool;
    PFN_vkCmdBindPipeline bind_pipeline;
    PFN_vkCmdDispatch dispatch;
    PFN_vkCmdDispatchBase dispatch_base;
    PFN_vkCmdDispatchIndirect dispatch_indirect;
    PFN_vkCmdCopyBuffer copy_buffer;
    PFN_vkCmdFillBuffer fill_buffer;
    PFN_vkCmdUpdateBuffer update_buffer;
    PFN_vkCreateComputePipelines create_compute_pipelines;
    PFN_vkDestroyPipeline destroy_pipeline;
    PFN_vkQueueSubmit submit;
    PFN_vkQueueSubmit2 submit2;
    PFN_vkQueueSubmit2 submit2_khr;
    PFN_vkWaitForFences wait_fences;
    PFN_vkGetFenceStatus fence_status;
    PFN_vkQueueWaitIdle queue_wait_idle;
    PFN_vkDeviceWaitIdle device_wait_idle;
    PFN_vkSetDebugUtilsObjectNameEXT set_name;
    PFN_vkGetCalibratedTimestampsEXT calibrated;
    double period;          /* nanoseconds per tick */
    uint64_t mask;          /* the valid bits of its timed queue families' timestamps (least of them) */
    const char *untimed;    /* why none of this device's commands can be timed (NULL: some can) */
    /* Per queue family, whether its command buffers are timed: timestamps (timestampValidBits
       above 0) and a query pool reset in a command buffer (compute or graphics: not a queue
       for transfers alone, which ggml-vulkan uses for copies where the device has one). */
    uint8_t family_timed[MAX_FAMILIES];
    int all_families_timed; /* every family the device was created with: a command buffer of an unknown pool */
    List pools;             /* CommandPoolFamily */
    int64_t offset_ns;      /* host clock minus device clock, where calibrated */
    int64_t uncertainty_ns;
    int64_t low_ns, high_ns; /* otherwise: the offset's bounds from submissions */
    int bounded;
    List free_pools;        /* VkQueryPool */
    List queues;            /* QueueFamily: each queue's family */
} Device;

typedef struct {
    VkQueue queue;
    uint32_t family, index;
} QueueFamily;

typedef struct {
    VkCommandPool pool;
    uint32_t family;
} CommandPoolFamily;

static Instance instances[MAX_INSTANCES];
static Device devices[MAX_DEVICES];
static uint32_t devices_created;

static Instance *instance_of(const void *handle) {
    void *key = dispatch_key(handle);
    for (int i = 0; i < MAX_INSTANCES; i++) {
        if (instances[i].key == key) return &instances[i];
    }
    return NULL;
}

static Device *device_of(const void *handle) {
    void *key = dispatch_key(handle);
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (devices[i].key == key) return &devices[i];
    }
    return NULL;
}

/* ---- state: timing, pipelines, command buffers -------------------------------------------- */

static int timing;             /* work recorded now is timed */
static uint32_t timing_epoch;  /* a start marker is valid only in the epoch it was written in */
static uint32_t next_correlation = 1;
static List done;              /* VulkanWork read and not yet drained */
static uint64_t lost;          /* commands whose results were lost */
static char problem[512];

/* Pipelines: each gets a name index (its order of creation, from 1) that a debug-utils name
   may rename; names are never freed (a drained record names its pipeline by index). */
typedef struct PipelineEntry {
    struct PipelineEntry *next;
    uint64_t handle;
    uint32_t name;
} PipelineEntry;
static PipelineEntry *pipelines[BUCKETS];
static List names; /* char *, index - 1 */

static size_t bucket_of(uint64_t handle) {
    return (size_t)((handle * 0x9E3779B97F4A7C15ULL) >> 52) & (BUCKETS - 1);
}

static PipelineEntry *pipeline_entry(uint64_t handle) {
    for (PipelineEntry *e = pipelines[bucket_of(handle)]; e; e = e->next) {
        if (e->handle == handle) return e;
    }
    return NULL;
}

static const char *pipeline_name(uint32_t index) {
    return index && index <= names.count ? LIST_AT(names, char *, index - 1) : NULL;
}

static void add_pipeline(uint64_t handle) {
    PipelineEntry *e = pipeline_entry(handle);
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) return;
        e->handle = handle;
        e->next = pipelines[bucket_of(handle)];
        pipelines[bucket_of(handle)] = e;
    }
    char text[32];
    snprintf(text, sizeof text, "pipeline %zu", names.count + 1);
    char **slot = list_push(&names);
    if (!slot) return;
    *slot = strdup(text);
    e->name = *slot ? (uint32_t)names.count : 0;
}

/* A timed command recorded into a command buffer, waiting for its results. */
typedef struct {
    VulkanWork work; /* times still to be read */
    uint32_t start_query, end_query;
} Recorded;

typedef struct CommandState {
    struct CommandState *next;
    VkCommandBuffer handle;
    VkCommandPool pool;
    Device *device;
    List query_pools; /* VkQueryPool, POOL_QUERIES each */
    uint32_t n_queries;
    uint32_t marker, marker_epoch; /* the last timestamp written, and the epoch it was written in */
    int has_marker, broken;
    int timed; /* its queue family's commands can be timed */
    List recorded; /* Recorded */
    int submitted;
    uint32_t queue;
    int64_t submit_ns;
} CommandState;

static CommandState *commands[BUCKETS];
static List pending; /* CommandState *: submitted, results not yet read, in submission order */

static CommandState *command_state(VkCommandBuffer handle, int create) {
    size_t b = bucket_of((uint64_t)(uintptr_t)handle);
    for (CommandState *c = commands[b]; c; c = c->next) {
        if (c->handle == handle) return c;
    }
    if (!create) return NULL;
    Device *device = device_of(handle);
    CommandState *c = device ? calloc(1, sizeof *c) : NULL;
    if (!c) return NULL;
    c->handle = handle;
    c->device = device;
    c->timed = device->all_families_timed; /* until its pool says which family */
    c->query_pools.size = sizeof(VkQueryPool);
    c->recorded.size = sizeof(Recorded);
    c->next = commands[b];
    commands[b] = c;
    return c;
}

/* The command buffer's timestamps are done with: its query pools go back to its device. */
static void release_queries(CommandState *c) {
    for (size_t i = 0; i < c->query_pools.count; i++) {
        VkQueryPool *slot = list_push(&c->device->free_pools);
        VkQueryPool pool = LIST_AT(c->query_pools, VkQueryPool, i);
        if (slot) {
            *slot = pool;
        } else {
            c->device->destroy_query_pool(c->device->handle, pool, NULL);
        }
    }
    c->query_pools.count = 0;
    c->n_queries = 0;
    c->recorded.count = 0;
    c->has_marker = c->broken = 0;
}

static void unpend(CommandState *c) {
    for (size_t i = 0; i < pending.count; i++) {
        if (LIST_AT(pending, CommandState *, i) == c) {
            memmove(&LIST_AT(pending, CommandState *, i), &LIST_AT(pending, CommandState *, i + 1),
                    (pending.count - i - 1) * sizeof(CommandState *));
            pending.count--;
            break;
        }
    }
    c->submitted = 0;
}

/* ---- reading the results ------------------------------------------------------------------ */

static int64_t device_to_host(Device *d, uint64_t ticks) {
    int64_t ns = (int64_t)((double)ticks * d->period);
    return ns + (d->calibrated ? d->offset_ns : d->low_ns);
}

/* Read a submitted command buffer's timestamps: 1 read (its work joins `done`), 0 not all
   available yet, -1 failed (its work is lost). */
static int read_results(CommandState *c, int64_t now) {
    Device *d = c->device;
    size_t n = c->n_queries;
    uint64_t *values = malloc(n * 2 * sizeof *values);
    if (!values) return -1;
    for (size_t p = 0; p * POOL_QUERIES < n; p++) {
        size_t count = n - p * POOL_QUERIES < POOL_QUERIES ? n - p * POOL_QUERIES : POOL_QUERIES;
        VkResult r = d->query_results(d->handle, LIST_AT(c->query_pools, VkQueryPool, p), 0, (uint32_t)count,
                                      count * 2 * sizeof *values, values + p * POOL_QUERIES * 2, 2 * sizeof *values,
                                      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WITH_AVAILABILITY_BIT);
        if (r != VK_SUCCESS && r != VK_NOT_READY) {
            free(values);
            return -1;
        }
    }
    for (size_t q = 0; q < n; q++) {
        if (!values[q * 2 + 1]) {
            free(values);
            return 0;
        }
    }
    uint64_t first = values[0] & d->mask, last = first;
    for (size_t i = 0; i < c->recorded.count; i++) {
        Recorded *r = &LIST_AT(c->recorded, Recorded, i);
        uint64_t start = values[r->start_query * 2] & d->mask, end = values[r->end_query * 2] & d->mask;
        uint64_t ticks = (end - start) & d->mask; /* the counter may wrap at its valid bits */
        VulkanWork *w = list_push(&done);
        if (!w) break;
        *w = r->work;
        w->start_ns = device_to_host(d, start);
        w->end_ns = w->start_ns + (int64_t)((double)ticks * d->period);
        w->queue = c->queue;
        if (!i) first = start;
        last = end;
    }
    free(values);
    if (!d->calibrated) {
        /* the work began after its submission and ended before it was seen done */
        int64_t low = c->submit_ns - (int64_t)((double)first * d->period);
        int64_t high = now - (int64_t)((double)last * d->period);
        if (!d->bounded || low > d->low_ns) d->low_ns = low;
        if (!d->bounded || high < d->high_ns) d->high_ns = high;
        d->bounded = 1;
        d->uncertainty_ns = d->high_ns > d->low_ns ? d->high_ns - d->low_ns : 0;
    }
    return 1;
}

/* Read every submitted command buffer the device (NULL: any) has finished (lock held). */
static void collect(Device *only) {
    int64_t now = host_ns();
    for (size_t i = 0; i < pending.count;) {
        CommandState *c = LIST_AT(pending, CommandState *, i);
        if (only && c->device != only) {
            i++;
            continue;
        }
        int read = read_results(c, now);
        if (read == 0) {
            i++;
            continue;
        }
        if (read < 0) lost += c->recorded.count;
        unpend(c); /* takes it out of `pending`: i now names the next */
        release_queries(c);
    }
}

/* The command buffer is begun, reset or freed: the work of its last submission is done (Vulkan
   requires it), so its results are read first. */
static void finish_command_buffer(CommandState *c) {
    if (c->submitted) {
        if (read_results(c, host_ns()) <= 0) lost += c->recorded.count;
        unpend(c);
    }
    release_queries(c);
}

static void forget_command_buffer(CommandState *c) {
    finish_command_buffer(c);
    size_t b = bucket_of((uint64_t)(uintptr_t)c->handle);
    for (CommandState **at = &commands[b]; *at; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            break;
        }
    }
    free(c->query_pools.items);
    free(c->recorded.items);
    free(c);
}

/* ---- recording ---------------------------------------------------------------------------- */

/* The next timestamp query of the command buffer, its pool reset in the command buffer first
   where the pool is new to it: 0, or -1 none to be had. */
static int next_query(CommandState *c, VkQueryPool *pool, uint32_t *slot) {
    Device *d = c->device;
    if (c->n_queries == c->query_pools.count * POOL_QUERIES) {
        VkQueryPool fresh = VK_NULL_HANDLE;
        if (d->free_pools.count) {
            fresh = LIST_AT(d->free_pools, VkQueryPool, --d->free_pools.count);
        } else {
            VkQueryPoolCreateInfo info = {
                VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, NULL, 0, VK_QUERY_TYPE_TIMESTAMP, POOL_QUERIES, 0};
            if (d->create_query_pool(d->handle, &info, NULL, &fresh) != VK_SUCCESS) return -1;
        }
        VkQueryPool *kept = list_push(&c->query_pools);
        if (!kept) {
            d->destroy_query_pool(d->handle, fresh, NULL);
            return -1;
        }
        *kept = fresh;
        d->cmd_reset_query_pool(c->handle, fresh, 0, POOL_QUERIES);
    }
    *pool = LIST_AT(c->query_pools, VkQueryPool, c->n_queries / POOL_QUERIES);
    *slot = c->n_queries % POOL_QUERIES;
    return 0;
}

static int write_timestamp(CommandState *c) {
    VkQueryPool pool;
    uint32_t slot;
    if (next_query(c, &pool, &slot) != 0) return -1;
    c->device->cmd_write_timestamp(c->handle, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, slot);
    c->marker = c->n_queries++;
    c->marker_epoch = timing_epoch;
    c->has_marker = 1;
    return 0;
}

/* The timed command's state, with a start marker written before it, and when it is recorded;
   NULL if not timed (lock taken only while timing: otherwise a command costs one load). */
static CommandState *before_work(VkCommandBuffer buffer, int64_t *recorded_ns) {
    if (!__atomic_load_n(&timing, __ATOMIC_RELAXED)) return NULL;
    *recorded_ns = host_ns();
    pthread_mutex_lock(&lock);
    CommandState *c = timing ? command_state(buffer, 1) : NULL;
    if (c && (c->broken || !c->timed)) c = NULL;
    if (c && !(c->has_marker && c->marker_epoch == timing_epoch) && write_timestamp(c) != 0) {
        c->broken = 1;
        c = NULL;
    }
    if (!c) pthread_mutex_unlock(&lock);
    return c;
}

static __thread struct {
    VkCommandBuffer buffer;
    uint64_t pipeline;
} bound; /* the compute pipeline last bound on this thread, and where */

static void after_work(CommandState *c, uint8_t command, uint8_t kind, uint64_t bytes, int64_t recorded_ns) {
    uint32_t start = c->marker;
    Recorded *r = write_timestamp(c) == 0 ? list_push(&c->recorded) : NULL;
    if (!r) {
        c->broken = 1;
    } else {
        PipelineEntry *e = kind == GPU_KERNEL && bound.buffer == c->handle ? pipeline_entry(bound.pipeline) : NULL;
        r->work = (VulkanWork){0,
                               0,
                               recorded_ns,
                               bytes,
                               (uint32_t)pthread_self(),
                               next_correlation++,
                               c->device->index,
                               0,
                               e ? e->name : 0,
                               kind,
                               command,
                               {0, 0}};
        r->start_query = start;
        r->end_query = c->marker;
    }
    pthread_mutex_unlock(&lock);
}

#define TIMED(buffer, command, kind, bytes, call) \
    do { \
        int64_t recorded_ns = 0; \
        CommandState *c = before_work(buffer, &recorded_ns); \
        call; \
        if (c) after_work(c, command, kind, bytes, recorded_ns); \
    } while (0)

static VKAPI_ATTR void VKAPI_CALL layer_CmdDispatch(VkCommandBuffer b, uint32_t x, uint32_t y, uint32_t z) {
    Device *d = device_of(b);
    TIMED(b, VULKAN_DISPATCH, GPU_KERNEL, 0, d->dispatch(b, x, y, z));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdDispatchBase(VkCommandBuffer b, uint32_t bx, uint32_t by, uint32_t bz,
                                                        uint32_t x, uint32_t y, uint32_t z) {
    Device *d = device_of(b);
    TIMED(b, VULKAN_DISPATCH_BASE, GPU_KERNEL, 0, d->dispatch_base(b, bx, by, bz, x, y, z));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdDispatchIndirect(VkCommandBuffer b, VkBuffer buffer, VkDeviceSize offset) {
    Device *d = device_of(b);
    TIMED(b, VULKAN_DISPATCH_INDIRECT, GPU_KERNEL, 0, d->dispatch_indirect(b, buffer, offset));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdCopyBuffer(VkCommandBuffer b, VkBuffer from, VkBuffer to, uint32_t n,
                                                      const VkBufferCopy *regions) {
    Device *d = device_of(b);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) bytes += regions[i].size;
    TIMED(b, VULKAN_COPY_BUFFER, GPU_MEMCPY, bytes, d->copy_buffer(b, from, to, n, regions));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdFillBuffer(VkCommandBuffer b, VkBuffer buffer, VkDeviceSize offset,
                                                      VkDeviceSize size, uint32_t data) {
    Device *d = device_of(b);
    TIMED(b, VULKAN_FILL_BUFFER, GPU_MEMSET, size == VK_WHOLE_SIZE ? 0 : size,
          d->fill_buffer(b, buffer, offset, size, data));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdUpdateBuffer(VkCommandBuffer b, VkBuffer buffer, VkDeviceSize offset,
                                                        VkDeviceSize size, const void *data) {
    Device *d = device_of(b);
    TIMED(b, VULKAN_UPDATE_BUFFER, GPU_MEMCPY, size, d->update_buffer(b, buffer, offset, size, data));
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdBindPipeline(VkCommandBuffer b, VkPipelineBindPoint point, VkPipeline p) {
    if (point == VK_PIPELINE_BIND_POINT_COMPUTE) {
        bound.buffer = b;
        bound.pipeline = (uint64_t)p;
    }
    device_of(b)->bind_pipeline(b, point, p);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateComputePipelines(VkDevice device, VkPipelineCache cache, uint32_t n,
                                                                   const VkComputePipelineCreateInfo *infos,
                                                                   const VkAllocationCallbacks *allocator,
                                                                   VkPipeline *created) {
    VkResult r = device_of(device)->create_compute_pipelines(device, cache, n, infos, allocator, created);
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < n; i++) {
        if (created[i] != VK_NULL_HANDLE) add_pipeline((uint64_t)created[i]);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyPipeline(VkDevice device, VkPipeline p,
                                                        const VkAllocationCallbacks *allocator) {
    pthread_mutex_lock(&lock);
    PipelineEntry **at = &pipelines[bucket_of((uint64_t)p)];
    for (; *at; at = &(*at)->next) {
        if ((*at)->handle == (uint64_t)p) {
            PipelineEntry *gone = *at;
            *at = gone->next;
            free(gone);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    device_of(device)->destroy_pipeline(device, p, allocator);
}

/* ggml-vulkan names its pipelines this way when debug markers are on (GGML_VK_DEBUG_MARKERS). */
static VKAPI_ATTR VkResult VKAPI_CALL layer_SetDebugUtilsObjectNameEXT(VkDevice device,
                                                                       const VkDebugUtilsObjectNameInfoEXT *info) {
    Device *d = device_of(device);
    if (info && info->objectType == VK_OBJECT_TYPE_PIPELINE && info->pObjectName) {
        pthread_mutex_lock(&lock);
        PipelineEntry *e = pipeline_entry(info->objectHandle);
        char *name = e && e->name ? strdup(info->pObjectName) : NULL;
        if (name) LIST_AT(names, char *, e->name - 1) = name; /* the old name stays: a record may hold it */
        pthread_mutex_unlock(&lock);
    }
    return d->set_name ? d->set_name(device, info) : VK_SUCCESS;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_BeginCommandBuffer(VkCommandBuffer b,
                                                               const VkCommandBufferBeginInfo *info) {
    pthread_mutex_lock(&lock);
    CommandState *c = command_state(b, 0);
    if (c) finish_command_buffer(c);
    pthread_mutex_unlock(&lock);
    return device_of(b)->begin(b, info);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_ResetCommandBuffer(VkCommandBuffer b, VkCommandBufferResetFlags flags) {
    pthread_mutex_lock(&lock);
    CommandState *c = command_state(b, 0);
    if (c) finish_command_buffer(c);
    pthread_mutex_unlock(&lock);
    return device_of(b)->reset(b, flags);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_AllocateCommandBuffers(VkDevice device,
                                                                   const VkCommandBufferAllocateInfo *info,
                                                                   VkCommandBuffer *buffers) {
    VkResult r = device_of(device)->allocate(device, info, buffers);
    if (r != VK_SUCCESS) return r;
    pthread_mutex_lock(&lock);
    Device *d = device_of(device);
    int timed = d->all_families_timed;
    for (size_t i = 0; i < d->pools.count; i++) {
        CommandPoolFamily *p = &LIST_AT(d->pools, CommandPoolFamily, i);
        if (p->pool == info->commandPool) timed = p->family < MAX_FAMILIES && d->family_timed[p->family];
    }
    for (uint32_t i = 0; i < info->commandBufferCount; i++) {
        CommandState *c = command_state(buffers[i], 1);
        if (c) {
            c->pool = info->commandPool;
            c->timed = timed;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateCommandPool(VkDevice device, const VkCommandPoolCreateInfo *info,
                                                              const VkAllocationCallbacks *allocator,
                                                              VkCommandPool *pool) {
    Device *d = device_of(device);
    VkResult r = d->create_pool(device, info, allocator, pool);
    if (r != VK_SUCCESS) return r;
    pthread_mutex_lock(&lock);
    CommandPoolFamily *p = list_push(&d->pools);
    if (p) *p = (CommandPoolFamily){*pool, info->queueFamilyIndex};
    pthread_mutex_unlock(&lock);
    return r;
}

/* Each command buffer of `pool`: finished (`forget` 0) or forgotten (lock held). */
static void for_pool(VkCommandPool pool, int forget) {
    for (size_t b = 0; b < BUCKETS; b++) {
        for (CommandState *c = commands[b], *next; c; c = next) {
            next = c->next;
            if (c->pool != pool) continue;
            if (forget) {
                forget_command_buffer(c);
            } else {
                finish_command_buffer(c);
            }
        }
    }
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_ResetCommandPool(VkDevice device, VkCommandPool pool,
                                                             VkCommandPoolResetFlags flags) {
    pthread_mutex_lock(&lock);
    for_pool(pool, 0);
    pthread_mutex_unlock(&lock);
    return device_of(device)->reset_pool(device, pool, flags);
}

static VKAPI_ATTR void VKAPI_CALL layer_FreeCommandBuffers(VkDevice device, VkCommandPool pool, uint32_t n,
                                                           const VkCommandBuffer *buffers) {
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < n; i++) {
        CommandState *c = buffers[i] ? command_state(buffers[i], 0) : NULL;
        if (c) forget_command_buffer(c);
    }
    pthread_mutex_unlock(&lock);
    device_of(device)->free_buffers(device, pool, n, buffers);
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyCommandPool(VkDevice device, VkCommandPool pool,
                                                           const VkAllocationCallbacks *allocator) {
    Device *d = device_of(device);
    pthread_mutex_lock(&lock);
    for_pool(pool, 1);
    for (size_t i = 0; i < d->pools.count; i++) {
        if (LIST_AT(d->pools, CommandPoolFamily, i).pool == pool) {
            LIST_AT(d->pools, CommandPoolFamily, i) = LIST_AT(d->pools, CommandPoolFamily, --d->pools.count);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    d->destroy_pool(device, pool, allocator);
}

/* ---- submitting and waiting --------------------------------------------------------------- */

static uint32_t queue_id(Device *d, VkQueue queue) {
    for (size_t i = 0; i < d->queues.count; i++) {
        QueueFamily *q = &LIST_AT(d->queues, QueueFamily, i);
        if (q->queue == queue) return q->family << 16 | q->index;
    }
    return 0;
}

/* A command buffer with timed work goes to the queue (lock held). */
static void submitted(Device *d, VkQueue queue, VkCommandBuffer buffer, int64_t now) {
    CommandState *c = command_state(buffer, 0);
    if (!c || !c->recorded.count) return;
    if (c->submitted) { /* submitted again before its results were read: those are lost */
        lost += c->recorded.count;
        unpend(c);
    }
    CommandState **slot = list_push(&pending);
    if (!slot) {
        lost += c->recorded.count;
        return;
    }
    *slot = c;
    c->submitted = 1;
    c->queue = queue_id(d, queue);
    c->submit_ns = now;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_QueueSubmit(VkQueue queue, uint32_t n, const VkSubmitInfo *submits,
                                                        VkFence fence) {
    Device *d = device_of(queue);
    pthread_mutex_lock(&lock);
    int64_t now = host_ns();
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t i = 0; i < submits[s].commandBufferCount; i++)
            submitted(d, queue, submits[s].pCommandBuffers[i], now);
    }
    pthread_mutex_unlock(&lock);
    return d->submit(queue, n, submits, fence);
}

static VkResult submit2(PFN_vkQueueSubmit2 next, Device *d, VkQueue queue, uint32_t n, const VkSubmitInfo2 *submits,
                        VkFence fence) {
    pthread_mutex_lock(&lock);
    int64_t now = host_ns();
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t i = 0; i < submits[s].commandBufferInfoCount; i++) {
            submitted(d, queue, submits[s].pCommandBufferInfos[i].commandBuffer, now);
        }
    }
    pthread_mutex_unlock(&lock);
    return next(queue, n, submits, fence);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_QueueSubmit2(VkQueue queue, uint32_t n, const VkSubmitInfo2 *submits,
                                                         VkFence fence) {
    Device *d = device_of(queue);
    return submit2(d->submit2, d, queue, n, submits, fence);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_QueueSubmit2KHR(VkQueue queue, uint32_t n, const VkSubmitInfo2 *submits,
                                                            VkFence fence) {
    Device *d = device_of(queue);
    return submit2(d->submit2_khr, d, queue, n, submits, fence);
}

/* Work may have finished: read what did (nothing to do while nothing timed waits). */
static void collect_after_wait(Device *d) {
    if (!__atomic_load_n(&pending.count, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&lock);
    collect(d);
    pthread_mutex_unlock(&lock);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_WaitForFences(VkDevice device, uint32_t n, const VkFence *fences,
                                                          VkBool32 all, uint64_t timeout) {
    Device *d = device_of(device);
    VkResult r = d->wait_fences(device, n, fences, all, timeout);
    if (r == VK_SUCCESS) collect_after_wait(d);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_GetFenceStatus(VkDevice device, VkFence fence) {
    Device *d = device_of(device);
    VkResult r = d->fence_status(device, fence);
    if (r == VK_SUCCESS) collect_after_wait(d);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_QueueWaitIdle(VkQueue queue) {
    Device *d = device_of(queue);
    VkResult r = d->queue_wait_idle(queue);
    if (r == VK_SUCCESS) collect_after_wait(d);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_DeviceWaitIdle(VkDevice device) {
    Device *d = device_of(device);
    VkResult r = d->device_wait_idle(device);
    if (r == VK_SUCCESS) collect_after_wait(d);
    return r;
}

static void note_queue(Device *d, VkQueue queue, uint32_t family, uint32_t index) {
    pthread_mutex_lock(&lock);
    if (!queue_id(d, queue) && (family || index)) {
        QueueFamily *q = list_push(&d->queues);
        if (q) *q = (QueueFamily){queue, family, index};
    }
    pthread_mutex_unlock(&lock);
}

static VKAPI_ATTR void VKAPI_CALL layer_GetDeviceQueue(VkDevice device, uint32_t family, uint32_t index,
                                                       VkQueue *queue) {
    Device *d = device_of(device);
    d->get_queue(device, family, index, queue);
    note_queue(d, *queue, family, index);
}

static VKAPI_ATTR void VKAPI_CALL layer_GetDeviceQueue2(VkDevice device, const VkDeviceQueueInfo2 *info,
                                                        VkQueue *queue) {
    Device *d = device_of(device);
    d->get_queue2(device, info, queue);
    note_queue(d, *queue, info->queueFamilyIndex, info->queueIndex);
}

/* ---- creating and destroying -------------------------------------------------------------- */

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance, const char *name);
static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device, const char *name);

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo *info,
                                                           const VkAllocationCallbacks *allocator,
                                                           VkInstance *instance) {
    VkLayerInstanceCreateInfo *chain = (VkLayerInstanceCreateInfo *)info->pNext;
    while (chain &&
           !(chain->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && chain->function == VK_LAYER_LINK_INFO)) {
        chain = (VkLayerInstanceCreateInfo *)chain->pNext;
    }
    if (!chain || !chain->u.pLayerInfo) return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr next_gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance");
    if (!create) return VK_ERROR_INITIALIZATION_FAILED;
    chain->u.pLayerInfo = chain->u.pLayerInfo->pNext; /* the next layer finds its own link */
    VkResult r = create(info, allocator, instance);
    if (r != VK_SUCCESS) return r;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_INSTANCES; i++) {
        if (instances[i].key) continue;
        Instance *in = &instances[i];
        *in = (Instance){dispatch_key(*instance), *instance, next_gipa, NULL, NULL, NULL, NULL, NULL};
        in->destroy = (PFN_vkDestroyInstance)next_gipa(*instance, "vkDestroyInstance");
        in->properties = (PFN_vkGetPhysicalDeviceProperties)next_gipa(*instance, "vkGetPhysicalDeviceProperties");
        in->families = (PFN_vkGetPhysicalDeviceQueueFamilyProperties)next_gipa(
            *instance, "vkGetPhysicalDeviceQueueFamilyProperties");
        in->extensions = (PFN_vkEnumerateDeviceExtensionProperties)next_gipa(*instance,
                                                                             "vkEnumerateDeviceExtensionProperties");
        in->time_domains = (PFN_vkGetPhysicalDeviceCalibrateableTimeDomainsEXT)next_gipa(
            *instance, "vkGetPhysicalDeviceCalibrateableTimeDomainsEXT");
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(VkInstance instance, const VkAllocationCallbacks *allocator) {
    Instance *in = instance ? instance_of(instance) : NULL;
    if (!in) return;
    PFN_vkDestroyInstance destroy = in->destroy;
    pthread_mutex_lock(&lock);
    memset(in, 0, sizeof *in);
    pthread_mutex_unlock(&lock);
    destroy(instance, allocator);
}

/* Whether the physical device offers an extension. */
static int has_extension(Instance *in, VkPhysicalDevice physical, const char *wanted) {
    uint32_t n = 0;
    if (!in->extensions || in->extensions(physical, NULL, &n, NULL) != VK_SUCCESS || !n) return 0;
    VkExtensionProperties *all = calloc(n, sizeof *all);
    int found = 0;
    if (all && in->extensions(physical, NULL, &n, all) == VK_SUCCESS) {
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(all[i].extensionName, wanted) == 0;
    }
    free(all);
    return found;
}

/* Whether the device can put its timestamps on CLOCK_MONOTONIC (VK_EXT_calibrated_timestamps). */
static int can_calibrate(Instance *in, VkPhysicalDevice physical) {
    if (!in->time_domains || !has_extension(in, physical, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME)) return 0;
    VkTimeDomainEXT domains[8];
    uint32_t n = 8;
    VkResult r = in->time_domains(physical, &n, domains);
    int device = 0, monotonic = 0;
    for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++) {
        device |= domains[i] == VK_TIME_DOMAIN_DEVICE_EXT;
        monotonic |= domains[i] == VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
    }
    return device && monotonic;
}

/* Which of the device's queue families are timed (`timed`, per family), the least valid bits
   among them, and why none is, if none is (NULL: some are). */
static const char *timestamp_support(Instance *in, VkPhysicalDevice physical, const VkDeviceCreateInfo *info,
                                     double *period, uint64_t *mask, uint8_t timed[MAX_FAMILIES], int *all) {
    static char why[512];
    VkPhysicalDeviceProperties properties;
    in->properties(physical, &properties);
    *period = properties.limits.timestampPeriod;
    uint32_t n = 0;
    in->families(physical, &n, NULL);
    VkQueueFamilyProperties *families = calloc(n ? n : 1, sizeof *families);
    if (!families) return "out of memory";
    in->families(physical, &n, families);
    uint32_t bits = 64, any = 0;
    *all = 1;
    for (uint32_t i = 0; i < info->queueCreateInfoCount; i++) {
        uint32_t family = info->pQueueCreateInfos[i].queueFamilyIndex;
        uint32_t valid = family < n ? families[family].timestampValidBits : 0;
        int resettable = family < n && (families[family].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT));
        int ok = valid > 0 && resettable && family < MAX_FAMILIES && *period > 0;
        if (family < MAX_FAMILIES) timed[family] = (uint8_t)ok;
        *all &= ok;
        if (ok && valid < bits) bits = valid;
        any |= ok;
    }
    free(families);
    if (!any) {
        snprintf(why, sizeof why, "the Vulkan device %s has no queue with timestamps (timestampValidBits 0%s)",
                 properties.deviceName, *period > 0 ? "" : ", or no timestampPeriod");
        return why;
    }
    *mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;
    return NULL;
}

#define NEXT(d, field, type, name) (d)->field = (type)(d)->next_gdpa((d)->handle, name)

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice physical, const VkDeviceCreateInfo *info,
                                                         const VkAllocationCallbacks *allocator, VkDevice *device) {
    VkLayerDeviceCreateInfo *chain = (VkLayerDeviceCreateInfo *)info->pNext;
    while (chain &&
           !(chain->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && chain->function == VK_LAYER_LINK_INFO)) {
        chain = (VkLayerDeviceCreateInfo *)chain->pNext;
    }
    Instance *in = instance_of(physical);
    if (!chain || !chain->u.pLayerInfo || !in) return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr next_gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr next_gdpa = chain->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    PFN_vkCreateDevice create = (PFN_vkCreateDevice)next_gipa(in->handle, "vkCreateDevice");
    if (!create) return VK_ERROR_INITIALIZATION_FAILED;
    chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;

    double period = 0;
    uint64_t mask = 0;
    uint8_t family_timed[MAX_FAMILIES] = {0};
    int all_families_timed = 0;
    const char *untimed = timestamp_support(in, physical, info, &period, &mask, family_timed, &all_families_timed);
    /* The calibration extension, enabled for the program if it did not enable it itself. */
    int calibrate = !untimed && can_calibrate(in, physical);
    VkDeviceCreateInfo changed = *info;
    const char **extensions = NULL;
    if (calibrate) {
        int enabled = 0;
        for (uint32_t i = 0; i < info->enabledExtensionCount; i++) {
            enabled |= strcmp(info->ppEnabledExtensionNames[i], VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME) == 0;
        }
        extensions = enabled ? NULL : calloc(info->enabledExtensionCount + 1, sizeof *extensions);
        if (extensions) {
            memcpy(extensions, info->ppEnabledExtensionNames, info->enabledExtensionCount * sizeof *extensions);
            extensions[info->enabledExtensionCount] = VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME;
            changed.enabledExtensionCount++;
            changed.ppEnabledExtensionNames = extensions;
        } else if (!enabled) {
            calibrate = 0;
        }
    }
    VkResult r = create(physical, &changed, allocator, device);
    free(extensions);
    if (r != VK_SUCCESS) return r;

    pthread_mutex_lock(&lock);
    Device *d = NULL;
    for (int i = 0; i < MAX_DEVICES && !d; i++) {
        if (!devices[i].key) d = &devices[i];
    }
    if (!d) { /* more devices than the layer follows: this one runs untimed, and so is not found */
        pthread_mutex_unlock(&lock);
        return r;
    }
    memset(d, 0, sizeof *d);
    d->handle = *device;
    d->index = devices_created++;
    d->instance = in;
    d->next_gdpa = next_gdpa;
    d->period = period;
    d->mask = mask;
    d->untimed = untimed;
    memcpy(d->family_timed, family_timed, sizeof family_timed);
    d->all_families_timed = all_families_timed;
    d->pools.size = sizeof(CommandPoolFamily);
    d->free_pools.size = sizeof(VkQueryPool);
    d->queues.size = sizeof(QueueFamily);
    NEXT(d, destroy, PFN_vkDestroyDevice, "vkDestroyDevice");
    NEXT(d, get_queue, PFN_vkGetDeviceQueue, "vkGetDeviceQueue");
    NEXT(d, get_queue2, PFN_vkGetDeviceQueue2, "vkGetDeviceQueue2");
    NEXT(d, create_query_pool, PFN_vkCreateQueryPool, "vkCreateQueryPool");
    NEXT(d, destroy_query_pool, PFN_vkDestroyQueryPool, "vkDestroyQueryPool");
    NEXT(d, query_results, PFN_vkGetQueryPoolResults, "vkGetQueryPoolResults");
    NEXT(d, cmd_reset_query_pool, PFN_vkCmdResetQueryPool, "vkCmdResetQueryPool");
    NEXT(d, cmd_write_timestamp, PFN_vkCmdWriteTimestamp, "vkCmdWriteTimestamp");
    NEXT(d, begin, PFN_vkBeginCommandBuffer, "vkBeginCommandBuffer");
    NEXT(d, reset, PFN_vkResetCommandBuffer, "vkResetCommandBuffer");
    NEXT(d, reset_pool, PFN_vkResetCommandPool, "vkResetCommandPool");
    NEXT(d, free_buffers, PFN_vkFreeCommandBuffers, "vkFreeCommandBuffers");
    NEXT(d, destroy_pool, PFN_vkDestroyCommandPool, "vkDestroyCommandPool");
    NEXT(d, allocate, PFN_vkAllocateCommandBuffers, "vkAllocateCommandBuffers");
    NEXT(d, create_pool, PFN_vkCreateCommandPool, "vkCreateCommandPool");
    NEXT(d, bind_pipeline, PFN_vkCmdBindPipeline, "vkCmdBindPipeline");
    NEXT(d, dispatch, PFN_vkCmdDispatch, "vkCmdDispatch");
    NEXT(d, dispatch_base, PFN_vkCmdDispatchBase, "vkCmdDispatchBase");
    NEXT(d, dispatch_indirect, PFN_vkCmdDispatchIndirect, "vkCmdDispatchIndirect");
    NEXT(d, copy_buffer, PFN_vkCmdCopyBuffer, "vkCmdCopyBuffer");
    NEXT(d, fill_buffer, PFN_vkCmdFillBuffer, "vkCmdFillBuffer");
    NEXT(d, update_buffer, PFN_vkCmdUpdateBuffer, "vkCmdUpdateBuffer");
    NEXT(d, create_compute_pipelines, PFN_vkCreateComputePipelines, "vkCreateComputePipelines");
    NEXT(d, destroy_pipeline, PFN_vkDestroyPipeline, "vkDestroyPipeline");
    NEXT(d, submit, PFN_vkQueueSubmit, "vkQueueSubmit");
    NEXT(d, submit2, PFN_vkQueueSubmit2, "vkQueueSubmit2");
    NEXT(d, submit2_khr, PFN_vkQueueSubmit2, "vkQueueSubmit2KHR");
    NEXT(d, wait_fences, PFN_vkWaitForFences, "vkWaitForFences");
    NEXT(d, fence_status, PFN_vkGetFenceStatus, "vkGetFenceStatus");
    NEXT(d, queue_wait_idle, PFN_vkQueueWaitIdle, "vkQueueWaitIdle");
    NEXT(d, device_wait_idle, PFN_vkDeviceWaitIdle, "vkDeviceWaitIdle");
    NEXT(d, set_name, PFN_vkSetDebugUtilsObjectNameEXT, "vkSetDebugUtilsObjectNameEXT");
    if (!d->set_name) {
        d->set_name = (PFN_vkSetDebugUtilsObjectNameEXT)in->next_gipa(in->handle, "vkSetDebugUtilsObjectNameEXT");
    }
    if (calibrate) NEXT(d, calibrated, PFN_vkGetCalibratedTimestampsEXT, "vkGetCalibratedTimestampsEXT");
    d->key = dispatch_key(*device); /* last: from here on the device is found */
    pthread_mutex_unlock(&lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(VkDevice device, const VkAllocationCallbacks *allocator) {
    Device *d = device ? device_of(device) : NULL;
    if (!d) return;
    PFN_vkDestroyDevice destroy = d->destroy;
    pthread_mutex_lock(&lock);
    for (size_t b = 0; b < BUCKETS; b++) {
        for (CommandState *c = commands[b], *next; c; c = next) {
            next = c->next;
            if (c->device == d) forget_command_buffer(c);
        }
    }
    for (size_t i = 0; i < d->free_pools.count; i++) {
        d->destroy_query_pool(device, LIST_AT(d->free_pools, VkQueryPool, i), NULL);
    }
    free(d->free_pools.items);
    free(d->queues.items);
    free(d->pools.items);
    memset(d, 0, sizeof *d);
    pthread_mutex_unlock(&lock);
    destroy(device, allocator);
}

/* ---- the dispatch chain ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    PFN_vkVoidFunction function;
} Hook;

#define HOOK(name) {"vk" #name, (PFN_vkVoidFunction)layer_##name}
static const Hook device_hooks[] = {
    HOOK(GetDeviceProcAddr),
    HOOK(DestroyDevice),
    HOOK(GetDeviceQueue),
    HOOK(GetDeviceQueue2),
    HOOK(CmdDispatch),
    HOOK(CmdDispatchBase),
    HOOK(CmdDispatchIndirect),
    HOOK(CmdCopyBuffer),
    HOOK(CmdFillBuffer),
    HOOK(CmdUpdateBuffer),
    HOOK(CmdBindPipeline),
    HOOK(CreateComputePipelines),
    HOOK(DestroyPipeline),
    HOOK(SetDebugUtilsObjectNameEXT),
    HOOK(BeginCommandBuffer),
    HOOK(ResetCommandBuffer),
    HOOK(AllocateCommandBuffers),
    HOOK(CreateCommandPool),
    HOOK(ResetCommandPool),
    HOOK(FreeCommandBuffers),
    HOOK(DestroyCommandPool),
    HOOK(QueueSubmit),
    HOOK(QueueSubmit2),
    HOOK(QueueSubmit2KHR),
    HOOK(WaitForFences),
    HOOK(GetFenceStatus),
    HOOK(QueueWaitIdle),
    HOOK(DeviceWaitIdle),
};
static const Hook instance_hooks[] = {
    HOOK(GetInstanceProcAddr),
    HOOK(CreateInstance),
    HOOK(DestroyInstance),
    HOOK(CreateDevice),
};

static PFN_vkVoidFunction find_hook(const Hook *hooks, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(hooks[i].name, name) == 0) return hooks[i].function;
    }
    return NULL;
}

#define N_HOOKS(hooks) (sizeof hooks / sizeof hooks[0])

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device, const char *name) {
    Device *d = device ? device_of(device) : NULL;
    if (!d) return NULL;
    PFN_vkVoidFunction next = d->next_gdpa(device, name);
    PFN_vkVoidFunction hook = find_hook(device_hooks, N_HOOKS(device_hooks), name);
    /* a function the driver lacks stays missing (vkQueueSubmit2 on a Vulkan 1.2 device) */
    return hook && (next || strcmp(name, "vkSetDebugUtilsObjectNameEXT") == 0) ? hook : next;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance, const char *name) {
    PFN_vkVoidFunction hook = find_hook(instance_hooks, N_HOOKS(instance_hooks), name);
    if (hook) return hook;
    Instance *in = instance ? instance_of(instance) : NULL;
    if (!in) return NULL;
    PFN_vkVoidFunction next = in->next_gipa(instance, name);
    hook = find_hook(device_hooks, N_HOOKS(device_hooks), name);
    return hook && next ? hook : next;
}

EXPORT VKAPI_ATTR VkResult VKAPI_CALL vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v) {
    if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT) return VK_ERROR_INITIALIZATION_FAILED;
    if (v->loaderLayerInterfaceVersion >= 2) {
        v->pfnGetInstanceProcAddr = layer_GetInstanceProcAddr;
        v->pfnGetDeviceProcAddr = layer_GetDeviceProcAddr;
        v->pfnGetPhysicalDeviceProcAddr = NULL;
    }
    if (v->loaderLayerInterfaceVersion > 2) v->loaderLayerInterfaceVersion = 2;
    return VK_SUCCESS;
}

/* ---- the recorder's side (vulkan_layer.h) ------------------------------------------------- */

/* Put each timed device's clock on the host's: the calibration with the least deviation of a few. */
static void calibrate(Device *d) {
    if (!d->calibrated) return;
    VkCalibratedTimestampInfoEXT info[2] = {
        {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, NULL, VK_TIME_DOMAIN_DEVICE_EXT},
        {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, NULL, VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
    uint64_t best = UINT64_MAX;
    for (int attempt = 0; attempt < 5; attempt++) {
        uint64_t values[2], deviation = 0;
        if (d->calibrated(d->handle, 2, info, values, &deviation) != VK_SUCCESS) continue;
        if (deviation < best) {
            best = deviation;
            d->offset_ns = (int64_t)values[1] - (int64_t)((double)(values[0] & d->mask) * d->period);
            d->uncertainty_ns = (int64_t)deviation;
        }
    }
}

EXPORT const char *ggml_viz_vulkan_start(void) {
    pthread_mutex_lock(&lock);
    const char *why = NULL;
    int timed = 0, any = 0;
    for (int i = 0; i < MAX_DEVICES; i++) {
        Device *d = &devices[i];
        if (!d->key) continue;
        any = 1;
        if (d->untimed) {
            why = d->untimed;
            continue;
        }
        timed = 1;
        calibrate(d);
    }
    if (!timed) {
        snprintf(problem, sizeof problem, "%s",
                 why   ? why
                 : any ? "no Vulkan device can be timed"
                       : "no Vulkan device was created through the layer");
    } else {
        timing_epoch++;
        __atomic_store_n(&timing, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&lock);
    return timed ? NULL : problem;
}

EXPORT void ggml_viz_vulkan_stop(void) {
    __atomic_store_n(&timing, 0, __ATOMIC_RELAXED);
}

EXPORT const char *ggml_viz_vulkan_collect(void) {
    pthread_mutex_lock(&lock);
    collect(NULL);
    pthread_mutex_unlock(&lock);
    return NULL;
}

EXPORT uint64_t ggml_viz_vulkan_drain(VulkanSink sink, void *context) {
    pthread_mutex_lock(&lock);
    if (done.count) sink(context, done.items, done.count, pipeline_name);
    done.count = 0;
    uint64_t was_lost = lost;
    lost = 0;
    pthread_mutex_unlock(&lock);
    return was_lost;
}

EXPORT int ggml_viz_vulkan_clock(int64_t *uncertainty_ns) {
    int calibrated = 1;
    int64_t most = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_DEVICES; i++) {
        Device *d = &devices[i];
        if (!d->key || d->untimed) continue;
        calibrated &= d->calibrated != NULL;
        if (d->uncertainty_ns > most) most = d->uncertainty_ns;
    }
    pthread_mutex_unlock(&lock);
    *uncertainty_ns = most;
    return calibrated;
}

/* A forked child owns none of the parent's devices: nothing is timed there. */
static void after_fork_in_child(void) {
    timing = 0;
    pending.count = done.count = 0;
    pthread_mutex_init(&lock, NULL);
}

EXPORT void ggml_viz_vulkan_forget(void) {
    after_fork_in_child();
}

__attribute__((constructor)) static void layer_loaded(void) {
    done.size = sizeof(VulkanWork);
    pending.size = sizeof(CommandState *);
    names.size = sizeof(char *);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}
