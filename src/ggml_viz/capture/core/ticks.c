/* Inline timing: the CPU backend's per-node abort callback (a tick), the barrier that ends each
   node (ggml_barrier redirected through us), and the timing floors' callbacks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include "got_hook.h"

#include <string.h>

/* Inline timing: the CPU backend's thread 0 calls this after each node it computes (not
   after views, which it skips, and once for nodes it fuses), before the barrier that
   ends the node. It always runs on the thread that called llama_decode. The barrier
   that follows, on this thread, is the node's end (recorder_barrier_passed). */
static __thread Recorder *barrier_recorder; /* the tick waiting for its barrier, on this thread */
static __thread size_t barrier_tick;

void forget_barrier(Recorder *r) {
    if (barrier_recorder == r) barrier_recorder = NULL;
}

bool recorder_abort_callback(void *user_data) {
    Recorder *r = (Recorder *)user_data;
    if (r->mode == MODE_RECORD && r->inline_timing && r->time_nodes) {
        int64_t *tick = array_push(&r->tick_ns);
        uint32_t *asked = array_push(&r->tick_asked);
        int64_t *barrier = array_push(&r->tick_barrier_ns);
        if (!tick || !asked || !barrier) {
            r->out_of_memory = 1;
            r->mode = MODE_OFF;
        } else {
            *tick = now_ns();
            *asked = (uint32_t)(r->tick_split_end ? r->tick_split_end : r->node_flags.count - r->graph_first_node);
            *barrier = 0;
            barrier_recorder = r;
            barrier_tick = r->tick_ns.count - 1;
            if (r->routing && read_planned_routing(r, r->tick_ns.count - r->graph_first_tick) != 0) {
                r->out_of_memory = 1;
                r->mode = MODE_OFF;
            }
        }
    }
    return r->chained_abort ? r->chained_abort(r->chained_abort_data) : false;
}

/* Called right after every ggml_barrier returns, on the thread that called it. The first
   one after a tick on the ticking thread is the barrier ending that node: every thread
   finished it then. Barriers inside an op (a matrix multiplication converting its input
   first) come before the op's tick, and other threads never tick: neither is taken. */
void recorder_barrier_passed(void) {
    Recorder *r = barrier_recorder;
    if (!r) return;
    barrier_recorder = NULL;
    if (barrier_tick < r->tick_barrier_ns.count) ARRAY_AT(r->tick_barrier_ns, int64_t, barrier_tick) = now_ns();
}

/* Every ggml_barrier call passes through one of these (recorder_hook_barriers): one per
   library defining a ggml_barrier of its own (ggml-cpu; its variants when several load). */
typedef void (*barrier_fn)(void *threadpool);
enum { MAX_BARRIER_LIBRARIES = 4 };
static barrier_fn barrier_originals[MAX_BARRIER_LIBRARIES];
#define BARRIER_TRAMPOLINE(i) \
    static void barrier_##i(void *threadpool) { \
        barrier_originals[i](threadpool); \
        recorder_barrier_passed(); \
    }
BARRIER_TRAMPOLINE(0)
BARRIER_TRAMPOLINE(1)
BARRIER_TRAMPOLINE(2)
BARRIER_TRAMPOLINE(3)
static barrier_fn const barrier_trampolines[MAX_BARRIER_LIBRARIES] = {barrier_0, barrier_1, barrier_2, barrier_3};

static void *barrier_replacement(void *original, void *context) {
    (void)context;
    for (int i = 0; i < MAX_BARRIER_LIBRARIES; i++) {
        if (!barrier_originals[i]) barrier_originals[i] = (barrier_fn)original;
        if (barrier_originals[i] == (barrier_fn)original) return (void *)barrier_trampolines[i];
    }
    return NULL;
}

int recorder_hook_barriers(void) {
    int failed = 0;
    int hooked = got_hook("ggml_barrier", barrier_replacement, NULL, &failed);
    return failed ? -1 : hooked;
}

/* The floor of per-node timing, for benchmarks: a callback that takes the time and asks
   for every node, recording nothing. What it costs is what ggml's slicing costs. */
static volatile int64_t floor_last_ns;
bool recorder_timing_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)ask;
    (void)user_data;
    floor_last_ns = now_ns();
    return true;
}

/* The floor of graph-level recording: a callback that declines every node, so each graph
   runs in one piece, and records nothing. What it costs is what ggml's asking costs. */
bool recorder_graph_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)user_data;
    return !ask;
}
