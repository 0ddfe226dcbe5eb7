/* The preload library, part 3: what it writes to the spool (its layout: spool.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload.h"

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

void spool_frame(uint32_t kind, uint32_t context_id, const void *payload, size_t size) {
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
void stop_recording(const char *reason) {
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

int open_spool_in(const char *folder) {
    if (mkdir(folder, 0755) != 0 && errno != EEXIST) return -1;
    snprintf(state.spool_path, sizeof state.spool_path, "%s/%d.spool", folder, (int)getpid());
    state.spool = open(state.spool_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (state.spool < 0) return -1;
    if (write(state.spool, SPOOL_MAGIC, sizeof SPOOL_MAGIC - 1) != sizeof SPOOL_MAGIC - 1) return -1;
    return 0;
}

int open_spool(const char *output) {
    const char *path = env("GGML_VIZ_SPOOL");
    if (state.control) return open_spool_in(state.control->spool_dir); /* the window's, or the dormant one's */
    if (path) {
        snprintf(state.spool_path, sizeof state.spool_path, "%s", path);
    } else {
        char folder[4000];
        snprintf(folder, sizeof folder, "%s", output);
        if (mkdir(folder, 0755) != 0 && errno != EEXIST) return -1;
        snprintf(folder, sizeof folder, "%s/spool", output);
        return open_spool_in(folder);
    }
    state.spool = open(state.spool_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (state.spool < 0) return -1;
    if (write(state.spool, SPOOL_MAGIC, sizeof SPOOL_MAGIC - 1) != sizeof SPOOL_MAGIC - 1) return -1;
    return 0;
}

void add_library_of(Array *t, const char *key, void *function) {
    Dl_info info;
    text_add(t, ",\"%s\":", key);
    if (function && dladdr(function, &info) && info.dli_fname) json_string(t, info.dli_fname);
    else text_add(t, "null");
}

/* ,"argv":[...]: the process's arguments, as /proc/self/cmdline holds them. */
static void add_argv(Array *t) {
    text_add(t, ",\"argv\":[");
    FILE *cmdline = fopen("/proc/self/cmdline", "rb");
    if (cmdline) {
        char argument[4096];
        int c, length = 0, first = 1;
        while ((c = fgetc(cmdline)) != EOF) {
            if (c && length < (int)sizeof argument - 1) argument[length++] = (char)c;
            if (!c) {
                argument[length] = 0;
                text_add(t, first ? "" : ",");
                json_string(t, argument);
                first = 0;
                length = 0;
            }
        }
        fclose(cmdline);
    }
    text_add(t, "]");
}

void write_start_frame(void) {
    Array t;
    array_init(&t, 1);
    text_add(&t, "{\"pid\":%d,\"start_ns\":%lld", (int)getpid(), (long long)now_ns());
    add_argv(&t);
    add_library_of(&t, "ggml_library", (void *)api.recorder.op_name);
    add_library_of(&t, "llama_library", (void *)api.get_model);
    text_add(&t, ",\"ggml_version\":");
    json_string(&t, api.version ? api.version() : NULL);
    text_add(&t, ",\"ggml_commit\":");
    json_string(&t, api.commit ? api.commit() : NULL);
    text_add(&t, ",\"system_info\":");
    json_string(&t, api.system_info ? api.system_info() : NULL);
    text_add(&t, ",\"timing\":\"%s\",\"inline_timing_available\":%s,\"tensor_layout\":",
             settings->sync_timing ? "sync" : "inline", api.is_cpu ? "true" : "false");
    json_string(&t, settings->layout_name);
    text_add(&t, ",\"no_node_ticks\":"); /* why nodes are not timed by ticks on this ggml, if they are not */
    if (settings->no_ticks_reason) json_string(&t, settings->no_ticks_reason);
    else text_add(&t, "null");
    text_add(&t, ",\"environment\":{");
    static const SettingDeclaration declared[] = PRELOAD_SETTINGS;
    for (int i = 0, n_set = 0; i < PRELOAD_SETTINGS_COUNT; i++) { /* the settings as given, for the run's manifest */
        const char *value = env(declared[i].variable);
        if (value) {
            text_add(&t, n_set++ ? "," : "");
            json_string(&t, declared[i].variable);
            text_add(&t, ":");
            json_string(&t, value);
        }
    }
    text_add(&t, "},\"contract\":\"%s\"}", CONTRACT_DIGEST);
    spool_frame(SPOOL_START, 0, t.items, t.count);
    array_free(&t);
}

/* A process that runs untraced (a ggml ggml-viz does not read, bad settings): a spool of one
   frame, SPOOL_UNTRACED, saying which process, which ggml and why. It has said so on stderr
   already; the note lets `ggml-viz run` add nothing and write no run for it. */
