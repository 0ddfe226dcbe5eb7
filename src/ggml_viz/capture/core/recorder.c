/* The recorder's hot path (recorder.h): reading a tensor struct, recording a node and its sources
   and buffers, asking (the eval callback), reading a graph at its compute call, and the recorder's
   life and settings. The rest of it, by concern, in the files beside it (recorder_internal.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading a tensor struct ------------------------------------------------------- */

/* The number at name[at] ending in a dot ("12." of "blk.12.x"), or -1. */
static int64_t layer_number(const char *name, size_t length, size_t at) {
    size_t i = at;
    int64_t value = 0;
    while (i < length && name[i] >= '0' && name[i] <= '9') value = value * 10 + (name[i++] - '0');
    return i > at && i < length && name[i] == '.' ? value : -1;
}

/* The layer in a tensor name, as ggml_viz.layers.layer_of reads it; -1 if none. */
int64_t layer_of(const char *name) {
    size_t length = strnlen(name, NAME_LEN);
    if (length > 4 && strncmp(name, "blk.", 4) == 0 && layer_number(name, length, 4) >= 0) {
        return layer_number(name, length, 4);
    }
    /* checkpoint names: blocks.N., layers.N., h.N. at the start or after a dot */
    const char *containers[3] = {"blocks.", "layers.", "h."};
    for (size_t start = 0; start < length; start++) {
        if (start > 0 && name[start - 1] != '.') continue;
        for (int c = 0; c < 3; c++) {
            size_t n = strlen(containers[c]);
            if (start + n < length && strncmp(name + start, containers[c], n) == 0) {
                int64_t value = layer_number(name, length, start + n);
                if (value >= 0) return value;
            }
        }
    }
    const char *markers[2] = {"-", "_l"};
    for (int m = 0; m < 2; m++) {
        size_t marker_length = strlen(markers[m]);
        for (size_t start = 0; start + marker_length < length; start++) {
            if (strncmp(name + start, markers[m], marker_length) != 0) continue;
            size_t i = start + marker_length;
            int64_t value = 0;
            while (i < length && name[i] >= '0' && name[i] <= '9') value = value * 10 + (name[i++] - '0');
            if (i > start + marker_length && (i == length || name[i] == ' ' || name[i] == '(')) return value;
        }
    }
    return -1;
}

bool is_selected(Recorder *r, const uint8_t *tensor) {
    char name[NAME_LEN + 1];
    memcpy(name, tensor + r->layout.name_offset, NAME_LEN);
    name[NAME_LEN] = 0;
    if (r->n_ops) {
        bool found = false;
        const char *specific = r->ggml.op_desc ? r->ggml.op_desc(tensor) : NULL;
        int32_t op;
        memcpy(&op, tensor + r->layout.op_offset, sizeof op);
        const char *base = r->ggml.op_name ? r->ggml.op_name(op) : NULL;
        for (int i = 0; i < r->n_ops && !found; i++) {
            found = (specific && strcmp(specific, r->ops[i]) == 0) || (base && strcmp(base, r->ops[i]) == 0);
        }
        if (!found) return false;
    }
    if (r->n_layer_ranges || r->select_no_layer) {
        int64_t layer = layer_of(name);
        bool found = layer < 0 && r->select_no_layer;
        for (int i = 0; i < r->n_layer_ranges && !found; i++) {
            found = layer >= r->layer_ranges[i][0] && layer <= r->layer_ranges[i][1];
        }
        if (!found) return false;
    }
    if (r->n_names) {
        bool found = false;
        for (int i = 0; i < r->n_names && !found; i++) found = fnmatch(r->names[i], name, 0) == 0;
        if (!found) return false;
    }
    return true;
}

/* ---- recording ------------------------------------------------------------------------ */

/* What a buffer holds (GGML_BACKEND_BUFFER_USAGE_*), or -1 where ggml cannot say (a ggml of 2024 H1
   has no ggml_backend_buffer_get_usage): its buffers are then of unknown use. */
int buffer_usage_of(const Recorder *r, const void *buffer) {
    return r->ggml.buffer_usage ? r->ggml.buffer_usage(buffer) : -1;
}

