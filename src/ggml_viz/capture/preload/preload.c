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
 *   ggml_backend_sched_alloc_graph            a graph (re)built: read again at its next compute
 *   llama_decode, llama_encode                a llama call: its batch (tokens, positions)
 *   llama_batch_ext_* and llama_process       the same for the opaque batches llama.cpp's
 *       own programs build: their tokens are seen where they are added
 *   llama_free                                a context's graphs are written while its
 *       model (the token texts) still lives
 *   llama_set_abort_callback, ggml_backend_cpu_set_abort_callback  the program's abort
 *       callback is called from ours
 *   gguf_init_from_file, fopen                the model files the program opens (GGUF, and
 *       the legacy ggml files whisper.cpp reads): their byte layout, for the memory view
 *   ggml_is_empty                             ggml-cuda calls it once per node before computing
 *       it, ggml-vulkan before recording it: where a traced compute's kernels come from
 *       (gpu/gpu_timer.h)
 *   ggml_backend_graph_compute                a graph computed on a backend without a scheduler
 *       (ggml's RPC server, for each graph the head sends): a call of its own, read at the call
 *   ggml_backend_graph_compute_async          each split of a scheduler's graph read at its compute
 *       call: on a CPU backend, timed by its ticks; elsewhere (an RPC server, CUDA, Vulkan), marked
 *       so; in a traced compute on CUDA or Vulkan, where each split began (gpu_split_call)
 *   ggml_new_graph_custom                     a graph made: one computed where the last one was is new
 *   connect, accept, send, recv               ggml's RPC protocol on the wire (preload_wire.c)
 *
 * A scheduler with a GPU backend gets no eval callback (with one, ggml-cuda gives up its
 * CUDA graphs and synchronizes per split): its graphs are read at the compute call, and on
 * CUDA and Vulkan the GPU times its nodes itself (CUPTI; ggml-viz's Vulkan layer: gpu/).
 *
 * A child the program forks records nothing: the spool, named by the parent's pid, is the
 * parent's (the child neither appends to it nor ends it at its exit), and so is what the
 * recorders held at the fork.
 *
 * This file holds what is interposed and the library's state; preload_setup.c finds the
 * program's ggml and reads the settings, preload_spool.c writes the spool.
 *
 * Never harm the program: any failure (a ggml layout this build does not know, a full
 * disk, no memory) says one line on stderr, stops recording, and the program runs on
 * untraced. A ggml that lacks a function ggml-viz calls, or lays out ggml_tensor otherwise,
 * is found at the first interposed call: that line names its version, and a note in the
 * spool (SPOOL_UNTRACED) tells `ggml-viz run` so.
 *
 * A Python process: ggml-viz's start-up hook records llama-cpp-python's contexts itself (it
 * sees their calls, which ctypes makes past this library), and claims the process when its
 * first context is made (ggml_viz_preload_claim); any other ggml binding (pywhispercpp, ...)
 * is recorded here, its spool opened with its first graph. One recorder per process: the
 * first to record keeps it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

/* The environment this library reads, as ggml_viz.capture.settings declares it (the contract's
   PRELOAD_SETTINGS; MAX_EVENTS, POLICY and RECORDER are applied where the run is written), and the
   contract it was built from: what the collector reads a spool by. */
EXPORT const char ggml_viz_preload_settings[] = PRELOAD_SETTING_NAMES;
EXPORT const char ggml_viz_contract_digest[] = CONTRACT_DIGEST;

typedef int32_t (*batch_add_fn)(void *, int32_t);
typedef int32_t (*batch_add_token_fn)(void *, int32_t, int32_t);
typedef int32_t (*batch_add_embd_fn)(void *, int32_t, struct llama_embd_abi);
typedef bool (*batch_set_pos_fn)(void *, int32_t, const int32_t *);
typedef bool (*batch_set_output_fn)(void *, int32_t, bool);

/* What we interpose (defined below). */
EXPORT int ggml_backend_sched_graph_compute(void *sched, void *graph);
EXPORT int ggml_backend_graph_compute(void *backend, void *graph);
EXPORT int ggml_backend_graph_compute_async(void *backend, void *graph);
EXPORT int ggml_graph_compute(void *graph, void *cplan);
EXPORT int ggml_graph_compute_with_ctx(void *ctx, void *graph, int n_threads);
EXPORT void *ggml_new_graph_custom(void *ctx, size_t size, bool grads);
EXPORT int ggml_backend_sched_graph_compute_async(void *sched, void *graph);
EXPORT void ggml_backend_sched_set_eval_callback(void *sched, eval_fn callback, void *user_data);
EXPORT void ggml_backend_sched_free(void *sched);
EXPORT void ggml_backend_free(void *backend);
EXPORT void ggml_backend_cpu_set_abort_callback(void *backend, abort_fn callback, void *data);
EXPORT void llama_free(void *ctx);
EXPORT void llama_set_abort_callback(void *ctx, abort_fn callback, void *data);
EXPORT void *gguf_init_from_file(const char *fname, struct gguf_init_params_abi params);
EXPORT bool ggml_is_empty(const void *tensor);
EXPORT bool ggml_backend_sched_alloc_graph(void *sched, void *graph);
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
void *find_original(const char *name, void *ours) {
    void *found = dlsym(RTLD_NEXT, name);
    if (found && found != ours) return found;
    SymbolSearch search = {name, ours, NULL};
    dl_iterate_phdr(search_library, &search);
    return search.found;
}

/* The original a call of one of our interposers must reach: the function of that name in the
   calling library's own scope. A process may hold two copies of ggml (gpt4all loads a llama.cpp
   built for AVX2 and one for AVX only, each with its ggml; a Python process, two bindings'), and
   a call from one must run that one's code. A caller in the executable, or in no library that
   sees the name, gets find_original's. Cached per thread by call site (its return address), so a
   call costs a lookup in a small table. */
enum { CALL_SITES = 64 };
typedef struct {
    const void *caller;
    const char *name;
    void *original;
} CallSite;
static __thread CallSite call_sites[CALL_SITES];

void *original_for(const char *name, void *ours, const void *caller) {
    CallSite *site = &call_sites[(((uintptr_t)caller >> 2) ^ ((uintptr_t)name >> 3)) % CALL_SITES];
    if (site->caller == caller && site->name == name && site->original) return site->original;
    void *found = NULL;
    Dl_info info;
    if (caller && dladdr(caller, &info) && info.dli_fname && info.dli_fname[0] && !preload_owns(caller)) {
        void *handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (handle) {
            found = dlsym(handle, name); /* the library and what it depends on */
            dlclose(handle);
        }
        if (found == ours) found = NULL;
    }
    if (!found) found = find_original(name, ours);
    *site = (CallSite){caller, name, found};
    return found;
}

/* ---- settings and state ------------------------------------------------------------------- */

/* The settings, written here by start() alone (and the start-up functions it hands them to). */
static Settings settings_at_start;
const Settings *const settings = &settings_at_start;
State state = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .spool = -1, .graphs_on = 1};

static const size_t LLAMA_BATCH_OFFSETS[5] = {offsetof(llama_batch_abi, token), offsetof(llama_batch_abi, pos),
                                              offsetof(llama_batch_abi, n_seq_id), offsetof(llama_batch_abi, seq_id),
                                              offsetof(llama_batch_abi, logits)};

/* The llama call in progress on this thread, if any. */
static __thread Entry *call_entry;
static __thread int compute_depth;
/* The entry whose graph, read at the compute call, computes split by split now (on a GPU
   scheduler: its CPU splits timed by ticks, a traced compute's splits marked for the GPU
   timer): ggml_backend_graph_compute_async tells it each split. */
static __thread Entry *splits_of;

void say(const char *format, ...) {
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

/* ---- start ---------------------------------------------------------------------------------- */

static void *write_when_idle(void *unused);
static void flush_at_exit(void);
static void end_on_signal(int signal_number);

/* A program that a signal ends by default (a server stopped with Ctrl-C or SIGTERM: ggml's RPC
   server) never runs its exit handlers. If everything it recorded is in the spool by then (it
   was idle: the idle writer wrote it), the spool is closed as at exit and the run is complete;
   the program still ends by that signal. A handler the program installs replaces this one. */
static void end_runs_on_signals(void) {
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction current;
        if (sigaction(signals[i], NULL, &current) != 0 || current.sa_handler != SIG_DFL) continue;
        struct sigaction ours = {0};
        ours.sa_handler = end_on_signal;
        ours.sa_flags = (int)SA_RESETHAND; /* the signal's default action comes back before ours runs */
        sigemptyset(&ours.sa_mask);
        sigaction(signals[i], &ours, NULL);
    }
}

/* fork: the lock is taken around it, so that no frame is half written and the child's copy of
   the lock is free. */
static void before_fork(void) {
    pthread_mutex_lock(&state.lock);
}

static void after_fork_in_parent(void) {
    pthread_mutex_unlock(&state.lock);
}

/* The child is not the process the spool records: it stops recording, without a word in the
   spool, and closes its copy of the spool (the parent's stays open); no thread of ours runs in
   it, and its exit writes nothing (flush_at_exit). */
static void after_fork_in_child(void) {
    state.enabled = 0;
    state.stopping = 1;
    if (state.spool >= 0) close(state.spool);
    state.spool = -1;
    pthread_mutex_unlock(&state.lock);
}

/* The spool, its first frame, and what ends it at exit: at the start of a native program, with
   the first graph of a Python one. 0 recording, -1 not (claimed, or no spool). */
static int open_recording(void) {
    pthread_mutex_lock(&state.lock);
    int status = state.spool_opened ? 1 : !state.enabled ? -1 : open_spool(env("GGML_VIZ_OUTPUT"));
    int error = errno;
    if (status == 0) state.spool_opened = 1;
    if (status < 0) state.enabled = 0;
    pthread_mutex_unlock(&state.lock);
    if (status != 0) {
        if (status < 0 && !state.claimed_by_python) {
            say("cannot write the spool %s: %s; the program runs untraced", state.spool_path, strerror(error));
        }
        return status > 0 ? 0 : -1;
    }
    write_start_frame();
    atexit(flush_at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    if (!settings->in_python) end_runs_on_signals();
    if (pthread_create(&state.idle_writer, NULL, write_when_idle, NULL) == 0) state.idle_writer_started = 1;
    if (settings->verbose) say("recording pid %d to %s", (int)getpid(), state.spool_path);
    return 0;
}

/* Called by ggml-viz's start-up hook in a Python process when it records a llama context
   itself: 1 this library stands aside from now on, 0 it already records this process. */
EXPORT int ggml_viz_preload_claim(void) {
    pthread_mutex_lock(&state.lock);
    int claimed = !state.spool_opened;
    if (claimed) {
        state.claimed_by_python = 1;
        state.enabled = 0;
    }
    pthread_mutex_unlock(&state.lock);
    return claimed;
}

/* This process runs untraced (settings->untraced_reason says why): one line says so, once, and a
   note in the spool tells `ggml-viz run` that it was said (it adds nothing of its own, and writes
   no run for this process). In a Python process that waits for its first graph: ggml-viz's
   start-up hook may claim the process before (it records llama-cpp-python itself), and then
   nothing is said. */
static void say_untraced(void) {
    pthread_mutex_lock(&state.lock);
    const char *reason = !state.untraced_said && !state.claimed_by_python ? settings->untraced_reason : NULL;
    if (reason) state.untraced_said = 1;
    pthread_mutex_unlock(&state.lock);
    if (!reason) return;
    say("%s; the program runs untraced", reason);
    write_untraced_note(reason);
}

/* Whether the program's ggml is one ggml-viz reads (its functions, its ggml_tensor layout among
   those it knows, its graphs); NULL if so, else why not, naming the ggml found. */
static const char *ggml_problem(TensorLayout *layout, const char **layout_name) {
    static char reason[5200];
    const char *missing = find_functions();
    if (!ggml_library_path()) return "no ggml function is visible to ggml-viz in this program";
    const char *problem = missing ? NULL : choose_layout(layout, layout_name);
    if (!missing && !problem) problem = check_graph_struct();
    if (missing) {
        snprintf(reason, sizeof reason, "this program's %s lacks functions ggml-viz calls: %s", ggml_description(),
                 missing);
    } else if (problem) {
        snprintf(reason, sizeof reason, "this program's %s is not one ggml-viz reads: %s", ggml_description(), problem);
    }
    return missing || problem ? reason : NULL;
}

/* The window control the collector writes (GGML_VIZ_CONTROL), mapped read-only for the process's
   life: 1 mapped (its generation followed from now), 0 not (said: the program runs untraced). */
static int map_control(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    void *mapped = fd >= 0 ? mmap(NULL, sizeof(WindowControl), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    int error = errno;
    if (fd >= 0) close(fd);
    if (mapped == MAP_FAILED || memcmp(((const WindowControl *)mapped)->magic, CONTROL_MAGIC, 8) != 0) {
        if (mapped != MAP_FAILED) munmap(mapped, sizeof(WindowControl));
        say("cannot read the window control %s: %s; the program runs untraced", path,
            mapped == MAP_FAILED ? strerror(error) : "not a control file");
        return 0;
    }
    const WindowControl *control = mapped;
    state.generation = __atomic_load_n(&control->generation, __ATOMIC_ACQUIRE);
    state.graphs_on = (int)control->graphs;
    state.control = control;
    return 1;
}

static void start(void) {
    const char *output = env("GGML_VIZ_OUTPUT");
    if (!output || env_flag("GGML_VIZ_DISABLE")) return;
    settings_at_start.in_python = dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL;
    settings_at_start.verbose = env_flag("GGML_VIZ_VERBOSE");
    pthread_mutex_lock(&state.lock);
    int claimed = state.claimed_by_python;
    pthread_mutex_unlock(&state.lock);
    if (claimed) return; /* ggml-viz's start-up hook records this process (and checked its ggml) */
    TensorLayout layout = RECORDER_TENSOR_LAYOUT;
    const char *layout_name = NULL;
    const char *problem = ggml_problem(&layout, &layout_name);
    if (!problem) problem = read_settings(&settings_at_start);
    if (problem) {
        settings_at_start.untraced_reason = problem;
        if (!settings->in_python) say_untraced();
        return;
    }
    settings_at_start.layout = layout;
    settings_at_start.layout_name = layout_name;
    /* An older ggml's CPU threads all call the abort callback, in a loop of their own, with no barrier
       ending each node: its ticks would not be node boundaries. */
    if (!api.threadpool_new) {
        settings_at_start.no_ticks_reason = "this ggml's CPU threads end no node at a barrier, which node times "
                                            "need (a ggml from before August 2024)";
    }
    if (settings->routing) probe_routing_ops(&settings_at_start);
    gpu_configure(&settings->gpu);
    if (env("GGML_VIZ_CONTROL") && !map_control(env("GGML_VIZ_CONTROL"))) return;
    pthread_mutex_lock(&state.lock);
    state.enabled = !state.claimed_by_python;
    pthread_mutex_unlock(&state.lock);
    if (!settings->in_python) open_recording();
}

static bool active(void) {
    pthread_once(&state.once, start);
    return state.enabled;
}

bool preload_recording(void) {
    /* a process without ggml (a tool a traced script runs) is left alone */
    if (!state.enabled && !dlsym(RTLD_DEFAULT, "ggml_init")) return false;
    return active() && state.spool_opened;
}

/* A fresh recorder for an entry, with the settings' rules (state.lock held: the program's callbacks
   are recalled). Dormant (no graphs recorded), its nodes are never timed: our abort callback, left on
   a CPU backend by a window, only calls the program's. */
static int setup_recorder(Entry *e) {
    if (recorder_init(&e->recorder, &settings->layout, &api.recorder) != 0) return -1;
    Recorder *r = &e->recorder;
    r->inline_timing = !settings->sync_timing && state.graphs_on;
    /* an older ggml's nodes are timed only where asked one by one (sync timing) */
    r->time_nodes = !settings->detail_graph && (!settings->no_ticks_reason || settings->sync_timing);
    recorder_set_decode_rules(r, settings->detail_graph, settings->sample, 32, 500000000LL, LLAMA_BATCH_OFFSETS);
    if (api.buffer_is_host && api.nbytes) recorder_set_weight_prints(r, api.buffer_is_host, api.nbytes);
    recorder_set_filters(r, (const char *const *)settings->ops, settings->n_ops, (const int64_t (*)[2])settings->ranges,
                         settings->n_ranges, settings->no_layer, (const char *const *)settings->names,
                         settings->n_names);
    if (settings->values_stats || settings->n_captures) {
        ValueFunctions values = {api.buffer_is_host, api.is_contiguous, api.nbytes, api.fp16_to_fp32};
        const char *problem = recorder_set_values(r, settings->values_stats, (const char *const *)settings->captures,
                                                  settings->n_captures, settings->capture_bytes, &values);
        if (problem && !e->values_problem_said) say("values are not recorded: %s", problem);
        e->values_problem_said |= problem != NULL;
    }
    if (settings->routing && settings->op_mul_mat_id && api.buffer_is_host && api.fp16_to_fp32) {
        const char *problem = recorder_set_routing(r, 1, settings->op_mul_mat_id, settings->op_get_rows,
                                                   api.buffer_is_host, api.tensor_get, api.fp16_to_fp32);
        if (problem && !e->routing_problem_said) say("mixture-of-experts routing is not recorded: %s", problem);
        e->routing_problem_said |= problem != NULL;
    }
    /* callbacks the program set before: called from ours */
    const ProgramCallback *eval = recall_callback(EVAL_ON_SCHEDULER, e->owner);
    const ProgramCallback *abort = recall_callback(ABORT_ON_CONTEXT, e->owner);
    if (eval && !e->is_llama) {
        e->chained_eval = (eval_fn)eval->function;
        e->chained_data = eval->data;
    }
    if (abort && e->is_llama) recorder_chain_abort(r, (abort_fn)abort->function, abort->data);
    /* dormant, a plain program's graphs pass by: an eval callback a window left on its scheduler answers
       no node */
    if (!state.graphs_on && !e->is_llama) r->mode = MODE_OFF;
    return 0;
}

/* Switchers of windows, and the making of an entry (a window's spool describes every entry once). */
static pthread_mutex_t switch_lock = PTHREAD_MUTEX_INITIALIZER;

static Entry *live_entry_of(void *owner) {
    for (int i = 0; i < state.n_entries; i++) {
        if (state.entries[i]->live && state.entries[i]->owner == owner) return state.entries[i];
    }
    return NULL;
}

/* The entry of a llama context or a plain scheduler, made on first sight (NULL: not recording);
   `code`: the program's function the call reaches, whose library the context names. */
static Entry *entry_for(void *owner, int kind, const void *code) {
    Entry *made = NULL;
    if (open_recording() != 0) return NULL;
    pthread_mutex_lock(&state.lock);
    Entry *found = live_entry_of(owner);
    pthread_mutex_unlock(&state.lock);
    if (found) return found;
    pthread_mutex_lock(&switch_lock);
    pthread_mutex_lock(&state.lock);
    found = live_entry_of(owner);
    if (!found && state.enabled && state.n_entries < MAX_ENTRIES && (made = calloc(1, sizeof *made))) {
        made->owner = owner;
        made->is_llama = kind == ENTRY_LLAMA;
        made->is_backend = kind == ENTRY_BACKEND;
        made->is_cpu_graphs = kind == ENTRY_CPU_GRAPHS;
        if (setup_recorder(made) == 0) {
            made->live = 1;
            made->context_id = state.n_entries;
            Dl_info library;
            if (code && dladdr(code, &library) && library.dli_fname) {
                snprintf(made->library, sizeof made->library, "%s", library.dli_fname);
            }
            pthread_mutex_init(&made->lock, NULL);
            array_init(&made->frame, 1);
            array_init(&made->nodes_rewritten, 1);
            array_init(&made->leaves_rewritten, 1);
            state.entries[state.n_entries++] = made;
            found = made;
        } else {
            recorder_free(&made->recorder);
            free(made);
            made = NULL;
        }
    }
    pthread_mutex_unlock(&state.lock);
    if (made) describe_context(made);
    pthread_mutex_unlock(&switch_lock);
    return found;
}

/* ---- windows ---------------------------------------------------------------------------------- */

/* The collector asked for a new spool (a window opens or closes): what the entries hold goes to the
   current spool, which ends as at exit; each entry's recorder starts afresh, and the new spool opens
   as a new process's would (START, then each live context), so each window is a run of its own.
   Lock order: the switch lock, every entry's lock (a writer holds its entry's, then state.lock). */
static void switch_window(void) {
    pthread_mutex_lock(&switch_lock);
    const WindowControl *control = state.control;
    uint64_t generation = __atomic_load_n(&control->generation, __ATOMIC_ACQUIRE);
    if (generation == state.generation || !state.enabled || state.stopping || !state.spool_opened) {
        pthread_mutex_unlock(&switch_lock);
        return;
    }
    char folder[sizeof control->spool_dir];
    memcpy(folder, control->spool_dir, sizeof folder);
    folder[sizeof folder - 1] = 0;
    int graphs = (int)control->graphs;
    pthread_mutex_lock(&state.lock);
    int n = state.n_entries;
    pthread_mutex_unlock(&state.lock);
    for (int i = 0; i < n; i++) pthread_mutex_lock(&state.entries[i]->lock);
    for (int i = 0; i < n && state.enabled; i++) {
        Entry *e = state.entries[i];
        if (e->live && e->unwritten) write_entry(e);
    }
    if (state.enabled) write_wire();
    if (state.enabled) write_end_frame();
    pthread_mutex_lock(&state.lock);
    if (state.spool >= 0) close(state.spool);
    state.spool = -1;
    state.generation = generation;
    state.graphs_on = graphs;
    int opened = state.enabled ? open_spool_in(folder) : -1;
    int error = errno;
    for (int i = 0; i < n; i++) {
        Entry *e = state.entries[i];
        if (!e->live) continue;
        abort_fn chained = e->recorder.chained_abort;
        void *chained_data = e->recorder.chained_abort_data;
        int tick_reads = e->recorder.tick_reads;
        recorder_free(&e->recorder);
        if (setup_recorder(e) != 0) {
            e->live = 0; /* no memory for it: this context is recorded no more */
            continue;
        }
        if (chained && !e->recorder.chained_abort) recorder_chain_abort(&e->recorder, chained, chained_data);
        e->recorder.tick_reads = tick_reads;
        e->unwritten = 0;
    }
    pthread_mutex_unlock(&state.lock);
    if (opened != 0 && state.enabled) {
        char reason[4400];
        snprintf(reason, sizeof reason, "cannot open the spool %s: %s", state.spool_path, strerror(error));
        state.enabled = 0;
        say("recording stopped: %s; the program goes on untraced", reason);
    } else if (state.enabled) {
        write_start_frame();
        for (int i = 0; i < n; i++) {
            if (state.entries[i]->live) describe_context(state.entries[i]);
        }
    }
    for (int i = n - 1; i >= 0; i--) pthread_mutex_unlock(&state.entries[i]->lock);
    pthread_mutex_unlock(&switch_lock);
}

/* Follow the control: one load, at each call that starts outside any other (no lock held). */
static inline void follow_control(void) {
    const WindowControl *control = state.control;
    if (control && __atomic_load_n(&control->generation, __ATOMIC_RELAXED) != state.generation) switch_window();
}

/* ---- taking and writing --------------------------------------------------------------------- */

/* The idle writer: a program that stops computing (a server waiting for requests) has its
   last graphs in the spool within about two write intervals. */
static void *write_when_idle(void *unused) {
    (void)unused;
    struct timespec pause = {0, 250000000L};
    while (!state.stopping) {
        nanosleep(&pause, NULL);
        if (state.enabled) follow_control(); /* an idle server switches too */
        if (state.enabled) write_wire();
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
    pthread_mutex_lock(&switch_lock); /* a switch in progress ends first; none starts after */
    state.stopping = 1;
    pthread_mutex_unlock(&switch_lock);
    if (!state.enabled) return; /* stopped, or a forked child: nothing here is this process's to write */
    for (int i = 0; i < state.n_entries; i++) {
        Entry *e = state.entries[i];
        if (e->live && !e->in_call) flush_entry(e, 0);
    }
    if (state.enabled && gpu_finish()) write_gpu_take();
    if (state.enabled) write_wire();
    if (state.enabled) write_end_frame();
}

static void end_on_signal(int signal_number) {
    int saved = errno;
    if (pthread_mutex_trylock(&state.lock) == 0) { /* no frame is being written */
        int everything_written = state.enabled && wire_written();
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            everything_written &= !e->live || (!e->in_call && !e->unwritten && !e->timed_device);
        }
        if (everything_written) write_end_frame_on_signal(signal_number);
        pthread_mutex_unlock(&state.lock);
    }
    errno = saved;
    raise(signal_number); /* now with its default action */
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

/* Our abort callback on a CPU backend, once (the program's own, set before, called from ours):
   its ticks time the nodes it computes. 1 ours is on it. */
static int time_cpu_backend(Entry *e, void *backend) {
    ORIGINAL(ggml_backend_cpu_set_abort_callback, set_abort_fn);
    if (settings->sync_timing || !original_ggml_backend_cpu_set_abort_callback) return 0;
    int known = 0, free_slot = -1;
    for (int k = 0; k < MAX_CPU_BACKENDS; k++) {
        known |= e->abort_set[k] == backend;
        if (!e->abort_set[k] && free_slot < 0) free_slot = k;
    }
    if (known || free_slot < 0) return known;
    pthread_mutex_lock(&state.lock);
    const ProgramCallback *theirs = recall_callback(ABORT_ON_BACKEND, backend);
    if (theirs && !e->recorder.chained_abort)
        recorder_chain_abort(&e->recorder, (abort_fn)theirs->function, theirs->data);
    pthread_mutex_unlock(&state.lock);
    original_ggml_backend_cpu_set_abort_callback(backend, recorder_abort_callback, &e->recorder);
    e->abort_set[free_slot] = backend;
    recorder_hook_barriers(); /* the barrier that ends each node: the wait for its stragglers */
    return 1;
}

/* Our abort callback on a scheduler's CPU backends. */
static void time_cpu_backends(Entry *e, void *sched) {
    if (settings->sync_timing || !api.sched_n_backends || !api.sched_backend || !api.is_cpu) return;
    int n = api.sched_n_backends(sched);
    for (int i = 0; i < n; i++) {
        void *backend = api.sched_backend(sched, i);
        if (backend && api.is_cpu(backend)) time_cpu_backend(e, backend);
    }
}

/* Our eval callback on the scheduler, and our abort callback on its CPU backends. */
static void install_callbacks(Entry *e, void *sched) {
    ORIGINAL(ggml_backend_sched_set_eval_callback, set_eval_fn);
    if (original_ggml_backend_sched_set_eval_callback) {
        original_ggml_backend_sched_set_eval_callback(sched, preload_eval_callback, e);
    }
    time_cpu_backends(e, sched);
}

/* ---- interposed: ggml's scheduler --------------------------------------------------------- */

/* The bracket around a call that computes graphs (a llama call with its batch, or a plain
   ggml program's graph without one): the entry is held for the call, its graphs closed at
   its end, and written when a write is due. */
static void begin_call(Entry *e, const void *batch) {
    pthread_mutex_lock(&e->lock);
    e->in_call = 1;
    recorder_begin_decode(&e->recorder, batch);
}

static void synchronize_scheduler(void *sched) {
    if (api.sched_synchronize) api.sched_synchronize(sched);
}

/* The call ends: its graphs are closed, and written when a write is due or a GPU trace window
   closed with it (its graphs then reach the spool before their kernels). `sched`: a plain
   program's scheduler, which may still be computing (a llama call has synchronized). */
static void end_call(Entry *e, int32_t status, void *sched) {
    int due = recorder_end_decode(&e->recorder, status);
    int gpu_waiting = e->timed_device && gpu_call_done(sched ? synchronize_scheduler : NULL, sched);
    e->in_call = 0;
    e->unwritten = 1;
    if (due || gpu_waiting) write_entry(e);
    pthread_mutex_unlock(&e->lock);
    if (gpu_waiting) write_gpu_take();
}

/* What a scheduler computes on: a GPU backend (any backend that is not a CPU), one the GPU timer times (CUDA, Vulkan). */
static void check_backends(Entry *e, void *sched) {
    if (e->checked_sched == sched) return;
    e->checked_sched = sched;
    e->on_gpu = e->timed_device = 0;
    int n = api.sched_n_backends && api.sched_backend && api.is_cpu ? api.sched_n_backends(sched) : 0;
    for (int i = 0; i < n; i++) {
        void *backend = api.sched_backend(sched, i);
        if (!backend || api.is_cpu(backend)) continue;
        const char *name = api.backend_name ? api.backend_name(backend) : NULL;
        if (!e->on_gpu) snprintf(e->gpu_name, sizeof e->gpu_name, "%s", name ? name : "GPU");
        e->on_gpu = 1;
        if (!e->timed_device) e->timed_device = gpu_device_named(name);
    }
    if (e->on_gpu && !e->timed_device && !strncmp(e->gpu_name, "RPC", 3)) {
        if (settings->verbose) {
            say("this program computes on %s: its nodes there are timed where they run (record the worker with "
                "`ggml-viz run -- ggml-rpc-server ...`); here its graphs keep their graph times",
                e->gpu_name);
        }
    } else if (e->on_gpu && !e->timed_device) {
        say("this program computes on %s: ggml-viz times GPU nodes on CUDA (with CUPTI) and Vulkan (with its "
            "layer) only; its graphs keep their graph times",
            e->gpu_name);
    }
}

/* The scheduler's own ggml_backend_sched_set_eval_callback (ours records a program's callback). */
static void set_scheduler_callback(void *sched, eval_fn callback, void *user_data) {
    ORIGINAL(ggml_backend_sched_set_eval_callback, set_eval_fn);
    if (original_ggml_backend_sched_set_eval_callback)
        original_ggml_backend_sched_set_eval_callback(sched, callback, user_data);
}

/* A GPU scheduler's graph is read at its compute call (no eval callback), unless a node must
   be answered: sync timing, values, captures, or the program's own eval callback. */
static bool reads_at_compute(Entry *e) {
    return (e->on_gpu || settings->read_graphs_at_compute) && !settings->sync_timing && !settings->values_stats &&
           !settings->n_captures && !e->chained_eval;
}

/* A graph computed through the scheduler: inside a llama call, part of it; else (a plain ggml
   program) a call of its own, without tokens. */
static int compute_graph(backend_compute_fn original, void *sched, void *graph) {
    if (!original) return -1;
    if (compute_depth > 0 || !active()) {
        if (settings->untraced_reason) say_untraced(); /* a Python process's first graph */
        return original(sched, graph);
    }
    Entry *e = call_entry;
    bool own_call = !e;
    if (own_call) follow_control();
    if (!state.graphs_on) return original(sched, graph); /* dormant: the llama call's batch is all it keeps */
    if (own_call) {
        e = entry_for(sched, ENTRY_SCHEDULER, (const void *)original);
        if (!e) return original(sched, graph);
        begin_call(e, NULL);
    }
    check_backends(e, sched);
    compute_depth++;
    int status;
    if (reads_at_compute(e)) {
        GraphAccess access = {graph_n_nodes, graph_node, settings->layout.buffer_offset, settings->layout.data_offset,
                              set_scheduler_callback};
        /* A scheduler with a CPU backend beside a GPU (CUDA, an RPC server, Vulkan): its CPU splits
           are timed by the CPU backend's ticks, split by split as they compute; the GPU's nodes are
           marked (CUDA's and Vulkan's get the GPU timer's times in its windows). */
        int time_splits = e->on_gpu && !settings->sync_timing && !settings->detail_graph;
        if (time_splits) {
            time_cpu_backends(e, sched);
            e->recorder.tick_reads = 1;
        }
        if (e->on_gpu) splits_of = e;
        /* a CPU program read at its compute calls (GGML_VIZ_READ_GRAPHS=compute) keeps graph times only:
           its routing is read at every compute, as in a GPU window */
        e->recorder.routing_every_compute = !e->on_gpu;
        status = compute_reading_graph(&e->recorder, (uint32_t)e->context_id, e->timed_device, &access, original, sched,
                                       graph);
        splits_of = NULL;
        e->recorder.tick_split_end = 0;
        if (e->timed_device && gpu_problem() && !state.gpu_problem_said) {
            state.gpu_problem_said = 1;
            say("GPU node times are off: %s; the run keeps graph times", gpu_problem());
        }
    } else {
        install_callbacks(e, sched);
        status = original(sched, graph);
    }
    compute_depth--;
    if (own_call) end_call(e, status, sched);
    return status;
}

int traced_sched_compute(backend_compute_fn original, void *sched, void *graph) {
    return compute_graph(original, sched, graph);
}

EXPORT int ggml_backend_sched_graph_compute(void *sched, void *graph) {
    ORIGINAL(ggml_backend_sched_graph_compute, backend_compute_fn);
    return compute_graph(original_ggml_backend_sched_graph_compute, sched, graph);
}

EXPORT int ggml_backend_sched_graph_compute_async(void *sched, void *graph) {
    ORIGINAL(ggml_backend_sched_graph_compute_async, backend_compute_fn);
    return compute_graph(original_ggml_backend_sched_graph_compute_async, sched, graph);
}

/* ---- interposed: a graph computed on a backend, without a scheduler ------------------------ */

/* Graphs made so far in this process: a program that builds a new graph in the memory of the
   one before (ggml's RPC server does, for each graph the head sends) has it read again. */
static uint64_t graphs_made;

void *traced_new_graph_custom(new_graph_fn original, void *ctx, size_t size, bool grads) {
    __atomic_add_fetch(&graphs_made, 1, __ATOMIC_RELAXED);
    return original ? original(ctx, size, grads) : NULL;
}

EXPORT void *ggml_new_graph_custom(void *ctx, size_t size, bool grads) {
    ORIGINAL(ggml_new_graph_custom, new_graph_fn);
    return traced_new_graph_custom(original_ggml_new_graph_custom, ctx, size, grads);
}

/* A graph computed on a backend directly (ggml's RPC server computes each graph the head sends
   so; so do small ggml programs): a call of its own, without tokens, its graph read at the call.
   A CPU backend's nodes are timed by its ticks; a GPU's as on a scheduler. Calls made inside a
   scheduler's or llama's compute are theirs. */
static int compute_on_backend(backend_compute_fn original, void *backend, void *graph) {
    if (!original) return -1;
    if (compute_depth > 0 || call_entry || !active()) return original(backend, graph);
    follow_control();
    if (!state.graphs_on) return original(backend, graph);
    Entry *e = entry_for(backend, ENTRY_BACKEND, (const void *)original);
    if (!e) return original(backend, graph);
    begin_call(e, NULL);
    if (!e->checked_sched) {
        e->checked_sched = backend;
        const char *name = api.backend_name ? api.backend_name(backend) : NULL;
        e->on_gpu = api.is_cpu && !api.is_cpu(backend);
        e->timed_device = e->on_gpu ? gpu_device_named(name) : GPU_DEVICE_NONE;
        /* the graph read at the call, its nodes timed by the backend's ticks */
        if (!e->on_gpu && !settings->detail_graph) e->recorder.tick_reads = time_cpu_backend(e, backend);
    }
    uint64_t made = __atomic_load_n(&graphs_made, __ATOMIC_RELAXED);
    if (made != e->graphs_made_seen) e->recorder.graph_allocated = 1;
    e->graphs_made_seen = made;
    compute_depth++;
    GraphAccess access = {graph_n_nodes, graph_node, settings->layout.buffer_offset, settings->layout.data_offset,
                          NULL}; /* no scheduler */
    int status = compute_reading_graph(&e->recorder, (uint32_t)e->context_id, e->timed_device, &access, original,
                                       backend, graph);
    compute_depth--;
    end_call(e, status, NULL);
    return status;
}

int traced_backend_compute(backend_compute_fn original, void *backend, void *graph) {
    return compute_on_backend(original, backend, graph);
}

EXPORT int ggml_backend_graph_compute(void *backend, void *graph) {
    ORIGINAL(ggml_backend_graph_compute, backend_compute_fn);
    return compute_on_backend(original_ggml_backend_graph_compute, backend, graph);
}

/* ---- interposed: a graph computed on the CPU, without a backend -------------------------- */

/* ggml's own compute path (its examples, rwkv.cpp, whisper.cpp and llama.cpp before backends):
   ggml_graph_compute(graph, &cplan) with a plan the program made, or ggml_graph_compute_with_ctx,
   which makes one and calls ggml_graph_compute. A graph so computed is a call of its own, without
   tokens, read at the call; the graphs each thread computes so are one context. Its nodes are
   timed by ticks: our abort callback goes into the plan for the call (the program's own, if it
   set one, is called from ours), and the plan is given back as it was. */

/* ggml_cplan, since threadpools (August 2024): what follows n_threads moved then */
typedef struct {
    size_t work_size;
    uint8_t *work_data;
    int n_threads;
    void *threadpool;
    abort_fn abort_callback;
    void *abort_callback_data;
} CplanAbi;

/* The key of this thread's CPU-graph context (its address is unique to the thread). */
static __thread char cpu_graphs_key;
/* ggml_graph_compute_with_ctx in progress on this thread: the entry its inner ggml_graph_compute
   puts our abort callback in the plan for (the call is recorded by the outer one). */
static __thread Entry *plan_of;


/* Whether this entry's graphs are timed by ticks: not on an older ggml (its plan and its threads
   are laid out otherwise), nor with sync timing or graph detail. The graph is read before its
   compute, so this is settled first; a compute whose ticks never come (a ggml_graph_compute_with_ctx
   whose inner call passes us by) keeps its graph time, as any graph whose ticks do not match. */
static int ticks_on(Entry *e) {
    if (settings->no_ticks_reason || settings->sync_timing || settings->detail_graph) return 0;
    if (!e->recorder.tick_reads) recorder_hook_barriers(); /* the barrier that ends each node */
    e->recorder.tick_reads = 1;
    return 1;
}

/* ggml_graph_compute(graph, plan), with our abort callback in the plan for the call where `e` (if
   any) is timed by ticks (the program's own, if it set one, called from ours), and the plan handed
   back as the program made it. */
static int compute_plan_ticked(Entry *e, graph_compute_fn compute, void *graph, CplanAbi *plan) {
    if (!e || !plan || !ticks_on(e) || plan->abort_callback == recorder_abort_callback) return compute(graph, plan);
    abort_fn theirs = plan->abort_callback;
    void *their_data = plan->abort_callback_data;
    recorder_chain_abort(&e->recorder, theirs, their_data);
    plan->abort_callback = recorder_abort_callback;
    plan->abort_callback_data = &e->recorder;
    int status = compute(graph, plan);
    plan->abort_callback = theirs;
    plan->abort_callback_data = their_data;
    return status;
}

/* One CPU compute as the program called it: with its plan, or with a context to make one in. */
typedef struct {
    Entry *entry; /* the context recording it (NULL: passed through untraced) */
    graph_compute_fn plan_compute;
    CplanAbi *cplan;
    graph_compute_with_ctx_fn with_ctx;
    void *ctx;
    int n_threads;
} CpuCompute;

static int run_cpu_compute(void *call, void *graph) {
    CpuCompute *c = call;
    if (c->plan_compute) return compute_plan_ticked(c->entry, c->plan_compute, graph, c->cplan);
    return c->with_ctx(c->ctx, graph, c->n_threads);
}

static int compute_on_cpu(CpuCompute *call, void *graph) {
    if (compute_depth > 0 || call_entry || !active()) return run_cpu_compute(call, graph);
    follow_control();
    if (!state.graphs_on) return run_cpu_compute(call, graph);
    const void *code = call->plan_compute ? (const void *)call->plan_compute : (const void *)call->with_ctx;
    Entry *e = entry_for(&cpu_graphs_key, ENTRY_CPU_GRAPHS, code);
    if (!e) return run_cpu_compute(call, graph);
    begin_call(e, NULL);
    uint64_t made = __atomic_load_n(&graphs_made, __ATOMIC_RELAXED); /* a graph made since: read again */
    if (made != e->graphs_made_seen) e->recorder.graph_allocated = 1;
    e->graphs_made_seen = made;
    call->entry = e;
    if (ticks_on(e) && !call->cplan) plan_of = e; /* _with_ctx: its plan is made inside */
    compute_depth++;
    GraphAccess access = {graph_n_nodes, graph_node, settings->layout.buffer_offset, settings->layout.data_offset,
                          NULL};
    int status = compute_reading_graph(&e->recorder, (uint32_t)e->context_id, 0, &access, run_cpu_compute, call, graph);
    compute_depth--;
    plan_of = NULL;
    end_call(e, status, NULL);
    return status;
}

int traced_graph_compute(graph_compute_fn original, void *graph, void *cplan) {
    if (!original) return -1;
    if (plan_of && compute_depth > 0) { /* inside ggml_graph_compute_with_ctx: its plan, made now */
        Entry *e = plan_of;
        plan_of = NULL;
        return compute_plan_ticked(e, original, graph, cplan);
    }
    CpuCompute call = {NULL, original, cplan, NULL, NULL, 0};
    return compute_on_cpu(&call, graph);
}

int traced_graph_compute_with_ctx(graph_compute_with_ctx_fn original, void *ctx, void *graph, int n_threads) {
    if (!original) return -1;
    CpuCompute call = {NULL, NULL, NULL, original, ctx, n_threads};
    return compute_on_cpu(&call, graph);
}

EXPORT int ggml_graph_compute(void *graph, void *cplan) {
    ORIGINAL(ggml_graph_compute, graph_compute_fn);
    return traced_graph_compute(original_ggml_graph_compute, graph, cplan);
}

EXPORT int ggml_graph_compute_with_ctx(void *ctx, void *graph, int n_threads) {
    ORIGINAL(ggml_graph_compute_with_ctx, graph_compute_with_ctx_fn);
    return traced_graph_compute_with_ctx(original_ggml_graph_compute_with_ctx, ctx, graph, n_threads);
}

/* Each split a scheduler computes (its own call, through the library's exported symbol). */
EXPORT int ggml_backend_graph_compute_async(void *backend, void *graph) {
    ORIGINAL(ggml_backend_graph_compute_async, backend_compute_fn);
    if (!original_ggml_backend_graph_compute_async) return -1;
    Entry *e = splits_of;
    int n_nodes = e && api.is_cpu ? graph_n_nodes(graph) : 0;
    if (n_nodes <= 0) return original_ggml_backend_graph_compute_async(backend, graph);
    int on_cpu = api.is_cpu(backend);
    void *first_node = graph_node(graph, 0);
    if (e->recorder.tick_reads) recorder_split_computed(&e->recorder, graph, n_nodes, graph_node, on_cpu, now_ns());
    if (e->timed_device) gpu_split_call(first_node, on_cpu); /* nothing unless traced here */
    int status = original_ggml_backend_graph_compute_async(backend, graph);
    if (e->timed_device) gpu_split_done(first_node, on_cpu);
    return status;
}

void traced_set_eval_callback(set_eval_fn original, void *sched, eval_fn callback, void *user_data) {
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
    if (original) original(sched, callback, user_data);
}

EXPORT void ggml_backend_sched_set_eval_callback(void *sched, eval_fn callback, void *user_data) {
    ORIGINAL(ggml_backend_sched_set_eval_callback, set_eval_fn);
    traced_set_eval_callback(original_ggml_backend_sched_set_eval_callback, sched, callback, user_data);
}

bool traced_sched_alloc_graph(alloc_graph_fn original, void *sched, void *graph) {
    if (state.enabled) { /* a graph (re)built: the next compute reads it */
        Entry *e = call_entry;
        for (int i = 0; i < state.n_entries && !e; i++) {
            if (state.entries[i]->live && state.entries[i]->owner == sched) e = state.entries[i];
        }
        if (e) e->recorder.graph_allocated = 1;
    }
    return original ? original(sched, graph) : false;
}

EXPORT bool ggml_backend_sched_alloc_graph(void *sched, void *graph) {
    ORIGINAL(ggml_backend_sched_alloc_graph, alloc_graph_fn);
    return traced_sched_alloc_graph(original_ggml_backend_sched_alloc_graph, sched, graph);
}

void traced_sched_free(free_fn original, void *sched) {
    if (state.enabled) {
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            if (e->live && !e->is_llama && e->owner == sched) flush_entry(e, 1);
        }
        if (gpu_finish()) write_gpu_take(); /* while the device lives */
    }
    if (original) original(sched);
}

EXPORT void ggml_backend_sched_free(void *sched) {
    ORIGINAL(ggml_backend_sched_free, free_fn);
    traced_sched_free(original_ggml_backend_sched_free, sched);
}

/* A backend freed: the graphs it computed itself are written and its context retired, and no entry
   takes a backend made later at the same address for one whose abort callback is ours already. */
void traced_backend_free(free_fn original, void *backend) {
    if (state.enabled) {
        pthread_mutex_lock(&state.lock);
        int n = state.n_entries;
        pthread_mutex_unlock(&state.lock);
        for (int i = 0; i < n; i++) {
            Entry *e = state.entries[i];
            if (e->live && e->is_backend && e->owner == backend) flush_entry(e, 1);
            pthread_mutex_lock(&e->lock);
            for (int k = 0; k < MAX_CPU_BACKENDS; k++) {
                if (e->abort_set[k] == backend) e->abort_set[k] = NULL;
            }
            pthread_mutex_unlock(&e->lock);
        }
    }
    if (original) original(backend);
}

EXPORT void ggml_backend_free(void *backend) {
    ORIGINAL(ggml_backend_free, free_fn);
    traced_backend_free(original_ggml_backend_free, backend);
}

void traced_cpu_set_abort_callback(set_abort_fn original, void *backend, abort_fn callback, void *data) {
    if (!original) return;
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
    original(backend, callback, data);
}

EXPORT void ggml_backend_cpu_set_abort_callback(void *backend, abort_fn callback, void *data) {
    ORIGINAL(ggml_backend_cpu_set_abort_callback, set_abort_fn);
    traced_cpu_set_abort_callback(original_ggml_backend_cpu_set_abort_callback, backend, callback, data);
}

/* ---- interposed: llama ---------------------------------------------------------------------- */

/* A llama call: the batch's tokens are copied, the graphs it computes are attributed to it. */
static int32_t llama_call(void *ctx, const llama_batch_abi *batch, int32_t (*compute)(void *, const void *),
                          const void *argument, const void *code) {
    if (call_entry || !active()) return compute(ctx, argument);
    follow_control();
    Entry *e = entry_for(ctx, ENTRY_LLAMA, code);
    if (!e) return compute(ctx, argument);
    begin_call(e, batch);
    call_entry = e;
    int32_t status = compute(ctx, argument);
    call_entry = NULL;
    /* llama.cpp's own eval timer runs until the next synchronize: stop it before our bookkeeping */
    if (api.synchronize) api.synchronize(ctx);
    end_call(e, status, NULL);
    return status;
}

typedef int32_t (*batch_call_fn)(void *, llama_batch_passed);
static __thread batch_call_fn decode_original, encode_original; /* the call's, on its thread */

static int32_t call_decode(void *ctx, const void *batch) {
    return decode_original(ctx, *(const llama_batch_passed *)batch);
}

static int32_t call_encode(void *ctx, const void *batch) {
    return encode_original(ctx, *(const llama_batch_passed *)batch);
}

EXPORT int32_t llama_decode(void *ctx, llama_batch_passed batch) {
    decode_original = (batch_call_fn)original_for("llama_decode", (void *)llama_decode, __builtin_return_address(0));
    if (!decode_original) return -1;
    return llama_call(ctx, &batch.batch, call_decode, &batch, (const void *)decode_original);
}

EXPORT int32_t llama_encode(void *ctx, llama_batch_passed batch) {
    encode_original = (batch_call_fn)original_for("llama_encode", (void *)llama_encode, __builtin_return_address(0));
    if (!encode_original) return -1;
    return llama_call(ctx, &batch.batch, call_encode, &batch, (const void *)encode_original);
}

EXPORT void llama_free(void *ctx) {
    ORIGINAL(llama_free, free_fn);
    if (state.enabled) {
        for (int i = 0; i < state.n_entries; i++) {
            Entry *e = state.entries[i];
            if (e->live && e->is_llama && e->owner == ctx) flush_entry(e, 1);
        }
        if (gpu_finish()) write_gpu_take(); /* while the device lives */
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
            if (e->abort_set[k])
                original_ggml_backend_cpu_set_abort_callback(e->abort_set[k], recorder_abort_callback, &e->recorder);
        }
    }
}

/* A model file the program opened, once (its layout is read by the collector). */
static void note_model_file(const char *name) {
    char *path = realpath(name, NULL);
    if (!path) return;
    pthread_mutex_lock(&state.lock);
    int known = 0;
    for (int i = 0; i < state.n_files; i++) known |= !strcmp(state.files[i], path);
    if (!known && state.n_files < MAX_FILES) state.files[state.n_files++] = path;
    else free(path);
    pthread_mutex_unlock(&state.lock);
}

void *traced_gguf_init_from_file(gguf_init_fn original, const char *fname, struct gguf_init_params_abi params) {
    if (!original) return NULL;
    void *gguf = original(fname, params);
    if (gguf && fname && active()) note_model_file(fname);
    return gguf;
}

EXPORT void *gguf_init_from_file(const char *fname, struct gguf_init_params_abi params) {
    ORIGINAL(gguf_init_from_file, gguf_init_fn);
    return traced_gguf_init_from_file(original_gguf_init_from_file, fname, params);
}

/* A file opened for reading that starts like a model: GGUF, or the legacy ggml format
   whisper.cpp (and ggml's older examples) read through the C library, not gguf. Only
   regular files of a model's size are looked at: 4 bytes read where the file starts,
   without moving the stream. Nothing here starts recording: any process that opens files
   passes through. */
enum { MODEL_FILE_MIN_BYTES = 1 << 16 };
static const char MODEL_MAGICS[][4] = {{'G', 'G', 'U', 'F'}, {'l', 'm', 'g', 'g'}};

static void notice_model_file(FILE *file, const char *name, const char *mode) {
    if (!file || !name || !mode || mode[0] != 'r' || strchr(mode, '+') || !env("GGML_VIZ_OUTPUT")) return;
    int saved = errno, fd = fileno(file);
    struct stat about;
    char magic[4];
    if (fd >= 0 && fstat(fd, &about) == 0 && S_ISREG(about.st_mode) && about.st_size >= MODEL_FILE_MIN_BYTES &&
        pread(fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic) {
        for (size_t i = 0; i < sizeof MODEL_MAGICS / sizeof MODEL_MAGICS[0]; i++) {
            if (!memcmp(magic, MODEL_MAGICS[i], sizeof magic)) note_model_file(name);
        }
    }
    errno = saved;
}

typedef FILE *(*fopen_fn)(const char *, const char *);

EXPORT FILE *fopen(const char *name, const char *mode) {
    ORIGINAL_ONCE(fopen, fopen_fn);
    FILE *file = original_fopen ? original_fopen(name, mode) : NULL;
    notice_model_file(file, name, mode);
    return file;
}

EXPORT FILE *fopen64(const char *name, const char *mode) {
    ORIGINAL_ONCE(fopen64, fopen_fn);
    FILE *file = original_fopen64 ? original_fopen64(name, mode) : NULL;
    notice_model_file(file, name, mode);
    return file;
}

typedef bool (*is_empty_fn)(const void *);

EXPORT bool ggml_is_empty(const void *tensor) {
    ORIGINAL(ggml_is_empty, is_empty_fn);
    gpu_node_call(tensor, __builtin_return_address(0)); /* nothing unless a traced compute runs here */
    return original_ggml_is_empty ? original_ggml_is_empty(tensor) : false;
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
static __thread process_fn process_original;
static __thread int process_type;

static int32_t call_process(void *ctx, const void *batch) {
    return process_original(ctx, process_type, (void *)batch);
}

EXPORT int32_t llama_process(void *ctx, int type, void *batch) {
    process_original = (process_fn)original_for("llama_process", (void *)llama_process, __builtin_return_address(0));
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
        copy = (llama_batch_abi){(int32_t)n,
                                 (int32_t *)s->columns[BATCH_TOKENS].items,
                                 NULL,
                                 (int32_t *)s->columns[BATCH_POSITIONS].items,
                                 n_seq,
                                 seq,
                                 (int8_t *)s->columns[BATCH_OUTPUTS].items};
    }
    int32_t status = llama_call(ctx, &copy, call_process, batch, (const void *)process_original);
    free(n_seq);
    free(seq);
    return status;
}