void write_untraced_note(const char *reason) {
    if (open_spool(env("GGML_VIZ_OUTPUT")) != 0) return; /* the line on stderr is enough */
    Array t;
    array_init(&t, 1);
    text_add(&t, "{\"pid\":%d", (int)getpid());
    add_argv(&t);
    const char *library = ggml_library_path();
    text_add(&t, ",\"ggml_library\":");
    if (library) json_string(&t, library);
    else text_add(&t, "null");
    text_add(&t, ",\"ggml_version\":");
    if (api.version && api.version()) json_string(&t, api.version());
    else text_add(&t, "null");
    text_add(&t, ",\"reason\":");
    json_string(&t, reason);
    text_add(&t, "}");
    write_frame(SPOOL_UNTRACED, 0, t.items, t.count);
    array_free(&t);
    close(state.spool);
    state.spool = -1;
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

void describe_context(Entry *e) {
    Array t;
    array_init(&t, 1);
    text_add(&t, "{\"context_id\":%d,\"kind\":\"%s\"", e->context_id,
             e->is_llama     ? "llama"
             : e->is_backend ? "backend"
                             : "ggml");
    if (e->library[0]) {
        text_add(&t, ",\"library\":");
        json_string(&t, e->library);
    }
    if (e->is_cpu_graphs) { /* the graphs a thread computed on the CPU without a backend */
        text_add(&t, ",\"backend\":\"CPU\",\"compute\":\"ggml_graph_compute\"");
    } else if (e->is_backend) { /* a backend computing graphs itself: which */
        text_add(&t, ",\"backend\":");
        json_string(&t, api.backend_name ? api.backend_name(e->owner) : NULL);
    }
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
            /* the warm-up llama.cpp's programs run before the prompt feeds these two */
            const void *vocab = api.model_vocab ? api.model_vocab(model) : NULL;
            if (vocab && api.vocab_bos && api.vocab_eos) {
                text_add(&t, ",\"bos\":%d,\"eos\":%d", api.vocab_bos(vocab), api.vocab_eos(vocab));
            }
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

/* ---- taking and writing --------------------------------------------------------------------- */

static void frame_add(Array *frame, const void *data, size_t size) {
    if (size && array_reserve(frame, size) == 0) {
        memcpy(frame->items + frame->count, data, size);
        frame->count += size;
    }
}

/* ggml_tensor in the current layout (RECORDER_TENSOR_LAYOUT): where the reader finds each field. */
static const TensorLayout CURRENT = RECORDER_TENSOR_LAYOUT;
enum { FIELDS_KEPT_IN_PLACE = 152 /* type, buffer, ne, nb, op, op_params, flags: where every layout has them */ };

const void *tensors_in_current_layout(const void *structs, size_t size, Array *out, size_t *out_size) {
    const TensorLayout *l = &settings->layout;
    *out_size = size;
    if (!memcmp(l, &CURRENT, sizeof *l) || !size) return structs;
    size_t n = size / l->tensor_size;
    out->count = 0;
    if (array_reserve(out, n * CURRENT.tensor_size) != 0) return NULL;
    uint8_t *to = out->items;
    const uint8_t *from = structs;
    memset(to, 0, n * CURRENT.tensor_size);
    for (size_t i = 0; i < n; i++, to += CURRENT.tensor_size, from += l->tensor_size) {
        memcpy(to, from, FIELDS_KEPT_IN_PLACE);
        memset(to + 4, 0, 4); /* 2024 H1's `backend` field, padding now */
        memcpy(to + CURRENT.src_offset, from + l->src_offset, 8 * CURRENT.n_src);
        memcpy(to + CURRENT.view_src_offset, from + l->view_src_offset, 16); /* view_src, view_offs */
        memcpy(to + CURRENT.data_offset, from + l->data_offset, 8);
        memcpy(to + CURRENT.name_offset, from + l->name_offset, 64 + 8); /* name, extra */
    }
    out->count = *out_size = n * CURRENT.tensor_size;
    return out->items;
}

/* Take what a context's recorder holds and write it as one frame (e->lock held). */
void write_entry(Entry *e) {
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
    if (r->weight_prints.count) { /* before the graphs that read them */
        spool_frame(SPOOL_WEIGHTS, (uint32_t)e->context_id, r->weight_prints.items,
                    r->weight_prints.count * sizeof(WeightPrint));
        r->weight_prints.count = 0;
    }
    Array *frame = &e->frame;
    frame->count = 0;
    SpoolTakeHead head = {decodes.n_calls, decodes.n_tokens, (uint64_t)n_graphs, 0};
    size_t head_at = frame->count;
    frame_add(frame, &head, sizeof head);
    frame_add(frame, decodes.calls, decodes.n_calls * sizeof(DecodeRecord));
    for (int c = 0; c < BATCH_COLUMNS; c++) frame_add(frame, decodes.columns[c].data, decodes.columns[c].size);
    /* each token's text, read now, while its model lives */
    const int32_t *tokens = decodes.columns[BATCH_TOKENS].data;
    const void *vocab = NULL;
    if (e->is_llama && api.get_model && api.token_to_piece) {
        /* llama.cpp before its vocabulary API (2025) took the model where it now takes the vocabulary */
        void *model = api.get_model(e->owner);
        vocab = model && api.model_vocab ? api.model_vocab(model) : model;
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
        SpoolGraphHeader header = {(uint32_t)taken.plain_repeat,
                                   (uint32_t)taken.same,
                                   taken.n_nodes,
                                   taken.start_ns,
                                   taken.end_ns,
                                   taken.boundary_ns,
                                   taken.n_timed,
                                   {0}};
        /* the node and leaf structs as the reader decodes them, whatever this ggml's layout */
        Bytes *node_part = &taken.parts[PART_NODES], *leaf_part = &taken.parts[PART_LEAVES];
        node_part->data = tensors_in_current_layout(node_part->data, node_part->size, &e->nodes_rewritten,
                                                    &node_part->size);
        leaf_part->data = tensors_in_current_layout(leaf_part->data, leaf_part->size, &e->leaves_rewritten,
                                                    &leaf_part->size);
        if ((node_part->size && !node_part->data) || (leaf_part->size && !leaf_part->data)) {
            failed = 1;
            break;
        }
        for (int p = 0; p < GRAPH_PARTS; p++) header.part_sizes[p] = taken.parts[p].size;
        frame_add(frame, &header, sizeof header);
        for (int p = 0; p < GRAPH_PARTS; p++) frame_add(frame, taken.parts[p].data, taken.parts[p].size);
    }
    head.text_bytes = text_bytes;
    memcpy(frame->items + head_at, &head, sizeof head);
    recorder_take_end(r);
    recorder_decodes_done(r);
    e->unwritten = 0;
    if (!failed) spool_frame(SPOOL_TAKE, (uint32_t)e->context_id, frame->items, frame->count);
    if (failed) stop_recording("the recorder ran out of memory");
}

/* The process is exiting: what it recorded, in all. */
void write_end_frame(void) {
    Array t;
    array_init(&t, 1);
    long long skipped = 0, skipped_bytes = 0, answered = 0, at_ticks = 0, dropped = 0;
    for (int i = 0; i < state.n_entries; i++) {
        const Recorder *r = &state.entries[i]->recorder;
        skipped += r->captures_skipped;
        skipped_bytes += r->capture_bytes_skipped;
        answered += r->routing_answered;
        at_ticks += r->routing_at_ticks;
        dropped += r->routing_dropped;
    }
    text_add(&t,
             "{\"end_ns\":%lld,\"contexts\":%d,\"captures_skipped\":%lld,\"capture_bytes_skipped\":%lld,"
             "\"routing_reads\":[%lld,%lld,%lld]",
             (long long)now_ns(), state.n_entries, skipped, skipped_bytes, answered, at_ticks, dropped);
    int on_gpu = 0;
    for (int i = 0; i < state.n_entries; i++) on_gpu |= state.entries[i]->timed_device != 0;
    if (on_gpu) { /* the GPU timer: what it used, or why it timed nothing */
        static const char *modes[] = {"off", "windows", "every"};
        text_add(&t, ",\"gpu\":{\"mode\":\"%s\",\"window\":%d,\"period\":%d,\"detach\":%s,\"timer\":\"%s\",",
                 modes[gpu_mode()], settings->gpu.window, settings->gpu.period,
                 settings->gpu.finalize ? "true" : "false", gpu_device() == GPU_DEVICE_VULKAN ? "vulkan" : "cupti");
        text_add(&t, "\"vulkan_layer\":");
        json_string(&t, gpu_vulkan_layer_path());
        text_add(&t, ",\"cupti\":");
        json_string(&t, gpu_cupti_path());
        text_add(&t, ",\"cupti_version\":%u,\"clock\":\"%s\",\"problem\":", gpu_cupti_version(),
                 gpu_own_clock() ? "recorder" : "offset");
        if (gpu_problem()) json_string(&t, gpu_problem());
        else text_add(&t, "null");
        text_add(&t, "}");
    }
    text_add(&t, "}");
    spool_frame(SPOOL_END, 0, t.items, t.count);
    array_free(&t);
}

/* The END frame of a program a signal ends (state.lock held, in the signal handler): its JSON is
   put together by hand, without stdio (a handler may call only what is async-signal-safe). */
static size_t put_number(char *out, long long value) {
    char digits[24];
    size_t n = 0, length = 0;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0) out[length++] = '-';
    while (n) out[length++] = digits[--n];
    return length;
}

static size_t put_text(char *out, const char *text) {
    size_t n = strlen(text);
    memcpy(out, text, n);
    return n;
}

void write_end_frame_on_signal(int signal_number) {
    char json[160];
    size_t n = put_text(json, "{\"end_ns\":");
    n += put_number(json + n, (long long)now_ns());
    n += put_text(json + n, ",\"contexts\":");
    n += put_number(json + n, state.n_entries);
    n += put_text(json + n, ",\"captures_skipped\":0,\"capture_bytes_skipped\":0,\"signal\":");
    n += put_number(json + n, signal_number);
    n += put_text(json + n, "}");
    write_frame(SPOOL_END, 0, json, n);
}

/* A closed GPU trace window: its computes, node calls and CUPTI's records. */
void write_gpu_take(void) {
    Array frame;
    array_init(&frame, 1);
    if (gpu_take_serialized(&frame) > 0) spool_frame(SPOOL_GPU, 0, frame.items, frame.count);
    array_free(&frame);
}
