/*
 * The preload library's parts (preload.c: what it interposes, its settings and state;
 * preload_setup.c: finding the program's ggml, checking its layout, reading the settings;
 * preload_spool.c: what it writes). Internal: nothing here is exported.
 */
#ifndef GGML_VIZ_PRELOAD_H
#define GGML_VIZ_PRELOAD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../gpu/gpu_timer.h"
#include "../core/graph_compute.h"
#include "../core/recorder.h"
#include "spool.h"

#define EXPORT __attribute__((visibility("default")))

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
/* llama_batch as llama_decode and llama_encode receive it, by value, and pass it on: llama.h's fields,
   then room for the three int32 fields llama.cpp had after them until late 2024 (all_pos_0,
   all_pos_1, all_seq_id; gpt4all 2.8.2's llama.cpp has them). A struct this size is passed in
   memory (on x86-64, on the caller's stack): an interposer declaring fewer bytes would hand such a
   llama_decode garbage for those fields. Declaring more reads a few bytes of a newer caller's own
   frame, which the original it calls never looks at. */
typedef struct {
    llama_batch_abi batch;
    int32_t older_fields[4];
} llama_batch_passed;

/* Functions of the program's own libraries, found once (NULL where its ggml lacks them). */
typedef struct {
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
    void (*sched_synchronize)(void *);
    bool (*is_cpu)(void *);
    const char *(*backend_name)(void *);
    /* ggml's graph accessors; a ggml from before them (2024) is read through its ggml_cgraph struct */
    int (*graph_n_nodes)(void *);
    void *(*graph_node)(void *, int);
    void *threadpool_new; /* ggml_threadpool_new: a ggml whose CPU threads end each node at a barrier */
    /* a mixture of experts' routing: the two ops probed for their numbers, a tensor read anywhere */
    void *(*get_rows)(void *, void *, void *);
    void *(*mul_mat_id)(void *, void *, void *, void *);
    void (*tensor_get)(const void *, void *, size_t, size_t);
    GgmlFunctions recorder;
    /* llama (absent in a plain ggml program) */
    void *(*get_model)(const void *);
    const void *(*model_vocab)(const void *);
    int32_t (*token_to_piece)(const void *, int32_t, char *, int32_t, int32_t, bool);
    int32_t (*vocab_bos)(const void *), (*vocab_eos)(const void *);
    int32_t (*model_desc)(const void *, char *, size_t);
    int32_t (*meta_val_str)(const void *, const char *, char *, size_t);
    uint32_t (*n_ctx)(const void *), (*n_batch)(const void *), (*n_ubatch)(const void *), (*n_seq_max)(const void *);
    int32_t (*n_threads)(void *), (*n_threads_batch)(void *);
    int32_t (*model_n_layer)(const void *), (*model_n_ctx_train)(const void *), (*model_n_embd)(const void *);
    uint64_t (*model_n_params)(const void *), (*model_size)(const void *);
    const char *(*system_info)(void);
    void (*synchronize)(void *);
} Api;
extern Api api;


/* ---- settings and state ------------------------------------------------------------------- */

enum { MAX_ENTRIES = 64, MAX_BATCHES = 64, MAX_FILES = 16, MAX_CPU_BACKENDS = 8 };

/* One recorded context: a llama context (owner: its llama_context) or, in a plain ggml
   program, a backend scheduler (owner: the scheduler), a backend (owner: the backend), or the
   graphs a thread computes on the CPU without a backend (owner: that thread's key). */
