/*
 * What the recorder's files share among themselves (recorder.h is what its owners see): the
 * recorder is one Recorder, its hot path split by concern into the files named below.
 */
#ifndef GGML_VIZ_RECORDER_INTERNAL_H
#define GGML_VIZ_RECORDER_INTERNAL_H

#include "recorder.h"

#include <string.h>

/* A tensor's 8-byte field (a pointer, a count) at `offset`: inline, as it was before the recorder's
   files were split, since every node reads several. */
static inline uint64_t field_u64(const uint8_t *tensor, size_t offset) {
    uint64_t value;
    memcpy(&value, tensor + offset, sizeof value);
    return value;
}

/* GGML_BACKEND_BUFFER_USAGE_WEIGHTS, the same in ggml 0.13.1 and 0.25.3 */
enum { BUFFER_USAGE_WEIGHTS = 1 };
/* The kinds of pointer a graph in flight has shown (Recorder.seen). */
enum { SEEN_NODE = 1, SEEN_LEAF = 2, SEEN_BUFFER = 3 };

/* A GET_ROWS of probabilities by a mixture's ids, followed through the ops computed from it
   with as many elements (llama.cpp's normalization, softmax, scale, reshapes): its last
   tensor so far is the experts' weights. */
typedef struct {
    uint64_t ids, head;
    int64_t n;
} RoutingChain;

/* One read of a layer's routing in the graph in flight: at its MUL_MAT_ID's result callback
   (answered), or, where the graph repeats the previous one under inline timing, at the tick that
   ends that node (planned: the previous graph's reads say which tick that is, and no node is
   answered, so the graph runs in one piece as untraced). */
typedef struct {
    uint64_t ids, weights;
    uint32_t node, tick; /* its node; the ticks of the graph counted once it ran */
    int32_t experts, planned;
    int64_t record; /* its RoutingRecord, once read (-1 before) */
} RoutingRead;

enum { ROUTING_CHAINS_FOLLOWED = 2 }; /* a chain is computed in one run of nodes: the latest ones */


/* recorder.c */
int buffer_usage_of(const Recorder *r, const void *buffer);
int describe_buffer(Recorder *r, uint64_t buffer);
bool is_selected(Recorder *r, const uint8_t *tensor);
void reset_recorded(Recorder *r);

/* weight_prints.c */
int print_weight(Recorder *r, const uint8_t *tensor);

/* repeats.c */
int check_repeat(Recorder *r, uint64_t address);
int close_graph(Recorder *r, int64_t boundary);
void open_graph(Recorder *r);

/* values.c */
bool answer_for(Recorder *r, const uint8_t *tensor, size_t index_in_graph, uint8_t *flags);
bool matches_capture(Recorder *r, const uint8_t *tensor);
int record_capture(Recorder *r, const uint8_t *tensor, uint32_t node);
int record_stats(Recorder *r, const uint8_t *tensor, uint32_t node);
bool starts_next_graph(Recorder *r, const uint8_t *tensor);

/* plain_tokens.c */
bool in_weights(Recorder *r, const uint8_t *tensor);
int note_input_ids(Recorder *r, const uint8_t *node);
int note_ubatch_ids(Recorder *r, const uint8_t *node);
int reread_ubatch_ids(Recorder *r);

/* routing.c */
int note_routing(Recorder *r, const uint8_t *tensor, uint64_t address, uint32_t node, bool can_plan, uint8_t *flags);
int read_answered_routing(Recorder *r, uint32_t node);
int read_planned_routing(Recorder *r, size_t ticks);
int read_routing(Recorder *r, RoutingRead *pending);
int settle_routing(Recorder *r);

/* ticks.c: a recorder freed forgets the tick its thread waits on. */
void forget_barrier(Recorder *r);

#endif
