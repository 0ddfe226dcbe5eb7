/* The preload library, part 2: finding the program's ggml, checking that it has the functions
   ggml-viz calls and lays out ggml_tensor as the recorder reads it, and reading the GGML_VIZ_*
   settings. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "preload.h"

Api api;

/* ---- finding the program's ggml ---------------------------------------------------------- */

/* In the global scope, or in whichever loaded library defines it: a Python extension loads its
   ggml into a scope of its own (pywhispercpp), where RTLD_DEFAULT does not look. */
#define FIND(field, name) (*(void **)&api.field = find_original(name, NULL))

/* The functions of a needed kind the loaded ggml lacks, listed by name. */
static char missing[512];

static void need(const void *found, const char *name) {
    if (found) return;
    size_t used = strlen(missing);
    snprintf(missing + used, sizeof missing - used, "%s%s", used ? ", " : "", name);
}

#define NEED(field, name) need(FIND(field, name), name)

/* Finds the program's ggml (and llama) functions; NULL, or the names of those ggml-viz cannot
   record without that this ggml lacks (an older ggml, or another library of that name). */
const char *find_functions(void) {
    missing[0] = 0;
    NEED(tensor_overhead, "ggml_tensor_overhead");
    NEED(init, "ggml_init");
    NEED(free, "ggml_free");
    NEED(new_tensor_2d, "ggml_new_tensor_2d");
    NEED(view_1d, "ggml_view_1d");
    NEED(add, "ggml_add");
    NEED(set_name, "ggml_set_name");
    NEED(get_name, "ggml_get_name");
    NEED(nbytes, "ggml_nbytes");
    FIND(is_contiguous, "ggml_is_contiguous");
    FIND(buffer_is_host, "ggml_backend_buffer_is_host");
    FIND(fp16_to_fp32, "ggml_fp16_to_fp32");
    FIND(version, "ggml_version"); /* since ggml 0.9 or so: older ones are of unknown version */
    FIND(commit, "ggml_commit");
    FIND(sched_n_backends, "ggml_backend_sched_get_n_backends");
    FIND(sched_backend, "ggml_backend_sched_get_backend");
    FIND(sched_synchronize, "ggml_backend_sched_synchronize");
    FIND(is_cpu, "ggml_backend_is_cpu");
    FIND(backend_name, "ggml_backend_name");
    FIND(graph_n_nodes, "ggml_graph_n_nodes");
    FIND(graph_node, "ggml_graph_node");
    FIND(threadpool_new, "ggml_threadpool_new");
    FIND(get_rows, "ggml_get_rows");
    FIND(mul_mat_id, "ggml_mul_mat_id");
    FIND(tensor_get, "ggml_backend_tensor_get");
    NEED(recorder.buffer_name, "ggml_backend_buffer_name");
    FIND(recorder.buffer_usage, "ggml_backend_buffer_get_usage"); /* 2024 H1 has none: buffers of unknown use */
    NEED(recorder.buffer_size, "ggml_backend_buffer_get_size");
    NEED(recorder.buffer_base, "ggml_backend_buffer_get_base");
    NEED(recorder.buffer_type, "ggml_backend_buffer_get_type");
    NEED(recorder.buft_name, "ggml_backend_buft_name");
    NEED(recorder.op_desc, "ggml_op_desc");
    NEED(recorder.op_name, "ggml_op_name");
    FIND(get_model, "llama_get_model");
    FIND(model_vocab, "llama_model_get_vocab");
    FIND(token_to_piece, "llama_token_to_piece");
    FIND(vocab_bos, "llama_vocab_bos");
    FIND(vocab_eos, "llama_vocab_eos");
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
    /* llama.cpp before 2025 named these without `model_` */
    if (!api.model_n_layer) FIND(model_n_layer, "llama_n_layer");
    if (!api.model_n_ctx_train) FIND(model_n_ctx_train, "llama_n_ctx_train");
    if (!api.model_n_embd) FIND(model_n_embd, "llama_n_embd");
    FIND(model_n_params, "llama_model_n_params");
    FIND(model_size, "llama_model_size");
    FIND(system_info, "llama_print_system_info");
    FIND(synchronize, "llama_synchronize");
    return missing[0] ? missing : NULL;
}

/* The file of the program's ggml (libggml-base), from any of its functions found; NULL if none is. */
const char *ggml_library_path(void) {
    const void *functions[] = {(const void *)api.recorder.op_name, (const void *)api.tensor_overhead,
                               (const void *)api.version, (const void *)api.init, (const void *)api.nbytes};
    Dl_info info;
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
        if (functions[i] && dladdr(functions[i], &info) && info.dli_fname) return info.dli_fname;
    }
    return NULL;
}