int describe_buffer(Recorder *r, uint64_t buffer) {
    BufferRecord *record = array_push(&r->buffers);
    if (!record) return -1;
    memset(record, 0, sizeof *record);
    const void *b = (const void *)(uintptr_t)buffer;
    record->address = buffer;
    record->usage = buffer_usage_of(r, b);
    record->size = r->ggml.buffer_size(b);
    record->base = (uint64_t)(uintptr_t)r->ggml.buffer_base(b);
    const char *name = r->ggml.buffer_name(b);
    if (name) strncpy(record->name, name, NAME_LEN - 1);
    void *buft = r->ggml.buffer_type(b);
    const char *buft_name = buft ? r->ggml.buft_name(buft) : NULL;
    if (buft_name) strncpy(record->buffer_type, buft_name, NAME_LEN - 1);
    return 0;
}

static int note_buffer(Recorder *r, const uint8_t *tensor) {
    uint64_t buffer = field_u64(tensor, r->layout.buffer_offset);
    if (!buffer || pointer_set_find(&r->seen, buffer)) return 0;
    if (pointer_set_add(&r->seen, buffer, SEEN_BUFFER) != 0) return -1;
    return describe_buffer(r, buffer);
}

static int copy_tensor(Recorder *r, Array *structs, uint64_t address, const uint8_t **copied) {
    uint8_t *slot = array_push(structs);
    if (!slot) return -1;
    memcpy(slot, (const void *)(uintptr_t)address, r->layout.tensor_size);
    /* A name is a C string: bytes after its NUL are stale, clear them. */
    uint8_t *name = slot + r->layout.name_offset;
    size_t length = strnlen((const char *)name, NAME_LEN);
    if (length < NAME_LEN) memset(name + length, 0, NAME_LEN - length);
    *copied = slot;
    return 0;
}


static int copy_leaf(Recorder *r, uint64_t address) {
    if (!address || pointer_set_find(&r->seen, address)) return 0;
    const uint8_t *copied;
    uint64_t *ptr = array_push(&r->leaf_ptrs);
    if (!ptr || copy_tensor(r, &r->leaves, address, &copied) != 0) return -1;
    *ptr = address;
    if (pointer_set_add(&r->seen, address, SEEN_LEAF) != 0) return -1;
    if (r->print_nbytes && print_weight(r, copied) != 0) return -1;
    return note_buffer(r, copied);
}


/* ---- asking ------------------------------------------------------------------------------- */

