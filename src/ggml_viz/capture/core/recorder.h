/*
 * The eval-callback recorder's hot path, in plain C (no Python here): the CPython
 * extension (_recorder.c) and the preload library for native programs (preload.c) both
 * build on it.
 *
 * llama.cpp's scheduler calls `recorder_eval_callback(t, ask, recorder)` for every graph
 * node (ask = true before computing it, ask = false after, when we answered true). The
 * callback per node takes the time, copies the tensor struct and the structs of sources
 * not seen yet in this graph into growable arrays, and describes each buffer the first
 * time a graph uses it. Whoever owns the recorder takes everything between llama_decode
 * calls (recorder_take_*) and decodes it in bulk.
 *
 * Decode graphs usually repeat the previous graph struct for struct (llama.cpp reuses or
 * rebuilds them alike). While the graph in flight does, a node is compared with the
 * previous graph's node at its index instead of being copied; the first difference copies
 * the part repeated so far, and recording goes on as above. A graph repeated whole costs
 * no copy and no comparison at its end, and is taken as `same`.
 *
 * Two ways to time nodes. `sync`: answer true when asked, so the scheduler computes the
 * node alone, synchronizes and calls back (exact boundaries; every node is a separate
 * compute call). `inline`: answer false, so the graph runs in one piece, and take the time
 * in the CPU backend's abort callback, which its thread 0 calls after each node it
 * computes (`recorder_abort_callback`); the reader maps those ticks to nodes.
 *
 * Field offsets come from the owner (ggml_api.TENSOR_DTYPE in Python, RECORDER_TENSOR_LAYOUT
 * below in the preload library), which checks them against the loaded ggml first.
 */
#ifndef GGML_VIZ_RECORDER_H
#define GGML_VIZ_RECORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/arrays.h"
#include "../util/clock.h"
#include "../util/pointer_set.h"
#include "ggml_viz_contract.h"

/* ggml_type ids: the same in ggml 0.13.1 (whisper.cpp 1.8.5) and 0.25.3 (llama-cpp-python 0.3.36) */
enum { TYPE_F32 = 0, TYPE_F16 = 1, TYPE_I32 = 26 };
enum { BATCH_TOKENS, BATCH_POSITIONS, BATCH_SEQ_IDS, BATCH_OUTPUTS, BATCH_COLUMNS }; /* int32 x3, uint8 */

typedef const char *(*name_fn)(const void *);
typedef int (*usage_fn)(const void *);
typedef size_t (*size_fn)(const void *);
typedef void *(*ptr_fn)(const void *);
typedef const char *(*op_name_fn)(int);
typedef bool (*abort_fn)(void *);
typedef bool (*tensor_bool_fn)(const void *);
typedef float (*fp16_fn)(uint16_t);
typedef void (*tensor_get_fn)(const void *tensor, void *data, size_t offset, size_t size);

/* ggml_tensor's fields the recorder reads, as byte offsets (and its size). */
typedef struct {
    size_t tensor_size, buffer_offset, op_offset, src_offset, n_src, view_src_offset, name_offset;
    size_t type_offset, ne_offset, nb_offset, data_offset;
} TensorLayout;

/* RECORDER_TENSOR_LAYOUT (ggml_viz_contract.h): ggml.h's on every LP64 platform, written from the
   contract's declaration of ggml_tensor, as ggml_api.TENSOR_DTYPE is in Python. */

/* The ggml functions a recorder calls, from the libggml-base the program loaded. */
typedef struct {
    name_fn buffer_name;
    usage_fn buffer_usage;
    size_fn buffer_size;
    ptr_fn buffer_base, buffer_type;
    name_fn buft_name, op_desc;
    op_name_fn op_name;
} GgmlFunctions;

/* ... and the ones reading node outputs (--values, --capture). */
typedef struct {
    tensor_bool_fn buffer_is_host, is_contiguous;
    size_fn nbytes;
    fp16_fn fp16_to_fp32;
} ValueFunctions;

