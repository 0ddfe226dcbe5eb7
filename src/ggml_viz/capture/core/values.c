/* --values stats and --capture: reading a node's output once it is computed, and which nodes to
   answer the scheduler for (each such node is computed alone). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <fnmatch.h>
#include <math.h>
#include <string.h>

/* ---- values ---------------------------------------------------------------------------- */

bool matches_capture(Recorder *r, const uint8_t *tensor) {
    char name[NAME_LEN + 1];
    memcpy(name, tensor + r->layout.name_offset, NAME_LEN);
    name[NAME_LEN] = 0;
    for (int i = 0; i < r->n_captures; i++) {
        if (fnmatch(r->captures[i], name, 0) == 0) return true;
    }
    return false;
}

static bool host_readable(Recorder *r, const uint8_t *tensor) {
    uint64_t buffer = field_u64(tensor, r->layout.buffer_offset);
    return field_u64(tensor, r->layout.data_offset) != 0 &&
           (!buffer || r->values.buffer_is_host((const void *)(uintptr_t)buffer));
}

/* Statistics of a computed node's output, read in place (any strides), f32 and f16. */
int record_stats(Recorder *r, const uint8_t *tensor, uint32_t node) {
    StatsRecord *stats = array_push(&r->stats);
    if (!stats) return -1;
    memset(stats, 0, sizeof *stats);
    stats->node = node;
    int32_t type;
    memcpy(&type, tensor + r->layout.type_offset, sizeof type);
    if ((type != TYPE_F32 && type != TYPE_F16) || !host_readable(r, tensor)) return 0;
    int64_t ne[4];
    uint64_t nb[4];
    memcpy(ne, tensor + r->layout.ne_offset, sizeof ne);
    memcpy(nb, tensor + r->layout.nb_offset, sizeof nb);
    const uint8_t *data = (const uint8_t *)(uintptr_t)field_u64(tensor, r->layout.data_offset);
    double lo = INFINITY, hi = -INFINITY, sum = 0, squares = 0, absolute = 0;
    int64_t n = 0, nan = 0, inf = 0;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                const uint8_t *row = data + i3 * nb[3] + i2 * nb[2] + i1 * nb[1];
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    float v;
                    if (type == TYPE_F32) {
                        memcpy(&v, row + i0 * nb[0], sizeof v);
                    } else {
                        uint16_t half;
                        memcpy(&half, row + i0 * nb[0], sizeof half);
                        v = r->fp16_table[half];
                    }
                    if (isnan(v)) {
                        nan++;
                        continue;
                    }
                    if (isinf(v)) {
                        inf++;
                        continue;
                    }
                    n++;
                    if (v < lo) lo = v;
                    if (v > hi) hi = v;
                    sum += v;
                    squares += (double)v * v;
                    absolute += fabs(v);
                }
            }
    stats->readable = 1;
    stats->n = n;
    stats->nan = nan;
    stats->inf = inf;
    stats->min = n ? lo : NAN;
    stats->max = n ? hi : NAN;
    stats->sum = sum;
    stats->sum_squares = squares;
    stats->sum_abs = absolute;
    return 0;
}

/* A whole copy of a computed node's output, within the run's byte budget. */
int record_capture(Recorder *r, const uint8_t *tensor, uint32_t node) {
    size_t nbytes = r->values.nbytes(tensor);
    if (!host_readable(r, tensor) || !r->values.is_contiguous(tensor) || (long long)nbytes > r->capture_budget) {
        r->captures_skipped++;
        r->capture_bytes_skipped += (long long)nbytes;
        return 0;
    }
    CaptureRecord *record = array_push(&r->capture_records);
    if (!record || array_reserve(&r->capture_data, nbytes) != 0) return -1;
    record->node = node;
    memcpy(&record->type, tensor + r->layout.type_offset, sizeof record->type);
    memcpy(record->ne, tensor + r->layout.ne_offset, sizeof record->ne);
    memcpy(record->name, tensor + r->layout.name_offset, NAME_LEN);
    record->name[NAME_LEN - 1] = 0;
    record->offset = r->capture_data.count - r->graph_first_capture_byte;
    record->nbytes = nbytes;
    memcpy(r->capture_data.items + r->capture_data.count,
           (const void *)(uintptr_t)field_u64(tensor, r->layout.data_offset), nbytes);
    r->capture_data.count += nbytes;
    r->capture_budget -= (long long)nbytes;
    return 0;
}

bool answer_for(Recorder *r, const uint8_t *tensor, size_t index_in_graph, uint8_t *flags) {
    if (!r->time_nodes) return false;
    bool selected = !r->filtering || is_selected(r, tensor);
    if (selected) *flags |= NODE_SELECTED;
    if (r->inline_timing) return false; /* the abort callback's ticks time it */
    if (!r->filtering) return true;
    /* Answer for the node before a selected one too (learned from the previous graph,
       which llama.cpp usually builds alike): then the selected node is computed alone. */
    bool fence = index_in_graph + 1 < r->previous_count && r->previous_selection[index_in_graph + 1];
    return selected || fence;
}

/* Whether this node begins the next graph the way the graph in flight began: its first node's
   op and (non-empty) name again. Within one llama_decode call llama.cpp computes one graph per
   ubatch with no pause between them, and may build the next one in other memory, where no
   node pointer repeats; a llama graph's first node (inp_embd) appears once in it. */
bool starts_next_graph(Recorder *r, const uint8_t *tensor) {
    if (r->node_flags.count == r->graph_first_node || !r->first_name[0]) return false;
    int32_t op;
    memcpy(&op, tensor + r->layout.op_offset, sizeof op);
    return op == r->first_op && strncmp((const char *)tensor + r->layout.name_offset, r->first_name, NAME_LEN) == 0;
}
