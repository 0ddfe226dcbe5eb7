/* Repeating the previous graph: a decode graph usually repeats the one before it struct for struct;
   while it does, nodes are compared, not copied. Opening and closing a graph. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- repeating the previous graph ------------------------------------------------------ */

/* Whether a live tensor struct equals a copied one (a name's bytes after its NUL aside).
   Nearly always the bytes are all equal: one comparison, the name's end sought only if not. */
static bool same_struct(Recorder *r, const uint8_t *live, const uint8_t *copied) {
    if (memcmp(live, copied, r->layout.tensor_size) == 0) return true;
    size_t name_end = r->layout.name_offset + NAME_LEN;
    return memcmp(live, copied, r->layout.name_offset) == 0 &&
           strncmp((const char *)live + r->layout.name_offset, (const char *)copied + r->layout.name_offset,
                   NAME_LEN) == 0 &&
           memcmp(live + name_end, copied + name_end, r->layout.tensor_size - name_end) == 0;
}

static size_t end_before(const Array *ends, size_t index) {
    return index ? ARRAY_AT(*ends, uint32_t, index - 1) : 0;
}

/* How many nodes ahead a repeating graph brings the live structs it will compare (and their
   copies) into the cache: a decode has just streamed the weights through it, and comparing
   cold structs was most of the callback's time (8 measured best: 100 -> 69 us a graph).
   A prefetch is a hint: it never faults, even where the previous graph's memory is gone. */
enum { PREFETCH_AHEAD = 8 };

static void prefetch_struct(Recorder *r, const uint8_t *tensor) {
    for (size_t line = 0; line < r->layout.tensor_size; line += 64) __builtin_prefetch(tensor + line);
}

/* Whether the node asked about repeats the previous graph's node at its index, with the
   leaves that node brought; if so, describe the buffers it first used, as copying would.
   1 yes, 0 no, -1 out of memory. */
static int repeats_previous(Recorder *r, uint64_t address) {
    size_t i = r->node_flags.count - r->graph_first_node;
    if (i >= r->previous_node_ptrs.count || ARRAY_AT(r->previous_node_ptrs, uint64_t, i) != address) return 0;
    if (i + PREFETCH_AHEAD < r->previous_node_ptrs.count) { /* the node asked about then, if it repeats too */
        size_t k = i + PREFETCH_AHEAD;
        prefetch_struct(r, (const uint8_t *)(uintptr_t)ARRAY_AT(r->previous_node_ptrs, uint64_t, k));
        prefetch_struct(r, r->previous_nodes.items + k * r->layout.tensor_size);
        for (size_t j = end_before(&r->previous_leaf_end, k); j < ARRAY_AT(r->previous_leaf_end, uint32_t, k); j++) {
            prefetch_struct(r, (const uint8_t *)(uintptr_t)ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j));
            prefetch_struct(r, r->previous_leaves.items + j * r->layout.tensor_size);
        }
    }
    if (!same_struct(r, (const uint8_t *)(uintptr_t)address, r->previous_nodes.items + i * r->layout.tensor_size))
        return 0;
    size_t leaf_end = ARRAY_AT(r->previous_leaf_end, uint32_t, i);
    for (size_t j = end_before(&r->previous_leaf_end, i); j < leaf_end; j++) {
        const uint8_t *leaf = (const uint8_t *)(uintptr_t)ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j);
        if (!same_struct(r, leaf, r->previous_leaves.items + j * r->layout.tensor_size)) return 0;
    }
    size_t buffer_end = ARRAY_AT(r->previous_buffer_end, uint32_t, i);
    for (size_t b = end_before(&r->previous_buffer_end, i); b < buffer_end; b++) {
        if (describe_buffer(r, ARRAY_AT(r->previous_buffers, uint64_t, b)) != 0) return -1;
    }
    return 1;
}

/* The graph in flight stops repeating the previous one: copy the part it repeated so far
   (equal to the previous graph's, byte for byte) and the pointer set, as if its nodes had
   been copied one by one. */
