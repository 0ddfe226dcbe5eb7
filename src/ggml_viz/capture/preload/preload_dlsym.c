/*
 * The preload library, part 5: programs that find ggml's functions with dlsym.
 *
 * A binding loads ggml with dlopen and looks each function up in the library's own handle
 * (Python's ctypes and cffi do; so do plugins that load ggml at run time). Such a lookup never
 * sees the functions this library exports, so the program's calls would pass ggml-viz by. This
 * library therefore interposes dlsym itself: a lookup of one of the few ggml functions ggml-viz
 * records through (WRAPPED below), in a library's handle, gets an entry point of ours bound to
 * the function found there, which records as the exported interposer does and calls that very
 * function (two ggml libraries in one process keep their own). Every other lookup goes on to the
 * C library's dlsym as a tail call, so that dlsym still sees its caller's return address
 * (RTLD_NEXT is relative to the caller). Lookups made by ggml-viz itself, RTLD_DEFAULT and
 * RTLD_NEXT ones pass through too.
 *
 * Why dlsym rather than patching a binding's resolved pointers: it needs nothing of the binding
 * (ctypes, cffi, a C plugin loader alike), costs one comparison of the name per lookup and
 * nothing per call but the entry point's jump (benchmarks/dlsym_lookup.py measures both).
 * dlvsym, which bindings do not use, is left alone.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "preload.h"

typedef void *(*dlsym_fn)(void *, const char *);

/* The C library's dlsym (libc since glibc 2.34, libdl before). */
static dlsym_fn real_dlsym(void) {
    static dlsym_fn found;
    dlsym_fn function = __atomic_load_n(&found, __ATOMIC_ACQUIRE);
    if (!function) {
        function = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!function) function = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&found, function, __ATOMIC_RELEASE);
    }
    return function;
}

/* This library's loaded segments, found once: an address in one is ours. */
enum { MAX_SEGMENTS = 16 };
static struct {
    pthread_once_t once;
    int n;
    uintptr_t start[MAX_SEGMENTS], end[MAX_SEGMENTS];
} own = {.once = PTHREAD_ONCE_INIT};

static int note_own_segments(struct dl_phdr_info *info, size_t size, void *mine) {
    (void)size;
    if (info->dlpi_addr != (uintptr_t)mine) return 0;
    for (int i = 0; i < info->dlpi_phnum && own.n < MAX_SEGMENTS; i++) {
        if (info->dlpi_phdr[i].p_type != PT_LOAD) continue;
        own.start[own.n] = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        own.end[own.n] = own.start[own.n] + info->dlpi_phdr[i].p_memsz;
        own.n++;
    }
    return 1;
}

static void find_own_segments(void) {
    Dl_info mine;
    if (dladdr((const void *)preload_owns, &mine)) dl_iterate_phdr(note_own_segments, mine.dli_fbase);
}

bool preload_owns(const void *address) {
    pthread_once(&own.once, find_own_segments);
    for (int i = 0; i < own.n; i++) {
        if ((uintptr_t)address >= own.start[i] && (uintptr_t)address < own.end[i]) return true;
    }
    return false;
}

/* ---- the entry points handed out: SLOTS per function, each bound to one library's ----------- */

enum {
    W_SCHED_COMPUTE,
    W_SCHED_COMPUTE_ASYNC,
    W_BACKEND_COMPUTE,
    W_GRAPH_COMPUTE,
    W_GRAPH_COMPUTE_WITH_CTX,
    W_SET_EVAL_CALLBACK,
    W_CPU_SET_ABORT_CALLBACK,
    W_SCHED_FREE,
    W_BACKEND_FREE,
    W_SCHED_ALLOC_GRAPH,
    W_GGUF_INIT,
    W_NEW_GRAPH_CUSTOM,
    N_WRAPPED,
    SLOTS = 4
};

static const char *const WRAPPED[N_WRAPPED] = {
    [W_SCHED_COMPUTE] = "ggml_backend_sched_graph_compute",
    [W_SCHED_COMPUTE_ASYNC] = "ggml_backend_sched_graph_compute_async",
    [W_BACKEND_COMPUTE] = "ggml_backend_graph_compute",
    [W_GRAPH_COMPUTE] = "ggml_graph_compute",
    [W_GRAPH_COMPUTE_WITH_CTX] = "ggml_graph_compute_with_ctx",
    [W_SET_EVAL_CALLBACK] = "ggml_backend_sched_set_eval_callback",
    [W_CPU_SET_ABORT_CALLBACK] = "ggml_backend_cpu_set_abort_callback",
    [W_SCHED_FREE] = "ggml_backend_sched_free",
    [W_BACKEND_FREE] = "ggml_backend_free",
    [W_SCHED_ALLOC_GRAPH] = "ggml_backend_sched_alloc_graph",
    [W_GGUF_INIT] = "gguf_init_from_file",
    [W_NEW_GRAPH_CUSTOM] = "ggml_new_graph_custom",
};

/* The function each entry point calls (NULL: the slot is free); set once, under the lock. */
static void *volatile originals[N_WRAPPED][SLOTS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

#define RETURNING(slot, id, name, ret, params, traced, type, ...) \
    static ret name##_##slot params { \
        return traced((type)originals[id][slot], __VA_ARGS__); \
    }
#define RETURNING_NOTHING(slot, id, name, params, traced, type, ...) \
    static void name##_##slot params { \
        traced((type)originals[id][slot], __VA_ARGS__); \
    }