/* Record a node the scheduler asks about; returns the answer, or -1 out of memory. */
static int on_ask(Recorder *r, uint64_t address) {
    if (r->fail_after_nodes > 0 && (long long)r->node_flags.count >= r->fail_after_nodes) return -1;
    const uint8_t *tensor = (const uint8_t *)(uintptr_t)address; /* live; the copy once there is one */
    bool asked = !r->reading_at_compute; /* else the graph is read whole, at its compute call */
    if (asked && starts_next_graph(r, tensor) && close_graph(r, now_ns()) != 0) return -1;
    int repeat = check_repeat(r, address);
    if (asked && repeat == 0 &&
        pointer_set_find(&r->seen, address) == SEEN_NODE) { /* a node again: the next graph begins */
        if (close_graph(r, now_ns()) != 0) return -1;
        repeat = check_repeat(r, address);
    }
    if (repeat < 0) return -1;
    if (!repeat) {
        if (copy_tensor(r, &r->nodes, address, &tensor) != 0) return -1;
        if (pointer_set_add(&r->seen, address, SEEN_NODE) != 0 || note_buffer(r, tensor) != 0) return -1;
        for (size_t i = 0; i < r->layout.n_src; i++) {
            if (copy_leaf(r, field_u64(tensor, r->layout.src_offset + 8 * i)) != 0) return -1;
        }
        if (copy_leaf(r, field_u64(tensor, r->layout.view_src_offset)) != 0) return -1;
        uint32_t *leaf_end = array_push(&r->leaf_end), *buffer_end = array_push(&r->buffer_end);
        if (!leaf_end || !buffer_end) return -1;
        *leaf_end = (uint32_t)(r->leaves.count - r->graph_first_leaf);
        *buffer_end = (uint32_t)(r->buffers.count - r->graph_first_buffer);
    }

    size_t index = r->node_flags.count;
    size_t index_in_graph = index - r->graph_first_node;
    uint64_t *ptr = array_push(&r->node_ptrs);
    uint8_t *flags = array_push(&r->node_flags);
    int64_t *start = array_push(&r->starts);
    int64_t *end = array_push(&r->ends);
    if (!ptr || !flags || !start || !end) return -1;
    *ptr = address;
    *flags = 0;
    if (index_in_graph == 0) {
        memcpy(&r->first_op, tensor + r->layout.op_offset, sizeof r->first_op);
        memcpy(r->first_name, tensor + r->layout.name_offset, NAME_LEN);
        r->first_name[NAME_LEN - 1] = 0;
    }
    if (r->read_input_ids && r->input_ids.count == r->graph_first_input_id && note_ubatch_ids(r, tensor) != 0)
        return -1;
    if (!asked) { /* no callback will come for it: nothing to read; timed by ticks, if at all */
        if (r->tick_reads && r->time_nodes && (!r->filtering || is_selected(r, tensor))) *flags |= NODE_SELECTED;
        *start = *end = 0;
        return 0;
    }
    if (r->plain_call && r->decode_open && note_input_ids(r, tensor) != 0) return -1;
    bool answer = answer_for(r, tensor, index_in_graph, flags);
    /* Values are read after the node is computed: the scheduler must call back for it.
       Views (KV cache writes among them) share their source's bytes: not read again. */
    if (r->values_mode && !field_u64(tensor, r->layout.view_src_offset)) *flags |= NODE_VALUES;
    if (r->n_captures && matches_capture(r, tensor)) *flags |= NODE_CAPTURE;
    if (r->routing && note_routing(r, tensor, address, (uint32_t)index_in_graph, true, flags) != 0) return -1;
    if (*flags & (NODE_VALUES | NODE_CAPTURE | NODE_ROUTING)) answer = true;
    if (answer) {
        *flags |= NODE_ANSWERED;
        /* Timed: selected (not just a fence), and alone: the previous slice ended right before it. */
        bool alone = index_in_graph == 0 || (ARRAY_AT(r->node_flags, uint8_t, index - 1) & NODE_ANSWERED);
        if (alone && (*flags & NODE_SELECTED)) *flags |= NODE_TIMED;
        r->pending = (int64_t)index;
    }
    /* The ask time matters where nodes are timed (inline timing starts a split at its last
       ask), for answered nodes, and for a graph's first node (when the graph began): graph
       detail reads the clock once per graph. */
    *start = *end = (r->time_nodes || answer || index_in_graph == 0) ? now_ns() : 0;
    return answer ? 1 : 0;
}

bool recorder_eval_callback(void *tensor, bool ask, void *user_data) {
    Recorder *r = (Recorder *)user_data;
    if (r->mode != MODE_RECORD) {
        if (ask && r->mode == MODE_COUNT) r->counted_nodes++;
        return !ask; /* a result callback must answer true, or ggml stops the graph */
    }
    if (!ask) {
        int64_t now = now_ns();
        if (r->pending >= 0) {
            ARRAY_AT(r->ends, int64_t, r->pending) = now;
            uint8_t flags = ARRAY_AT(r->node_flags, uint8_t, r->pending);
            const uint8_t *live = (const uint8_t *)(uintptr_t)ARRAY_AT(r->node_ptrs, uint64_t, r->pending);
            uint32_t node = (uint32_t)(r->pending - (int64_t)r->graph_first_node);
            if (((flags & NODE_VALUES) && record_stats(r, live, node) != 0) ||
                ((flags & NODE_CAPTURE) && record_capture(r, live, node) != 0) ||
                ((flags & NODE_ROUTING) && read_answered_routing(r, node) != 0)) {
                r->out_of_memory = 1;
                r->mode = MODE_OFF;
            }
            r->pending = -1;
        }
        return true;
    }
    int answer = on_ask(r, (uint64_t)(uintptr_t)tensor);
    if (answer < 0) { /* the owner sees the flag, discards the partial graph and stops recording */
        r->out_of_memory = 1;
        r->mode = MODE_OFF;
        return false;
    }
    return answer == 1;
}

void recorder_begin_routing_reads(Recorder *r) {
    r->routing_cursor = 0;
    r->routing_pending = -1;
}