static int stop_repeating(Recorder *r) {
    r->repeating = 0;
    size_t n = r->node_flags.count - r->graph_first_node;
    if (n == 0) return 0;
    size_t n_leaves = ARRAY_AT(r->previous_leaf_end, uint32_t, n - 1);
    if (array_append(&r->nodes, &r->previous_nodes, 0, n) != 0 ||
        array_append(&r->leaves, &r->previous_leaves, 0, n_leaves) != 0 ||
        array_append(&r->leaf_ptrs, &r->previous_leaf_ptrs, 0, n_leaves) != 0 ||
        array_append(&r->leaf_end, &r->previous_leaf_end, 0, n) != 0 ||
        array_append(&r->buffer_end, &r->previous_buffer_end, 0, n) != 0) {
        return -1;
    }
    /* In the order copying adds them: a node, then the leaves it brought. */
    for (size_t i = 0; i < n; i++) {
        if (pointer_set_add(&r->seen, ARRAY_AT(r->node_ptrs, uint64_t, r->graph_first_node + i), SEEN_NODE) != 0)
            return -1;
        for (size_t j = end_before(&r->previous_leaf_end, i); j < ARRAY_AT(r->previous_leaf_end, uint32_t, i); j++) {
            if (pointer_set_add(&r->seen, ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j), SEEN_LEAF) != 0) return -1;
        }
    }
    for (size_t b = r->graph_first_buffer; b < r->buffers.count; b++) {
        if (pointer_set_add(&r->seen, ARRAY_AT(r->buffers, BufferRecord, b).address, SEEN_BUFFER) != 0) return -1;
    }
    return 0;
}

/* While the graph in flight repeats the previous one: does this node go on repeating it?
   If not, it stops repeating. 1 yes, 0 no, -1 out of memory. */
int check_repeat(Recorder *r, uint64_t address) {
    if (!r->repeating) return 0;
    int repeat = repeats_previous(r, address);
    if (repeat == 0 && stop_repeating(r) != 0) return -1;
    return repeat;
}

/* Whether a[from, to) holds the same bytes as all of `previous`; if not, `previous` becomes a copy. */
static int same_or_copy(Array *previous, const Array *a, size_t from, size_t to, bool *same) {
    size_t bytes = (to - from) * a->item_size;
    if (*same && previous->count * previous->item_size == bytes &&
        memcmp(previous->items, a->items + from * a->item_size, bytes) == 0) {
        return 0;
    }
    *same = false;
    previous->count = 0;
    if (array_reserve(previous, to - from) != 0) return -1;
    memcpy(previous->items, a->items + from * a->item_size, bytes);
    previous->count = to - from;
    return 0;
}

/* The next graph begins after everything recorded so far; it may repeat the last one. */
void open_graph(Recorder *r) {
    r->graph_first_node = r->node_flags.count;
    r->graph_first_struct = r->nodes.count;
    r->graph_first_leaf = r->leaves.count;
    r->graph_first_buffer = r->buffers.count;
    r->graph_first_tick = r->tick_ns.count;
    r->graph_first_stats = r->stats.count;
    r->graph_first_capture = r->capture_records.count;
    r->graph_first_capture_byte = r->capture_data.count;
    r->graph_first_routing = r->routing_records.count;
    r->graph_first_routing_byte = r->routing_data.count;
    r->graph_first_input_id = r->input_ids.count;
    r->routing_chains.count = r->routing_reads.count = 0;
    r->planned_next = r->routing_plan_at = 0;
    r->leaf_end.count = r->buffer_end.count = 0;
    r->repeating = r->previous_node_ptrs.count > 0;
    r->pending = -1;
    pointer_set_clear(&r->seen);
}

