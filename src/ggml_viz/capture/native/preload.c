/*
 * libggml_viz_preload: records a native program that computes with ggml, unchanged.
 *
 * `ggml-viz run -- llama-server ...` puts this library into the program with LD_PRELOAD.
 * It interposes the exported functions the program calls across shared-library
 * boundaries, looks the originals up with dlsym(RTLD_NEXT), and records every graph
 * with the same recorder core as the Python extension (recorder.c). What it records goes,
 * a batch of graphs at a time, into a spool file (spool.h) that `ggml-viz run` (or the
 * first ggml-viz command that opens the run) turns into the columnar run. No Python runs
 * in the traced process.
 *
 * What is interposed, and why:
 *   ggml_backend_sched_graph_compute(_async)  every graph: install our eval callback on the
 *       scheduler (and our abort callback on its CPU backends, for inline timing); outside
 *       a llama call, a graph of a plain ggml program is bracketed as a call without tokens
 *   ggml_backend_sched_set_eval_callback      a program's own eval callback is kept and
 *       called from ours (libllama re-applies its context's callback before each graph)
 *   ggml_backend_sched_free                   a plain ggml program's graphs are written
 *   llama_decode, llama_encode                a llama call: its batch (tokens, positions)
 *   llama_batch_ext_* and llama_process       the same for the opaque batches llama.cpp's
 *       own programs build: their tokens are seen where they are added
 *   llama_free                                a context's graphs are written while its
 *       model (the token texts) still lives
 *   llama_set_abort_callback, ggml_backend_cpu_set_abort_callback  the program's abort
 *       callback is called from ours
 *   gguf_init_from_file                       the GGUF files the program opens: the model's
 *       byte layout, for the memory view
 *
 * Never harm the program: any failure (a ggml layout this build does not know, a full
 * disk, no memory) says one line on stderr, stops recording, and the program runs on
 * untraced. A Python process is left alone: ggml-viz's start-up hook records it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "recorder.h"
#include "spool.h"

#define EXPORT __attribute__((visibility("default")))

/* The environment this library reads: ggml_viz.capture.settings declares each, and
   preload_environment_names() is tested equal to this list. MAX_EVENTS and POLICY are
   applied where the run is written. */
EXPORT const char ggml_viz_preload_settings[] =
    "GGML_VIZ_OUTPUT,GGML_VIZ_DISABLE,GGML_VIZ_VERBOSE,GGML_VIZ_SPOOL,GGML_VIZ_DETAIL,GGML_VIZ_TIMING,"
    "GGML_VIZ_SAMPLE,GGML_VIZ_OPS,GGML_VIZ_LAYERS,GGML_VIZ_NAMES,GGML_VIZ_VALUES,GGML_VIZ_CAPTURE,"
    "GGML_VIZ_CAPTURE_BYTES";

/* ---- what we call, declared here (no ggml or llama header is needed to build this) ----- */