/* The program's ggml in words, for the one line that says why it runs untraced: "ggml 0.13.1
   (/path/libggml-base.so.0)", or of unknown version where it has no ggml_version. */
const char *ggml_description(void) {
    static char description[4200];
    const char *version = api.version ? api.version() : NULL, *path = ggml_library_path();
    if (!path) return "no ggml library is loaded";
    if (version && *version) snprintf(description, sizeof description, "ggml %s (%s)", version, path);
    else snprintf(description, sizeof description, "ggml of unknown version (%s)", path);
    return description;
}

int64_t i64_at(const void *tensor, size_t offset) {
    int64_t value;
    memcpy(&value, (const char *)tensor + offset, sizeof value);
    return value;
}

/* The ggml_tensor layouts ggml-viz reads (LP64), read from each version's ggml.h, newest first.
   ggml_tensor kept its first fields (type, buffer, ne, nb, op, op_params, flags) where they are;
   what changed is what came after: */
static const struct {
    const char *name;
    TensorLayout layout;
} KNOWN_LAYOUTS[] = {
    /* ggml 0.9 and later (llama.cpp since late 2024, whisper.cpp 1.7.2 and later) */
    {"current", RECORDER_TENSOR_LAYOUT},
    /* with `grad` before `src` (mid-2024: the backend field and the perf counters gone; gpt4all 2.8.2's
       llama.cpp) */
    {"2024 (with grad)", {336, 8, 80, 160, 10, 240, 264, 0, 16, 48, 256}},
    /* with `backend` after `type`, `grad`, and the perf counters before `view_src` (2024 H1: llama.cpp
       until June 2024, ggml-python 0.0.37) */
    {"2024 H1 (with backend, grad and perf counters)", {368, 8, 80, 160, 10, 264, 288, 0, 16, 48, 280}},
};

const char *choose_layout(TensorLayout *layout, const char **name) {
    static char problem[256]; /* the current layout's problem is the one said */
    for (size_t i = 0; i < sizeof KNOWN_LAYOUTS / sizeof KNOWN_LAYOUTS[0]; i++) {
        const char *wrong = check_layout(&KNOWN_LAYOUTS[i].layout);
        if (!wrong) {
            *layout = KNOWN_LAYOUTS[i].layout;
            *name = KNOWN_LAYOUTS[i].name;
            return NULL;
        }
        if (i == 0) snprintf(problem, sizeof problem, "%s", wrong);
    }
    return problem;
}

/* ---- graphs: ggml's accessors, or an older ggml's ggml_cgraph read directly --------------- */

/* ggml_cgraph began {int size; int n_nodes; int n_leafs; struct ggml_tensor **nodes; ...} from
   ggml_new_graph_custom's introduction (October 2023) until it became opaque, and still does
   inside ggml (ggml-impl.h); an older ggml without ggml_graph_n_nodes is read so, once
   check_graph_struct said it holds. */
typedef struct {
    int size, n_nodes, n_leafs;
    void **nodes;
} GraphStart;

int graph_n_nodes(void *graph) {
    return api.graph_n_nodes ? api.graph_n_nodes(graph) : ((GraphStart *)graph)->n_nodes;
}

void *graph_node(void *graph, int i) {
    if (api.graph_node) return api.graph_node(graph, i);
    GraphStart *start = graph;
    return start->nodes[i < 0 ? start->n_nodes + i : i]; /* as ggml_graph_node counts from the end */
}

/* Whether an older ggml's graphs are read right by the stand-ins above: NULL if so (or if this
   ggml has its own accessors), else why not. */
const char *check_graph_struct(void) {
    if (api.graph_n_nodes && api.graph_node) return NULL;
    size_t (*graph_overhead)(void) = find_original("ggml_graph_overhead", NULL);
    void *(*new_graph)(void *) = find_original("ggml_new_graph", NULL);
    void (*expand)(void *, void *) = find_original("ggml_build_forward_expand", NULL);
    if (!graph_overhead || !new_graph || !expand || !find_original("ggml_new_graph_custom", NULL)) {
        return "it has neither ggml_graph_n_nodes nor the ggml_cgraph of ggml_new_graph_custom (a ggml from "
               "before October 2023)";
    }
    size_t overhead = api.tensor_overhead();
    void *ctx = api.init((struct ggml_init_params_abi){8 * overhead + graph_overhead(), NULL, true});
    if (!ctx) return "ggml_init failed while checking the graph layout";
    void *input = api.new_tensor_2d(ctx, 0 /* F32 */, 4, 1);
    void *total = api.add(ctx, input, input);
    void *graph = new_graph(ctx);
    expand(graph, total);
    int holds = graph_n_nodes(graph) == 1 && graph_node(graph, 0) == total && graph_node(graph, -1) == total;
    api.free(ctx);
    return holds ? NULL : "its ggml_cgraph is not laid out as ggml-viz reads an older ggml's graphs";
}