#define FOR_SLOTS(M, ...) M(0, __VA_ARGS__) M(1, __VA_ARGS__) M(2, __VA_ARGS__) M(3, __VA_ARGS__)
#define POINTS(name) {(void *)name##_0, (void *)name##_1, (void *)name##_2, (void *)name##_3}

FOR_SLOTS(RETURNING, W_SCHED_COMPUTE, sched_compute, int, (void *s, void *g), traced_sched_compute, backend_compute_fn,
          s, g)
FOR_SLOTS(RETURNING, W_SCHED_COMPUTE_ASYNC, sched_compute_async, int, (void *s, void *g), traced_sched_compute,
          backend_compute_fn, s, g)
FOR_SLOTS(RETURNING, W_BACKEND_COMPUTE, backend_compute, int, (void *b, void *g), traced_backend_compute,
          backend_compute_fn, b, g)
FOR_SLOTS(RETURNING, W_GRAPH_COMPUTE, graph_compute, int, (void *g, void *plan), traced_graph_compute, graph_compute_fn,
          g, plan)
FOR_SLOTS(RETURNING, W_GRAPH_COMPUTE_WITH_CTX, graph_compute_with_ctx, int, (void *ctx, void *g, int n),
          traced_graph_compute_with_ctx, graph_compute_with_ctx_fn, ctx, g, n)
FOR_SLOTS(RETURNING_NOTHING, W_SET_EVAL_CALLBACK, set_eval_callback, (void *s, eval_fn f, void *d),
          traced_set_eval_callback, set_eval_fn, s, f, d)
FOR_SLOTS(RETURNING_NOTHING, W_CPU_SET_ABORT_CALLBACK, cpu_set_abort_callback, (void *b, abort_fn f, void *d),
          traced_cpu_set_abort_callback, set_abort_fn, b, f, d)
FOR_SLOTS(RETURNING_NOTHING, W_SCHED_FREE, sched_free, (void *s), traced_sched_free, free_fn, s)
FOR_SLOTS(RETURNING_NOTHING, W_BACKEND_FREE, backend_free, (void *b), traced_backend_free, free_fn, b)
FOR_SLOTS(RETURNING, W_SCHED_ALLOC_GRAPH, sched_alloc_graph, bool, (void *s, void *g), traced_sched_alloc_graph,
          alloc_graph_fn, s, g)
FOR_SLOTS(RETURNING, W_GGUF_INIT, gguf_init, void *, (const char *f, struct gguf_init_params_abi p),
          traced_gguf_init_from_file, gguf_init_fn, f, p)
FOR_SLOTS(RETURNING, W_NEW_GRAPH_CUSTOM, new_graph_custom, void *, (void *ctx, size_t n, bool grads),
          traced_new_graph_custom, new_graph_fn, ctx, n, grads)

static void *const ENTRY_POINTS[N_WRAPPED][SLOTS] = {
    [W_SCHED_COMPUTE] = POINTS(sched_compute),
    [W_SCHED_COMPUTE_ASYNC] = POINTS(sched_compute_async),
    [W_BACKEND_COMPUTE] = POINTS(backend_compute),
    [W_GRAPH_COMPUTE] = POINTS(graph_compute),
    [W_GRAPH_COMPUTE_WITH_CTX] = POINTS(graph_compute_with_ctx),
    [W_SET_EVAL_CALLBACK] = POINTS(set_eval_callback),
    [W_CPU_SET_ABORT_CALLBACK] = POINTS(cpu_set_abort_callback),
    [W_SCHED_FREE] = POINTS(sched_free),
    [W_BACKEND_FREE] = POINTS(backend_free),
    [W_SCHED_ALLOC_GRAPH] = POINTS(sched_alloc_graph),
    [W_GGUF_INIT] = POINTS(gguf_init),
    [W_NEW_GRAPH_CUSTOM] = POINTS(new_graph_custom),
};

/* Which wrapped function `name` is (-1: none). */
static int wrapped_index(const char *name) {
    if (!name || (strncmp(name, "ggml_", 5) != 0 && strncmp(name, "gguf_", 5) != 0)) return -1;
    for (int i = 0; i < N_WRAPPED; i++) {
        if (!strcmp(name, WRAPPED[i])) return i;
    }
    return -1;
}

/* The entry point bound to `function` (found for wrapped function `id`), or `function` itself
   where every slot is bound to another library's (that library's calls then pass ggml-viz by). */
static void *entry_point(int id, void *function) {
    void *given = function;
    pthread_mutex_lock(&slots_lock);
    for (int k = 0; k < SLOTS; k++) {
        if (!originals[id][k]) originals[id][k] = function;
        if (originals[id][k] == function) {
            given = ENTRY_POINTS[id][k];
            break;
        }
    }
    pthread_mutex_unlock(&slots_lock);
    return given;
}

static void *look_up_wrapped(int id, void *handle, const char *name) {
    void *found = real_dlsym()(handle, name);
    if (!found || preload_owns(found) || !env("GGML_VIZ_OUTPUT") || env_flag("GGML_VIZ_DISABLE")) return found;
    return entry_point(id, found);
}

EXPORT void *dlsym(void *handle, const char *name) {
    int id = handle != RTLD_DEFAULT && handle != RTLD_NEXT ? wrapped_index(name) : -1;
    if (id >= 0 && !preload_owns(__builtin_return_address(0))) return look_up_wrapped(id, handle, name);
    dlsym_fn original = real_dlsym();
    return original(handle, name); /* a tail call: the caller's return address is dlsym's to see */
}
