/* Mixture of experts: the experts each token chose in each MoE layer, and their weights, read
   right after the layer's first MUL_MAT_ID (answered), or at the tick that ends it (planned). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <math.h>
#include <string.h>

/* ---- mixture of experts: the experts each token chose ------------------------------------- */

static int64_t n_elements(Recorder *r, const uint8_t *tensor) {
    int64_t ne[4];
    memcpy(ne, tensor + r->layout.ne_offset, sizeof ne);
    return ne[0] * ne[1] * ne[2] * ne[3];
}

static int32_t type_of(Recorder *r, const uint8_t *tensor) {
    int32_t type;
    memcpy(&type, tensor + r->layout.type_offset, sizeof type);
    return type;
}

/* Follow the experts' weights, and note a MUL_MAT_ID whose ids were not read yet in this graph:
   its ids and weights are read right after it ran (its ids still hold then, the ops that use them
   after it not run yet; llama.cpp computes the weights before it), at its result callback
   (answered), or at its tick (planned: see RoutingRead). */
int note_routing(Recorder *r, const uint8_t *tensor, uint64_t address, uint32_t node, bool can_plan, uint8_t *flags) {
    int32_t op;
    memcpy(&op, tensor + r->layout.op_offset, sizeof op);
    uint64_t src0 = field_u64(tensor, r->layout.src_offset);
    if (op == r->op_get_rows) {
        const uint8_t *ids = (const uint8_t *)(uintptr_t)field_u64(tensor, r->layout.src_offset + 8);
        if (!ids || type_of(r, ids) != TYPE_I32 || in_weights(r, ids)) return 0;
        RoutingChain *chain = array_push(&r->routing_chains);
        if (!chain) return -1;
        *chain = (RoutingChain){(uint64_t)(uintptr_t)ids, address, n_elements(r, tensor)};
        return 0;
    }
    if (op == r->op_mul_mat_id) {
        uint64_t ids = field_u64(tensor, r->layout.src_offset + 16);
        if (!ids || !src0) return 0;
        for (size_t i = 0; i < r->routing_reads.count; i++) {
            if (ARRAY_AT(r->routing_reads, RoutingRead, i).ids == ids) return 0;
        }
        RoutingRead *read = array_push(&r->routing_reads);
        if (!read) return -1;
        int64_t ne[4];
        memcpy(ne, (const uint8_t *)(uintptr_t)src0 + r->layout.ne_offset, sizeof ne);
        *read = (RoutingRead){.ids = ids, .node = node, .experts = (int32_t)ne[2], .record = -1};
        for (size_t i = r->routing_chains.count; i-- > 0;) {
            const RoutingChain *chain = &ARRAY_AT(r->routing_chains, RoutingChain, i);
            if (chain->ids == ids) {
                read->weights = chain->head;
                break;
            }
        }
        /* the graph repeats the previous one so far, whose read of this node came at a known
           tick: read there, without answering */
        bool ticking = can_plan && r->inline_timing && r->time_nodes && r->repeating;
        while (ticking && r->routing_plan_at < r->previous_routing_reads.count &&
               ARRAY_AT(r->previous_routing_reads, RoutingRead, r->routing_plan_at).node < node) {
            r->routing_plan_at++;
        }
        if (ticking && r->routing_plan_at < r->previous_routing_reads.count &&
            ARRAY_AT(r->previous_routing_reads, RoutingRead, r->routing_plan_at).node == node) {
            read->planned = 1;
            read->tick = ARRAY_AT(r->previous_routing_reads, RoutingRead, r->routing_plan_at).tick;
        } else {
            *flags |= NODE_ROUTING;
        }
        return 0;
    }
    size_t n = r->routing_chains.count;
    for (size_t i = n > ROUTING_CHAINS_FOLLOWED ? n - ROUTING_CHAINS_FOLLOWED : 0; src0 && i < n; i++) {
        RoutingChain *chain = &ARRAY_AT(r->routing_chains, RoutingChain, i);
        if (chain->head == src0 && n_elements(r, tensor) == chain->n) chain->head = address;
    }
    return 0;
}

/* Copy a tensor's elements (any strides) in order, ne0 fastest: from host memory, or through
   ggml_backend_tensor_get row by row. Whether it could. */
static bool read_elements(Recorder *r, const uint8_t *tensor, size_t element_size, uint8_t *out) {
    uint64_t buffer = field_u64(tensor, r->layout.buffer_offset);
    const uint8_t *data = (const uint8_t *)(uintptr_t)field_u64(tensor, r->layout.data_offset);
    if (!data) return false;
    int64_t ne[4];
    uint64_t nb[4];
    memcpy(ne, tensor + r->layout.ne_offset, sizeof ne);
    memcpy(nb, tensor + r->layout.nb_offset, sizeof nb);
    bool host = !buffer || r->routing_is_host((const void *)(uintptr_t)buffer);
    if (!host && (!r->tensor_get || nb[0] != element_size)) return false;
    size_t row = (size_t)ne[0] * element_size;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                size_t offset = (size_t)(i3 * nb[3] + i2 * nb[2] + i1 * nb[1]);
                if (!host) {
                    r->tensor_get(tensor, out, offset, row);
                } else if (nb[0] == element_size) {
                    memcpy(out, data + offset, row);
                } else {
                    for (int64_t i0 = 0; i0 < ne[0]; i0++)
                        memcpy(out + i0 * element_size, data + offset + i0 * nb[0], element_size);
                }
                out += row;
            }
    return true;
}

