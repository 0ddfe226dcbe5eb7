/*
 * _memory_read: the machine's memory read bandwidth, measured as memory is read (`ggml-viz limits`'
 * memory_read on the CPU).
 *
 * ggml's own F32 matrix-vector kernel was the measure before: its rate depends on how that one
 * kernel was compiled (a row's dot product and its reduction per 16 KiB), and on a 2-core AMD EPYC it
 * read 14 GB/s where a plain read loop reads 21. Here each of N threads sums its own contiguous
 * share of one buffer in 64-bit words, two cache lines a step in four independent 32-byte vector
 * accumulators (GCC's vector extension: AVX2 or SSE2 on x86-64, NEON on AArch64): enough loads in
 * flight that the memory, not the loop, sets the rate, whatever the compiler does with it.
 *
 * read_pass(address, size, threads) -> (nanoseconds, checksum): one pass over [address, address +
 * size). The threads are started first and wait; the time runs from their release to the last
 * thread's end (the calling thread reads the first share). The GIL is released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 1024

typedef uint64_t words4 __attribute__((vector_size(32)));

/* The threads wait until the pass starts (state 1) or is called off (state -1). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int state;
} Start;

typedef struct {
    const unsigned char *start;
    size_t size;
    Start *go;
    uint64_t sum; /* kept, so that no compiler drops the reads */
} Share;

/* Two cache lines a step; compiled twice on x86-64 (AVX2's 32-byte loads where the CPU has them,
 * else SSE2's 16-byte ones, chosen when the library loads), once elsewhere. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
static uint64_t sum_share(const unsigned char *start, size_t size) {
    words4 a = {0}, b = {0}, c = {0}, d = {0}, w;
    size_t i = 0;
    for (; i + 128 <= size; i += 128) {
        memcpy(&w, start + i, 32), a += w;
        memcpy(&w, start + i + 32, 32), b += w;
        memcpy(&w, start + i + 64, 32), c += w;
        memcpy(&w, start + i + 96, 32), d += w;
    }
    a += b + c + d;
    uint64_t sum = a[0] + a[1] + a[2] + a[3];
    for (; i < size; i += 8) { /* (a share is whole words: see read_pass) */
        uint64_t word;
        memcpy(&word, start + i, 8);
        sum += word;
    }
    return sum;
}

static void *read_share(void *argument) {
    Share *share = argument;
    pthread_mutex_lock(&share->go->lock);
    while (share->go->state == 0) pthread_cond_wait(&share->go->changed, &share->go->lock);
    int state = share->go->state;
    pthread_mutex_unlock(&share->go->lock);
    if (state > 0) share->sum = sum_share(share->start, share->size);
    return NULL;
}

static void set_start(Start *go, int state) {
    pthread_mutex_lock(&go->lock);
    go->state = state;
    pthread_cond_broadcast(&go->changed);
    pthread_mutex_unlock(&go->lock);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* One pass; -1 where a thread could not start (nothing was measured). */
static int64_t timed_pass(const unsigned char *address, size_t size, int threads, Share *shares, pthread_t *started,
                          uint64_t *sum) {
    Start go = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    size_t per = (size / (size_t)threads) & ~(size_t)63; /* cache-line aligned shares */
    for (int t = 0; t < threads; t++) {
        shares[t] = (Share){address + (size_t)t * per, t == threads - 1 ? size - (size_t)t * per : per, &go, 0};
    }
    int running = 1;
    while (running < threads && pthread_create(&started[running], NULL, read_share, &shares[running]) == 0) running++;
    int64_t elapsed = -1;
    if (running == threads) {
        int64_t begin = now_ns();
        set_start(&go, 1);
        shares[0].sum = sum_share(shares[0].start, shares[0].size);
        for (int t = 1; t < threads; t++) pthread_join(started[t], NULL);
        elapsed = now_ns() - begin;
    } else {
        set_start(&go, -1);
        for (int t = 1; t < running; t++) pthread_join(started[t], NULL);
    }
    for (int t = 0; t < threads; t++) *sum += shares[t].sum;
    return elapsed;
}

static PyObject *read_pass(PyObject *self, PyObject *args) {
    unsigned long long address;
    Py_ssize_t size;
    int threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "Kni", &address, &size, &threads)) return NULL;
    if (threads < 1 || threads > MAX_THREADS || size < 64 * (Py_ssize_t)threads || size % 8 || address == 0) {
        PyErr_Format(PyExc_ValueError, "read_pass: 1 to %d threads over whole 64-bit words, 64 bytes each at least",
                     MAX_THREADS);
        return NULL;
    }
    Share *shares = PyMem_Calloc((size_t)threads, sizeof(Share));
    pthread_t *started = PyMem_Calloc((size_t)threads, sizeof(pthread_t));
    if (!shares || !started) {
        PyMem_Free(shares);
        PyMem_Free(started);
        return PyErr_NoMemory();
    }
    uint64_t sum = 0;
    int64_t elapsed;
    Py_BEGIN_ALLOW_THREADS elapsed = timed_pass((const unsigned char *)(uintptr_t)address, (size_t)size, threads,
                                                shares, started, &sum);
    Py_END_ALLOW_THREADS PyMem_Free(shares);
    PyMem_Free(started);
    if (elapsed < 0) {
        PyErr_SetString(PyExc_OSError, "read_pass: a reading thread could not be started");
        return NULL;
    }
    return Py_BuildValue("LK", (long long)elapsed, (unsigned long long)sum);
}

static PyMethodDef methods[] = {
    {"read_pass", read_pass, METH_VARARGS,
     "read_pass(address, size, threads) -> (nanoseconds, checksum): one timed read of the buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_memory_read", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__memory_read(void) {
    return PyModule_Create(&module);
}
