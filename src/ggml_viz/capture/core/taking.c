/* Taking what was recorded: the owner reads the closed graphs and calls in bulk, then they are
   forgotten; ending the graph in flight. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <string.h>

/* ---- taking --------------------------------------------------------------------------------- */

long long recorder_take_begin(Recorder *r, int64_t boundary_ns) {
    if (close_graph(r, boundary_ns) != 0) return -1;
    return (long long)r->graph_node_start.count;
}

/* Where graph g's items begin in `a`'s per-graph starts, and where the next graph's begin. */
static void graph_range(const Array *starts, size_t g, size_t total, size_t *from, size_t *to) {
    *from = ARRAY_AT(*starts, size_t, g);
    *to = g + 1 < starts->count ? ARRAY_AT(*starts, size_t, g + 1) : total;
}

static Bytes bytes_of(const Array *a, size_t from, size_t to) {
    return (Bytes){a->items + from * a->item_size, (to - from) * a->item_size};
}

int recorder_take_graph(Recorder *r, size_t g, GraphTake *out) {
    size_t n0, n1, m0, m1, l0, l1, b0, b1, k0, k1, v0, v1, c0, c1, d0, d1, e0, e1, f0, f1, i0, i1;
    graph_range(&r->graph_node_start, g, r->node_flags.count, &n0, &n1);
    graph_range(&r->graph_struct_start, g, r->nodes.count, &m0, &m1);
    graph_range(&r->graph_leaf_start, g, r->leaves.count, &l0, &l1);
    graph_range(&r->graph_buffer_start, g, r->buffers.count, &b0, &b1);
    graph_range(&r->graph_tick_start, g, r->tick_ns.count, &k0, &k1);
    graph_range(&r->graph_stats_start, g, r->stats.count, &v0, &v1);
    graph_range(&r->graph_capture_start, g, r->capture_records.count, &c0, &c1);
    graph_range(&r->graph_capture_data_start, g, r->capture_data.count, &d0, &d1);
    graph_range(&r->graph_routing_start, g, r->routing_records.count, &e0, &e1);
    graph_range(&r->graph_routing_data_start, g, r->routing_data.count, &f0, &f1);
    graph_range(&r->graph_input_ids_start, g, r->input_ids.count, &i0, &i1);
    memset(out, 0, sizeof *out);
    out->same = ARRAY_AT(r->graph_same, uint8_t, g);
    out->n_nodes = n1 - n0;
    out->boundary_ns = ARRAY_AT(r->graph_boundary, int64_t, g);
    out->start_ns = n1 > n0 ? ARRAY_AT(r->starts, int64_t, n0) : 0;
    /* nodes timed alone, and when the graph ended (the last node's end if it ended a slice
       of its own making) */
    long long n_selected = 0;
    for (size_t i = n0; i < n1; i++) {
        uint8_t flags = ARRAY_AT(r->node_flags, uint8_t, i);
        out->n_timed += (flags & NODE_TIMED) != 0;
        n_selected += (flags & NODE_SELECTED) != 0;
    }
    int last_answered = n1 > n0 && (ARRAY_AT(r->node_flags, uint8_t, n1 - 1) & NODE_ANSWERED);
    out->end_ns = last_answered ? ARRAY_AT(r->ends, int64_t, n1 - 1) : out->boundary_ns;
    Bytes buffers = bytes_of(&r->buffers, b0, b1);
    bool same_buffers = r->taken_buffers.count == b1 - b0 &&
                        !memcmp(r->taken_buffers.items, buffers.data, buffers.size);
    if (!same_buffers) {
        r->taken_buffers.count = 0;
        if (array_reserve(&r->taken_buffers, b1 - b0) != 0) return -1;
        memcpy(r->taken_buffers.items, buffers.data, buffers.size);
        r->taken_buffers.count = b1 - b0;
    }
    out->plain_repeat = out->same && same_buffers && !out->n_timed && !n_selected && k1 == k0 && v1 == v0 && c1 == c0 &&
                        e1 == e0 && i1 == i0;
    if (out->plain_repeat) return 0;
    size_t s0 = out->same ? n1 : n0, t0 = out->same ? l1 : l0, u0 = out->same ? m1 : m0; /* empty when same */
    out->parts[PART_NODES] = bytes_of(&r->nodes, u0, m1);
    out->parts[PART_NODE_PTRS] = bytes_of(&r->node_ptrs, s0, n1);
    out->parts[PART_STARTS] = bytes_of(&r->starts, n0, n1);
    out->parts[PART_ENDS] = bytes_of(&r->ends, n0, n1);
    out->parts[PART_FLAGS] = bytes_of(&r->node_flags, n0, n1);
    out->parts[PART_LEAVES] = bytes_of(&r->leaves, t0, l1);
    out->parts[PART_LEAF_PTRS] = bytes_of(&r->leaf_ptrs, t0, l1);
    out->parts[PART_BUFFERS] = buffers;
    out->parts[PART_TICK_NS] = bytes_of(&r->tick_ns, k0, k1);
    out->parts[PART_TICK_ASKED] = bytes_of(&r->tick_asked, k0, k1);
    out->parts[PART_TICK_BARRIER_NS] = bytes_of(&r->tick_barrier_ns, k0, k1);
    out->parts[PART_STATS] = bytes_of(&r->stats, v0, v1);
    out->parts[PART_CAPTURE_RECORDS] = bytes_of(&r->capture_records, c0, c1);
    out->parts[PART_CAPTURE_BYTES] = bytes_of(&r->capture_data, d0, d1);
    out->parts[PART_ROUTING_RECORDS] = bytes_of(&r->routing_records, e0, e1);
    out->parts[PART_ROUTING_BYTES] = bytes_of(&r->routing_data, f0, f1);
    out->parts[PART_INPUT_IDS] = bytes_of(&r->input_ids, i0, i1);
    return 0;
}

