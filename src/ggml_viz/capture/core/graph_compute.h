/*
 * A graph computed on a GPU scheduler, recorded without an eval callback: the graph is read
 * at the scheduler's compute call (recorder_read_graph) and, on CUDA, the compute may be
 * traced by the GPU timer (gpu_timer.h). The preload library and the Python extension both
 * put this around the scheduler's compute function.
 */
#ifndef GGML_VIZ_GRAPH_COMPUTE_H
#define GGML_VIZ_GRAPH_COMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recorder.h"
#include "../gpu/gpu_timer.h"

typedef int (*sched_compute_fn)(void *sched, void *graph);

/* ggml's graph accessors, where a tensor keeps its buffer and its data, and the scheduler's
   ggml_backend_sched_set_eval_callback (NULL: none; a mixture's routing is then not read). */
typedef struct {
    int (*n_nodes)(void *graph);
    void *(*node)(void *graph, int i);
    size_t buffer_offset, data_offset;
    void (*set_eval_callback)(void *sched, bool (*callback)(void *, bool, void *), void *user_data);
} GraphAccess;

/* Read `graph` into `r` and compute it with `original` (traced on the GPU when `timed_device`
   (GPU_DEVICE_*: CUDA, Vulkan) is not NONE
   and a window is open; then a mixture of experts' routing is read too, each MoE layer's
   first MUL_MAT_ID answered through a routing-only eval callback, the compute cut there);
   returns what `original` returned. The owner sets
   r->graph_allocated when the program allocates a graph (ggml_backend_sched_alloc_graph):
   a graph computed again without that is the one read before. */
int compute_reading_graph(Recorder *r, uint32_t context_id, int timed_device, const GraphAccess *access,
                          sched_compute_fn original, void *sched, void *graph);

#endif
