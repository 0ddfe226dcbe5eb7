/*
 * An independent tally of what a CUDA program's GPU ran, for benchmarks/gpu.sh to set beside
 * ggml-viz's: preloaded into an untraced program, it records every kernel with CUPTI
 * (nothing of ggml-viz's code) and writes, per kernel symbol, how many ran and their summed
 * durations (end - start) to $GPU_TALLY_OUT as tab-separated lines, each time the program
 * frees a ggml backend (it interposes ggml_backend_free: CUDA still runs then). With
 * $GPU_TALLY_RECORDS set, it also writes every kernel there, one tab-separated line each:
 * start and end (ns, CUPTI's clock), device, stream, symbol (benchmarks/gpu_check.sh counts
 * each device's busy time once from them).
 *
 *   gcc -O2 -shared -fPIC -I$CUDA_HOME/include gpu_kernel_tally.c -o tally.so -L$CUPTI_DIR -lcupti -ldl
 *   LD_PRELOAD=tally.so GPU_TALLY_OUT=tally.tsv [GPU_TALLY_RECORDS=kernels.tsv] llama-completion ...
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20)
#define MAX_NAMES 4096

static struct {
    char *name;
    unsigned long long count, ns;
} kernels[MAX_NAMES];
static int n_kernels;
static unsigned long long dropped;
static FILE *records; /* $GPU_TALLY_RECORDS: every kernel, as it is handed over */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void add(const char *name, unsigned long long ns) {
    for (int i = 0; i < n_kernels; i++) {
        if (strcmp(kernels[i].name, name) == 0) {
            kernels[i].count++;
            kernels[i].ns += ns;
            return;
        }
    }
    if (n_kernels < MAX_NAMES) kernels[n_kernels++] = (typeof(kernels[0])){strdup(name), 1, ns};
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = BUFFER_BYTES;
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *record = NULL;
    pthread_mutex_lock(&lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        CUpti_ActivityKernel9 *kernel = (CUpti_ActivityKernel9 *)record; /* the fields read sit alike in every version */
        if (!kernel->start || kernel->end <= kernel->start) continue;
        add(kernel->name ? kernel->name : "?", kernel->end - kernel->start);
        if (records) {
            fprintf(records, "%llu\t%llu\t%u\t%u\t%s\n", (unsigned long long)kernel->start,
                    (unsigned long long)kernel->end, kernel->deviceId, kernel->streamId, kernel->name ? kernel->name : "?");
        }
    }
    size_t lost = 0;
    cuptiActivityGetNumDroppedRecords(context, stream, &lost);
    dropped += lost;
    pthread_mutex_unlock(&lock);
    free(buffer);
}

static void write_tally(void) {
    const char *path = getenv("GPU_TALLY_OUT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_kernels; i++) fprintf(out, "%s\t%llu\t%llu\n", kernels[i].name, kernels[i].count, kernels[i].ns);
    if (dropped) fprintf(out, "(dropped records)\t%llu\t0\n", dropped);
    if (records) fflush(records);
    pthread_mutex_unlock(&lock);
    if (out != stderr) fclose(out);
}

/* The program frees its GPU backend before it exits: CUPTI's records of its work are handed
   over and written then, while CUDA still runs (at exit, CUDA and CUPTI may be gone). */
void ggml_backend_free(void *backend) {
    static void (*original)(void *);
    if (!original) original = (void (*)(void *))dlsym(RTLD_NEXT, "ggml_backend_free");
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    write_tally();
    if (original) original(backend);
}

__attribute__((constructor)) static void start(void) {
    const char *path = getenv("GPU_TALLY_RECORDS");
    if (path && *path && !(records = fopen(path, "w"))) fprintf(stderr, "gpu_kernel_tally: cannot write %s\n", path);
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "gpu_kernel_tally: CUPTI refused\n");
    }
}
