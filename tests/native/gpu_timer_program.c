/*
 * The GPU timer's C side (native/gpu/) driven as a CUDA program would drive it, against the
 * stand-in libcupti (fake_cupti.c): for tests on machines without a GPU.
 *
 *   gpu_timer_program FAKE_CUPTI.so OUT MODE COMPUTES [CUPTI_CANDIDATES]
 *
 * One graph of NODES nodes, computed COMPUTES times, as ggml-cuda runs it: the first compute
 * eager (each node reached, then its work launched item by item), the second captured into
 * a CUDA graph and launched, the others replays of that graph. Node 1 launches two kernels;
 * node 2 copies memory (cudaMemcpyAsync; in the CUDA graph the driver runs the copy as a
 * kernel of its own); node 3 is a view (reached, no kernel); nodes 4 and 5 run fused, as one
 * kernel (node 5 is never reached). The scheduler copies the split's inputs before the loop.
 * Each closed window is written to OUT as a uint64 length and the SPOOL_GPU frame's payload.
 * The timer loads CUPTI_CANDIDATES (default: the stand-in). MODE:
 *   windows   windows of 2 computes, every 6 computes
 *   every     every compute traced, handed over every 6
 *   driver    windows; node 0's runtime launch makes a driver call of its own (the same
 *             correlation id), node 1's second kernel is launched by the driver alone
 *             (cuLaunchKernelEx, as cuBLAS does), and the CUDA graph with cudaGraphLaunch_ptsz
 *   splits    windows; the scheduler computes two splits in each compute: one on CUDA at node 0,
 *             one on the CPU at node 5, copying 2048 bytes for the CPU split between them
 *   fork      windows; after the first compute (its window open) a child is forked, which
 *             checks that it has nothing of the parent's to hand over and exits
 *   churn     the default policy (windows of 4, every 256); the graph's structure changes every
 *             2 computes, and the computes come in calls of 1 to 6
 *   bound     every compute traced, handed over every 100000 (so only the window bound hands over)
 * It prints whether each compute was traced, then what CUPTI was asked, then how many record
 * kinds are still on, how many takes were written before the end and at it, and the forked
 * child's exit status.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/gpu_timer.h"

enum { NODES = 6, LOOP_SITE = 0x1000, CHECK_SITE = 0x2000, THREAD = 77 };
static int tensors[NODES];
static void *node_at(void *graph, int i) {
    (void)graph;
    return &tensors[i];
}

static void (*kernel)(const char *, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, uint32_t);
static void (*api)(uint32_t, uint64_t, uint64_t, uint32_t, uint32_t);
static void (*driver_api)(uint32_t, uint64_t, uint64_t, uint32_t, uint32_t);
static void (*memcpy_record)(uint64_t, uint64_t, uint64_t, uint32_t, uint32_t);
/* a pass's work, in order: node 0, node 1 (two kernels), node 2 (the copy, as a graph runs it), node 4 */
static const char *KERNELS[] = {"_Z8rms_normPKf", "_Z13quantize_q8_1PKf", "_Z13mul_mat_vec_qPKv", "memcpy32_post",
                                "_Z9fused_addPKf"};
static uint32_t correlation = 100;
static int driver_calls, split_calls;
/* CUPTI's callback ids: the runtime's, the driver's */
enum { LAUNCH = 211, GRAPH_LAUNCH = 311, GRAPH_LAUNCH_PTSZ = 312, COPY = 41 };
enum { DRIVER_LAUNCH = 307, DRIVER_LAUNCH_EX = 652 };

static void launch_graph(uint64_t t, uint32_t launch) {
    api(driver_calls ? GRAPH_LAUNCH_PTSZ : GRAPH_LAUNCH, t, t + 1000, launch, THREAD);
}

/* A launch of node `node` (its `l`-th), as the runtime or the driver makes it. */
static void launch_kernel(int node, int l, uint64_t t, uint32_t c) {
    if (driver_calls && node == 1 && l == 1) {
        driver_api(DRIVER_LAUNCH_EX, t, t + 500, c, THREAD);
        return;
    }
    api(node == 2 ? COPY : LAUNCH, t, t + 500, c, THREAD);
    if (driver_calls && node == 0) driver_api(DRIVER_LAUNCH, t + 100, t + 400, c, THREAD); /* its own call */
}

/* With splits: the CUDA split's call returns, the scheduler copies the CPU split's input from
   the device, and the CPU split is computed. */
static void cpu_split(void) {
    if (!split_calls) return;
    gpu_split_done(&tensors[0], 0);
    uint64_t t = (uint64_t)now_ns();
    uint32_t c = correlation++;
    api(COPY, t, t + 300, c, THREAD);
    memcpy_record(2048, t + 400, t + 700, c, 0);
    gpu_split_call(&tensors[5], 1);
    gpu_split_done(&tensors[5], 1);
}