bool recorder_routing_callback(void *tensor, bool ask, void *user_data) {
    Recorder *r = (Recorder *)user_data;
    if (r->mode != MODE_RECORD) return !ask;
    if (!ask) {
        if (r->routing_pending >= 0 &&
            read_routing(r, &ARRAY_AT(r->routing_reads, RoutingRead, (size_t)r->routing_pending)) != 0) {
            r->out_of_memory = 1;
            r->mode = MODE_OFF;
        }
        r->routing_pending = -1;
        return true;
    }
    /* the scheduler asks about the graph's nodes in order, and about copies it made of a split's
       inputs, which are no node of the graph read */
    uint64_t address = (uint64_t)(uintptr_t)tensor;
    size_t first = r->graph_first_node, n = r->node_flags.count - first, i = r->routing_cursor;
    while (i < n && ARRAY_AT(r->node_ptrs, uint64_t, first + i) != address) i++;
    if (i == n) return false;
    r->routing_cursor = i + 1;
    uint8_t flags = 0;
    if (note_routing(r, (const uint8_t *)tensor, address, (uint32_t)i, false, &flags) != 0) {
        r->out_of_memory = 1;
        r->mode = MODE_OFF;
        return false;
    }
    if (!(flags & NODE_ROUTING)) return false;
    r->routing_pending = (int64_t)r->routing_reads.count - 1;
    return true;
}

/* A graph read whole at the scheduler's compute call, without an eval callback (which
   would make ggml-cuda give up its CUDA graphs): each node recorded as if asked about and
   not answered, so no node is timed; the graph began at start_ns. It ends at the next
   graph read or at the end of its llama call. */
int recorder_read_graph(Recorder *r, void *graph, int n_nodes, void *(*node_at)(void *, int), int64_t start_ns) {
    if (r->mode != MODE_RECORD) {
        if (r->mode == MODE_COUNT) r->counted_nodes += (uint64_t)n_nodes;
        return 0;
    }
    if (recorder_open_nodes(r) && close_graph(r, start_ns) != 0) goto failed;
    r->split_cursor = r->tick_split_end = 0;
    r->reading_at_compute = 1;
    r->ids_tensor = 0;
    for (int i = 0; i < n_nodes; i++) {
        if (on_ask(r, (uint64_t)(uintptr_t)node_at(graph, i)) < 0) goto failed;
    }
    r->reading_at_compute = 0;
    if (n_nodes > 0)
        ARRAY_AT(r->starts, int64_t, r->graph_first_node) = ARRAY_AT(r->ends, int64_t, r->graph_first_node) = start_ns;
    if (n_nodes > 0 && r->tick_reads)
        ARRAY_AT(r->starts, int64_t, r->node_flags.count - 1) = start_ns; /* the split's last ask */
    return r->repeating && (size_t)n_nodes == r->previous_node_ptrs.count;
failed:
    r->reading_at_compute = 0;
    r->out_of_memory = 1;
    r->mode = MODE_OFF;
    return -1;
}

/* The graph at this compute call is the previous graph again, unchanged (the program neither
   rebuilt nor allocated it since): record it without reading its nodes, as reading would find
   it. 1 done, 0 it cannot be (not the previous graph), -1 out of memory. */
