/* The tokens of a graph computed outside llama (a plain ggml program): the ids its graph looks up. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <string.h>

/* ---- the tokens of a graph computed outside llama ------------------------------------------ */

enum { MAX_INPUT_IDS = 1 << 16 }; /* a sanity bound: llama.cpp's ubatches are 512 by default */

bool in_weights(Recorder *r, const uint8_t *tensor) {
    const void *buffer = (const void *)(uintptr_t)field_u64(tensor, r->layout.buffer_offset);
    return buffer && buffer_usage_of(r, buffer) == BUFFER_USAGE_WEIGHTS;
}

/* The ids a token lookup reads: a GET_ROWS of a weight (the table) by a 1-D I32 tensor that is
   no weight, in host memory and set before the graph runs. NULL where `node` is no such lookup. */
static const int32_t *lookup_ids(Recorder *r, const uint8_t *node, size_t *n, int64_t *table_rows) {
    const char *op = r->ggml.op_desc ? r->ggml.op_desc(node) : NULL;
    if (!op || strcmp(op, "GET_ROWS") != 0 || !r->is_host_buffer) return NULL;
    const uint8_t *table = (const uint8_t *)(uintptr_t)field_u64(node, r->layout.src_offset);
    const uint8_t *ids = (const uint8_t *)(uintptr_t)field_u64(node, r->layout.src_offset + 8);
    if (!table || !ids || !in_weights(r, table) || in_weights(r, ids)) return NULL;
    int32_t type;
    int64_t ne[4], table_ne[4];
    memcpy(&type, ids + r->layout.type_offset, sizeof type);
    memcpy(ne, ids + r->layout.ne_offset, sizeof ne);
    memcpy(table_ne, table + r->layout.ne_offset, sizeof table_ne);
    const void *buffer = (const void *)(uintptr_t)field_u64(ids, r->layout.buffer_offset);
    const int32_t *values = (const int32_t *)(uintptr_t)field_u64(ids, r->layout.data_offset);
    if (type != TYPE_I32 || ne[0] <= 0 || ne[0] > MAX_INPUT_IDS || ne[1] != 1 || ne[2] != 1 || ne[3] != 1 ||
        field_u64(ids, r->layout.nb_offset) != sizeof(int32_t) || !values || !buffer || !r->is_host_buffer(buffer)) {
        return NULL;
    }
    *n = (size_t)ne[0];
    *table_rows = table_ne[1];
    return values;
}

/* A plain program's graph (whisper.cpp's decoder) takes its tokens as an input: the integer
   ids a GET_ROWS looks up in a weight. Those ids, in host memory and set before the graph
   runs, become the call's tokens; where a graph looks up two tables (token and positional
   embeddings), the larger table's ids are the tokens and the other's their positions. */
int note_input_ids(Recorder *r, const uint8_t *node) {
    size_t n;
    int64_t table_rows;
    const int32_t *values = lookup_ids(r, node, &n, &table_rows);
    if (!values) return 0;
    DecodeRecord *call = &ARRAY_AT(r->decodes, DecodeRecord, r->decodes.count - 1);
    if (call->n_tokens == 0 && call->first_token == r->batch[BATCH_TOKENS].count) {
        for (int c = 0; c < BATCH_COLUMNS; c++) {
            if (array_reserve(&r->batch[c], n) != 0) return -1;
        }
        memcpy(&ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, call->first_token), values, n * sizeof(int32_t));
        for (size_t i = 0; i < n; i++) {
            ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, call->first_token + i) = -1;
            ARRAY_AT(r->batch[BATCH_SEQ_IDS], int32_t, call->first_token + i) = -1;
        }
        memset(&ARRAY_AT(r->batch[BATCH_OUTPUTS], uint8_t, call->first_token), 0, n);
        for (int c = 0; c < BATCH_COLUMNS; c++) r->batch[c].count += n;
        call->n_tokens = (int32_t)n;
        r->ids_table_rows = table_rows;
    } else if ((size_t)call->n_tokens == n && call->first_token + n == r->batch[BATCH_TOKENS].count) {
        int32_t *tokens = &ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, call->first_token);
        int32_t *positions = &ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, call->first_token);
        if (table_rows > r->ids_table_rows) { /* the larger table is the vocabulary */
            memcpy(positions, tokens, n * sizeof(int32_t));
            memcpy(tokens, values, n * sizeof(int32_t));
            r->ids_table_rows = table_rows;
        } else {
            memcpy(positions, values, n * sizeof(int32_t));
        }
    }
    return 0;
}

/* ---- the tokens of a ubatch ------------------------------------------------------------------ */

/* llama.cpp may split a llama_decode call's batch into ubatches of its own order (by sequence,
   a few tokens of each: llama_batch_allocr::split_equal), so which of the call's tokens a graph
   computes is read from the graph: the ids its token lookup reads, kept as the graph's input_ids
   (its first lookup's: a second table looked up by the same tokens adds nothing). Read for calls
   of several tokens only: a call of one has one ubatch. */
int note_ubatch_ids(Recorder *r, const uint8_t *node) {
    size_t n;
    int64_t table_rows;
    const int32_t *values = lookup_ids(r, node, &n, &table_rows);
    if (!values) return 0;
    r->ids_tensor = field_u64(node, r->layout.src_offset + 8);
    return array_append_items(&r->input_ids, values, n);
}

/* A graph computed again without being read (recorder_repeat_graph): its lookup reads the same
   ids tensor as when it was read, refilled for this ubatch. */
int reread_ubatch_ids(Recorder *r) {
    if (!r->read_input_ids || !r->ids_tensor || !r->is_host_buffer) return 0;
    const uint8_t *ids = (const uint8_t *)(uintptr_t)r->ids_tensor;
    int64_t ne[4];
    memcpy(ne, ids + r->layout.ne_offset, sizeof ne);
    const void *buffer = (const void *)(uintptr_t)field_u64(ids, r->layout.buffer_offset);
    const int32_t *values = (const int32_t *)(uintptr_t)field_u64(ids, r->layout.data_offset);
    if (ne[0] <= 0 || ne[0] > MAX_INPUT_IDS || !values || !buffer || !r->is_host_buffer(buffer)) return 0;
    return array_append_items(&r->input_ids, values, (size_t)ne[0]);
}