/* A routing read noted at a MUL_MAT_ID, done now that the node ran. */
int read_routing(Recorder *r, RoutingRead *pending) {
    const uint8_t *ids = (const uint8_t *)(uintptr_t)pending->ids;
    const uint8_t *weights = (const uint8_t *)(uintptr_t)pending->weights;
    int64_t ne[4];
    memcpy(ne, ids + r->layout.ne_offset, sizeof ne);
    int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    if (n <= 0 || ne[0] > INT32_MAX || n / ne[0] > INT32_MAX) return 0; /* no ids: nothing to read */
    pending->record = (int64_t)r->routing_records.count;
    if (pending->planned) r->routing_at_ticks++;
    else r->routing_answered++;
    RoutingRecord *record = array_push(&r->routing_records);
    if (!record || array_reserve(&r->routing_data, (size_t)n * 8) != 0) return -1;
    *record = (RoutingRecord){.node = pending->node,
                              .n_used = (int32_t)ne[0],
                              .n_tokens = (int32_t)(n / ne[0]),
                              .n_expert = pending->experts,
                              .status = ROUTING_READ,
                              .offset = r->routing_data.count - r->graph_first_routing_byte};
    uint8_t *id_bytes = r->routing_data.items + r->routing_data.count;
    float *weight_values = (float *)(id_bytes + n * 4);
    r->routing_data.count += (size_t)n * 8;
    if (!read_elements(r, ids, sizeof(int32_t), id_bytes)) {
        memset(id_bytes, 0xff, (size_t)n * 4); /* -1 */
        record->status = ROUTING_UNREADABLE;
    }
    int32_t type = weights ? type_of(r, weights) : -1;
    bool read = weights && n_elements(r, weights) == n && (type == TYPE_F32 || type == TYPE_F16);
    if (read && type == TYPE_F32) {
        read = read_elements(r, weights, sizeof(float), (uint8_t *)weight_values);
    } else if (read) { /* f16: read into the second half of the room, widened from there */
        uint16_t *halves = (uint16_t *)(weight_values + n) - n;
        read = read_elements(r, weights, sizeof(uint16_t), (uint8_t *)halves);
        for (int64_t i = 0; read && i < n; i++) weight_values[i] = r->routing_fp16(halves[i]);
    }
    if (!read) {
        for (int64_t i = 0; i < n; i++) weight_values[i] = NAN;
        if (record->status == ROUTING_READ) record->status = ROUTING_NO_WEIGHTS;
    }
    return 0;
}

/* The answered read of this node: now, at its result callback; the graph's ticks so far say
   where a graph repeating this one will read it. */
int read_answered_routing(Recorder *r, uint32_t node) {
    for (size_t i = r->routing_reads.count; i-- > 0;) {
        RoutingRead *read = &ARRAY_AT(r->routing_reads, RoutingRead, i);
        if (read->node == node && !read->planned) {
            read->tick = (uint32_t)(r->tick_ns.count - r->graph_first_tick);
            return read_routing(r, read);
        }
    }
    return 0;
}

/* Inline timing: thread 0 just finished the graph's `ticks`-th ticking node; the planned reads
   due at this tick are done (in node order, as their ticks come). */
int read_planned_routing(Recorder *r, size_t ticks) {
    while (r->planned_next < r->routing_reads.count) {
        RoutingRead *read = &ARRAY_AT(r->routing_reads, RoutingRead, r->planned_next);
        if (read->planned && read->tick > ticks) break;
        r->planned_next++;
        if (read->planned && read->tick == ticks && read_routing(r, read) != 0) return -1;
    }
    return 0;
}

/* When a graph closes: its planned reads count only if each was done and the graph ticked as
   often as the one it repeated (else a tick may have been another node's: they are dropped, and
   the next graph answers). If every read was done, and ticks counted them, the next graph that
   repeats this one reads where this one did. */
int settle_routing(Recorder *r) {
    size_t ticks = r->tick_ns.count - r->graph_first_tick, n = r->routing_reads.count;
    bool all_read = true, planned_held = ticks == r->previous_ticks;
    for (size_t i = 0; i < n; i++) all_read &= ARRAY_AT(r->routing_reads, RoutingRead, i).record >= 0;
    for (size_t i = 0; i < n && !planned_held; i++) {
        RoutingRead *read = &ARRAY_AT(r->routing_reads, RoutingRead, i);
        if (read->planned && read->record >= 0) {
            ARRAY_AT(r->routing_records, RoutingRecord, (size_t)read->record).status = ROUTING_DROPPED;
            r->routing_dropped++;
            all_read = false;
        }
    }
    r->previous_routing_reads.count = 0;
    if (all_read && n && r->inline_timing && r->time_nodes) {
        if (array_append(&r->previous_routing_reads, &r->routing_reads, 0, n) != 0) return -1;
        r->previous_ticks = ticks;
    }
    return 0;
}