typedef struct {
    TensorLayout layout;
    GgmlFunctions ggml;
    /* settings */
    int mode;
    int time_nodes;
    int inline_timing; /* time nodes by the abort callback's ticks, not by answering the scheduler */
    int tick_reads;    /* graphs read whole at their compute call are timed by ticks too */
    /* A graph read whole whose splits run on several backends (a CPU and an RPC server, say):
       where the next split begins, and where the CPU split computing now ends (its ticks' `asked`;
       0: the whole graph, one split) */
    size_t split_cursor, tick_split_end;
    abort_fn chained_abort; /* the program's own abort callback, called from ours */
    void *chained_abort_data;
    /* values: statistics of every node's output, copies of some */
    int values_mode;
    int n_captures;
    char captures[MAX_CAPTURES][NAME_LEN];
    long long capture_budget; /* bytes still allowed */
    long long captures_skipped, capture_bytes_skipped;
    ValueFunctions values;
    float *fp16_table; /* every f16 value as f32: a lookup per element, not a call */
    Array stats, capture_records, capture_data;
    /* mixture of experts (recorder_set_routing): ggml's op numbers for the two ops that show
       one; per graph, the GET_ROWS(·, ids) chains followed to the experts' weights
       (RoutingChain) and the ids read; the read pending at the answered MUL_MAT_ID */
    int routing;
    int32_t op_mul_mat_id, op_get_rows;
    tensor_bool_fn routing_is_host;
    tensor_get_fn tensor_get; /* reads a tensor on any backend (a GPU's); NULL: host memory only */
    fp16_fn routing_fp16;
    Array routing_chains;
    Array routing_reads;   /* RoutingRead: the reads of the graph in flight, answered or planned */
    size_t planned_next;   /* the next of them to read at a tick */
    Array previous_routing_reads; /* ... of the last graph closed, all read: where its ticks put them */
    size_t previous_ticks, routing_plan_at; /* its ticks in all; the next of its reads to match */
    long long routing_answered, routing_at_ticks, routing_dropped; /* reads, by how they were done */
    size_t routing_cursor;  /* a graph read at its compute call: the next node the routing callback expects */
    int64_t routing_pending; /* ... and the read it answered for (-1: none) */
    int routing_every_compute; /* ... read at every compute, not only in GPU windows (a CPU read so) */
    Array routing_records, routing_data, graph_routing_start, graph_routing_data_start;
    int filtering;
    int n_ops, n_names, n_layer_ranges, select_no_layer;
    char ops[MAX_OPS][NAME_LEN];
    char names[MAX_NAMES][NAME_LEN];
    int64_t layer_ranges[MAX_LAYER_RANGES][2];
    /* what has been recorded since the last take */
    Array nodes, node_ptrs, starts, ends, node_flags;
    /* inline timing, per tick: when thread 0 finished a node, how many nodes were asked by
       then, and when thread 0 left the barrier after it (0: not seen; see recorder_hook_barriers) */
    Array tick_ns, tick_asked, tick_barrier_ns;
    Array leaves, leaf_ptrs;
    Array graph_node_start, graph_leaf_start, graph_buffer_start, graph_tick_start, graph_boundary, graph_same;
    Array graph_stats_start, graph_capture_start, graph_capture_data_start;
    Array graph_struct_start; /* where a graph's node structs begin in `nodes` (none when repeated) */
    /* the last graph closed, to recognize an identical next one (decode graphs usually are);
       per node, how many leaves and buffers the graph had noted once it was copied */
    Array previous_nodes, previous_leaves, previous_node_ptrs, previous_leaf_ptrs;
    Array previous_leaf_end, previous_buffer_end, previous_buffers;
    Array buffers;
    Array taken_buffers; /* the buffers of the last graph taken, to recognize a plain repeat */
    /* the graph in flight */
    size_t graph_first_node, graph_first_leaf, graph_first_buffer, graph_first_tick, graph_first_struct;
    Array leaf_end, buffer_end; /* per node, as previous_leaf_end and previous_buffer_end */
    int repeating;              /* it repeats the previous graph so far: nothing copied yet */
    int32_t first_op;           /* its first node's op and name, to recognize the next graph */
    char first_name[NAME_LEN];
    size_t graph_first_stats, graph_first_capture, graph_first_capture_byte, graph_first_routing,
        graph_first_routing_byte;
    PointerSet seen; /* the pointers this graph has shown: nodes, leaves, buffers (SEEN_*) */
    uint8_t *previous_selection; /* which node indexes the previous graph selected */
    size_t previous_count, previous_capacity;
    int64_t pending; /* node waiting for its result callback, or -1 */
    int reading_at_compute; /* recorder_read_graph is recording the nodes, none asked about */
    void *read_graph;       /* the graph read at the last compute call ... */
    int graph_allocated;    /* ... and whether a graph was allocated since (then it is read again) */
    uint64_t counted_nodes;
    /* the decode bracket: what each llama_decode call fed, and which graphs it ran */
    size_t batch_offsets[5]; /* llama_batch: token, pos, n_seq_id, seq_id, logits */
    int detail_graph;        /* never time nodes */
    long long sample;        /* time the first prompt call and every sample-th other call (0: all) */
    long long graphs_per_write, write_interval_ns;
    long long n_decodes, n_prompt_decodes, n_other_decodes;
    int decode_open;       /* the last record is a call still running */
    int64_t last_take_ns;  /* when the owner last took the graphs */
    Array decodes;         /* DecodeRecord */
    Array batch[BATCH_COLUMNS]; /* the calls' batches, column by column */
    int out_of_memory;
    long long fail_after_nodes; /* tests: act out of memory at this many nodes (0: never) */
    /* ggml_backend_buffer_is_host (recorder_set_weight_prints, recorder_set_input_reads): which
       memory the recorder may read itself; NULL: none */
    tensor_bool_fn is_host_buffer;
    /* unnamed weights' fingerprints (recorder_set_weight_prints): new ones since the owner took
       them, and the data address of every weight printed (sorted) */
    size_fn print_nbytes;
    Array weight_prints, printed;
    /* a call without a batch: the rows of the table its tokens were read from (0: none yet) */
    int plain_call;
    int64_t ids_table_rows;
    /* the ubatch each graph of a call of several tokens computes (plain_tokens.c): the ids its
       token lookup read, per graph; the lookup's ids tensor in the graph last read whole (a graph
       computed again unread reads it again) */
    int read_input_ids;
    Array input_ids, graph_input_ids_start;
    size_t graph_first_input_id;
    uint64_t ids_tensor;
} Recorder;