int recorder_repeat_graph(Recorder *r, void *graph, int n_nodes, void *(*node_at)(void *, int), int64_t start_ns) {
    size_t n = r->previous_node_ptrs.count;
    if (r->mode != MODE_RECORD || (size_t)n_nodes != n || n == 0 ||
        (uint64_t)(uintptr_t)node_at(graph, 0) != ARRAY_AT(r->previous_node_ptrs, uint64_t, 0) ||
        (uint64_t)(uintptr_t)node_at(graph, n_nodes - 1) != ARRAY_AT(r->previous_node_ptrs, uint64_t, n - 1)) {
        return 0;
    }
    if (recorder_open_nodes(r) && close_graph(r, start_ns) != 0) goto failed;
    r->split_cursor = r->tick_split_end = 0;
    if (!r->repeating) return 0; /* the graph before was not closed as the previous one */
    if (array_reserve(&r->node_ptrs, n) || array_reserve(&r->node_flags, n) || array_reserve(&r->starts, n) ||
        array_reserve(&r->ends, n)) {
        goto failed;
    }
    size_t first = r->node_flags.count;
    memcpy(&ARRAY_AT(r->node_ptrs, uint64_t, first), r->previous_node_ptrs.items, n * sizeof(uint64_t));
    memset(&ARRAY_AT(r->node_flags, uint8_t, first), 0, n);
    memset(&ARRAY_AT(r->starts, int64_t, first), 0, n * sizeof(int64_t));
    memset(&ARRAY_AT(r->ends, int64_t, first), 0, n * sizeof(int64_t));
    r->node_ptrs.count = r->node_flags.count = r->starts.count = r->ends.count = first + n;
    ARRAY_AT(r->starts, int64_t, first) = ARRAY_AT(r->ends, int64_t, first) = start_ns;
    if (r->tick_reads) { /* timed by ticks as the graph it repeats was */
        ARRAY_AT(r->starts, int64_t, first + n - 1) = start_ns;
        for (size_t i = 0; i < n && i < r->previous_count; i++) {
            if (r->previous_selection[i]) ARRAY_AT(r->node_flags, uint8_t, first + i) = NODE_SELECTED;
        }
    }
    for (size_t b = 0; b < r->previous_buffers.count; b++) { /* as a read describes them */
        if (describe_buffer(r, ARRAY_AT(r->previous_buffers, uint64_t, b)) != 0) goto failed;
    }
    if (reread_ubatch_ids(r) != 0) goto failed;
    return 1;
failed:
    r->out_of_memory = 1;
    r->mode = MODE_OFF;
    return -1;
}

int recorder_split_computed(Recorder *r, void *split, int n_nodes, void *(*node_at)(void *, int), int on_cpu,
                            int64_t now) {
    if (r->mode != MODE_RECORD || n_nodes <= 0 || !recorder_open_nodes(r)) return 0;
    /* A split's nodes are the graph's nodes it covers, in order, and the splits follow each other:
       the split begins at its first node, found from where the split before ended. */
    size_t first = r->graph_first_node, n_graph = r->node_flags.count - first, at = r->split_cursor;
    uint64_t begins = (uint64_t)(uintptr_t)node_at(split, 0);
    while (at < n_graph && ARRAY_AT(r->node_ptrs, uint64_t, first + at) != begins) at++;
    if (at + (size_t)n_nodes > n_graph) return 0;
    for (size_t i = at; i < at + (size_t)n_nodes; i++) {
        uint8_t *flags = &ARRAY_AT(r->node_flags, uint8_t, first + i);
        if (!on_cpu) *flags = (uint8_t)((*flags & ~NODE_SELECTED) | NODE_ELSEWHERE);
    }
    r->split_cursor = at + (size_t)n_nodes;
    if (on_cpu) { /* its ticks end here; it began now (a split starts at its last ask) */
        r->tick_split_end = r->split_cursor;
        ARRAY_AT(r->starts, int64_t, first + r->split_cursor - 1) = now;
    }
    return 1;
}


