/* A graph computed on a GPU scheduler: see graph_compute.h. */
#include "graph_compute.h"

#include <string.h>

#include "../gpu/gpu_timer.h"

/* Whether a graph's nodes have their memory yet: a buffer, or data in a ggml context's own memory
   (a graph computed without a backend). A program may leave the allocation to the compute call;
   then the graph is read after it. */
static int allocated(const GraphAccess *access, void *graph, int n_nodes) {
    if (n_nodes <= 0) return 0;
    const uint8_t *first = access->node(graph, 0);
    uint64_t buffer, data;
    memcpy(&buffer, first + access->buffer_offset, sizeof buffer);
    memcpy(&data, first + access->data_offset, sizeof data);
    return buffer != 0 || data != 0;
}

int compute_reading_graph(Recorder *r, uint32_t context_id, int timed_device, const GraphAccess *access,
                          sched_compute_fn original, void *sched, void *graph) {
    int64_t start = now_ns();
    int n = access->n_nodes(graph);
    int read_first = allocated(access, graph, n);
    /* a graph the program computes again without rebuilding it (llama.cpp reuses its decode
       graphs): the previous one, not read again */
    int repeats = graph == r->read_graph && !r->graph_allocated
                      ? recorder_repeat_graph(r, graph, n, access->node, start)
                      : 0;
    r->read_graph = graph;
    r->graph_allocated = 0;
    if (repeats == 0) repeats = read_first ? recorder_read_graph(r, graph, n, access->node, start) : 1;
    int traced = timed_device &&
                 gpu_compute_begin(timed_device, context_id, graph, n, access->node, repeats == 0, start);
    /* in a window, the routing too: the graph was read (its nodes known), so the callback only
       answers each MoE layer's first MUL_MAT_ID and reads its ids where they are */
    int routing = (traced || r->routing_every_compute) && read_first && r->routing && access->set_eval_callback &&
                  repeats >= 0;
    if (routing) {
        recorder_begin_routing_reads(r);
        access->set_eval_callback(sched, recorder_routing_callback, r);
    }
    int status = original(sched, graph);
    if (routing) access->set_eval_callback(sched, NULL, NULL);
    if (traced) gpu_compute_end(now_ns());
    if (!read_first) recorder_read_graph(r, graph, access->n_nodes(graph), access->node, start);
    return status;
}