enum { ENTRY_SCHEDULER, ENTRY_LLAMA, ENTRY_BACKEND, ENTRY_CPU_GRAPHS };
typedef struct {
    void *owner;
    int is_llama, is_backend, is_cpu_graphs, context_id, live;
    char library[512]; /* the library whose code it computes with (a process may hold two ggml copies) */
    Recorder recorder;
    pthread_mutex_t lock;  /* held by the thread in a call, and while writing */
    int in_call, unwritten;
    int values_problem_said, routing_problem_said; /* once, not at every window */
    eval_fn chained_eval;  /* the program's own eval callback, called from ours */
    void *chained_data;
    int chained_answered;  /* it asked for the node in flight */
    void *abort_set[MAX_CPU_BACKENDS]; /* CPU backends whose abort callback is ours */
    /* A scheduler with a backend that is not a CPU (a GPU): its graphs are read at their
       compute call, with no eval callback, which would cost a GPU its fast path. */
    void *checked_sched;   /* the scheduler the two below were worked out for */
    int on_gpu, timed_device; /* timed_device: GPU_DEVICE_* whose nodes the GPU timer times (CUDA, Vulkan) */
    char gpu_name[64];     /* its first GPU backend (CUDA0, Vulkan0, ...) */
    /* A backend computing graphs itself (owner: the backend): the graphs made in the process when
       it last computed (a new one since is read again). */
    uint64_t graphs_made_seen;
    Array frame;           /* the frame being built */
    Array nodes_rewritten, leaves_rewritten; /* an older ggml's tensor structs, in the current layout */
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

/* What is read once, at start-up, and never changes after: the settings (GGML_VIZ_*) and what
   start-up found out about the process and its ggml. Written only by start-up (preload.c's start(),
   and preload_setup.c's read_settings and probe_routing_ops, which it hands its copy to); every
   other part reads it through `settings`, which cannot write it. */
typedef struct {
    int verbose;
    int in_python; /* a Python process (its spool: State's spool_opened, claimed_by_python) */
    const char *untraced_reason; /* why this process runs untraced (its ggml, the settings), if it does */
    TensorLayout layout;
    const char *layout_name; /* which ggml_tensor layout this ggml has (preload_setup.c: KNOWN_LAYOUTS) */
    /* Whether nodes can be timed by the CPU backend's ticks: on a ggml whose thread 0 ticks after each
       node and whose threads then meet at a barrier (ggml with threadpools, from August 2024). NULL if
       so, else why not (an older ggml: its graphs keep graph times, unless sync timing asks per node). */
    const char *no_ticks_reason;
    int detail_graph, sync_timing, values_stats;
    GpuTraceSettings gpu;
    int read_graphs_at_compute; /* GGML_VIZ_READ_GRAPHS=compute: as on a GPU, on any backend */
    int routing;                /* GGML_VIZ_ROUTING (on unless off): read each MoE layer's experts */
    int32_t op_mul_mat_id, op_get_rows; /* their numbers in this ggml (0: not found) */
    long long sample, capture_bytes;
    int n_ops, n_names, n_ranges, no_layer, n_captures;
    char *ops[MAX_OPS], *names[MAX_NAMES], *captures[MAX_CAPTURES];
    int64_t ranges[MAX_LAYER_RANGES][2];
} Settings;
extern const Settings *const settings;

/* The window control (`ggml-viz run --dormant` and `--keep-minutes`): a file the collector writes and
   this library maps read-only (GGML_VIZ_CONTROL names it). A new generation asks for a new spool in
   `spool_dir`: graphs recorded (`graphs` 1: a window) or only each llama call's batch (0: dormant).
   Its layout is capture/preload/control.py's. */
enum { CONTROL_BYTES = 4096 };
#define CONTROL_MAGIC "GVIZCTL1"
typedef struct {
    char magic[8];
    uint64_t generation; /* written last: the rest is whole once it changes */
    uint32_t graphs;
    uint32_t unused;
    char spool_dir[CONTROL_BYTES - 24];
} WindowControl;

/* What changes while the process records. */
typedef struct {
    pthread_once_t once; /* start-up */
    int enabled;
    pthread_mutex_t lock; /* entries, shadows, program callbacks, the spool file, the claim */
    /* A Python process: its spool is opened with the first graph, unless ggml-viz's start-up
       hook claimed the process first (it records llama-cpp-python's contexts itself). */
    int spool_opened, claimed_by_python;
    int untraced_said; /* Settings' untraced_reason was said */
    int spool;
    char spool_path[4096];
    Entry *entries[MAX_ENTRIES];
    int n_entries;
    BatchShadow *shadows[MAX_BATCHES];
    char *files[MAX_FILES];
    int n_files;
    int gpu_problem_said;
    pthread_t idle_writer;
    int idle_writer_started, stopping;
    /* the program's own callbacks, kept to be called from ours (ProgramCallback) */
    ProgramCallback callbacks[MAX_CALLBACKS];
    /* Windows: the control (NULL: none, graphs always recorded), the generation this process
       follows, and whether it records graphs now (0: dormant, each llama call's batch only). */
    const WindowControl *control;
    uint64_t generation;
    int graphs_on;
} State;
extern State state;


extern const char ggml_viz_preload_settings[];

/* preload.c */
/* Whether this process records to its spool now (a native program that computes with ggml). */
bool preload_recording(void);
void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* A function of the program's (ours: our own of that name, skipped): in the global scope, or
   in a library loaded into a local one (a Python extension's ggml). */
void *find_original(const char *name, void *ours);
/* The original of a function we interpose (`name`, ours) that this call must reach: the calling
   library's (original_for). Used at the top of the interposer, where the return address is its caller's. */
void *original_for(const char *name, void *ours, const void *caller);
#define ORIGINAL(name, type) type original_##name = (type)original_for(#name, (void *)name, __builtin_return_address(0))
/* ... and of a function the process has once (the C library's: fopen, send, ...), found on first use. */
#define ORIGINAL_ONCE(name, type) \
    static type original_##name; \
    if (!original_##name) original_##name = (type)find_original(#name, (void *)name)

/* What ggml-viz puts between a program and its ggml, each called with the program's function
   (the one the program would have called): the exported interposers use the one found in the
   process, and preload_dlsym.c's entry points the one a program looked up with dlsym. */
typedef int (*graph_compute_fn)(void *graph, void *cplan);
typedef int (*graph_compute_with_ctx_fn)(void *ctx, void *graph, int n_threads);
typedef int (*backend_compute_fn)(void *backend_or_sched, void *graph);
typedef void (*set_eval_fn)(void *sched, eval_fn callback, void *user_data);
typedef void (*set_abort_fn)(void *owner, abort_fn callback, void *data);
typedef void (*free_fn)(void *);
typedef bool (*alloc_graph_fn)(void *sched, void *graph);
typedef void *(*gguf_init_fn)(const char *fname, struct gguf_init_params_abi params);
typedef void *(*new_graph_fn)(void *ctx, size_t size, bool grads);
int traced_graph_compute(graph_compute_fn original, void *graph, void *cplan);
int traced_graph_compute_with_ctx(graph_compute_with_ctx_fn original, void *ctx, void *graph, int n_threads);
int traced_sched_compute(backend_compute_fn original, void *sched, void *graph);
int traced_backend_compute(backend_compute_fn original, void *backend, void *graph);
void traced_set_eval_callback(set_eval_fn original, void *sched, eval_fn callback, void *user_data);
void traced_cpu_set_abort_callback(set_abort_fn original, void *backend, abort_fn callback, void *data);
void traced_sched_free(free_fn original, void *sched);
void traced_backend_free(free_fn original, void *backend);
bool traced_sched_alloc_graph(alloc_graph_fn original, void *sched, void *graph);
void *traced_gguf_init_from_file(gguf_init_fn original, const char *fname, struct gguf_init_params_abi params);
void *traced_new_graph_custom(new_graph_fn original, void *ctx, size_t size, bool grads);

/* preload_dlsym.c: whether an address is in this library's own code */
bool preload_owns(const void *address);

/* preload_setup.c */
const char *find_functions(void);
const char *ggml_library_path(void);
const char *ggml_description(void);
const char *check_layout(const TensorLayout *layout);
/* The first of the ggml_tensor layouts ggml-viz knows that this ggml passes check_layout with (its
   name in *name), or NULL and the problem the current layout has. */
const char *choose_layout(TensorLayout *layout, const char **name);
/* ggml's graph accessors, or their stand-ins reading an older ggml's ggml_cgraph struct */
int graph_n_nodes(void *graph);
void *graph_node(void *graph, int i);
const char *check_graph_struct(void);
void probe_routing_ops(Settings *written);
const char *env(const char *name);
bool env_flag(const char *name);
int split_list(const char *text, char **items, int limit, bool upper);
const char *read_settings(Settings *written);

/* preload_spool.c */
int open_spool(const char *output);
/* A new spool, `folder`/PID.spool (state.lock held): the next window's. */
int open_spool_in(const char *folder);
void spool_frame(uint32_t kind, uint32_t context_id, const void *payload, size_t size);
void stop_recording(const char *reason);
void write_start_frame(void);
void describe_context(Entry *e);
void write_entry(Entry *e);
void write_end_frame(void);
void write_end_frame_on_signal(int signal_number);
void write_gpu_take(void);
void write_untraced_note(const char *reason);
/* Record bytes of ggml_tensor structs in this ggml's layout rewritten in the current one (what the
   reader decodes): `out` holds them (NULL: the layout is the current one, the bytes go as they are). */
const void *tensors_in_current_layout(const void *structs, size_t size, Array *out, size_t *out_size);

/* preload_wire.c */
void write_wire(void);
bool wire_written(void); /* every message recorded is in the spool */

#endif