/* Every growable array of a Recorder and its item size: init and dealloc both go by this list. */
#define RECORDER_ARRAYS(X, r) \
    X(r, nodes, r->layout.tensor_size) \
    X(r, leaves, r->layout.tensor_size) \
    X(r, node_ptrs, sizeof(uint64_t)) \
    X(r, leaf_ptrs, sizeof(uint64_t)) \
    X(r, starts, sizeof(int64_t)) \
    X(r, ends, sizeof(int64_t)) \
    X(r, node_flags, 1) \
    X(r, tick_ns, sizeof(int64_t)) \
    X(r, tick_asked, sizeof(uint32_t)) \
    X(r, tick_barrier_ns, sizeof(int64_t)) \
    X(r, graph_tick_start, sizeof(size_t)) \
    X(r, stats, sizeof(StatsRecord)) \
    X(r, capture_records, sizeof(CaptureRecord)) \
    X(r, capture_data, 1) \
    X(r, graph_stats_start, sizeof(size_t)) \
    X(r, graph_capture_start, sizeof(size_t)) \
    X(r, graph_capture_data_start, sizeof(size_t)) \
    X(r, graph_node_start, sizeof(size_t)) \
    X(r, graph_leaf_start, sizeof(size_t)) \
    X(r, graph_buffer_start, sizeof(size_t)) \
    X(r, graph_boundary, sizeof(int64_t)) \
    X(r, graph_same, 1) \
    X(r, previous_nodes, r->layout.tensor_size) \
    X(r, previous_leaves, r->layout.tensor_size) \
    X(r, previous_node_ptrs, sizeof(uint64_t)) \
    X(r, previous_leaf_ptrs, sizeof(uint64_t)) \
    X(r, buffers, sizeof(BufferRecord)) \
    X(r, graph_struct_start, sizeof(size_t)) \
    X(r, leaf_end, sizeof(uint32_t)) \
    X(r, buffer_end, sizeof(uint32_t)) \
    X(r, previous_leaf_end, sizeof(uint32_t)) \
    X(r, previous_buffer_end, sizeof(uint32_t)) \
    X(r, previous_buffers, sizeof(uint64_t)) \
    X(r, decodes, sizeof(DecodeRecord)) \
    X(r, weight_prints, sizeof(WeightPrint)) \
    X(r, printed, sizeof(uint64_t)) \
    X(r, batch[BATCH_TOKENS], sizeof(int32_t)) \
    X(r, batch[BATCH_POSITIONS], sizeof(int32_t)) \
    X(r, batch[BATCH_SEQ_IDS], sizeof(int32_t)) \
    X(r, batch[BATCH_OUTPUTS], 1) \
    X(r, taken_buffers, sizeof(BufferRecord)) \
    X(r, routing_chains, sizeof(RoutingChain)) \
    X(r, routing_reads, sizeof(RoutingRead)) \
    X(r, previous_routing_reads, sizeof(RoutingRead)) \
    X(r, routing_records, sizeof(RoutingRecord)) \
    X(r, routing_data, 1) \
    X(r, graph_routing_start, sizeof(size_t)) \
    X(r, graph_routing_data_start, sizeof(size_t)) \
    X(r, input_ids, sizeof(int32_t)) \
    X(r, graph_input_ids_start, sizeof(size_t))
#define ARRAY_INIT(r, field, item_size) array_init(&(r)->field, item_size);
#define ARRAY_FREE(r, field, item_size) array_free(&(r)->field);
void reset_recorded(Recorder *r) {
    r->nodes.count = r->leaves.count = r->node_ptrs.count = r->leaf_ptrs.count = 0;
    r->starts.count = r->ends.count = r->node_flags.count = 0;
    r->tick_ns.count = r->tick_asked.count = r->tick_barrier_ns.count = r->graph_tick_start.count = 0;
    r->stats.count = r->capture_records.count = r->capture_data.count = 0;
    r->graph_stats_start.count = r->graph_capture_start.count = r->graph_capture_data_start.count = 0;
    r->routing_records.count = r->routing_data.count = 0;
    r->graph_routing_start.count = r->graph_routing_data_start.count = 0;
    r->input_ids.count = r->graph_input_ids_start.count = 0;
    r->graph_node_start.count = r->graph_struct_start.count = r->graph_leaf_start.count = 0;
    r->graph_buffer_start.count = r->graph_boundary.count = r->buffers.count = r->graph_same.count = 0;
    open_graph(r);
}

/* ---- life and settings ------------------------------------------------------------------ */

int recorder_init(Recorder *r, const TensorLayout *layout, const GgmlFunctions *ggml) {
    memset(r, 0, sizeof *r);
    r->layout = *layout;
    r->ggml = *ggml;
    RECORDER_ARRAYS(ARRAY_INIT, r)
    if (pointer_set_init(&r->seen) != 0) return -1;
    r->mode = MODE_RECORD;
    r->time_nodes = 1;
    r->pending = -1;
    r->routing_pending = -1;
    r->graphs_per_write = 32;
    r->write_interval_ns = 500000000LL;
    r->last_take_ns = now_ns();
    return 0;
}

void recorder_free(Recorder *r) {
    forget_barrier(r);
    RECORDER_ARRAYS(ARRAY_FREE, r)
    pointer_set_free(&r->seen);
    free(r->previous_selection);
    free(r->fp16_table);
    r->previous_selection = NULL;
    r->fp16_table = NULL;
}

void recorder_set_weight_prints(Recorder *r, tensor_bool_fn buffer_is_host, size_fn nbytes) {
    r->is_host_buffer = buffer_is_host;
    r->print_nbytes = buffer_is_host ? nbytes : NULL;
}