/* Whether the loaded ggml lays ggml_tensor out as the recorder reads it, checked on tensors
   ggml itself builds (as ggml_api.check_tensor_layout does in Python); NULL if so. The
   overhead is a 32-byte ggml_object before each tensor, and the type ids F32 = 0, Q4_1 = 3
   are those of every ggml with ggml_op_desc (0.13.1 and 0.25.3 checked). */
const char *check_layout(const TensorLayout *l) {
    static char problem[256];
    size_t overhead = api.tensor_overhead();
    if (overhead != l->tensor_size + 32) {
        snprintf(problem, sizeof problem, "it lays out ggml_tensor in %zu bytes, ggml-viz expects %zu", overhead - 32,
                 l->tensor_size);
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
    else if (i64_at(view, l->view_src_offset) != (int64_t)(uintptr_t)other ||
             i64_at(view, l->view_src_offset + 8) != 28)
        wrong = "view_src";
    else if (strcmp((char *)other + l->name_offset, "ggml_viz_probe") != 0 ||
             api.get_name(other) != (char *)other + l->name_offset)
        wrong = "name";
    api.free(ctx);
    if (!wrong) return NULL;
    snprintf(problem, sizeof problem, "its ggml_tensor's field '%s' is not where ggml-viz expects it", wrong);
    return problem;
}

/* The numbers this ggml gives MUL_MAT_ID and GET_ROWS (the enum's numbering changes between
   versions), read from probe tensors it builds (shapes every ggml accepts: one 2-D expert), into
   start-up's settings. */
void probe_routing_ops(Settings *written) {
    written->op_mul_mat_id = written->op_get_rows = 0;
    if (!api.get_rows || !api.mul_mat_id) return;
    size_t overhead = api.tensor_overhead();
    void *ctx = api.init((struct ggml_init_params_abi){16 * overhead, NULL, true});
    if (!ctx) return;
    void *experts = api.new_tensor_2d(ctx, 0 /* F32 */, 8, 4);
    void *input = api.new_tensor_2d(ctx, 0, 8, 1);
    void *ids = api.new_tensor_2d(ctx, 26 /* I32 */, 1, 1);
    void *rows = api.get_rows(ctx, experts, ids);
    void *product = api.mul_mat_id(ctx, experts, input, ids);
    memcpy(&written->op_get_rows, (char *)rows + written->layout.op_offset, 4);
    memcpy(&written->op_mul_mat_id, (char *)product + written->layout.op_offset, 4);
    api.free(ctx);
}

/* ---- settings from the environment --------------------------------------------------------- */

const char *env(const char *name) {
    const char *value = getenv(name);
    return value && *value ? value : NULL;
}

bool env_flag(const char *name) {
    const char *value = env(name);
    return value &&
           (!strcmp(value, "1") || !strcasecmp(value, "true") || !strcasecmp(value, "yes") || !strcasecmp(value, "on"));
}

/* Split a comma list into at most `limit` trimmed items (upper-cased for ops). */
int split_list(const char *text, char **items, int limit, bool upper) {
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

bool whole_number(const char *text, long long *value) {
    char *end;
    errno = 0;
    *value = strtoll(text, &end, 10);
    return !errno && end != text && *end == 0;
}

/* Whether `value` is one of `choices` (|-separated). */
static bool one_of(const char *value, const char *choices) {
    size_t length = strlen(value);
    for (const char *c = choices; *c;) {
        const char *end = strchr(c, '|');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == length && !strncmp(c, value, n)) return true;
        c += n + (end ? 1 : 0);
    }
    return false;
}

/* Every GGML_VIZ_* variable given, checked by its kind as the settings declare it (the Python's
   rule too, from the same declarations: ggml_viz_contract.h); NULL, or what is wrong. */
static const char *check_settings(char *problem, size_t size) {
    static const SettingDeclaration declared[] = PRELOAD_SETTINGS;
    for (int i = 0; i < PRELOAD_SETTINGS_COUNT; i++) {
        const SettingDeclaration *s = &declared[i];
        const char *value = env(s->variable);
        long long number;
        if (!value) continue;
        if (s->kind == SETTING_CHOICE && !one_of(value, s->choices)) {
            snprintf(problem, size, "%s=%s: choose one of %s", s->variable, value, s->choices);
        } else if (s->kind == SETTING_COUNT && (!whole_number(value, &number) || number < 1)) {
            snprintf(problem, size, "%s=%s: a whole number, 1 or more", s->variable, value);
        } else if (s->kind == SETTING_NUMBER && (!whole_number(value, &number) || number < 0)) {
            snprintf(problem, size, "%s=%s: a whole number, 0 or more", s->variable, value);
        } else {
            continue;
        }
        return problem;
    }
    return NULL;
}

/* The GGML_VIZ_* capture settings, read into start-up's settings; NULL, or what is wrong (ggml-viz
   run checked them already). */
const char *read_settings(Settings *written) {
    static char problem[256];
    if (check_settings(problem, sizeof problem)) return problem;
    const char *detail = env("GGML_VIZ_DETAIL"), *timing = env("GGML_VIZ_TIMING"), *values = env("GGML_VIZ_VALUES");
    written->detail_graph = detail && !strcmp(detail, "graph");
    written->sync_timing = timing && !strcmp(timing, "sync");
    written->values_stats = values && !strcmp(values, "stats");
    written->capture_bytes = DEFAULT_CAPTURE_BYTES;
    const char *sample = env("GGML_VIZ_SAMPLE"), *capture_bytes = env("GGML_VIZ_CAPTURE_BYTES");
    if (sample) whole_number(sample, &written->sample);
    if (capture_bytes) whole_number(capture_bytes, &written->capture_bytes);
    const char *read_graphs = env("GGML_VIZ_READ_GRAPHS");
    written->read_graphs_at_compute = read_graphs && !strcmp(read_graphs, "compute");
    const char *routing = env("GGML_VIZ_ROUTING");
    written->routing = !routing || !strcmp(routing, "on");
    const char *gpu = env("GGML_VIZ_GPU");
    long long window = DEFAULT_GPU_WINDOW, period = DEFAULT_GPU_PERIOD;
    const char *window_text = env("GGML_VIZ_GPU_WINDOW"), *period_text = env("GGML_VIZ_GPU_PERIOD");
    if (window_text) whole_number(window_text, &window);
    if (period_text) whole_number(period_text, &period);
    written->gpu = (GpuTraceSettings){
        /* graph detail: no node times, the GPU's neither */
        .mode = written->detail_graph || (gpu && !strcmp(gpu, "off")) ? GPU_TRACE_OFF
                : gpu && !strcmp(gpu, "every")                        ? GPU_TRACE_EVERY
                                                                      : GPU_TRACE_WINDOWS,
        .window = (int)window,
        .period = (int)period,
        .finalize = !env("GGML_VIZ_GPU_DETACH") || env_flag("GGML_VIZ_GPU_DETACH"),
        .cupti_paths = env("GGML_VIZ_CUPTI"),
    };
    written->n_ops = split_list(env("GGML_VIZ_OPS"), written->ops, MAX_OPS, true);
    written->n_names = split_list(env("GGML_VIZ_NAMES"), written->names, MAX_NAMES, false);
    written->n_captures = split_list(env("GGML_VIZ_CAPTURE"), written->captures, MAX_CAPTURES, false);
    char *layers[MAX_LAYER_RANGES];
    int n_layers = split_list(env("GGML_VIZ_LAYERS"), layers, MAX_LAYER_RANGES, false);
    for (int i = 0; i < n_layers; i++) {
        long long low, high;
        char *dash = strchr(layers[i], '-');
        if (!strcasecmp(layers[i], "none")) {
            written->no_layer = 1;
        } else if (dash) {
            *dash = 0;
            if (!whole_number(layers[i], &low) || !whole_number(dash + 1, &high) || high < low) {
                snprintf(problem, sizeof problem, "GGML_VIZ_LAYERS: %s-%s is not a layer range", layers[i], dash + 1);
                return problem;
            }
            written->ranges[written->n_ranges][0] = low;
            written->ranges[written->n_ranges++][1] = high;
        } else if (whole_number(layers[i], &low)) {
            written->ranges[written->n_ranges][0] = written->ranges[written->n_ranges][1] = low;
            written->n_ranges++;
        } else {
            snprintf(problem, sizeof problem, "GGML_VIZ_LAYERS: %s is not a layer, a range or 'none'", layers[i]);
            return problem;
        }
    }
    return NULL;
}