/* Remember the graph just closed, whole, as the one the next graph may repeat. */
static int remember_as_previous(Recorder *r, bool *same) {
    size_t first_buffer = r->graph_first_buffer, n_buffers = r->buffers.count - first_buffer;
    if (same_or_copy(&r->previous_nodes, &r->nodes, r->graph_first_struct, r->nodes.count, same) != 0 ||
        same_or_copy(&r->previous_node_ptrs, &r->node_ptrs, r->graph_first_node, r->node_ptrs.count, same) != 0 ||
        same_or_copy(&r->previous_leaves, &r->leaves, r->graph_first_leaf, r->leaves.count, same) != 0 ||
        same_or_copy(&r->previous_leaf_ptrs, &r->leaf_ptrs, r->graph_first_leaf, r->leaf_ptrs.count, same) != 0) {
        return -1;
    }
    if (*same) return 0; /* what was remembered describes this graph too */
    r->previous_leaf_end.count = r->previous_buffer_end.count = r->previous_buffers.count = 0;
    if (array_append(&r->previous_leaf_end, &r->leaf_end, 0, r->leaf_end.count) != 0 ||
        array_append(&r->previous_buffer_end, &r->buffer_end, 0, r->buffer_end.count) != 0 ||
        array_reserve(&r->previous_buffers, n_buffers) != 0) {
        return -1;
    }
    for (size_t b = 0; b < n_buffers; b++) {
        ARRAY_AT(r->previous_buffers, uint64_t, b) = ARRAY_AT(r->buffers, BufferRecord, first_buffer + b).address;
    }
    r->previous_buffers.count = n_buffers;
    return 0;
}

/* Close the graph in flight: remember where it ended, what it selected, and whether it
   repeats the previous graph struct for struct (then the reader reuses what it decoded). */

int close_graph(Recorder *r, int64_t boundary) {
    size_t n = r->node_flags.count - r->graph_first_node;
    if (n == 0) return 0;
    if (r->routing && settle_routing(r) != 0) return -1;
    size_t *node_start = array_push(&r->graph_node_start);
    size_t *struct_start = array_push(&r->graph_struct_start);
    size_t *leaf_start = array_push(&r->graph_leaf_start);
    size_t *buffer_start = array_push(&r->graph_buffer_start);
    size_t *tick_start = array_push(&r->graph_tick_start);
    size_t *stats_start = array_push(&r->graph_stats_start);
    size_t *capture_start = array_push(&r->graph_capture_start);
    size_t *capture_data_start = array_push(&r->graph_capture_data_start);
    size_t *routing_start = array_push(&r->graph_routing_start);
    size_t *routing_data_start = array_push(&r->graph_routing_data_start);
    size_t *input_ids_start = array_push(&r->graph_input_ids_start);
    int64_t *boundary_ns = array_push(&r->graph_boundary);
    uint8_t *same_flag = array_push(&r->graph_same);
    if (!node_start || !struct_start || !leaf_start || !buffer_start || !tick_start || !boundary_ns || !same_flag ||
        !stats_start || !capture_start || !capture_data_start || !routing_start || !routing_data_start ||
        !input_ids_start) {
        return -1;
    }
    bool same;
    if (r->repeating && n == r->previous_node_ptrs.count) {
        same = true; /* repeated whole: compared node by node already */
    } else {
        if (r->repeating && stop_repeating(r) != 0) return -1; /* repeated only in part */
        same = r->previous_nodes.count > 0;
        if (remember_as_previous(r, &same) != 0) return -1;
    }
    *same_flag = same;
    *node_start = r->graph_first_node;
    *struct_start = r->graph_first_struct;
    *leaf_start = r->graph_first_leaf;
    *buffer_start = r->graph_first_buffer;
    *tick_start = r->graph_first_tick;
    *stats_start = r->graph_first_stats;
    *capture_start = r->graph_first_capture;
    *capture_data_start = r->graph_first_capture_byte;
    *routing_start = r->graph_first_routing;
    *routing_data_start = r->graph_first_routing_byte;
    *input_ids_start = r->graph_first_input_id;
    *boundary_ns = boundary;
    if (n > r->previous_capacity) {
        uint8_t *grown = realloc(r->previous_selection, n);
        if (!grown) return -1;
        r->previous_selection = grown;
        r->previous_capacity = n;
    }
    for (size_t i = 0; i < n; i++) {
        r->previous_selection[i] = (ARRAY_AT(r->node_flags, uint8_t, r->graph_first_node + i) & NODE_SELECTED) != 0;
    }
    r->previous_count = n;
    open_graph(r);
    return 0;
}