void recorder_set_input_reads(Recorder *r, tensor_bool_fn buffer_is_host) {
    if (buffer_is_host) r->is_host_buffer = buffer_is_host;
}

const char *recorder_set_filters(Recorder *r, const char *const *ops, int n_ops, const int64_t (*layer_ranges)[2],
                                 int n_ranges, int select_no_layer, const char *const *names, int n_names) {
    if (n_ops < 0 || n_ops > MAX_OPS || n_names < 0 || n_names > MAX_NAMES || n_ranges < 0 ||
        n_ranges > MAX_LAYER_RANGES) {
        return "filters: at most 32 ops, 64 layer ranges, 32 names";
    }
    for (int i = 0; i < n_ops + n_names; i++) {
        if (strlen(i < n_ops ? ops[i] : names[i - n_ops]) >= NAME_LEN) {
            return "filters: an op or name pattern is longer than 63 bytes";
        }
    }
    for (int i = 0; i < n_ops; i++) strcpy(r->ops[i], ops[i]);
    for (int i = 0; i < n_names; i++) strcpy(r->names[i], names[i]);
    for (int i = 0; i < n_ranges; i++) {
        r->layer_ranges[i][0] = layer_ranges[i][0];
        r->layer_ranges[i][1] = layer_ranges[i][1];
    }
    r->n_ops = n_ops;
    r->n_names = n_names;
    r->n_layer_ranges = n_ranges;
    r->select_no_layer = select_no_layer;
    r->filtering = n_ops || n_names || n_ranges || select_no_layer;
    return NULL;
}

const char *recorder_set_values(Recorder *r, int stats, const char *const *patterns, int n_patterns, long long budget,
                                const ValueFunctions *functions) {
    if (n_patterns < 0 || n_patterns > MAX_CAPTURES) return "captures: at most 16 name patterns";
    if (!functions->buffer_is_host || !functions->is_contiguous || !functions->nbytes || !functions->fp16_to_fp32) {
        return "a ggml function address is null";
    }
    for (int i = 0; i < n_patterns; i++) {
        if (strlen(patterns[i]) >= NAME_LEN) return "captures: a pattern is longer than 63 bytes";
    }
    for (int i = 0; i < n_patterns; i++) strcpy(r->captures[i], patterns[i]);
    r->values = *functions;
    if (!r->fp16_table) {
        r->fp16_table = malloc(65536 * sizeof(float));
        if (!r->fp16_table) return "out of memory";
        for (uint32_t i = 0; i < 65536; i++) r->fp16_table[i] = r->values.fp16_to_fp32((uint16_t)i);
    }
    r->n_captures = n_patterns;
    r->capture_budget = budget;
    r->values_mode = stats;
    return NULL;
}

void recorder_set_decode_rules(Recorder *r, int detail_graph, long long sample, long long graphs_per_write,
                               long long write_interval_ns, const size_t batch_offsets[5]) {
    r->detail_graph = detail_graph;
    r->sample = sample;
    r->graphs_per_write = graphs_per_write;
    r->write_interval_ns = write_interval_ns;
    memcpy(r->batch_offsets, batch_offsets, sizeof r->batch_offsets);
    r->last_take_ns = now_ns();
}

const char *recorder_set_routing(Recorder *r, int on, int32_t op_mul_mat_id, int32_t op_get_rows,
                                 tensor_bool_fn buffer_is_host, tensor_get_fn tensor_get, fp16_fn fp16_to_fp32) {
    r->routing = 0;
    if (!on) return NULL;
    if (!buffer_is_host || !fp16_to_fp32) return "a ggml function address is null";
    if (op_mul_mat_id <= 0 || op_get_rows <= 0 || op_mul_mat_id == op_get_rows) return "bad op numbers";
    r->op_mul_mat_id = op_mul_mat_id;
    r->op_get_rows = op_get_rows;
    r->routing_is_host = buffer_is_host;
    r->tensor_get = tensor_get;
    r->routing_fp16 = fp16_to_fp32;
    r->routing = 1;
    return NULL;
}

void recorder_chain_abort(Recorder *r, abort_fn function, void *data) {
    r->chained_abort = function;
    r->chained_abort_data = data;
}
