/* The decode bracket: each llama_decode call's batch copied, its graphs closed and attributed to
   it, and whether its nodes are timed (--detail, --sample). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <limits.h>
#include <string.h>

/* ---- llama_batch ----------------------------------------------------------------------- */

int32_t batch_size(const uint8_t *batch) {
    int32_t n;
    memcpy(&n, batch, sizeof n);
    return n < 0 ? 0 : n;
}

/* A llama_batch's column pointers, read at their offsets (token, pos, n_seq_id, seq_id, logits). */
typedef struct {
    const int32_t *token, *pos, *n_seq;
    const int32_t *const *seq;
    const int8_t *logits;
} BatchColumns;

static BatchColumns batch_columns(const uint8_t *batch, const size_t *offsets) {
    BatchColumns c;
    memcpy(&c.token, batch + offsets[0], sizeof c.token);
    memcpy(&c.pos, batch + offsets[1], sizeof c.pos);
    memcpy(&c.n_seq, batch + offsets[2], sizeof c.n_seq);
    memcpy(&c.seq, batch + offsets[3], sizeof c.seq);
    memcpy(&c.logits, batch + offsets[4], sizeof c.logits);
    return c;
}

/* Token i's first sequence, or -1 where the batch gives none. */
static int32_t first_sequence(BatchColumns c, int32_t i) {
    return (c.seq && c.n_seq && c.n_seq[i] > 0 && c.seq[i]) ? c.seq[i][0] : -1;
}

/* Copy a llama_batch's columns (offsets of its token, pos, n_seq_id, seq_id and logits
   pointers): token ids, positions, each token's first sequence id, whether llama.cpp
   computes its logits. What a pointer the batch leaves NULL gives is -1 (outputs: the last
   token only, as llama.cpp does). Returns the lowest position (-1: no token). */
long long copy_batch(const uint8_t *batch, const size_t *offsets, int32_t n, int32_t *token_out, int32_t *pos_out,
                     int32_t *seq_out, uint8_t *output_out) {
    BatchColumns c = batch_columns(batch, offsets);
    long long lowest = -1;
    for (int32_t i = 0; i < n; i++) {
        token_out[i] = c.token ? c.token[i] : -1;
        pos_out[i] = c.pos ? c.pos[i] : -1;
        if (i == 0 || pos_out[i] < lowest) lowest = pos_out[i];
        seq_out[i] = first_sequence(c, i);
        output_out[i] = c.logits ? c.logits[i] > 0 : i == n - 1;
    }
    return lowest;
}

/* ---- the decode bracket ------------------------------------------------------------------ */

/* Around each llama_decode the owner calls begin_decode and end_decode, and nothing else: the
   call's batch is copied, the nodes of its graphs are timed or not (--detail, --sample), its
   graphs are closed and attributed to it, all here. In the pause between two calls of a
   generation Python runs with cold caches, several times slower than C. */

/* The graph in flight ends with the llama_decode call that ran it (none open: outside any). */
static int close_decode(Recorder *r, int32_t return_code, int64_t now) {
    size_t closed_before = r->graph_node_start.count;
    if (close_graph(r, now) != 0) return -1;
    DecodeRecord *record;
    if (r->decode_open) {
        record = &ARRAY_AT(r->decodes, DecodeRecord, r->decodes.count - 1);
        r->decode_open = 0;
        r->read_input_ids = 0;
    } else {
        if (r->graph_node_start.count == closed_before) return 0; /* nothing ran outside a call */
        record = array_push(&r->decodes);
        if (!record) return -1;
        memset(record, 0, sizeof *record);
        record->index = -1;
        record->lowest_position = -1;
        record->first_token = r->batch[BATCH_TOKENS].count;
    }
    record->end_ns = now;
    record->return_code = return_code;
    record->graphs_closed = (uint32_t)r->graph_node_start.count;
    return 0;
}

enum { OPEN_FAILED = INT32_MIN };