typedef bool (*eval_fn)(void *tensor, bool ask, void *user_data);
struct ggml_init_params_abi {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
struct gguf_init_params_abi {
    bool no_alloc;
    void **ctx;
};
struct llama_embd_abi {
    const float *data;
    size_t n_rows, n_embd;
};
/* llama_batch, as llama.h declares it (passed by value to llama_decode). */
typedef struct {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch_abi;
static const size_t LLAMA_BATCH_OFFSETS[5] = {
    offsetof(llama_batch_abi, token), offsetof(llama_batch_abi, pos), offsetof(llama_batch_abi, n_seq_id),
    offsetof(llama_batch_abi, seq_id), offsetof(llama_batch_abi, logits)};

/* Functions of the program's own libraries, found once (NULL where its ggml lacks them). */
static struct {
    size_t (*tensor_overhead)(void);
    void *(*init)(struct ggml_init_params_abi);
    void (*free)(void *);
    void *(*new_tensor_2d)(void *, int, int64_t, int64_t);
    void *(*view_1d)(void *, void *, int64_t, size_t);
    void *(*add)(void *, void *, void *);
    void *(*set_name)(void *, const char *);
    char *(*get_name)(const void *);
    size_t (*nbytes)(const void *);
    bool (*is_contiguous)(const void *);
    bool (*buffer_is_host)(const void *);
    float (*fp16_to_fp32)(uint16_t);
    const char *(*version)(void);
    const char *(*commit)(void);
    int (*sched_n_backends)(void *);
    void *(*sched_backend)(void *, int);
    bool (*is_cpu)(void *);
    GgmlFunctions recorder;
    /* llama (absent in a plain ggml program) */
    void *(*get_model)(const void *);
    const void *(*model_vocab)(const void *);
    int32_t (*token_to_piece)(const void *, int32_t, char *, int32_t, int32_t, bool);
    int32_t (*model_desc)(const void *, char *, size_t);
    int32_t (*meta_val_str)(const void *, const char *, char *, size_t);
    uint32_t (*n_ctx)(const void *), (*n_batch)(const void *), (*n_ubatch)(const void *), (*n_seq_max)(const void *);
    int32_t (*n_threads)(void *), (*n_threads_batch)(void *);
    int32_t (*model_n_layer)(const void *), (*model_n_ctx_train)(const void *), (*model_n_embd)(const void *);
    uint64_t (*model_n_params)(const void *), (*model_size)(const void *);
    const char *(*system_info)(void);
    void (*synchronize)(void *);
} api;

typedef void (*set_callback_fn)(void *, eval_fn, void *);
typedef void (*set_abort_fn)(void *, abort_fn, void *);
typedef void (*free_fn)(void *);
typedef void *(*gguf_init_fn)(const char *, struct gguf_init_params_abi);
typedef int32_t (*batch_add_fn)(void *, int32_t);
typedef int32_t (*batch_add_token_fn)(void *, int32_t, int32_t);
typedef int32_t (*batch_add_embd_fn)(void *, int32_t, struct llama_embd_abi);
typedef bool (*batch_set_pos_fn)(void *, int32_t, const int32_t *);
typedef bool (*batch_set_output_fn)(void *, int32_t, bool);

/* What we interpose (defined below). */
EXPORT int ggml_backend_sched_graph_compute(void *sched, void *graph);
EXPORT int ggml_backend_sched_graph_compute_async(void *sched, void *graph);
EXPORT void ggml_backend_sched_set_eval_callback(void *sched, eval_fn callback, void *user_data);
EXPORT void ggml_backend_sched_free(void *sched);
EXPORT void ggml_backend_cpu_set_abort_callback(void *backend, abort_fn callback, void *data);
EXPORT void llama_free(void *ctx);
EXPORT void llama_set_abort_callback(void *ctx, abort_fn callback, void *data);
EXPORT void *gguf_init_from_file(const char *fname, struct gguf_init_params_abi params);
EXPORT void llama_batch_ext_free(void *batch);
EXPORT void llama_batch_ext_clear(void *batch);
EXPORT int32_t llama_batch_ext_add(void *batch, int32_t seq_id);
EXPORT int32_t llama_batch_ext_add_token(void *batch, int32_t seq_id, int32_t token);
EXPORT int32_t llama_batch_ext_add_embd(void *batch, int32_t seq_id, struct llama_embd_abi embd);
EXPORT bool llama_batch_ext_set_pos(void *batch, int32_t index, const int32_t *pos);
EXPORT bool llama_batch_ext_set_output_logits(void *batch, int32_t index, bool value);
EXPORT bool llama_batch_ext_set_output_embd(void *batch, int32_t index, bool value);

/* A library loaded where RTLD_NEXT can see it, and the symbol's address there. */
typedef struct {
    const char *name;
    void *ours, *found;
} SymbolSearch;

static int search_library(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    SymbolSearch *search = data;
    if (search->found || !info->dlpi_name || !info->dlpi_name[0]) return search->found != NULL;
    void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return 0;
    void *symbol = dlsym(handle, search->name); /* the library's own scope: it and its dependencies */
    if (symbol && symbol != search->ours) search->found = symbol;
    dlclose(handle);
    return search->found != NULL;
}

/* The original of a function we interpose. RTLD_NEXT finds it in a program linked to ggml;
   where ggml was loaded into a local scope (dlopen(RTLD_LOCAL), as Python's ctypes does) the
   libraries' calls between each other still reach us first, and the original is found in
   whichever loaded library defines it. */
static void *find_original(const char *name, void *ours) {
    void *found = dlsym(RTLD_NEXT, name);
    if (found && found != ours) return found;
    SymbolSearch search = {name, ours, NULL};
    dl_iterate_phdr(search_library, &search);
    return search.found;
}

/* The originals of what we interpose, looked up on first use. */
#define ORIGINAL(name, type)                                          \
    static type original_##name;                                     \
    if (!original_##name) original_##name = (type)find_original(#name, (void *)name)

/* ---- state -------------------------------------------------------------------------------- */

enum { MAX_ENTRIES = 64, MAX_BATCHES = 64, MAX_FILES = 16, MAX_CPU_BACKENDS = 8 };

/* One recorded context: a llama context (owner: its llama_context) or, in a plain ggml
   program, a backend scheduler (owner: the scheduler). */
typedef struct {
    void *owner;
    int is_llama, context_id, live;
    Recorder recorder;
    pthread_mutex_t lock;  /* held by the thread in a call, and while writing */
    int in_call, unwritten;
    eval_fn chained_eval;  /* the program's own eval callback, called from ours */
    void *chained_data;
    int chained_answered;  /* it asked for the node in flight */
    void *abort_set[MAX_CPU_BACKENDS]; /* CPU backends whose abort callback is ours */
    Array frame;           /* the frame being built */
} Entry;

/* A callback the program set (an eval callback on a scheduler, an abort callback on a llama
   context or a CPU backend), remembered to be called from ours even when it was set before
   we saw the scheduler or context compute. */
enum { EVAL_ON_SCHEDULER = 1, ABORT_ON_CONTEXT, ABORT_ON_BACKEND, MAX_CALLBACKS = 128 };
typedef struct {
    int kind;
    void *key;
    void *function, *data;
} ProgramCallback;

/* What llama.cpp's own programs add to a llama_batch_ext, seen where they add it. */
typedef struct {
    void *batch;
    Array columns[BATCH_COLUMNS];
} BatchShadow;

static struct {
    pthread_once_t once;
    int enabled, verbose;
    pthread_mutex_t lock; /* entries, shadows, program callbacks, the spool file */
    int spool;
    char spool_path[4096];
    Entry *entries[MAX_ENTRIES];
    int n_entries;
    BatchShadow *shadows[MAX_BATCHES];
    char *files[MAX_FILES];
    int n_files;
    TensorLayout layout;
    /* settings */
    int detail_graph, sync_timing, values_stats;
    long long sample, capture_bytes;
    int n_ops, n_names, n_ranges, no_layer, n_captures;
    char *ops[MAX_OPS], *names[MAX_NAMES], *captures[MAX_CAPTURES];
    int64_t ranges[MAX_LAYER_RANGES][2];
    pthread_t idle_writer;
    int idle_writer_started, stopping;
    /* the program's own callbacks, kept to be called from ours (ProgramCallback) */
    ProgramCallback callbacks[MAX_CALLBACKS];
} state = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .spool = -1};

/* The llama call in progress on this thread, if any. */
static __thread Entry *call_entry;
static __thread int compute_depth;

static void say(const char *format, ...) {
    char line[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    fprintf(stderr, "ggml-viz: %s\n", line);
}

/* Remember (state.lock held) or recall the program's callback of this kind on `key`. */
static void remember_callback(int kind, void *key, void *function, void *data) {
    ProgramCallback *slot = NULL;
    for (int i = 0; i < MAX_CALLBACKS && !slot; i++) {
        ProgramCallback *c = &state.callbacks[i];
        if ((c->kind == kind && c->key == key) || !c->kind) slot = c;
    }
    if (slot) *slot = (ProgramCallback){kind, key, function, data};
}

static const ProgramCallback *recall_callback(int kind, void *key) {
    for (int i = 0; i < MAX_CALLBACKS && state.callbacks[i].kind; i++) {
        if (state.callbacks[i].kind == kind && state.callbacks[i].key == key) return &state.callbacks[i];
    }
    return NULL;
}

/* ---- growable text, for JSON -------------------------------------------------------------- */

static void text_add(Array *t, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int n = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (n < 0 || array_reserve(t, (size_t)n + 1) != 0) return;
    va_start(args, format);
    vsnprintf((char *)t->items + t->count, (size_t)n + 1, format, args);
    va_end(args);
    t->count += (size_t)n;
}

static void json_string(Array *t, const char *s) {
    text_add(t, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') text_add(t, "\\%c", c);
        else if (c < 0x20) text_add(t, "\\u%04x", c);
        else text_add(t, "%c", c);
    }
    text_add(t, "\"");
}

/* ---- the spool ---------------------------------------------------------------------------- */

static void stop_recording(const char *reason);

/* CRC-32 as zlib computes it (the reader checks each frame with zlib.crc32). */
static uint32_t crc32_of(const void *data, size_t size) {
    static uint32_t table[256];
    if (!table[1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    }
    uint32_t crc = 0xffffffffu;
    const uint8_t *bytes = data;
    for (size_t i = 0; i < size; i++) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

/* One frame, in one write (under state.lock): a process that dies leaves whole frames. */
static int write_frame(uint32_t kind, uint32_t context_id, const void *payload, size_t size) {
    SpoolFrameHeader header = {kind, context_id, size};
    uint32_t trailer = crc32_of(payload, size);
    struct iovec parts[3] = {{&header, sizeof header}, {(void *)payload, size}, {&trailer, sizeof trailer}};
    size_t total = sizeof header + size + sizeof trailer, written = 0;
    if (state.spool < 0) return -1;
    while (written < total) {
        ssize_t n = writev(state.spool, parts, 3);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        written += (size_t)n;
        /* a short write: go on from where it stopped */
        for (int i = 0; i < 3; i++) {
            size_t step = (size_t)n < parts[i].iov_len ? (size_t)n : parts[i].iov_len;
            parts[i].iov_base = (char *)parts[i].iov_base + step;
            parts[i].iov_len -= step;
            n -= (ssize_t)step;
        }
    }
    return 0;
}

static void spool_frame(uint32_t kind, uint32_t context_id, const void *payload, size_t size) {
    pthread_mutex_lock(&state.lock);
    int failed = state.enabled && write_frame(kind, context_id, payload, size) != 0;
    int error = errno;
    pthread_mutex_unlock(&state.lock);
    if (failed) {
        char reason[4400];
        snprintf(reason, sizeof reason, "writing the spool %s failed: %s", state.spool_path, strerror(error));
        stop_recording(reason);
    }
}

/* Recording stops for good; the spool says why (if it still can), the program runs on. */
static void stop_recording(const char *reason) {
    pthread_mutex_lock(&state.lock);
    int was_enabled = state.enabled;
    state.enabled = 0;
    if (was_enabled) {
        write_frame(SPOOL_FAILED, 0, reason, strlen(reason));
        for (int i = 0; i < state.n_entries; i++) state.entries[i]->recorder.mode = MODE_OFF;
    }
    pthread_mutex_unlock(&state.lock);
    if (was_enabled) say("recording stopped: %s; the program goes on untraced", reason);
}

/* ---- finding the program's ggml ---------------------------------------------------------- */

#define FIND(field, name) (*(void **)&api.field = dlsym(RTLD_DEFAULT, name))

static int find_functions(void) {
    FIND(tensor_overhead, "ggml_tensor_overhead");
    FIND(init, "ggml_init");
    FIND(free, "ggml_free");
    FIND(new_tensor_2d, "ggml_new_tensor_2d");
    FIND(view_1d, "ggml_view_1d");
    FIND(add, "ggml_add");
    FIND(set_name, "ggml_set_name");
    FIND(get_name, "ggml_get_name");
    FIND(nbytes, "ggml_nbytes");
    FIND(is_contiguous, "ggml_is_contiguous");
    FIND(buffer_is_host, "ggml_backend_buffer_is_host");
    FIND(fp16_to_fp32, "ggml_fp16_to_fp32");
    FIND(version, "ggml_version");
    FIND(commit, "ggml_commit");
    FIND(sched_n_backends, "ggml_backend_sched_get_n_backends");
    FIND(sched_backend, "ggml_backend_sched_get_backend");
    FIND(is_cpu, "ggml_backend_is_cpu");
    FIND(recorder.buffer_name, "ggml_backend_buffer_name");
    FIND(recorder.buffer_usage, "ggml_backend_buffer_get_usage");
    FIND(recorder.buffer_size, "ggml_backend_buffer_get_size");
    FIND(recorder.buffer_base, "ggml_backend_buffer_get_base");
    FIND(recorder.buffer_type, "ggml_backend_buffer_get_type");
    FIND(recorder.buft_name, "ggml_backend_buft_name");
    FIND(recorder.op_desc, "ggml_op_desc");
    FIND(recorder.op_name, "ggml_op_name");
    FIND(get_model, "llama_get_model");
    FIND(model_vocab, "llama_model_get_vocab");
    FIND(token_to_piece, "llama_token_to_piece");
    FIND(model_desc, "llama_model_desc");
    FIND(meta_val_str, "llama_model_meta_val_str");
    FIND(n_ctx, "llama_n_ctx");
    FIND(n_batch, "llama_n_batch");
    FIND(n_ubatch, "llama_n_ubatch");
    FIND(n_seq_max, "llama_n_seq_max");
    FIND(n_threads, "llama_n_threads");
    FIND(n_threads_batch, "llama_n_threads_batch");
    FIND(model_n_layer, "llama_model_n_layer");
    FIND(model_n_ctx_train, "llama_model_n_ctx_train");
    FIND(model_n_embd, "llama_model_n_embd");
    FIND(model_n_params, "llama_model_n_params");
    FIND(model_size, "llama_model_size");
    FIND(system_info, "llama_print_system_info");
    FIND(synchronize, "llama_synchronize");
    void *needed[] = {api.tensor_overhead, api.init, api.free, api.new_tensor_2d, api.view_1d, api.add,
                      api.set_name, api.get_name, api.nbytes, api.recorder.buffer_name, api.recorder.buffer_usage,
                      api.recorder.buffer_size, api.recorder.buffer_base, api.recorder.buffer_type,
                      api.recorder.buft_name, api.recorder.op_desc, api.recorder.op_name};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        if (!needed[i]) return -1;
    }
    return 0;
}

static int64_t i64_at(const void *tensor, size_t offset) {
    int64_t value;
    memcpy(&value, (const char *)tensor + offset, sizeof value);
    return value;
}

/* Whether the loaded ggml lays ggml_tensor out as the recorder reads it, checked on tensors
   ggml itself builds (as ggml_api.check_tensor_layout does in Python); NULL if so. */
static const char *check_layout(const TensorLayout *l) {
    static char problem[256];
    size_t overhead = api.tensor_overhead();
    if (overhead != l->tensor_size + 32) {
        snprintf(problem, sizeof problem, "this ggml lays out ggml_tensor in %zu bytes, ggml-viz expects %zu",
                 overhead - 32, l->tensor_size);
        return problem;
    }
    void *ctx = api.init((struct ggml_init_params_abi){16 * overhead, NULL, true});
    if (!ctx) return "ggml_init failed while checking the tensor layout";
    void *base = api.new_tensor_2d(ctx, 3 /* Q4_1 */, 64, 3);
    void *other = api.new_tensor_2d(ctx, 0 /* F32 */, 7, 5);
    api.set_name(other, "ggml_viz_probe");
    void *view = api.view_1d(ctx, other, 7, 28);
    void *total = api.add(ctx, view, view);
    int32_t base_type, other_type, op;
    memcpy(&base_type, (char *)base + l->type_offset, 4);
    memcpy(&other_type, (char *)other + l->type_offset, 4);
    memcpy(&op, (char *)total + l->op_offset, 4);
    const char *op_name = api.recorder.op_name(op);
    const char *wrong = NULL;
    if (base_type != 3 || other_type != 0) wrong = "type";
    else if (i64_at(other, l->ne_offset) != 7 || i64_at(other, l->ne_offset + 8) != 5 ||
             i64_at(other, l->ne_offset + 16) != 1)
        wrong = "ne";
    else if ((size_t)i64_at(base, l->nb_offset + 8) * 3 != api.nbytes(base)) wrong = "nb";
    else if (!op_name || strcmp(op_name, "ADD") != 0) wrong = "op";
    else if (i64_at(total, l->src_offset) != (int64_t)(uintptr_t)view ||
             i64_at(total, l->src_offset + 8) != (int64_t)(uintptr_t)view)
        wrong = "src";
    else if (i64_at(view, l->view_src_offset) != (int64_t)(uintptr_t)other || i64_at(view, l->view_src_offset + 8) != 28)
        wrong = "view_src";
    else if (strcmp((char *)other + l->name_offset, "ggml_viz_probe") != 0 ||
             api.get_name(other) != (char *)other + l->name_offset)
        wrong = "name";
    api.free(ctx);
    if (!wrong) return NULL;
    snprintf(problem, sizeof problem, "field '%s' of ggml_tensor is not where ggml-viz expects it", wrong);
    return problem;
}

/* ---- settings from the environment --------------------------------------------------------- */

static const char *env(const char *name) {
    const char *value = getenv(name);
    return value && *value ? value : NULL;
}

static bool env_flag(const char *name) {
    const char *value = env(name);
    return value && (!strcmp(value, "1") || !strcasecmp(value, "true") || !strcasecmp(value, "yes") ||
                     !strcasecmp(value, "on"));
}

/* Split a comma list into at most `limit` trimmed items (upper-cased for ops). */
static int split_list(const char *text, char **items, int limit, bool upper) {
    int n = 0;
    char *copy = strdup(text ? text : ""), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && n < limit; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        size_t length = strlen(item);
        while (length && item[length - 1] == ' ') item[--length] = 0;
        if (!length) continue;
        if (upper) {
            for (char *c = item; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        }
        items[n++] = strdup(item);
    }
    free(copy);
    return n;
}

static bool whole_number(const char *text, long long *value) {
    char *end;
    errno = 0;
    *value = strtoll(text, &end, 10);
    return !errno && end != text && *end == 0;
}

/* The GGML_VIZ_* capture settings; NULL, or what is wrong (ggml-viz run checked them already). */
static const char *read_settings(void) {
    static char problem[256];
    const char *detail = env("GGML_VIZ_DETAIL"), *timing = env("GGML_VIZ_TIMING"), *values = env("GGML_VIZ_VALUES");
    if (detail && strcmp(detail, "op") && strcmp(detail, "graph")) return "GGML_VIZ_DETAIL: choose op or graph";
    if (timing && strcmp(timing, "inline") && strcmp(timing, "sync")) return "GGML_VIZ_TIMING: choose inline or sync";
    if (values && strcmp(values, "off") && strcmp(values, "stats")) return "GGML_VIZ_VALUES: choose off or stats";
    state.detail_graph = detail && !strcmp(detail, "graph");
    state.sync_timing = timing && !strcmp(timing, "sync");
    state.values_stats = values && !strcmp(values, "stats");
    state.capture_bytes = 64LL << 20;
    const char *sample = env("GGML_VIZ_SAMPLE"), *capture_bytes = env("GGML_VIZ_CAPTURE_BYTES");
    if (sample && (!whole_number(sample, &state.sample) || state.sample < 1)) {
        return "GGML_VIZ_SAMPLE: a whole number, 1 or more";
    }
    if (capture_bytes && (!whole_number(capture_bytes, &state.capture_bytes) || state.capture_bytes < 0)) {
        return "GGML_VIZ_CAPTURE_BYTES: a whole number of bytes";
    }
    state.n_ops = split_list(env("GGML_VIZ_OPS"), state.ops, MAX_OPS, true);
    state.n_names = split_list(env("GGML_VIZ_NAMES"), state.names, MAX_NAMES, false);
    state.n_captures = split_list(env("GGML_VIZ_CAPTURE"), state.captures, MAX_CAPTURES, false);
    char *layers[MAX_LAYER_RANGES];
    int n_layers = split_list(env("GGML_VIZ_LAYERS"), layers, MAX_LAYER_RANGES, false);
    for (int i = 0; i < n_layers; i++) {
        long long low, high;
        char *dash = strchr(layers[i], '-');
        if (!strcasecmp(layers[i], "none")) {
            state.no_layer = 1;
        } else if (dash) {
            *dash = 0;
            if (!whole_number(layers[i], &low) || !whole_number(dash + 1, &high) || high < low) {
                snprintf(problem, sizeof problem, "GGML_VIZ_LAYERS: %s-%s is not a layer range", layers[i], dash + 1);
                return problem;
            }
            state.ranges[state.n_ranges][0] = low;
            state.ranges[state.n_ranges++][1] = high;
        } else if (whole_number(layers[i], &low)) {
            state.ranges[state.n_ranges][0] = state.ranges[state.n_ranges][1] = low;
            state.n_ranges++;
        } else {
            snprintf(problem, sizeof problem, "GGML_VIZ_LAYERS: %s is not a layer, a range or 'none'", layers[i]);
            return problem;
        }
    }
    return NULL;
}

/* ---- start ---------------------------------------------------------------------------------- */

static void write_start_frame(void);
static void *write_when_idle(void *unused);
static void flush_at_exit(void);

static int open_spool(const char *output) {
    const char *path = env("GGML_VIZ_SPOOL");
    if (path) {
        snprintf(state.spool_path, sizeof state.spool_path, "%s", path);
    } else {
        char folder[4000];
        snprintf(folder, sizeof folder, "%s", output);
        if (mkdir(folder, 0755) != 0 && errno != EEXIST) return -1;
        snprintf(folder, sizeof folder, "%s/spool", output);
        if (mkdir(folder, 0755) != 0 && errno != EEXIST) return -1;
        snprintf(state.spool_path, sizeof state.spool_path, "%s/%d.spool", folder, (int)getpid());
    }
    state.spool = open(state.spool_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (state.spool < 0) return -1;
    if (write(state.spool, SPOOL_MAGIC, 8) != 8) return -1;
    return 0;
}

static void start(void) {
    const char *output = env("GGML_VIZ_OUTPUT");
    if (!output || env_flag("GGML_VIZ_DISABLE")) return;
    /* A Python program: the start-up hook records it, through llama-cpp-python. */
    if (dlsym(RTLD_DEFAULT, "Py_IsInitialized")) return;
    state.verbose = env_flag("GGML_VIZ_VERBOSE");
    if (find_functions() != 0) {
        say("this program's ggml lacks functions ggml-viz needs (or none is loaded); it runs untraced");
        return;
    }
    TensorLayout layout = RECORDER_TENSOR_LAYOUT;
    const char *problem = check_layout(&layout);
    if (!problem) problem = read_settings();
    if (problem) {
        say("%s; recording is off, the program runs untraced", problem);
        return;
    }
    state.layout = layout;
    if (open_spool(output) != 0) {
        say("cannot write the spool %s: %s; the program runs untraced", state.spool_path, strerror(errno));
        return;
    }
    state.enabled = 1;
    write_start_frame();
    atexit(flush_at_exit);
    if (pthread_create(&state.idle_writer, NULL, write_when_idle, NULL) == 0) state.idle_writer_started = 1;
    if (state.verbose) say("recording pid %d to %s", (int)getpid(), state.spool_path);
}

static bool active(void) {
    pthread_once(&state.once, start);
    return state.enabled;
}

static void add_library_of(Array *t, const char *key, void *function) {
    Dl_info info;
    text_add(t, ",\"%s\":", key);
    if (function && dladdr(function, &info) && info.dli_fname) json_string(t, info.dli_fname);
    else text_add(t, "null");
}

static void write_start_frame(void) {
    Array t;
    array_init(&t, 1);
    text_add(&t, "{\"pid\":%d,\"start_ns\":%lld,\"argv\":[", (int)getpid(), (long long)now_ns());
    FILE *cmdline = fopen("/proc/self/cmdline", "rb");
    if (cmdline) {
        char argument[4096];
        int c, length = 0, first = 1;
        while ((c = fgetc(cmdline)) != EOF) {
            if (c && length < (int)sizeof argument - 1) argument[length++] = (char)c;
            if (!c) {
                argument[length] = 0;
                text_add(&t, first ? "" : ",");
                json_string(&t, argument);
                first = 0;
                length = 0;
            }
        }
        fclose(cmdline);
    }
    text_add(&t, "]");
    add_library_of(&t, "ggml_library", (void *)api.recorder.op_name);
    add_library_of(&t, "llama_library", (void *)api.get_model);
    text_add(&t, ",\"ggml_version\":");
    json_string(&t, api.version ? api.version() : NULL);
    text_add(&t, ",\"ggml_commit\":");
    json_string(&t, api.commit ? api.commit() : NULL);
    text_add(&t, ",\"system_info\":");
    json_string(&t, api.system_info ? api.system_info() : NULL);
    text_add(&t, ",\"timing\":\"%s\",\"inline_timing_available\":%s,\"environment\":{",
             state.sync_timing ? "sync" : "inline", api.is_cpu ? "true" : "false");
    char *names[32];
    int n_names = split_list(ggml_viz_preload_settings, names, 32, false), n_set = 0;
    for (int i = 0; i < n_names; i++) { /* the settings as given, for the run's manifest */
        const char *value = env(names[i]);
        if (value) {
            text_add(&t, n_set++ ? "," : "");
            json_string(&t, names[i]);
            text_add(&t, ":");
            json_string(&t, value);
        }
        free(names[i]);
    }
    text_add(&t, "}}");
    spool_frame(SPOOL_START, 0, t.items, t.count);
    array_free(&t);
}

/* ---- contexts ----------------------------------------------------------------------------- */

/* The GGUF files the process opened so far (the collector finds which one is the model's). */
static void add_model_files(Array *t) {
    pthread_mutex_lock(&state.lock);
    text_add(t, ",\"files\":[");
    for (int i = 0; i < state.n_files; i++) {
        text_add(t, i ? "," : "");
        json_string(t, state.files[i]);
    }
    text_add(t, "]");
    pthread_mutex_unlock(&state.lock);
}

static void add_meta(Array *t, const void *model, const char *key, const char *field) {
    char value[256];
    text_add(t, ",\"%s\":", field);
    if (api.meta_val_str && api.meta_val_str(model, key, value, sizeof value) >= 0) json_string(t, value);
    else text_add(t, "null");
}

static void describe_context(Entry *e) {
    Array t;
    array_init(&t, 1);
    text_add(&t, "{\"context_id\":%d,\"kind\":\"%s\"", e->context_id, e->is_llama ? "llama" : "ggml");
    void *ctx = e->owner;
    if (e->is_llama) {
        text_add(&t, ",\"n_ctx\":%u,\"n_batch\":%u,\"n_ubatch\":%u,\"n_seq_max\":%u", api.n_ctx ? api.n_ctx(ctx) : 0,
                 api.n_batch ? api.n_batch(ctx) : 0, api.n_ubatch ? api.n_ubatch(ctx) : 0,
                 api.n_seq_max ? api.n_seq_max(ctx) : 0);
        text_add(&t, ",\"n_threads\":%d,\"n_threads_batch\":%d", api.n_threads ? api.n_threads(ctx) : -1,
                 api.n_threads_batch ? api.n_threads_batch(ctx) : -1);
        void *model = api.get_model ? api.get_model(ctx) : NULL;
        if (model) {
            char description[256] = "";
            if (api.model_desc) api.model_desc(model, description, sizeof description);
            text_add(&t, ",\"model\":{\"description\":");
            json_string(&t, description);
            add_meta(&t, model, "general.architecture", "architecture");
            add_meta(&t, model, "general.name", "name");
            text_add(&t, ",\"layers\":%d,\"parameters\":%llu,\"tensor_bytes\":%llu,\"n_ctx_train\":%d,\"n_embd\":%d",
                     api.model_n_layer ? api.model_n_layer(model) : -1,
                     (unsigned long long)(api.model_n_params ? api.model_n_params(model) : 0),
                     (unsigned long long)(api.model_size ? api.model_size(model) : 0),
                     api.model_n_ctx_train ? api.model_n_ctx_train(model) : -1,
                     api.model_n_embd ? api.model_n_embd(model) : -1);
            add_model_files(&t);
            text_add(&t, "}");
        }
    } else {
        add_model_files(&t);
    }
    text_add(&t, "}");
    spool_frame(SPOOL_CONTEXT, (uint32_t)e->context_id, t.items, t.count);
    array_free(&t);
}

/* The entry of a llama context or a plain scheduler, made on first sight (NULL: not recording). */
static Entry *entry_for(void *owner, int is_llama) {
    Entry *found = NULL, *made = NULL;
    pthread_mutex_lock(&state.lock);
    for (int i = 0; i < state.n_entries && !found; i++) {
        if (state.entries[i]->live && state.entries[i]->owner == owner) found = state.entries[i];
    }
    if (!found && state.enabled && state.n_entries < MAX_ENTRIES) {
        made = calloc(1, sizeof *made);
        if (made && recorder_init(&made->recorder, &state.layout, &api.recorder) == 0) {
            made->owner = owner;
            made->is_llama = is_llama;
            made->live = 1;
            made->context_id = state.n_entries;
            pthread_mutex_init(&made->lock, NULL);
            array_init(&made->frame, 1);
            Recorder *r = &made->recorder;
            r->inline_timing = !state.sync_timing;
            r->time_nodes = !state.detail_graph;
            recorder_set_decode_rules(r, state.detail_graph, state.sample, 32, 500000000LL, LLAMA_BATCH_OFFSETS);
            recorder_set_filters(r, (const char *const *)state.ops, state.n_ops, (const int64_t(*)[2])state.ranges,
                                 state.n_ranges, state.no_layer, (const char *const *)state.names, state.n_names);
            if (state.values_stats || state.n_captures) {
                ValueFunctions values = {api.buffer_is_host, api.is_contiguous, api.nbytes, api.fp16_to_fp32};
                const char *problem = recorder_set_values(r, state.values_stats, (const char *const *)state.captures,
                                                          state.n_captures, state.capture_bytes, &values);
                if (problem) say("values are not recorded: %s", problem);
            }
            /* callbacks the program set before: called from ours */
            const ProgramCallback *eval = recall_callback(EVAL_ON_SCHEDULER, owner);
            const ProgramCallback *abort = recall_callback(ABORT_ON_CONTEXT, owner);
            if (eval && !is_llama) {
                made->chained_eval = (eval_fn)eval->function;
                made->chained_data = eval->data;
            }
            if (abort && is_llama) recorder_chain_abort(r, (abort_fn)abort->function, abort->data);
            state.entries[state.n_entries++] = made;
            found = made;
        } else if (made) {
            recorder_free(&made->recorder);
            free(made);
            made = NULL;
        }
    }
    pthread_mutex_unlock(&state.lock);
    if (made) describe_context(made);
    return found;
}

/* ---- taking and writing --------------------------------------------------------------------- */

static void frame_add(Array *frame, const void *data, size_t size) {
    if (size && array_reserve(frame, size) == 0) {
        memcpy(frame->items + frame->count, data, size);
        frame->count += size;
    }
}

/* Take what a context's recorder holds and write it as one frame (e->lock held). */
static void write_entry(Entry *e) {
    Recorder *r = &e->recorder;
    int failed = r->out_of_memory;
    if (failed) recorder_drop_open(r);
    DecodesTake decodes;
    recorder_decodes_view(r, &decodes);
    long long n_graphs = recorder_take_begin(r, now_ns());
    if (n_graphs < 0) {
        recorder_discard(r);
        stop_recording("the recorder ran out of memory");
        return;
    }
    Array *frame = &e->frame;
    frame->count = 0;
    uint64_t counts[4] = {decodes.n_calls, decodes.n_tokens, (uint64_t)n_graphs, 0};
    size_t counts_at = frame->count;
    frame_add(frame, counts, sizeof counts);
    frame_add(frame, decodes.calls, decodes.n_calls * sizeof(DecodeRecord));
    for (int c = 0; c < BATCH_COLUMNS; c++) frame_add(frame, decodes.columns[c].data, decodes.columns[c].size);
    /* each token's text, read now, while its model lives */
    const int32_t *tokens = decodes.columns[BATCH_TOKENS].data;
    const void *vocab = NULL;
    if (e->is_llama && api.get_model && api.model_vocab && api.token_to_piece) {
        void *model = api.get_model(e->owner);
        vocab = model ? api.model_vocab(model) : NULL;
    }
    size_t lengths_at = frame->count;
    if (array_reserve(frame, decodes.n_tokens * 4) == 0) {
        memset(frame->items + frame->count, 0, decodes.n_tokens * 4);
        frame->count += decodes.n_tokens * 4;
    }
    uint64_t text_bytes = 0;
    for (size_t i = 0; vocab && i < decodes.n_tokens; i++) {
        char piece[256];
        int32_t length = tokens[i] >= 0 ? api.token_to_piece(vocab, tokens[i], piece, sizeof piece, 0, true) : 0;
        if (length < 0) length = 0;
        frame_add(frame, piece, (size_t)length);
        uint32_t stored = (uint32_t)length;
        memcpy(frame->items + lengths_at + 4 * i, &stored, 4);
        text_bytes += (uint64_t)length;
    }
    for (long long g = 0; g < n_graphs; g++) {
        GraphTake taken;
        if (recorder_take_graph(r, (size_t)g, &taken) != 0) {
            failed = 1;
            break;
        }
        SpoolGraphHeader header = {(uint32_t)taken.plain_repeat, (uint32_t)taken.same, taken.n_nodes,
                                   taken.start_ns, taken.end_ns, taken.boundary_ns, taken.n_timed, {0}};
        for (int p = 0; p < GRAPH_PARTS; p++) header.part_sizes[p] = taken.parts[p].size;
        frame_add(frame, &header, sizeof header);
        for (int p = 0; p < GRAPH_PARTS; p++) frame_add(frame, taken.parts[p].data, taken.parts[p].size);
    }
    counts[3] = text_bytes;
    memcpy(frame->items + counts_at, counts, sizeof counts);
    recorder_take_end(r);
    recorder_decodes_done(r);
    e->unwritten = 0;
    if (!failed) spool_frame(SPOOL_TAKE, (uint32_t)e->context_id, frame->items, frame->count);
    if (failed) stop_recording("the recorder ran out of memory");
}

/* The idle writer: a program that stops computing (a server waiting for requests) has its
   last graphs in the spool within about two write intervals. */
static void *write_when_idle(void *unused) {
    (void)unused;
    struct timespec pause = {0, 250000000L};
    while (!state.stopping) {
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&state.lock);
        int n = state.n_entries;
        pthread_mutex_unlock(&state.lock);
        for (int i = 0; i < n && state.enabled; i++) {
            Entry *e = state.entries[i];
            if (pthread_mutex_trylock(&e->lock) != 0) continue; /* in a call, or being written */
            Recorder *r = &e->recorder;
            if (e->live && !e->in_call && e->unwritten && !recorder_open_nodes(r) &&
                now_ns() - r->last_take_ns >= r->write_interval_ns) {
                write_entry(e);
            }
            pthread_mutex_unlock(&e->lock);
        }
    }
    return NULL;
}

/* A context is going away, or the program ends: write what its recorder holds. */
static void flush_entry(Entry *e, int retire) {
    pthread_mutex_lock(&e->lock);
    if (e->live && e->recorder.mode == MODE_RECORD) write_entry(e);
    if (retire) {
        e->live = 0;
        e->recorder.mode = MODE_OFF;
    }
    pthread_mutex_unlock(&e->lock);
}

static void flush_at_exit(void) {
    state.stopping = 1;
    for (int i = 0; i < state.n_entries; i++) {
        Entry *e = state.entries[i];
        if (e->live && !e->in_call) flush_entry(e, 0);
    }
    if (state.enabled) {
        Array t;
        array_init(&t, 1);
        long long skipped = 0, skipped_bytes = 0;
        for (int i = 0; i < state.n_entries; i++) {
            skipped += state.entries[i]->recorder.captures_skipped;
            skipped_bytes += state.entries[i]->recorder.capture_bytes_skipped;
        }
        text_add(&t, "{\"end_ns\":%lld,\"contexts\":%d,\"captures_skipped\":%lld,\"capture_bytes_skipped\":%lld}",
                 (long long)now_ns(), state.n_entries, skipped, skipped_bytes);
        spool_frame(SPOOL_END, 0, t.items, t.count);
        array_free(&t);
    }
}

/* ---- our callbacks -------------------------------------------------------------------------- */

static bool preload_eval_callback(void *tensor, bool ask, void *user_data) {
    Entry *e = user_data;
    if (!e->chained_eval) return recorder_eval_callback(tensor, ask, &e->recorder);
    if (ask) { /* the program's callback asks for nodes too: a node either asks for is computed alone */
        bool ours = recorder_eval_callback(tensor, true, &e->recorder);
        e->chained_answered = e->chained_eval(tensor, true, e->chained_data);
        return ours || e->chained_answered;
    }
    recorder_eval_callback(tensor, false, &e->recorder);
    bool go_on = e->chained_answered ? e->chained_eval(tensor, false, e->chained_data) : true;
    e->chained_answered = 0;
    return go_on;
}

/* Our eval callback on the scheduler, and our abort callback on its CPU backends. */
static void install_callbacks(Entry *e, void *sched) {
    ORIGINAL(ggml_backend_sched_set_eval_callback, set_callback_fn);
    ORIGINAL(ggml_backend_cpu_set_abort_callback, set_abort_fn);
    if (original_ggml_backend_sched_set_eval_callback) {
        original_ggml_backend_sched_set_eval_callback(sched, preload_eval_callback, e);
    }
    if (state.sync_timing || !original_ggml_backend_cpu_set_abort_callback || !api.sched_n_backends ||
        !api.sched_backend || !api.is_cpu) {
        return;
    }
    int n = api.sched_n_backends(sched);
    for (int i = 0; i < n; i++) {
        void *backend = api.sched_backend(sched, i);
        if (!backend || !api.is_cpu(backend)) continue;
        int known = 0, free_slot = -1;
        for (int k = 0; k < MAX_CPU_BACKENDS; k++) {
            known |= e->abort_set[k] == backend;
            if (!e->abort_set[k] && free_slot < 0) free_slot = k;
        }
        if (known || free_slot < 0) continue;
        pthread_mutex_lock(&state.lock);
        const ProgramCallback *theirs = recall_callback(ABORT_ON_BACKEND, backend);
        if (theirs && !e->recorder.chained_abort) {
            recorder_chain_abort(&e->recorder, (abort_fn)theirs->function, theirs->data);
        }
        pthread_mutex_unlock(&state.lock);
        original_ggml_backend_cpu_set_abort_callback(backend, recorder_abort_callback, &e->recorder);
        e->abort_set[free_slot] = backend;
    }
}

/* ---- interposed: ggml's scheduler --------------------------------------------------------- */

typedef int (*compute_fn)(void *, void *);

/* The bracket around a call that computes graphs (a llama call with its batch, or a plain
   ggml program's graph without one): the entry is held for the call, its graphs closed at
   its end, and written when a write is due. */
static void begin_call(Entry *e, const void *batch) {
    pthread_mutex_lock(&e->lock);
    e->in_call = 1;
    recorder_begin_decode(&e->recorder, batch);
}

static void end_call(Entry *e, int32_t status) {
    int due = recorder_end_decode(&e->recorder, status);
    e->in_call = 0;
    e->unwritten = 1;
    if (due) write_entry(e);
    pthread_mutex_unlock(&e->lock);
}

/* A graph computed through the scheduler: inside a llama call, part of it; else (a plain ggml
   program) a call of its own, without tokens. */
static int compute_graph(compute_fn original, void *sched, void *graph) {
    if (!original) return -1;
    if (compute_depth > 0 || !active()) return original(sched, graph);
    Entry *e = call_entry;
    if (e) {
        install_callbacks(e, sched);
        compute_depth++;
        int status = original(sched, graph);
        compute_depth--;
        return status;
    }
    e = entry_for(sched, 0);
    if (!e) return original(sched, graph);
    begin_call(e, NULL);
    install_callbacks(e, sched);
    compute_depth++;
    int status = original(sched, graph);
    compute_depth--;
    end_call(e, status);
    return status;
}

EXPORT int ggml_backend_sched_graph_compute(void *sched, void *graph) {
    ORIGINAL(ggml_backend_sched_graph_compute, compute_fn);
    return compute_graph(original_ggml_backend_sched_graph_compute, sched, graph);
}

EXPORT int ggml_backend_sched_graph_compute_async(void *sched, void *graph) {
    ORIGINAL(ggml_backend_sched_graph_compute_async, compute_fn);
    return compute_graph(original_ggml_backend_sched_graph_compute_async, sched, graph);
}

EXPORT void ggml_backend_sched_set_eval_callback(void *sched, eval_fn callback, void *user_data) {
    ORIGINAL(ggml_backend_sched_set_eval_callback, set_callback_fn);
    if (callback != preload_eval_callback && active()) {
        /* the program's own: kept, and called from ours once we compute with this scheduler */
        pthread_mutex_lock(&state.lock);
        remember_callback(EVAL_ON_SCHEDULER, sched, (void *)callback, user_data);
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            if (e->live && (e->owner == sched || e == call_entry)) {
                e->chained_eval = callback;
                e->chained_data = user_data;
            }
        }
        pthread_mutex_unlock(&state.lock);
    }
    if (original_ggml_backend_sched_set_eval_callback) original_ggml_backend_sched_set_eval_callback(sched, callback, user_data);
}

EXPORT void ggml_backend_sched_free(void *sched) {
    ORIGINAL(ggml_backend_sched_free, free_fn);
    if (state.enabled) {
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            if (e->live && !e->is_llama && e->owner == sched) flush_entry(e, 1);
        }
    }
    if (original_ggml_backend_sched_free) original_ggml_backend_sched_free(sched);
}

EXPORT void ggml_backend_cpu_set_abort_callback(void *backend, abort_fn callback, void *data) {
    ORIGINAL(ggml_backend_cpu_set_abort_callback, set_abort_fn);
    if (!original_ggml_backend_cpu_set_abort_callback) return;
    if (callback != recorder_abort_callback && active()) {
        pthread_mutex_lock(&state.lock);
        remember_callback(ABORT_ON_BACKEND, backend, (void *)callback, data);
        Entry *ours = NULL;
        for (int i = 0; i < state.n_entries && !ours; i++) {
            for (int k = 0; k < MAX_CPU_BACKENDS; k++) {
                if (state.entries[i]->live && state.entries[i]->abort_set[k] == backend) ours = state.entries[i];
            }
        }
        pthread_mutex_unlock(&state.lock);
        if (ours) { /* ours stays, and calls the program's */
            recorder_chain_abort(&ours->recorder, callback, data);
            return;
        }
    }
    original_ggml_backend_cpu_set_abort_callback(backend, callback, data);
}

/* ---- interposed: llama ---------------------------------------------------------------------- */

/* A llama call: the batch's tokens are copied, the graphs it computes are attributed to it. */
static int32_t llama_call(void *ctx, const llama_batch_abi *batch, int32_t (*compute)(void *, const void *),
                          const void *argument) {
    Entry *e = active() && !call_entry ? entry_for(ctx, 1) : NULL;
    if (!e) return compute(ctx, argument);
    begin_call(e, batch);
    call_entry = e;
    int32_t status = compute(ctx, argument);
    call_entry = NULL;
    /* llama.cpp's own eval timer runs until the next synchronize: stop it before our bookkeeping */
    if (api.synchronize) api.synchronize(ctx);
    end_call(e, status);
    return status;
}

typedef int32_t (*batch_call_fn)(void *, llama_batch_abi);
static batch_call_fn decode_original, encode_original;

static int32_t call_decode(void *ctx, const void *batch) {
    return decode_original(ctx, *(const llama_batch_abi *)batch);
}

static int32_t call_encode(void *ctx, const void *batch) {
    return encode_original(ctx, *(const llama_batch_abi *)batch);
}

EXPORT int32_t llama_decode(void *ctx, llama_batch_abi batch) {
    if (!decode_original) decode_original = (batch_call_fn)find_original("llama_decode", (void *)llama_decode);
    if (!decode_original) return -1;
    return llama_call(ctx, &batch, call_decode, &batch);
}

EXPORT int32_t llama_encode(void *ctx, llama_batch_abi batch) {
    if (!encode_original) encode_original = (batch_call_fn)find_original("llama_encode", (void *)llama_encode);
    if (!encode_original) return -1;
    return llama_call(ctx, &batch, call_encode, &batch);
}

EXPORT void llama_free(void *ctx) {
    ORIGINAL(llama_free, free_fn);
    if (state.enabled) {
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            if (e->live && e->is_llama && e->owner == ctx) flush_entry(e, 1);
        }
    }
    if (original_llama_free) original_llama_free(ctx);
}

EXPORT void llama_set_abort_callback(void *ctx, abort_fn callback, void *data) {
    ORIGINAL(llama_set_abort_callback, set_abort_fn);
    if (!original_llama_set_abort_callback) return;
    original_llama_set_abort_callback(ctx, callback, data);
    if (!active()) return;
    pthread_mutex_lock(&state.lock);
    remember_callback(ABORT_ON_CONTEXT, ctx, (void *)callback, data);
    pthread_mutex_unlock(&state.lock);
    for (int i = 0; i < state.n_entries; i++) { /* put ours back, calling the program's */
        Entry *e = state.entries[i];
        if (!e->live || !e->is_llama || e->owner != ctx) continue;
        recorder_chain_abort(&e->recorder, callback, data);
        ORIGINAL(ggml_backend_cpu_set_abort_callback, set_abort_fn);
        for (int k = 0; k < MAX_CPU_BACKENDS && original_ggml_backend_cpu_set_abort_callback; k++) {
            if (e->abort_set[k]) original_ggml_backend_cpu_set_abort_callback(e->abort_set[k], recorder_abort_callback, &e->recorder);
        }
    }
}

EXPORT void *gguf_init_from_file(const char *fname, struct gguf_init_params_abi params) {
    ORIGINAL(gguf_init_from_file, gguf_init_fn);
    if (!original_gguf_init_from_file) return NULL;
    void *gguf = original_gguf_init_from_file(fname, params);
    if (gguf && fname && active()) {
        char *path = realpath(fname, NULL);
        pthread_mutex_lock(&state.lock);
        int known = 0;
        for (int i = 0; i < state.n_files && path; i++) known |= !strcmp(state.files[i], path);
        if (path && !known && state.n_files < MAX_FILES) state.files[state.n_files++] = path;
        else free(path);
        pthread_mutex_unlock(&state.lock);
    }
    return gguf;
}

/* ---- interposed: llama_batch_ext (llama.cpp's own programs) -------------------------------- */

static BatchShadow *shadow_of(void *batch, int make) {
    BatchShadow *found = NULL;
    pthread_mutex_lock(&state.lock);
    int free_slot = -1;
    for (int i = 0; i < MAX_BATCHES && !found; i++) {
        if (state.shadows[i] && state.shadows[i]->batch == batch) found = state.shadows[i];
        else if (!state.shadows[i] && free_slot < 0) free_slot = i;
    }
    if (!found && make && free_slot >= 0 && (found = calloc(1, sizeof *found))) {
        found->batch = batch;
        size_t sizes[BATCH_COLUMNS] = {4, 4, 4, 1};
        for (int c = 0; c < BATCH_COLUMNS; c++) array_init(&found->columns[c], sizes[c]);
        state.shadows[free_slot] = found;
    }
    pthread_mutex_unlock(&state.lock);
    return found;
}

/* Token `index` of a shadowed batch: the columns grow to hold it (a new one: token, seq). */
static void shadow_add(void *batch, int32_t index, int32_t seq_id, int32_t token) {
    BatchShadow *s = index >= 0 && state.enabled ? shadow_of(batch, 1) : NULL;
    if (!s) return;
    while (s->columns[BATCH_TOKENS].count <= (size_t)index) {
        int32_t *t = array_push(&s->columns[BATCH_TOKENS]), *p = array_push(&s->columns[BATCH_POSITIONS]);
        int32_t *q = array_push(&s->columns[BATCH_SEQ_IDS]);
        uint8_t *o = array_push(&s->columns[BATCH_OUTPUTS]);
        if (!t || !p || !q || !o) return;
        *t = *p = *q = -1;
        *o = 0;
    }
    ARRAY_AT(s->columns[BATCH_TOKENS], int32_t, index) = token;
    ARRAY_AT(s->columns[BATCH_SEQ_IDS], int32_t, index) = seq_id;
}

EXPORT void llama_batch_ext_free(void *batch) {
    ORIGINAL(llama_batch_ext_free, free_fn);
    pthread_mutex_lock(&state.lock);
    for (int i = 0; i < MAX_BATCHES; i++) {
        BatchShadow *s = state.shadows[i];
        if (s && s->batch == batch) {
            for (int c = 0; c < BATCH_COLUMNS; c++) array_free(&s->columns[c]);
            free(s);
            state.shadows[i] = NULL;
        }
    }
    pthread_mutex_unlock(&state.lock);
    if (original_llama_batch_ext_free) original_llama_batch_ext_free(batch);
}

EXPORT void llama_batch_ext_clear(void *batch) {
    ORIGINAL(llama_batch_ext_clear, free_fn);
    BatchShadow *s = state.enabled ? shadow_of(batch, 0) : NULL;
    if (s) {
        for (int c = 0; c < BATCH_COLUMNS; c++) s->columns[c].count = 0;
    }
    if (original_llama_batch_ext_clear) original_llama_batch_ext_clear(batch);
}

EXPORT int32_t llama_batch_ext_add(void *batch, int32_t seq_id) {
    ORIGINAL(llama_batch_ext_add, batch_add_fn);
    if (!original_llama_batch_ext_add) return -1;
    int32_t index = original_llama_batch_ext_add(batch, seq_id);
    shadow_add(batch, index, seq_id, -1);
    return index;
}

EXPORT int32_t llama_batch_ext_add_token(void *batch, int32_t seq_id, int32_t token) {
    ORIGINAL(llama_batch_ext_add_token, batch_add_token_fn);
    if (!original_llama_batch_ext_add_token) return -1;
    int32_t index = original_llama_batch_ext_add_token(batch, seq_id, token);
    shadow_add(batch, index, seq_id, token);
    return index;
}

EXPORT int32_t llama_batch_ext_add_embd(void *batch, int32_t seq_id, struct llama_embd_abi embd) {
    ORIGINAL(llama_batch_ext_add_embd, batch_add_embd_fn);
    if (!original_llama_batch_ext_add_embd) return -1;
    int32_t index = original_llama_batch_ext_add_embd(batch, seq_id, embd);
    shadow_add(batch, index, seq_id, -1);
    return index;
}

EXPORT bool llama_batch_ext_set_pos(void *batch, int32_t index, const int32_t *pos) {
    ORIGINAL(llama_batch_ext_set_pos, batch_set_pos_fn);
    if (!original_llama_batch_ext_set_pos) return false;
    bool done = original_llama_batch_ext_set_pos(batch, index, pos);
    BatchShadow *s = done && pos && state.enabled ? shadow_of(batch, 0) : NULL;
    if (s && index >= 0 && (size_t)index < s->columns[BATCH_POSITIONS].count) {
        ARRAY_AT(s->columns[BATCH_POSITIONS], int32_t, index) = pos[0];
    }
    return done;
}

static void shadow_output(void *batch, int32_t index, bool value) {
    BatchShadow *s = state.enabled ? shadow_of(batch, 0) : NULL;
    if (s && index >= 0 && (size_t)index < s->columns[BATCH_OUTPUTS].count) {
        ARRAY_AT(s->columns[BATCH_OUTPUTS], uint8_t, index) = value;
    }
}

EXPORT bool llama_batch_ext_set_output_logits(void *batch, int32_t index, bool value) {
    ORIGINAL(llama_batch_ext_set_output_logits, batch_set_output_fn);
    if (!original_llama_batch_ext_set_output_logits) return false;
    bool done = original_llama_batch_ext_set_output_logits(batch, index, value);
    if (done) shadow_output(batch, index, value);
    return done;
}

EXPORT bool llama_batch_ext_set_output_embd(void *batch, int32_t index, bool value) {
    ORIGINAL(llama_batch_ext_set_output_embd, batch_set_output_fn);
    if (!original_llama_batch_ext_set_output_embd) return false;
    bool done = original_llama_batch_ext_set_output_embd(batch, index, value);
    if (done) shadow_output(batch, index, value);
    return done;
}

typedef int32_t (*process_fn)(void *, int, void *);
static process_fn process_original;
static __thread int process_type;

static int32_t call_process(void *ctx, const void *batch) {
    return process_original(ctx, process_type, (void *)batch);
}

EXPORT int32_t llama_process(void *ctx, int type, void *batch) {
    if (!process_original) process_original = (process_fn)find_original("llama_process", (void *)llama_process);
    if (!process_original) return -1;
    process_type = type;
    if (!active()) return process_original(ctx, type, batch);
    /* the batch as a llama_batch, from what was added to it */
    BatchShadow *s = shadow_of(batch, 0);
    size_t n = s ? s->columns[BATCH_TOKENS].count : 0;
    int32_t *n_seq = n ? malloc(n * sizeof *n_seq) : NULL;
    int32_t **seq = n ? malloc(n * sizeof *seq) : NULL;
    llama_batch_abi copy = {0};
    if (s && n_seq && seq) {
        for (size_t i = 0; i < n; i++) {
            n_seq[i] = 1;
            seq[i] = &ARRAY_AT(s->columns[BATCH_SEQ_IDS], int32_t, i);
        }
        copy = (llama_batch_abi){(int32_t)n, (int32_t *)s->columns[BATCH_TOKENS].items, NULL,
                                 (int32_t *)s->columns[BATCH_POSITIONS].items, n_seq, seq,
                                 (int8_t *)s->columns[BATCH_OUTPUTS].items};
    }
    int32_t status = llama_call(ctx, &copy, call_process, batch);
    free(n_seq);
    free(seq);
    return status;
}
