/*
 * The GPU timer's C side (no Python here): which graph computes are traced with CUPTI (CUDA)
 * or ggml-viz's Vulkan layer (Vulkan: vulkan_timer.h, whose records take the same form), and
 * what a traced compute needs besides those records to map each kernel to its ggml node.
 *
 * Around every graph compute of a scheduler with a CUDA or Vulkan backend, its owner (the preload
 * library, or the Python extension) calls gpu_compute_begin and gpu_compute_end; after each
 * call that ends with the device synchronized (a llama call; a plain program's compute), it
 * calls gpu_call_done, which closes a window whose computes are done and says when a take
 * waits. ggml-cuda calls the exported ggml_is_empty once per node just before computing it
 * (eager passes and CUDA-graph captures; its CUDA-graph check calls it too), and ggml-vulkan
 * once per node as it begins recording the node's commands (ggml_vk_build_graph): the owner
 * routes those calls to gpu_node_call, which notes when each node of the traced compute
 * was reached, and from where; where it sees the scheduler begin each split of the graph
 * (ggml_backend_graph_compute_async), it calls gpu_split_call, which notes that too.
 * ggml_viz/capture/gpu/attribution.py maps kernels to nodes.
 *
 * Windows (GGML_VIZ_GPU=windows, the default): CUPTI is attached for `window` consecutive
 * computes when a compute's graph structure is new (its eager pass shows which kernels each
 * node launches; later CUDA-graph replays run them again in that order), and again every
 * `period` computes; between windows it is detached. New structures open or extend windows
 * only while the computes traced stay within a tenth of all (plus a window): a server's
 * prompts each have a structure of their own. `every`: CUPTI stays attached, its records
 * handed over every `period` computes. Either way a window's records are handed over (CUPTI
 * staying attached) once it holds WINDOW_MAX_COMPUTES computes or WINDOW_MAX_ACTIVITIES
 * records, so memory stays bounded however long a window lasts.
 *
 * Any failure switches the timer off for good, CUPTI's records with it. A forked child's
 * timer is off, and the parent's records it inherited are dropped.
 */
#ifndef GGML_VIZ_GPU_TIMER_H
#define GGML_VIZ_GPU_TIMER_H

#include <stddef.h>
#include <stdint.h>

#include "cupti_activity.h"

/* What a compute runs on, and so which source times it: CUPTI, or the Vulkan layer (vulkan_timer.h). */
enum { GPU_DEVICE_NONE = 0, GPU_DEVICE_CUDA = 1, GPU_DEVICE_VULKAN = 2 };
/* 64 computes: a window's eager pass, capture and replays are 4 computes; more than 64 come only
   from a window a stream of new structures kept open. 1 << 18 activities (56 bytes each, 14 MiB,
   with their API calls about 22 MiB): a large model's eager pass launches about a thousand
   kernels, so 64 of them fit four times over. */
enum { WINDOW_MAX_COMPUTES = 64, WINDOW_MAX_ACTIVITIES = 1 << 18 };

typedef struct {
    int mode;               /* GPU_TRACE_* */
    int window, period;     /* computes per window; computes between windows (every: per take) */
    int finalize;           /* detach CUPTI between windows (else switch its records off) */
    const char *cupti_paths; /* GGML_VIZ_CUPTI: colon-separated libcupti candidates, or NULL */
} GpuTraceSettings;

/* What one take hands over: a closed window's records (valid until gpu_take_done). */
typedef struct {
    const GpuComputeRecord *computes;
    const GpuNodeCall *node_calls;
    const GpuApiRecord *api_calls;
    const GpuActivityRecord *activities;
    const uint32_t *name_lengths; /* kernel names seen for the first time, ids in order */
    const char *names;
    size_t n_computes, n_node_calls, n_api_calls, n_activities, n_names, name_bytes;
    uint32_t first_name_id;
    int64_t clock_offset_ns, clock_uncertainty_ns; /* already applied; said for the record */
    uint64_t dropped, invalid;
    int64_t overhead_ns; /* host time spent attaching, flushing and detaching CUPTI */
    int reason;          /* WINDOW_* */
} GpuTake;

void gpu_configure(const GpuTraceSettings *settings);
int gpu_mode(void);
/* CUPTI's state, for the run's manifest: its path and version ("" before it was loaded). */
const char *gpu_cupti_path(void);
uint32_t gpu_cupti_version(void);
int gpu_own_clock(void);
/* Why GPU times are not recorded (NULL while they are); set once, on the first failure. */
const char *gpu_problem(void);

/* The device kind timed (GPU_DEVICE_*): the first traced compute's; NONE before. */
int gpu_device(void);
/* The device kind a ggml backend of this name computes on ("CUDA0", "Vulkan0"): NONE if not timed. */
int gpu_device_named(const char *backend_name);
/* Where the Vulkan layer was found ("" before it was). */
const char *gpu_vulkan_layer_path(void);

/* A compute of `graph` begins on a `device` (GPU_DEVICE_*; its nodes: node_at(graph, i),
   i < n_nodes); 1 if it is traced. A process's computes are timed on one device kind: the
   first one's. */
int gpu_compute_begin(int device, uint32_t context_id, void *graph, int n_nodes, void *(*node_at)(void *, int),
                      int new_structure, int64_t start_ns);
void gpu_compute_end(int64_t end_ns);
void gpu_node_call(const void *tensor, void *return_address);
/* The scheduler begins a split of the traced compute in flight on this thread, at its node
   `first_node`, on a CPU backend (`on_cpu`) or not. Nothing if no traced compute runs here. */
void gpu_split_call(const void *first_node, int on_cpu);
/* ... and that split's compute call returned: its device work is all launched (what the scheduler
   does before the next split begins, such as copying that split's inputs, is no node's). */
void gpu_split_done(const void *first_node, int on_cpu);
/* A call ended with the device synchronized (`synchronize(data)` is called first when a
   window must close and the device may not be): 1 if a take waits. */
int gpu_call_done(void (*synchronize)(void *), void *data);
/* The program ends: the window open, if any, closes (1 if a take waits). */
int gpu_finish(void);

/* Taking a closed window's records: 1 and `out` filled, or 0 if none wait. */
int gpu_take(GpuTake *out);
void gpu_take_done(void);
/* The take as the bytes of the spool's SPOOL_GPU frame (spool.h), appended to `out`. */
int gpu_serialize(const GpuTake *take, Array *out);
/* Take the closed window, if one waits, as those bytes appended to `out`, and let it go:
   1 taken, 0 none waits, -1 out of memory (the window is let go all the same). */
int gpu_take_serialized(Array *out);

#endif