/* Open a record for the call and copy its batch; returns its lowest position, or OPEN_FAILED out of memory. */
static long long open_decode(Recorder *r, const uint8_t *batch, int32_t n, long long index, int64_t now) {
    if ((r->decode_open || r->node_flags.count > r->graph_first_node) && close_decode(r, 0, now) != 0)
        return OPEN_FAILED;
    for (int c = 0; c < BATCH_COLUMNS; c++) {
        if (array_reserve(&r->batch[c], (size_t)n) != 0) return OPEN_FAILED;
    }
    DecodeRecord *record = array_push(&r->decodes);
    if (!record) return OPEN_FAILED;
    size_t first = r->batch[BATCH_TOKENS].count;
    long long lowest = NO_BATCH; /* a graph computed outside llama: tokens only from its inputs */
    r->plain_call = batch == NULL;
    r->read_input_ids = batch != NULL && n > 1;
    r->ids_table_rows = 0;
    if (batch) {
        lowest = copy_batch(batch, r->batch_offsets, n, &ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_SEQ_IDS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_OUTPUTS], uint8_t, first));
    }
    for (int c = 0; c < BATCH_COLUMNS; c++) r->batch[c].count += (size_t)n;
    *record = (DecodeRecord){.index = index,
                             .start_ns = now,
                             .end_ns = now,
                             .n_tokens = n,
                             .lowest_position = (int32_t)lowest,
                             .first_token = first};
    r->decode_open = 1;
    return lowest;
}

/* Whether a llama_batch holds a prompt, as context_tracer.batch_phase says: a decode step
   has each token alone in its sequence, past the sequence's start, with its logits computed
   (a server's slots step together so); a batch that starts a sequence, or holds several
   tokens of one, or does not compute every token's logits, holds a prompt. */
static bool is_prompt_batch(const uint8_t *batch, const size_t *offsets, int32_t n) {
    if (!batch || n <= 0) return false;
    BatchColumns c = batch_columns(batch, offsets);
    if (n == 1) return c.pos && c.pos[0] == 0;
    if (!c.pos || !c.logits || n > 256) return true;
    for (int32_t i = 0; i < n; i++) {
        if (c.logits[i] <= 0 || c.pos[i] <= 0) return true;
        int32_t s = first_sequence(c, i);
        for (int32_t j = 0; j < i; j++) {
            if (s == first_sequence(c, j)) return true;
        }
    }
    return false;
}

/* --detail and --sample: are the nodes of this call's graphs timed one by one? */
static int times_nodes(Recorder *r, bool prompt) {
    if (r->detail_graph) return 0;
    if (prompt) return ++r->n_prompt_decodes == 1 || !r->sample;
    return !r->sample || (r->n_other_decodes++ % r->sample) == 0;
}

/* ---- the decode bracket, for owners --------------------------------------------------------- */

void recorder_begin_decode(Recorder *r, const uint8_t *batch) {
    int64_t now = now_ns();
    int32_t n = batch ? batch_size(batch) : 0;
    long long index = r->n_decodes++;
    if (r->mode == MODE_RECORD && open_decode(r, batch, n, index, now) == OPEN_FAILED) {
        r->out_of_memory = 1; /* the owner sees the flag at end_decode, writes what was closed, and stops */
        r->mode = MODE_OFF;
        return;
    }
    r->time_nodes = times_nodes(r, is_prompt_batch(batch, r->batch_offsets, n));
}

int recorder_end_decode(Recorder *r, int32_t return_code) {
    int64_t now = now_ns();
    if (!r->out_of_memory && r->mode == MODE_RECORD && close_decode(r, return_code, now) != 0) {
        r->out_of_memory = 1;
        r->mode = MODE_OFF;
    }
    if (r->out_of_memory) return -1;
    r->decode_open = 0;
    return r->graph_node_start.count >= (size_t)r->graphs_per_write || now - r->last_take_ns >= r->write_interval_ns;
}
