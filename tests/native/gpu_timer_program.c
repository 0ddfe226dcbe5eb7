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
 * MODE: windows or every. The timer loads CUPTI_CANDIDATES (default: the stand-in).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_tracer.h"

enum { NODES = 6, LOOP_SITE = 0x1000, CHECK_SITE = 0x2000, THREAD = 77 };
static int tensors[NODES];
static void *node_at(void *graph, int i) {
    (void)graph;
    return &tensors[i];
}

static void (*kernel)(const char *, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, uint32_t);
static void (*api)(uint32_t, uint64_t, uint64_t, uint32_t, uint32_t);
static void (*memcpy_record)(uint64_t, uint64_t, uint64_t, uint32_t, uint32_t);
/* a pass's work, in order: node 0, node 1 (two kernels), node 2 (the copy, as a graph runs it), node 4 */
static const char *KERNELS[] = {"_Z8rms_normPKf", "_Z13quantize_q8_1PKf", "_Z13mul_mat_vec_qPKv", "memcpy32_post",
                                "_Z9fused_addPKf"};
static uint32_t correlation = 100;

/* What ggml-cuda does in one compute; `how`: 0 eager, 1 capture, 2 replay. GPU times follow the host's. */
static void compute_on_gpu(int how) {
    uint64_t t0 = (uint64_t)now_ns();
    uint32_t inputs = correlation++; /* the scheduler copies the split's inputs first */
    api(41, t0, t0 + 300, inputs, THREAD);
    memcpy_record(4096, t0 + 400, t0 + 600, inputs, 0);
    for (int i = 0; i < NODES; i++) gpu_node_call(&tensors[i], (void *)CHECK_SITE); /* CUDA-graph check */
    if (how == 2) {
        uint64_t t = (uint64_t)now_ns();
        uint32_t launch = correlation++;
        api(311, t, t + 1000, launch, THREAD);
        for (int k = 0; k < 5; k++) {
            kernel(KERNELS[k], t + 2000 + k * 1000, t + 2900 + k * 1000 + (k == 2 ? 500 : 0), launch, 1, (uint64_t)k + 1, 0);
        }
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
            api(i == 2 ? 41 : 211, t, t + 500, c, THREAD);
            if (how == 0 && i == 2) memcpy_record(1024, t + 1000, t + 1800, c, 0);
            else if (how == 0) kernel(KERNELS[i == 0 ? 0 : i == 1 ? 1 + l : 4], t + 1000, t + 1800, c, 0, 0, 0);
        }
    }
    if (how == 1) { /* the captured graph launched: its work, in launch order */
        uint64_t t = (uint64_t)now_ns();
        uint32_t launch = correlation++;
        api(311, t, t + 1000, launch, THREAD);
        for (uint32_t k = 0; k < correlation - 1 - first; k++) {
            kernel(KERNELS[k], t + 2000 + k * 1000, t + 2900 + k * 1000, launch, 1, k + 1, 0);
        }
    }
}

static void write_take(FILE *out) {
    Array bytes;
    array_init(&bytes, 1);
    if (gpu_take_serialized(&bytes) > 0) {
        uint64_t size = bytes.count;
        fwrite(&size, sizeof size, 1, out);
        fwrite(bytes.items, 1, bytes.count, out);
    }
    array_free(&bytes);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) return 2;
    void *fake = dlopen(argv[1], RTLD_NOW);
    if (!fake) return 3;
    *(void **)&kernel = dlsym(fake, "fake_cupti_kernel");
    *(void **)&api = dlsym(fake, "fake_cupti_api");
    *(void **)&memcpy_record = dlsym(fake, "fake_cupti_memcpy");
    GpuTraceSettings settings = {!strcmp(argv[3], "every") ? GPU_TRACE_EVERY : GPU_TRACE_WINDOWS, 2, 6, 1, argc == 6 ? argv[5] : argv[1]};
    gpu_configure(&settings);
    FILE *out = fopen(argv[2], "wb");
    int computes = atoi(argv[4]);
    for (int c = 0; c < computes; c++) {
        int traced = gpu_compute_begin(0, NULL, NODES, node_at, c == 0, now_ns());
        compute_on_gpu(c == 0 ? 0 : c == 1 ? 1 : 2);
        gpu_compute_end(now_ns());
        printf("%d", traced);
        if (gpu_call_done(NULL, NULL)) write_take(out);
    }
    if (gpu_finish()) write_take(out);
    int *enables = dlsym(fake, "fake_cupti_enables"), *finalizes = dlsym(fake, "fake_cupti_finalizes");
    printf("\nenables %d finalizes %d problem %s\n", *enables, *finalizes, gpu_problem() ? gpu_problem() : "none");
    fclose(out);
    return 0;
}