void recorder_take_end(Recorder *r) {
    reset_recorded(r);
}

void recorder_decodes_view(Recorder *r, DecodesTake *out) {
    size_t n_done = r->decodes.count - (r->decode_open ? 1 : 0);
    size_t tokens_done = r->decode_open ? ARRAY_AT(r->decodes, DecodeRecord, n_done).first_token
                                        : r->batch[BATCH_TOKENS].count;
    out->calls = (const DecodeRecord *)r->decodes.items;
    out->n_calls = n_done;
    out->n_tokens = tokens_done;
    for (int c = 0; c < BATCH_COLUMNS; c++) out->columns[c] = bytes_of(&r->batch[c], 0, tokens_done);
}

void recorder_decodes_done(Recorder *r) {
    DecodesTake taken;
    recorder_decodes_view(r, &taken);
    r->last_take_ns = now_ns();
    /* keep the call still running, and its tokens, at the front */
    for (int c = 0; c < BATCH_COLUMNS; c++) {
        Array *a = &r->batch[c];
        memmove(a->items, a->items + taken.n_tokens * a->item_size, (a->count - taken.n_tokens) * a->item_size);
        a->count -= taken.n_tokens;
    }
    if (r->decode_open) {
        DecodeRecord running = ARRAY_AT(r->decodes, DecodeRecord, taken.n_calls);
        running.first_token = 0;
        ARRAY_AT(r->decodes, DecodeRecord, 0) = running;
    }
    r->decodes.count -= taken.n_calls;
}


/* ---- the graph in flight, and forgetting ---------------------------------------------------- */

long long recorder_close(Recorder *r, int64_t boundary_ns) {
    if (r->out_of_memory) return -1;
    if (close_graph(r, boundary_ns) != 0) return -2;
    return (long long)r->graph_node_start.count;
}

/* Forget the graph in flight (recording failed inside it), keep the closed ones. */
void recorder_drop_open(Recorder *r) {
    size_t n_graphs = r->graph_node_start.count;
    if (r->graph_leaf_start.count != n_graphs || r->graph_buffer_start.count != n_graphs ||
        r->graph_struct_start.count != n_graphs || r->graph_tick_start.count != n_graphs ||
        r->graph_boundary.count != n_graphs || r->graph_same.count != n_graphs ||
        r->graph_stats_start.count != n_graphs || r->graph_capture_start.count != n_graphs ||
        r->graph_capture_data_start.count != n_graphs || r->graph_routing_start.count != n_graphs ||
        r->graph_routing_data_start.count != n_graphs || r->graph_input_ids_start.count != n_graphs) {
        reset_recorded(r); /* failed while closing a graph: nothing is whole */
        return;
    }
    r->nodes.count = r->graph_first_struct;
    r->node_ptrs.count = r->starts.count = r->ends.count = r->node_flags.count = r->graph_first_node;
    r->leaves.count = r->leaf_ptrs.count = r->graph_first_leaf;
    r->buffers.count = r->graph_first_buffer;
    r->tick_ns.count = r->tick_asked.count = r->tick_barrier_ns.count = r->graph_first_tick;
    r->stats.count = r->graph_first_stats;
    r->capture_records.count = r->graph_first_capture;
    r->capture_data.count = r->graph_first_capture_byte;
    r->routing_records.count = r->graph_first_routing;
    r->routing_data.count = r->graph_first_routing_byte;
    r->input_ids.count = r->graph_first_input_id;
    open_graph(r);
}

/* Forget everything not taken: the reader never saw the previous graph, so the next is new to it. */
void recorder_discard(Recorder *r) {
    r->previous_nodes.count = r->previous_node_ptrs.count = 0;
    r->decodes.count = r->taken_buffers.count = 0;
    r->decode_open = 0;
    for (int c = 0; c < BATCH_COLUMNS; c++) r->batch[c].count = 0;
    reset_recorded(r);
}

size_t recorder_open_nodes(const Recorder *r) {
    return r->node_flags.count - r->graph_first_node;
}

uint64_t recorder_take_counted(Recorder *r) {
    uint64_t counted = r->counted_nodes;
    r->counted_nodes = 0;
    return counted;
}