/* A byte range of what the recorder holds (valid until the next take ends). */
typedef struct {
    const void *data;
    size_t size;
} Bytes;

/* One graph as take gives it. A plain repeat (the previous graph again, with the same
   buffers, no node selected for timing, nothing read from its outputs: most decode graphs
   under --detail graph or --sample) has only n_nodes, start_ns and end_ns; a graph that
   repeats the previous one (same) comes without its struct bytes. */
typedef struct {
    int plain_repeat, same;
    uint64_t n_nodes;
    int64_t start_ns, end_ns, boundary_ns;
    int64_t n_timed;
    Bytes parts[GRAPH_PARTS];
} GraphTake;

/* The llama_decode calls closed since the last take, and their tokens. */
typedef struct {
    const DecodeRecord *calls;
    size_t n_calls;
    size_t n_tokens;
    Bytes columns[BATCH_COLUMNS];
} DecodesTake;

/* Life: init (0, or -1 out of memory), free. */
int recorder_init(Recorder *r, const TensorLayout *layout, const GgmlFunctions *ggml);
void recorder_free(Recorder *r);

/* Settings. Each returns NULL, or what is wrong. */
const char *recorder_set_filters(Recorder *r, const char *const *ops, int n_ops, const int64_t (*layer_ranges)[2],
                                 int n_ranges, int select_no_layer, const char *const *names, int n_names);
const char *recorder_set_values(Recorder *r, int stats, const char *const *patterns, int n_patterns, long long budget,
                                const ValueFunctions *functions);
void recorder_set_decode_rules(Recorder *r, int detail_graph, long long sample, long long graphs_per_write,
                               long long write_interval_ns, const size_t batch_offsets[5]);
void recorder_chain_abort(Recorder *r, abort_fn function, void *data);
/* Read every MoE layer's routing (on: 1): the numbers this ggml gives GGML_OP_MUL_MAT_ID and
   GGML_OP_GET_ROWS, and ggml_backend_buffer_is_host, ggml_backend_tensor_get (NULL: host memory
   only), ggml_fp16_to_fp32. Returns NULL, or what is wrong. */
const char *recorder_set_routing(Recorder *r, int on, int32_t op_mul_mat_id, int32_t op_get_rows,
                                 tensor_bool_fn buffer_is_host, tensor_get_fn tensor_get, fp16_fn fp16_to_fp32);
/* Fingerprint each unnamed weight in host memory the first time a graph reads it (the owner
   takes them from r->weight_prints); the functions: ggml_backend_buffer_is_host, ggml_nbytes. */