/* What ggml-cuda does in one compute; `how`: 0 eager, 1 capture, 2 replay. GPU times follow the host's. */
static void compute_on_gpu(int how) {
    uint64_t t0 = (uint64_t)now_ns();
    uint32_t inputs = correlation++; /* the scheduler copies the split's inputs first */
    api(COPY, t0, t0 + 300, inputs, THREAD);
    memcpy_record(4096, t0 + 400, t0 + 600, inputs, 0);
    if (split_calls) gpu_split_call(&tensors[0], 0); /* the split on CUDA begins */
    for (int i = 0; i < NODES; i++) gpu_node_call(&tensors[i], (void *)CHECK_SITE); /* CUDA-graph check */
    if (how == 2) {
        uint64_t t = (uint64_t)now_ns();
        uint32_t launch = correlation++;
        launch_graph(t, launch);
        for (int k = 0; k < 5; k++) {
            kernel(KERNELS[k], t + 2000 + k * 1000, t + 2900 + k * 1000 + (k == 2 ? 500 : 0), launch, 1, (uint64_t)k + 1, 0);
        }
        cpu_split();
        return;
    }
    uint32_t first = correlation;
    for (int i = 0; i < NODES; i++) {
        if (i == 5) continue; /* fused into node 4 */
        gpu_node_call(&tensors[i], (void *)LOOP_SITE);
        if (i == 3) continue; /* a view */
        int launches = i == 1 ? 2 : 1;
        for (int l = 0; l < launches; l++) {
            uint64_t t = (uint64_t)now_ns();
            uint32_t c = correlation++;
            launch_kernel(i, l, t, c);
            if (how == 0 && i == 2) memcpy_record(1024, t + 1000, t + 1800, c, 0);
            else if (how == 0) kernel(KERNELS[i == 0 ? 0 : i == 1 ? 1 + l : 4], t + 1000, t + 1800, c, 0, 0, 0);
        }
    }
    if (how == 1) { /* the captured graph launched: its work, in launch order */
        uint64_t t = (uint64_t)now_ns();
        uint32_t launch = correlation++;
        launch_graph(t, launch);
        for (uint32_t k = 0; k < correlation - 1 - first; k++) {
            kernel(KERNELS[k], t + 2000 + k * 1000, t + 2900 + k * 1000, launch, 1, k + 1, 0);
        }
    }
    cpu_split();
}

static int write_take(FILE *out) {
    Array bytes;
    array_init(&bytes, 1);
    int taken = gpu_take_serialized(&bytes) > 0;
    if (taken) {
        uint64_t size = bytes.count;
        fwrite(&size, sizeof size, 1, out);
        fwrite(bytes.items, 1, bytes.count, out);
    }
    array_free(&bytes);
    return taken;
}

/* A child forked with a window open: 0 if its timer is off and it holds nothing of the parent's. */
static int forked_child_holds_nothing(void) {
    if (!gpu_problem() || gpu_finish() || gpu_compute_begin(GPU_DEVICE_CUDA, 0, NULL, NODES, node_at, 1, now_ns())) return 1;
    Array bytes;
    array_init(&bytes, 1);
    return gpu_take_serialized(&bytes) != 0 ? 2 : 0;
}

/* The child's exit status (-1: none forked). */
static int fork_a_child(void) {
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) _exit(forked_child_holds_nothing());
    int status = -1;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) return 2;
    void *fake = dlopen(argv[1], RTLD_NOW);
    if (!fake) return 3;
    *(void **)&kernel = dlsym(fake, "fake_cupti_kernel");
    *(void **)&api = dlsym(fake, "fake_cupti_api");
    *(void **)&driver_api = dlsym(fake, "fake_cupti_driver_api");
    *(void **)&memcpy_record = dlsym(fake, "fake_cupti_memcpy");
    const char *mode = argv[3];
    int churn = !strcmp(mode, "churn"), bound = !strcmp(mode, "bound");
    driver_calls = !strcmp(mode, "driver");
    split_calls = !strcmp(mode, "splits");
    GpuTraceSettings settings = {!strcmp(mode, "every") || bound ? GPU_TRACE_EVERY : GPU_TRACE_WINDOWS, churn ? 4 : 2,
                                 churn ? 256 : bound ? 100000 : 6, 1, argc == 6 ? argv[5] : argv[1]};
    gpu_configure(&settings);
    FILE *out = fopen(argv[2], "wb");
    int computes = atoi(argv[4]), in_call = 0, call_size = 1, takes = 0, takes_at_exit = 0, child = -1;
    srand(7);
    for (int c = 0; c < computes; c++) {
        int new_structure = churn ? c % 2 == 0 : c == 0;
        int traced = gpu_compute_begin(GPU_DEVICE_CUDA, 0, NULL, NODES, node_at, new_structure, now_ns());
        compute_on_gpu(churn || c == 0 ? 0 : c == 1 ? 1 : 2);
        gpu_compute_end(now_ns());
        printf("%d", traced);
        if (!strcmp(mode, "fork") && c == 0) child = fork_a_child();
        if (++in_call < call_size) continue;
        in_call = 0;
        call_size = churn ? 1 + rand() % 6 : 1;
        if (gpu_call_done(NULL, NULL)) takes += write_take(out);
    }
    if (in_call && gpu_call_done(NULL, NULL)) takes += write_take(out);
    if (gpu_finish()) takes_at_exit += write_take(out);
    int *enables = dlsym(fake, "fake_cupti_enables"), *finalizes = dlsym(fake, "fake_cupti_finalizes");
    int (*kinds_on)(void) = (int (*)(void))dlsym(fake, "fake_cupti_kinds_on");
    printf("\nenables %d finalizes %d problem %s\n", *enables, *finalizes, gpu_problem() ? gpu_problem() : "none");
    printf("kinds on %d, takes %d, at exit %d, child %d\n", kinds_on(), takes, takes_at_exit, child);
    fclose(out);
    return 0;
}