void recorder_set_weight_prints(Recorder *r, tensor_bool_fn buffer_is_host, size_fn nbytes);
/* Read the ids each graph of a llama_decode call of several tokens looks up (its ubatch's tokens),
   where they are in host memory: ggml_backend_buffer_is_host (NULL: never). */
void recorder_set_input_reads(Recorder *r, tensor_bool_fn buffer_is_host);
/* FNV-1a (64 bits) over the first, middle and last 64 bytes (all of them when fewer). */
uint64_t weight_fingerprint(const uint8_t *bytes, uint64_t nbytes);

/* The callbacks handed to ggml (user_data: the Recorder). */
bool recorder_eval_callback(void *tensor, bool ask, void *user_data);
bool recorder_abort_callback(void *user_data);

/* A graph read at its compute call (GPU windows): the eval callback that reads its routing alone,
   answering each MoE layer's first MUL_MAT_ID (user_data: the Recorder); begin before each compute. */
void recorder_begin_routing_reads(Recorder *r);
bool recorder_routing_callback(void *tensor, bool ask, void *user_data);

/* Record a whole graph at its compute call, without an eval callback (nodes: node_at(graph,
   i), i < n_nodes; the graph began at start_ns): 1 if it repeats the previous graph struct for
   struct, 0 if not (a new structure), -1 out of memory. */
int recorder_read_graph(Recorder *r, void *graph, int n_nodes, void *(*node_at)(void *, int), int64_t start_ns);
/* ... or, the program having neither rebuilt nor allocated it since, the previous graph
   again, without reading its nodes: 1 done, 0 not the previous graph (read it), -1 out of memory. */
int recorder_repeat_graph(Recorder *r, void *graph, int n_nodes, void *(*node_at)(void *, int), int64_t start_ns);
/* A split of the graph read at this compute call is computed now, on a CPU backend (its nodes are
   timed by that backend's ticks) or on another (they are marked NODE_ELSEWHERE). 1 found in the
   graph, 0 not. */
int recorder_split_computed(Recorder *r, void *split, int n_nodes, void *(*node_at)(void *, int), int on_cpu,
                            int64_t now);

/* Node ends: route every loaded library's calls of ggml_barrier through the recorder, so
   the barrier ending each inline-timed node is seen (recorder_barrier_passed). ggml-cpu
   calls its own ggml_barrier through its PLT. Returns how many call slots go through us
   (0: none found, so node ends are not seen), -1 if some could not be redirected. */
int recorder_hook_barriers(void);
void recorder_barrier_passed(void);
bool recorder_timing_floor_callback(void *tensor, bool ask, void *user_data);
bool recorder_graph_floor_callback(void *tensor, bool ask, void *user_data);

/* The decode bracket: begin before a llama_batch is computed (NULL: a call with no
   tokens, e.g. a ggml program's graph computed outside llama), end after it returned.
   end answers 1 when the graphs waiting should be taken now, 0 if not, -1 once failed. */
void recorder_begin_decode(Recorder *r, const uint8_t *batch);
int recorder_end_decode(Recorder *r, int32_t return_code);

/* Taking what was recorded: begin closes the graph in flight (-1 out of memory) and says
   how many graphs there are; graph g is then read in order, once each; end forgets them. */
long long recorder_take_begin(Recorder *r, int64_t boundary_ns);
int recorder_take_graph(Recorder *r, size_t g, GraphTake *out);
void recorder_take_end(Recorder *r);
/* The calls whose graphs were closed (one still running stays), then drop them. */
void recorder_decodes_view(Recorder *r, DecodesTake *out);
void recorder_decodes_done(Recorder *r);

/* End the graph in flight; graphs closed and not yet taken (-1 once out of memory). */
long long recorder_close(Recorder *r, int64_t boundary_ns);
void recorder_drop_open(Recorder *r);
void recorder_discard(Recorder *r);
size_t recorder_open_nodes(const Recorder *r);
uint64_t recorder_take_counted(Recorder *r);

/* Reading: the layer in a tensor name (-1 if none); a llama_batch's columns. */
int64_t layer_of(const char *name);
int32_t batch_size(const uint8_t *batch);
long long copy_batch(const uint8_t *batch, const size_t *offsets, int32_t n, int32_t *token_out, int32_t *pos_out,
                     int32_t *seq_out, uint8_t *output_out);

#endif
