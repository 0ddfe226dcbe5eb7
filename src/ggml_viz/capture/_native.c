/*
 * ggml_viz.capture._native: the eval-callback recorder's hot path, in C.
 *
 * llama.cpp calls `ggml_viz_eval_callback(t, ask, recorder)` for every graph node
 * (ask = true before computing it, ask = false after, when we answered true). The
 * callback runs without the GIL and never calls Python: per node it takes the time,
 * copies the tensor struct and the structs of sources not seen yet in this graph into
 * growable C arrays, and describes each buffer the first time a graph uses it.
 * Python takes everything between llama_decode calls (`take()`) and decodes it in bulk.
 *
 * Decode graphs usually repeat the previous graph struct for struct (llama.cpp reuses or
 * rebuilds them alike). While the graph in flight does, a node is compared with the
 * previous graph's node at its index instead of being copied; the first difference copies
 * the part repeated so far, and recording goes on as above. A graph repeated whole costs
 * no copy and no comparison at its end, and reaches Python as `same`.
 *
 * Two ways to time nodes. `sync`: answer true when asked, so the scheduler computes the
 * node alone, synchronizes and calls back (exact boundaries; every node is a separate
 * compute call). `inline`: answer false, so the graph runs in one piece, and take the time
 * in the CPU backend's abort callback, which its thread 0 calls after each node it
 * computes (`ggml_viz_abort_callback`); Python maps those ticks to nodes (inline_times.py).
 *
 * Field offsets come from Python (ggml_api.TENSOR_DTYPE), which checks them against
 * the loaded ggml before any recorder is attached.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <fnmatch.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MODE_OFF = 0, MODE_RECORD = 1, MODE_COUNT = 2 };
enum { MAX_OPS = 32, MAX_NAMES = 32, MAX_LAYER_RANGES = 64, NAME_LEN = 64 };
enum { NODE_ANSWERED = 1, NODE_TIMED = 2, NODE_SELECTED = 4, NODE_VALUES = 8, NODE_CAPTURE = 16 };
enum { MAX_CAPTURES = 16, TYPE_F32 = 0, TYPE_F16 = 1 };
enum { BATCH_TOKENS, BATCH_POSITIONS, BATCH_SEQ_IDS, BATCH_OUTPUTS, BATCH_COLUMNS }; /* int32 x3, uint8 */

typedef const char *(*name_fn)(const void *);
typedef int (*usage_fn)(const void *);
typedef size_t (*size_fn)(const void *);
typedef void *(*ptr_fn)(const void *);
typedef const char *(*op_name_fn)(int);
typedef bool (*abort_fn)(void *);
typedef bool (*tensor_bool_fn)(const void *);
typedef float (*fp16_fn)(uint16_t);

/* --values stats: one per node whose output was read after it was computed. */
typedef struct {
    uint32_t node; /* index in its graph */
    uint32_t readable; /* 0: not read (not f32/f16, or not in host memory) */
    int64_t n, nan, inf;
    double min, max, sum, sum_squares, sum_abs;
} StatsRecord;

/* --capture: a node's output copied whole. */
typedef struct {
    uint32_t node;
    int32_t type;
    int64_t ne[4];
    uint64_t offset, nbytes; /* in the graph's capture bytes */
    char name[NAME_LEN];
} CaptureRecord;

typedef struct {
    uint64_t address;
    int64_t usage;
    uint64_t size;
    uint64_t base;
    char name[NAME_LEN];
    char buffer_type[NAME_LEN];
} BufferRecord;

typedef struct {
    size_t count, capacity, item_size;
    uint8_t *items;
} Array;

/* One llama_decode call (index -1: graphs computed outside any), as the decode bracket saw it. */
typedef struct {
    int64_t index, start_ns, end_ns;
    int32_t return_code, n_tokens, lowest_position;
    uint32_t graphs_closed; /* graphs waiting to be taken once this call's graphs were closed */
    uint64_t first_token;   /* where its tokens begin in the batch columns */
} DecodeRecord;

typedef struct {
    PyObject_HEAD
    /* tensor layout */
    size_t tensor_size, buffer_offset, op_offset, src_offset, n_src, view_src_offset, name_offset;
    size_t type_offset, ne_offset, nb_offset, data_offset;
    /* ggml functions */
    name_fn buffer_name, op_desc, buft_name;
    usage_fn buffer_usage;
    size_fn buffer_size;
    ptr_fn buffer_base, buffer_type;
    op_name_fn op_name;
    /* settings */
    int mode;
    int time_nodes;
    int inline_timing; /* time nodes by the abort callback's ticks, not by answering the scheduler */
    abort_fn chained_abort; /* the program's own abort callback, called from ours */
    void *chained_abort_data;
    /* values: statistics of every node's output, copies of some */
    int values_mode;
    int n_captures;
    char captures[MAX_CAPTURES][NAME_LEN];
    long long capture_budget; /* bytes still allowed */
    long long captures_skipped, capture_bytes_skipped;
    tensor_bool_fn buffer_is_host, is_contiguous;
    size_fn nbytes_of;
    fp16_fn fp16_to_fp32;
    float *fp16_table; /* every f16 value as f32: a lookup per element, not a call */
    Array stats, capture_records, capture_data;
    int filtering;
    int n_ops, n_names, n_layer_ranges, select_no_layer;
    char ops[MAX_OPS][NAME_LEN];
    char names[MAX_NAMES][NAME_LEN];
    int64_t layer_ranges[MAX_LAYER_RANGES][2];
    /* what has been recorded since the last take() */
    Array nodes, node_ptrs, starts, ends, node_flags;
    Array tick_ns, tick_asked; /* inline timing: when thread 0 finished a node, nodes asked by then */
    Array leaves, leaf_ptrs;
    Array graph_node_start, graph_leaf_start, graph_buffer_start, graph_tick_start, graph_boundary, graph_same;
    Array graph_stats_start, graph_capture_start, graph_capture_data_start;
    Array graph_struct_start; /* where a graph's node structs begin in `nodes` (none when repeated) */
    /* the last graph closed, to recognize an identical next one (decode graphs usually are);
       per node, how many leaves and buffers the graph had noted once it was copied */
    Array previous_nodes, previous_leaves, previous_node_ptrs, previous_leaf_ptrs;
    Array previous_leaf_end, previous_buffer_end, previous_buffers;
    Array buffers;
    Array taken_buffers; /* the buffers of the last graph take() gave, to recognize a plain repeat */
    /* the graph in flight */
    size_t graph_first_node, graph_first_leaf, graph_first_buffer, graph_first_tick, graph_first_struct;
    Array leaf_end, buffer_end; /* per node, as previous_leaf_end and previous_buffer_end */
    int repeating;              /* it repeats the previous graph so far: nothing copied yet */
    int32_t first_op;           /* its first node's op and name, to recognize the next graph */
    char first_name[NAME_LEN];
    size_t graph_first_stats, graph_first_capture, graph_first_capture_byte;
    uint64_t *set_keys; /* open-addressing set of pointers seen in this graph */
    uint8_t *set_kinds; /* 0 empty, 1 node, 2 leaf, 3 buffer */
    size_t set_capacity, set_count;
    uint8_t *previous_selection; /* which node indexes the previous graph selected */
    size_t previous_count, previous_capacity;
    int64_t pending; /* node waiting for its result callback, or -1 */
    uint64_t counted_nodes;
    /* the decode bracket: what each llama_decode call fed, and which graphs it ran */
    Py_ssize_t batch_offsets[5]; /* llama_batch: token, pos, n_seq_id, seq_id, logits */
    int detail_graph;            /* never time nodes */
    long long sample;            /* time the first prompt call and every sample-th other call (0: all) */
    long long graphs_per_write, write_interval_ns;
    long long n_decodes, n_prompt_decodes, n_other_decodes;
    int decode_open;       /* the last record is a call still running */
    int64_t last_take_ns;  /* when Python last took the graphs */
    Array decodes;         /* DecodeRecord */
    Array batch[BATCH_COLUMNS]; /* the calls' batches, column by column */
    int out_of_memory;
    long long fail_after_nodes; /* tests: act out of memory at this many nodes (0: never) */
} Recorder;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- growable arrays -------------------------------------------------------------- */

static int array_reserve(Array *a, size_t extra) {
    if (a->count + extra <= a->capacity) return 0;
    size_t capacity = a->capacity ? a->capacity : 1024;
    while (capacity < a->count + extra) capacity *= 2;
    uint8_t *items = realloc(a->items, capacity * a->item_size);
    if (!items) return -1;
    a->items = items;
    a->capacity = capacity;
    return 0;
}

static void *array_push(Array *a) {
    if (array_reserve(a, 1) != 0) return NULL;
    return a->items + (a->count++) * a->item_size;
}

#define ARRAY_AT(a, type, i) (((type *)(a).items)[i])

/* Append `count` items of `from` (same item size), starting at item `start`. */
static int array_append(Array *a, const Array *from, size_t start, size_t count) {
    if (array_reserve(a, count) != 0) return -1;
    memcpy(a->items + a->count * a->item_size, from->items + start * from->item_size, count * a->item_size);
    a->count += count;
    return 0;
}

/* ---- the per-graph pointer set ------------------------------------------------------ */

static size_t hash_pointer(uint64_t p, size_t capacity) {
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdULL;
    p ^= p >> 33;
    return (size_t)p & (capacity - 1);
}

static int set_find(Recorder *r, uint64_t key) {
    size_t i = hash_pointer(key, r->set_capacity);
    while (r->set_kinds[i]) {
        if (r->set_keys[i] == key) return r->set_kinds[i];
        i = (i + 1) & (r->set_capacity - 1);
    }
    return 0;
}

static int set_grow(Recorder *r) {
    size_t old_capacity = r->set_capacity;
    uint64_t *old_keys = r->set_keys;
    uint8_t *old_kinds = r->set_kinds;
    size_t capacity = old_capacity ? old_capacity * 2 : 8192;
    uint64_t *keys = calloc(capacity, sizeof(uint64_t));
    uint8_t *kinds = calloc(capacity, 1);
    if (!keys || !kinds) {
        free(keys);
        free(kinds);
        return -1;
    }
    r->set_keys = keys;
    r->set_kinds = kinds;
    r->set_capacity = capacity;
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old_kinds[i]) continue;
        size_t j = hash_pointer(old_keys[i], capacity);
        while (kinds[j]) j = (j + 1) & (capacity - 1);
        keys[j] = old_keys[i];
        kinds[j] = old_kinds[i];
    }
    free(old_keys);
    free(old_kinds);
    return 0;
}

static int set_add(Recorder *r, uint64_t key, uint8_t kind) {
    if ((r->set_count + 1) * 2 > r->set_capacity && set_grow(r) != 0) return -1;
    size_t i = hash_pointer(key, r->set_capacity);
    while (r->set_kinds[i]) i = (i + 1) & (r->set_capacity - 1);
    r->set_keys[i] = key;
    r->set_kinds[i] = kind;
    r->set_count++;
    return 0;
}

static void set_clear(Recorder *r) {
    if (r->set_count) memset(r->set_kinds, 0, r->set_capacity);
    r->set_count = 0;
}

/* ---- reading a tensor struct ------------------------------------------------------- */

static uint64_t field_u64(const uint8_t *tensor, size_t offset) {
    uint64_t value;
    memcpy(&value, tensor + offset, sizeof value);
    return value;
}

/* The layer in a tensor name, as ggml_viz.layers.layer_of reads it; -1 if none. */
static int64_t layer_of(const char *name) {
    size_t length = strnlen(name, NAME_LEN);
    if (length > 4 && strncmp(name, "blk.", 4) == 0) {
        size_t i = 4;
        int64_t value = 0;
        while (i < length && name[i] >= '0' && name[i] <= '9') value = value * 10 + (name[i++] - '0');
        if (i > 4 && i < length && name[i] == '.') return value;
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

static bool is_selected(Recorder *r, const uint8_t *tensor) {
    char name[NAME_LEN + 1];
    memcpy(name, tensor + r->name_offset, NAME_LEN);
    name[NAME_LEN] = 0;
    if (r->n_ops) {
        bool found = false;
        const char *specific = r->op_desc ? r->op_desc(tensor) : NULL;
        int32_t op;
        memcpy(&op, tensor + r->op_offset, sizeof op);
        const char *base = r->op_name ? r->op_name(op) : NULL;
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

static int describe_buffer(Recorder *r, uint64_t buffer) {
    BufferRecord *record = array_push(&r->buffers);
    if (!record) return -1;
    memset(record, 0, sizeof *record);
    const void *b = (const void *)(uintptr_t)buffer;
    record->address = buffer;
    record->usage = r->buffer_usage(b);
    record->size = r->buffer_size(b);
    record->base = (uint64_t)(uintptr_t)r->buffer_base(b);
    const char *name = r->buffer_name(b);
    if (name) strncpy(record->name, name, NAME_LEN - 1);
    void *buft = r->buffer_type(b);
    const char *buft_name = buft ? r->buft_name(buft) : NULL;
    if (buft_name) strncpy(record->buffer_type, buft_name, NAME_LEN - 1);
    return 0;
}

static int note_buffer(Recorder *r, const uint8_t *tensor) {
    uint64_t buffer = field_u64(tensor, r->buffer_offset);
    if (!buffer || set_find(r, buffer)) return 0;
    if (set_add(r, buffer, 3) != 0) return -1;
    return describe_buffer(r, buffer);
}

static int copy_tensor(Recorder *r, Array *structs, uint64_t address, const uint8_t **copied) {
    uint8_t *slot = array_push(structs);
    if (!slot) return -1;
    memcpy(slot, (const void *)(uintptr_t)address, r->tensor_size);
    /* A name is a C string: bytes after its NUL are stale, clear them. */
    uint8_t *name = slot + r->name_offset;
    size_t length = strnlen((const char *)name, NAME_LEN);
    if (length < NAME_LEN) memset(name + length, 0, NAME_LEN - length);
    *copied = slot;
    return 0;
}

static int copy_leaf(Recorder *r, uint64_t address) {
    if (!address || set_find(r, address)) return 0;
    const uint8_t *copied;
    uint64_t *ptr = array_push(&r->leaf_ptrs);
    if (!ptr || copy_tensor(r, &r->leaves, address, &copied) != 0) return -1;
    *ptr = address;
    if (set_add(r, address, 2) != 0) return -1;
    return note_buffer(r, copied);
}

/* ---- repeating the previous graph ------------------------------------------------------ */

/* Whether a live tensor struct equals a copied one (a name's bytes after its NUL aside).
   Nearly always the bytes are all equal: one comparison, the name's end sought only if not. */
static bool same_struct(Recorder *r, const uint8_t *live, const uint8_t *copied) {
    if (memcmp(live, copied, r->tensor_size) == 0) return true;
    size_t name_end = r->name_offset + NAME_LEN;
    return memcmp(live, copied, r->name_offset) == 0 &&
           strncmp((const char *)live + r->name_offset, (const char *)copied + r->name_offset, NAME_LEN) == 0 &&
           memcmp(live + name_end, copied + name_end, r->tensor_size - name_end) == 0;
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
    for (size_t line = 0; line < r->tensor_size; line += 64) __builtin_prefetch(tensor + line);
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
        prefetch_struct(r, r->previous_nodes.items + k * r->tensor_size);
        for (size_t j = end_before(&r->previous_leaf_end, k); j < ARRAY_AT(r->previous_leaf_end, uint32_t, k); j++) {
            prefetch_struct(r, (const uint8_t *)(uintptr_t)ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j));
            prefetch_struct(r, r->previous_leaves.items + j * r->tensor_size);
        }
    }
    if (!same_struct(r, (const uint8_t *)(uintptr_t)address, r->previous_nodes.items + i * r->tensor_size)) return 0;
    size_t leaf_end = ARRAY_AT(r->previous_leaf_end, uint32_t, i);
    for (size_t j = end_before(&r->previous_leaf_end, i); j < leaf_end; j++) {
        const uint8_t *leaf = (const uint8_t *)(uintptr_t)ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j);
        if (!same_struct(r, leaf, r->previous_leaves.items + j * r->tensor_size)) return 0;
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
        if (set_add(r, ARRAY_AT(r->node_ptrs, uint64_t, r->graph_first_node + i), 1) != 0) return -1;
        for (size_t j = end_before(&r->previous_leaf_end, i); j < ARRAY_AT(r->previous_leaf_end, uint32_t, i); j++) {
            if (set_add(r, ARRAY_AT(r->previous_leaf_ptrs, uint64_t, j), 2) != 0) return -1;
        }
    }
    for (size_t b = r->graph_first_buffer; b < r->buffers.count; b++) {
        if (set_add(r, ARRAY_AT(r->buffers, BufferRecord, b).address, 3) != 0) return -1;
    }
    return 0;
}

/* While the graph in flight repeats the previous one: does this node go on repeating it?
   If not, it stops repeating. 1 yes, 0 no, -1 out of memory. */
static int check_repeat(Recorder *r, uint64_t address) {
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
static void open_graph(Recorder *r) {
    r->graph_first_node = r->node_flags.count;
    r->graph_first_struct = r->nodes.count;
    r->graph_first_leaf = r->leaves.count;
    r->graph_first_buffer = r->buffers.count;
    r->graph_first_tick = r->tick_ns.count;
    r->graph_first_stats = r->stats.count;
    r->graph_first_capture = r->capture_records.count;
    r->graph_first_capture_byte = r->capture_data.count;
    r->leaf_end.count = r->buffer_end.count = 0;
    r->repeating = r->previous_node_ptrs.count > 0;
    r->pending = -1;
    set_clear(r);
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
   repeats the previous graph struct for struct (then Python reuses what it decoded). */
static int close_graph(Recorder *r, int64_t boundary) {
    size_t n = r->node_flags.count - r->graph_first_node;
    if (n == 0) return 0;
    size_t *node_start = array_push(&r->graph_node_start);
    size_t *struct_start = array_push(&r->graph_struct_start);
    size_t *leaf_start = array_push(&r->graph_leaf_start);
    size_t *buffer_start = array_push(&r->graph_buffer_start);
    size_t *tick_start = array_push(&r->graph_tick_start);
    size_t *stats_start = array_push(&r->graph_stats_start);
    size_t *capture_start = array_push(&r->graph_capture_start);
    size_t *capture_data_start = array_push(&r->graph_capture_data_start);
    int64_t *boundary_ns = array_push(&r->graph_boundary);
    uint8_t *same_flag = array_push(&r->graph_same);
    if (!node_start || !struct_start || !leaf_start || !buffer_start || !tick_start || !boundary_ns || !same_flag ||
        !stats_start || !capture_start || !capture_data_start) {
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

/* ---- values ---------------------------------------------------------------------------- */

static bool matches_capture(Recorder *r, const uint8_t *tensor) {
    char name[NAME_LEN + 1];
    memcpy(name, tensor + r->name_offset, NAME_LEN);
    name[NAME_LEN] = 0;
    for (int i = 0; i < r->n_captures; i++) {
        if (fnmatch(r->captures[i], name, 0) == 0) return true;
    }
    return false;
}

static bool host_readable(Recorder *r, const uint8_t *tensor) {
    uint64_t buffer = field_u64(tensor, r->buffer_offset);
    return field_u64(tensor, r->data_offset) != 0 && (!buffer || r->buffer_is_host((const void *)(uintptr_t)buffer));
}

/* Statistics of a computed node's output, read in place (any strides), f32 and f16. */
static int record_stats(Recorder *r, const uint8_t *tensor, uint32_t node) {
    StatsRecord *stats = array_push(&r->stats);
    if (!stats) return -1;
    memset(stats, 0, sizeof *stats);
    stats->node = node;
    int32_t type;
    memcpy(&type, tensor + r->type_offset, sizeof type);
    if ((type != TYPE_F32 && type != TYPE_F16) || !host_readable(r, tensor)) return 0;
    int64_t ne[4];
    uint64_t nb[4];
    memcpy(ne, tensor + r->ne_offset, sizeof ne);
    memcpy(nb, tensor + r->nb_offset, sizeof nb);
    const uint8_t *data = (const uint8_t *)(uintptr_t)field_u64(tensor, r->data_offset);
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
                    if (isnan(v)) { nan++; continue; }
                    if (isinf(v)) { inf++; continue; }
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
static int record_capture(Recorder *r, const uint8_t *tensor, uint32_t node) {
    size_t nbytes = r->nbytes_of(tensor);
    if (!host_readable(r, tensor) || !r->is_contiguous(tensor) || (long long)nbytes > r->capture_budget) {
        r->captures_skipped++;
        r->capture_bytes_skipped += (long long)nbytes;
        return 0;
    }
    CaptureRecord *record = array_push(&r->capture_records);
    if (!record || array_reserve(&r->capture_data, nbytes) != 0) return -1;
    record->node = node;
    memcpy(&record->type, tensor + r->type_offset, sizeof record->type);
    memcpy(record->ne, tensor + r->ne_offset, sizeof record->ne);
    memcpy(record->name, tensor + r->name_offset, NAME_LEN);
    record->name[NAME_LEN - 1] = 0;
    record->offset = r->capture_data.count - r->graph_first_capture_byte;
    record->nbytes = nbytes;
    memcpy(r->capture_data.items + r->capture_data.count, (const void *)(uintptr_t)field_u64(tensor, r->data_offset),
           nbytes);
    r->capture_data.count += nbytes;
    r->capture_budget -= (long long)nbytes;
    return 0;
}

static bool answer_for(Recorder *r, const uint8_t *tensor, size_t index_in_graph, uint8_t *flags) {
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
static bool starts_next_graph(Recorder *r, const uint8_t *tensor) {
    if (r->node_flags.count == r->graph_first_node || !r->first_name[0]) return false;
    int32_t op;
    memcpy(&op, tensor + r->op_offset, sizeof op);
    return op == r->first_op && strncmp((const char *)tensor + r->name_offset, r->first_name, NAME_LEN) == 0;
}

/* Record a node the scheduler asks about; returns the answer, or -1 out of memory. */
static int on_ask(Recorder *r, uint64_t address) {
    if (r->fail_after_nodes > 0 && (long long)r->node_flags.count >= r->fail_after_nodes) return -1;
    const uint8_t *tensor = (const uint8_t *)(uintptr_t)address; /* live; the copy once there is one */
    if (starts_next_graph(r, tensor) && close_graph(r, now_ns()) != 0) return -1;
    int repeat = check_repeat(r, address);
    if (repeat == 0 && set_find(r, address) == 1) { /* a node again: the next graph begins */
        if (close_graph(r, now_ns()) != 0) return -1;
        repeat = check_repeat(r, address);
    }
    if (repeat < 0) return -1;
    if (!repeat) {
        if (copy_tensor(r, &r->nodes, address, &tensor) != 0) return -1;
        if (set_add(r, address, 1) != 0 || note_buffer(r, tensor) != 0) return -1;
        for (size_t i = 0; i < r->n_src; i++) {
            if (copy_leaf(r, field_u64(tensor, r->src_offset + 8 * i)) != 0) return -1;
        }
        if (copy_leaf(r, field_u64(tensor, r->view_src_offset)) != 0) return -1;
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
        memcpy(&r->first_op, tensor + r->op_offset, sizeof r->first_op);
        memcpy(r->first_name, tensor + r->name_offset, NAME_LEN);
        r->first_name[NAME_LEN - 1] = 0;
    }
    bool answer = answer_for(r, tensor, index_in_graph, flags);
    /* Values are read after the node is computed: the scheduler must call back for it.
       Views (KV cache writes among them) share their source's bytes: not read again. */
    if (r->values_mode && !field_u64(tensor, r->view_src_offset)) *flags |= NODE_VALUES;
    if (r->n_captures && matches_capture(r, tensor)) *flags |= NODE_CAPTURE;
    if (*flags & (NODE_VALUES | NODE_CAPTURE)) answer = true;
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

static bool ggml_viz_eval_callback(void *tensor, bool ask, void *user_data) {
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
                ((flags & NODE_CAPTURE) && record_capture(r, live, node) != 0)) {
                r->out_of_memory = 1;
                r->mode = MODE_OFF;
            }
            r->pending = -1;
        }
        return true;
    }
    int answer = on_ask(r, (uint64_t)(uintptr_t)tensor);
    if (answer < 0) { /* Python sees the flag, discards the partial graph and stops recording */
        r->out_of_memory = 1;
        r->mode = MODE_OFF;
        return false;
    }
    return answer == 1;
}

/* Inline timing: the CPU backend's thread 0 calls this after each node it computes (not
   after views, which it skips, and once for nodes it fuses), before the barrier that
   ends the node. It always runs on the thread that called llama_decode. */
static bool ggml_viz_abort_callback(void *user_data) {
    Recorder *r = (Recorder *)user_data;
    if (r->mode == MODE_RECORD && r->inline_timing && r->time_nodes) {
        int64_t *tick = array_push(&r->tick_ns);
        uint32_t *asked = array_push(&r->tick_asked);
        if (!tick || !asked) {
            r->out_of_memory = 1;
            r->mode = MODE_OFF;
        } else {
            *tick = now_ns();
            *asked = (uint32_t)(r->node_flags.count - r->graph_first_node);
        }
    }
    return r->chained_abort ? r->chained_abort(r->chained_abort_data) : false;
}

/* The floor of per-node timing, for benchmarks: a callback that takes the time and asks
   for every node, recording nothing. What it costs is what ggml's slicing costs. */
static volatile int64_t floor_last_ns;
static bool ggml_viz_timing_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)user_data;
    floor_last_ns = now_ns();
    return true;
}

/* The floor of graph-level recording: a callback that declines every node, so each graph
   runs in one piece, and records nothing. What it costs is what ggml's asking costs. */
static bool ggml_viz_graph_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)user_data;
    return !ask;
}

/* ---- llama_batch ----------------------------------------------------------------------- */

static int32_t batch_size(const uint8_t *batch) {
    int32_t n;
    memcpy(&n, batch, sizeof n);
    return n < 0 ? 0 : n;
}

/* Copy a llama_batch's columns (offsets of its token, pos, n_seq_id, seq_id and logits
   pointers): token ids, positions, each token's first sequence id, whether llama.cpp
   computes its logits. What a pointer the batch leaves NULL gives is -1 (outputs: the last
   token only, as llama.cpp does). Returns the lowest position (-1: no token). */
static long long copy_batch(const uint8_t *batch, const Py_ssize_t *offsets, int32_t n, int32_t *token_out,
                            int32_t *pos_out, int32_t *seq_out, uint8_t *output_out) {
    const int32_t *token, *pos, *n_seq;
    const int32_t *const *seq;
    const int8_t *logits;
    memcpy(&token, batch + offsets[0], sizeof token);
    memcpy(&pos, batch + offsets[1], sizeof pos);
    memcpy(&n_seq, batch + offsets[2], sizeof n_seq);
    memcpy(&seq, batch + offsets[3], sizeof seq);
    memcpy(&logits, batch + offsets[4], sizeof logits);
    long long lowest = -1;
    for (int32_t i = 0; i < n; i++) {
        token_out[i] = token ? token[i] : -1;
        pos_out[i] = pos ? pos[i] : -1;
        if (i == 0 || pos_out[i] < lowest) lowest = pos_out[i];
        seq_out[i] = (seq && n_seq && n_seq[i] > 0 && seq[i]) ? seq[i][0] : -1;
        output_out[i] = logits ? logits[i] > 0 : i == n - 1;
    }
    return lowest;
}

/* ---- the decode bracket ------------------------------------------------------------------ */

/* Around each llama_decode, Python calls begin_decode and end_decode, and nothing else: the
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

/* Open a record for the call and copy its batch; returns its lowest position, or -2 out of memory. */
static long long open_decode(Recorder *r, const uint8_t *batch, int32_t n, long long index, int64_t now) {
    if ((r->decode_open || r->node_flags.count > r->graph_first_node) && close_decode(r, 0, now) != 0) return -2;
    for (int c = 0; c < BATCH_COLUMNS; c++) {
        if (array_reserve(&r->batch[c], (size_t)n) != 0) return -2;
    }
    DecodeRecord *record = array_push(&r->decodes);
    if (!record) return -2;
    size_t first = r->batch[BATCH_TOKENS].count;
    long long lowest = copy_batch(batch, r->batch_offsets, n, &ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, first),
                                  &ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, first),
                                  &ARRAY_AT(r->batch[BATCH_SEQ_IDS], int32_t, first),
                                  &ARRAY_AT(r->batch[BATCH_OUTPUTS], uint8_t, first));
    for (int c = 0; c < BATCH_COLUMNS; c++) r->batch[c].count += (size_t)n;
    *record = (DecodeRecord){.index = index, .start_ns = now, .end_ns = now, .n_tokens = n,
                             .lowest_position = (int32_t)lowest, .first_token = first};
    r->decode_open = 1;
    return lowest;
}

static long long lowest_position(const uint8_t *batch, const Py_ssize_t *offsets, int32_t n) {
    const int32_t *pos;
    memcpy(&pos, batch + offsets[1], sizeof pos);
    long long lowest = -1;
    for (int32_t i = 0; i < n; i++) {
        long long p = pos ? pos[i] : -1;
        if (i == 0 || p < lowest) lowest = p;
    }
    return lowest;
}

/* --detail and --sample: are the nodes of this call's graphs timed one by one? A call of
   several tokens, or one starting a sequence, is a prompt call. */
static int times_nodes(Recorder *r, int32_t n, long long lowest) {
    if (r->detail_graph) return 0;
    if (n > 0 && (n > 1 || lowest == 0)) return ++r->n_prompt_decodes == 1 || !r->sample;
    return !r->sample || (r->n_other_decodes++ % r->sample) == 0;
}

/* ---- Python interface ---------------------------------------------------------------- */

static void array_init(Array *a, size_t item_size) {
    memset(a, 0, sizeof *a);
    a->item_size = item_size;
}

static void array_free(Array *a) {
    free(a->items);
    a->items = NULL;
    a->count = a->capacity = 0;
}

/* Every growable array of a Recorder and its item size: init and dealloc both go by this list. */
#define RECORDER_ARRAYS(X, r) \
    X(r, nodes, r->tensor_size) \
    X(r, leaves, r->tensor_size) \
    X(r, node_ptrs, sizeof(uint64_t)) \
    X(r, leaf_ptrs, sizeof(uint64_t)) \
    X(r, starts, sizeof(int64_t)) \
    X(r, ends, sizeof(int64_t)) \
    X(r, node_flags, 1) \
    X(r, tick_ns, sizeof(int64_t)) \
    X(r, tick_asked, sizeof(uint32_t)) \
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
    X(r, previous_nodes, r->tensor_size) \
    X(r, previous_leaves, r->tensor_size) \
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
    X(r, batch[BATCH_TOKENS], sizeof(int32_t)) \
    X(r, batch[BATCH_POSITIONS], sizeof(int32_t)) \
    X(r, batch[BATCH_SEQ_IDS], sizeof(int32_t)) \
    X(r, batch[BATCH_OUTPUTS], 1) \
    X(r, taken_buffers, sizeof(BufferRecord))
#define ARRAY_INIT(r, field, item_size) array_init(&(r)->field, item_size);
#define ARRAY_FREE(r, field, item_size) array_free(&(r)->field);

static PyObject *array_bytes(Array *a, size_t from, size_t to) {
    return PyBytes_FromStringAndSize((const char *)a->items + from * a->item_size, (to - from) * a->item_size);
}

static int Recorder_init(Recorder *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"layout", "functions", NULL};
    PyObject *layout, *functions;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", keywords, &layout, &functions)) return -1;
    unsigned long long f[9];
    if (!PyArg_ParseTuple(layout, "nnnnnnnnnnn", &self->tensor_size, &self->buffer_offset, &self->op_offset,
                          &self->src_offset, &self->n_src, &self->view_src_offset, &self->name_offset,
                          &self->type_offset, &self->ne_offset, &self->nb_offset, &self->data_offset) ||
        !PyArg_ParseTuple(functions, "KKKKKKKK", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7])) {
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        if (!f[i]) {
            PyErr_SetString(PyExc_ValueError, "a ggml function address is null");
            return -1;
        }
    }
    self->buffer_name = (name_fn)(uintptr_t)f[0];
    self->buffer_usage = (usage_fn)(uintptr_t)f[1];
    self->buffer_size = (size_fn)(uintptr_t)f[2];
    self->buffer_base = (ptr_fn)(uintptr_t)f[3];
    self->buffer_type = (ptr_fn)(uintptr_t)f[4];
    self->buft_name = (name_fn)(uintptr_t)f[5];
    self->op_desc = (name_fn)(uintptr_t)f[6];
    self->op_name = (op_name_fn)(uintptr_t)f[7];
    if (self->tensor_size < self->name_offset + NAME_LEN) {
        PyErr_SetString(PyExc_ValueError, "tensor layout: the name lies past the struct");
        return -1;
    }
    RECORDER_ARRAYS(ARRAY_INIT, self)
    if (set_grow(self) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    self->mode = MODE_RECORD;
    self->time_nodes = 1;
    self->pending = -1;
    return 0;
}

static void Recorder_dealloc(Recorder *self) {
    RECORDER_ARRAYS(ARRAY_FREE, self)
    free(self->set_keys);
    free(self->set_kinds);
    free(self->previous_selection);
    free(self->fp16_table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Forget everything recorded since the last take, the graph in flight included. */
static void reset_recorded(Recorder *r) {
    r->nodes.count = r->leaves.count = r->node_ptrs.count = r->leaf_ptrs.count = 0;
    r->starts.count = r->ends.count = r->node_flags.count = 0;
    r->tick_ns.count = r->tick_asked.count = r->graph_tick_start.count = 0;
    r->stats.count = r->capture_records.count = r->capture_data.count = 0;
    r->graph_stats_start.count = r->graph_capture_start.count = r->graph_capture_data_start.count = 0;
    r->graph_node_start.count = r->graph_struct_start.count = r->graph_leaf_start.count = 0;
    r->graph_buffer_start.count = r->graph_boundary.count = r->buffers.count = r->graph_same.count = 0;
    open_graph(r);
}

/* take(boundary_ns) -> list of graphs, each a tuple:
   (nodes, node_ptrs, starts, ends, flags, leaves, leaf_ptrs, buffers, boundary_ns, same, n_timed, end_ns,
    tick_ns, tick_asked, stats, capture_records, capture_bytes)
   where a graph that repeats the previous one (same) comes without its struct bytes; or, for
   a plain repeat (the previous graph again, with the same buffers, no node selected for
   timing, nothing read from its outputs: most decode graphs under --detail graph or
   --sample), only (n_nodes, graph_start_ns, end_ns). */
static PyObject *Recorder_take(Recorder *self, PyObject *arg) {
    long long boundary = PyLong_AsLongLong(arg);
    if (boundary == -1 && PyErr_Occurred()) return NULL;
    if (close_graph(self, boundary) != 0) return PyErr_NoMemory();
    size_t n_graphs = self->graph_node_start.count;
    PyObject *graphs = PyList_New((Py_ssize_t)n_graphs);
    if (!graphs) return NULL;
    for (size_t g = 0; g < n_graphs; g++) {
        size_t n0 = ARRAY_AT(self->graph_node_start, size_t, g);
        size_t n1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_node_start, size_t, g + 1) : self->node_flags.count;
        size_t m0 = ARRAY_AT(self->graph_struct_start, size_t, g);
        size_t m1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_struct_start, size_t, g + 1) : self->nodes.count;
        size_t l0 = ARRAY_AT(self->graph_leaf_start, size_t, g);
        size_t l1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_leaf_start, size_t, g + 1) : self->leaves.count;
        size_t b0 = ARRAY_AT(self->graph_buffer_start, size_t, g);
        size_t b1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_buffer_start, size_t, g + 1) : self->buffers.count;
        size_t k0 = ARRAY_AT(self->graph_tick_start, size_t, g);
        size_t k1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_tick_start, size_t, g + 1) : self->tick_ns.count;
        size_t v0 = ARRAY_AT(self->graph_stats_start, size_t, g);
        size_t v1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_stats_start, size_t, g + 1) : self->stats.count;
        size_t c0 = ARRAY_AT(self->graph_capture_start, size_t, g);
        size_t c1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_capture_start, size_t, g + 1) : self->capture_records.count;
        size_t d0 = ARRAY_AT(self->graph_capture_data_start, size_t, g);
        size_t d1 = g + 1 < n_graphs ? ARRAY_AT(self->graph_capture_data_start, size_t, g + 1) : self->capture_data.count;
        int same = ARRAY_AT(self->graph_same, uint8_t, g);
        /* What Python would otherwise compute with numpy: nodes timed alone, and when the
           graph ended (the last node's end if it ended a slice of its own making). */
        long long n_timed = 0, n_selected = 0;
        for (size_t i = n0; i < n1; i++) {
            uint8_t flags = ARRAY_AT(self->node_flags, uint8_t, i);
            n_timed += (flags & NODE_TIMED) != 0;
            n_selected += (flags & NODE_SELECTED) != 0;
        }
        int last_answered = n1 > n0 && (ARRAY_AT(self->node_flags, uint8_t, n1 - 1) & NODE_ANSWERED);
        long long end = last_answered ? ARRAY_AT(self->ends, int64_t, n1 - 1)
                                      : ARRAY_AT(self->graph_boundary, int64_t, g);
        size_t buffer_bytes = (b1 - b0) * sizeof(BufferRecord);
        const uint8_t *buffer_records = self->buffers.items + b0 * sizeof(BufferRecord);
        bool same_buffers = self->taken_buffers.count == b1 - b0 &&
                            !memcmp(self->taken_buffers.items, buffer_records, buffer_bytes);
        if (!same_buffers) {
            self->taken_buffers.count = 0;
            if (array_reserve(&self->taken_buffers, b1 - b0) != 0) goto no_memory;
            memcpy(self->taken_buffers.items, buffer_records, buffer_bytes);
            self->taken_buffers.count = b1 - b0;
        }
        PyObject *graph;
        if (same && same_buffers && !n_timed && !n_selected && k1 == k0 && v1 == v0 && c1 == c0) {
            /* a plain repeat: the previous graph again, buffer for buffer, nothing timed or read */
            graph = Py_BuildValue("(nLL)", (Py_ssize_t)(n1 - n0), (long long)ARRAY_AT(self->starts, int64_t, n0), end);
        } else {
            PyObject *buffers = PyList_New((Py_ssize_t)(b1 - b0));
            if (!buffers) goto error;
            for (size_t b = b0; b < b1; b++) {
                BufferRecord *record = &ARRAY_AT(self->buffers, BufferRecord, b);
                PyObject *item = Py_BuildValue("(KLKKss)", (unsigned long long)record->address,
                                               (long long)record->usage, (unsigned long long)record->size,
                                               (unsigned long long)record->base, record->name, record->buffer_type);
                if (!item) {
                    Py_DECREF(buffers);
                    goto error;
                }
                PyList_SET_ITEM(buffers, (Py_ssize_t)(b - b0), item);
            }
            size_t s0 = same ? n1 : n0, t0 = same ? l1 : l0, u0 = same ? m1 : m0; /* empty ranges when same */
            graph = Py_BuildValue(
                "(NNNNNNNNLOLLNNNNN)", array_bytes(&self->nodes, u0, m1), array_bytes(&self->node_ptrs, s0, n1),
                array_bytes(&self->starts, n0, n1), array_bytes(&self->ends, n0, n1),
                array_bytes(&self->node_flags, n0, n1), array_bytes(&self->leaves, t0, l1),
                array_bytes(&self->leaf_ptrs, t0, l1), buffers, (long long)ARRAY_AT(self->graph_boundary, int64_t, g),
                same ? Py_True : Py_False, n_timed, end, array_bytes(&self->tick_ns, k0, k1),
                array_bytes(&self->tick_asked, k0, k1), array_bytes(&self->stats, v0, v1),
                array_bytes(&self->capture_records, c0, c1), array_bytes(&self->capture_data, d0, d1));
        }
        if (!graph) goto error;
        PyList_SET_ITEM(graphs, (Py_ssize_t)g, graph);
    }
    reset_recorded(self);
    return graphs;
no_memory:
    PyErr_NoMemory();
error:
    Py_DECREF(graphs);
    return NULL;
}

static PyObject *Recorder_set_filters(Recorder *self, PyObject *args) {
    PyObject *ops, *layers, *names;
    int select_no_layer;
    if (!PyArg_ParseTuple(args, "OOpO", &ops, &layers, &select_no_layer, &names)) return NULL;
    PyObject *sequences[3] = {ops, layers, names};
    Py_ssize_t limits[3] = {MAX_OPS, MAX_LAYER_RANGES, MAX_NAMES};
    for (int s = 0; s < 3; s++) {
        if (!PyTuple_Check(sequences[s]) || PyTuple_GET_SIZE(sequences[s]) > limits[s]) {
            PyErr_SetString(PyExc_ValueError, "filters: tuples of at most 32 ops, 64 layer ranges, 32 names");
            return NULL;
        }
    }
    int n_ops = (int)PyTuple_GET_SIZE(ops), n_names = (int)PyTuple_GET_SIZE(names);
    int n_ranges = (int)PyTuple_GET_SIZE(layers);
    for (int i = 0; i < n_ops + n_names; i++) {
        PyObject *item = i < n_ops ? PyTuple_GET_ITEM(ops, i) : PyTuple_GET_ITEM(names, i - n_ops);
        const char *text = PyUnicode_AsUTF8(item);
        if (!text) return NULL;
        if (strlen(text) >= NAME_LEN) {
            PyErr_SetString(PyExc_ValueError, "filters: an op or name pattern is longer than 63 bytes");
            return NULL;
        }
        strcpy(i < n_ops ? self->ops[i] : self->names[i - n_ops], text);
    }
    for (int i = 0; i < n_ranges; i++) {
        long long low, high;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(layers, i), "LL", &low, &high)) return NULL;
        self->layer_ranges[i][0] = low;
        self->layer_ranges[i][1] = high;
    }
    self->n_ops = n_ops;
    self->n_names = n_names;
    self->n_layer_ranges = n_ranges;
    self->select_no_layer = select_no_layer;
    self->filtering = n_ops || n_names || n_ranges || select_no_layer;
    Py_RETURN_NONE;
}

/* close(boundary_ns) -> graphs closed and not yet taken: the graph in flight ends here
   (-1 once the recorder ran out of memory: Python writes what it closed before, and stops). */
static PyObject *Recorder_close(Recorder *self, PyObject *arg) {
    long long boundary = PyLong_AsLongLong(arg);
    if (boundary == -1 && PyErr_Occurred()) return NULL;
    if (self->out_of_memory) return PyLong_FromLong(-1);
    if (close_graph(self, boundary) != 0) return PyErr_NoMemory();
    return PyLong_FromSize_t(self->graph_node_start.count);
}

/* set_decode_rules(detail_graph, sample, graphs_per_write, write_interval_ns, batch_offsets) */
static PyObject *Recorder_set_decode_rules(Recorder *self, PyObject *args) {
    Py_ssize_t *o = self->batch_offsets;
    if (!PyArg_ParseTuple(args, "pLLL(nnnnn)", &self->detail_graph, &self->sample, &self->graphs_per_write,
                          &self->write_interval_ns, &o[0], &o[1], &o[2], &o[3], &o[4])) {
        return NULL;
    }
    self->last_take_ns = now_ns();
    Py_RETURN_NONE;
}

/* begin_decode(batch_address): llama_decode is about to run this llama_batch. */
static PyObject *Recorder_begin_decode(Recorder *self, PyObject *arg) {
    unsigned long long address = PyLong_AsUnsignedLongLong(arg);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    const uint8_t *batch = (const uint8_t *)(uintptr_t)address;
    int64_t now = now_ns();
    int32_t n = batch_size(batch);
    long long index = self->n_decodes++;
    long long lowest;
    if (self->mode == MODE_RECORD) {
        lowest = open_decode(self, batch, n, index, now);
        if (lowest == -2) { /* Python sees the flag at end_decode, writes what was closed, and stops */
            self->out_of_memory = 1;
            self->mode = MODE_OFF;
            Py_RETURN_NONE;
        }
    } else {
        lowest = lowest_position(batch, self->batch_offsets, n);
    }
    self->time_nodes = times_nodes(self, n, lowest);
    Py_RETURN_NONE;
}

/* end_decode(return_code) -> 1 when the graphs waiting should be written now (enough of
   them, or enough time since the last take), 0 if not, -1 once the recorder failed. */
static PyObject *Recorder_end_decode(Recorder *self, PyObject *arg) {
    long return_code = PyLong_AsLong(arg);
    if (return_code == -1 && PyErr_Occurred()) return NULL;
    int64_t now = now_ns();
    if (!self->out_of_memory && self->mode == MODE_RECORD && close_decode(self, (int32_t)return_code, now) != 0) {
        self->out_of_memory = 1;
        self->mode = MODE_OFF;
    }
    if (self->out_of_memory) return PyLong_FromLong(-1);
    self->decode_open = 0;
    bool due = (long long)self->graph_node_start.count >= self->graphs_per_write ||
               now - self->last_take_ns >= self->write_interval_ns;
    return PyLong_FromLong(due);
}

/* take_decodes() -> (calls, token_ids, positions, seq_ids, outputs): the llama_decode calls
   whose graphs were closed since the last take (one still running stays), each a tuple
   (index, start_ns, end_ns, return_code, graphs_closed, n_tokens, lowest_position,
   first_token), and their batches' columns as bytes (int32, int32, int32, uint8). */
static PyObject *Recorder_take_decodes(Recorder *self, PyObject *unused) {
    self->last_take_ns = now_ns();
    size_t n_done = self->decodes.count - (self->decode_open ? 1 : 0);
    size_t tokens_done = self->decode_open ? ARRAY_AT(self->decodes, DecodeRecord, n_done).first_token
                                           : self->batch[BATCH_TOKENS].count;
    PyObject *calls = PyList_New((Py_ssize_t)n_done);
    if (!calls) return NULL;
    for (size_t i = 0; i < n_done; i++) {
        DecodeRecord *d = &ARRAY_AT(self->decodes, DecodeRecord, i);
        PyObject *call = Py_BuildValue("(LLLiIiiK)", (long long)d->index, (long long)d->start_ns, (long long)d->end_ns,
                                       (int)d->return_code, (unsigned int)d->graphs_closed, (int)d->n_tokens,
                                       (int)d->lowest_position, (unsigned long long)d->first_token);
        if (!call) {
            Py_DECREF(calls);
            return NULL;
        }
        PyList_SET_ITEM(calls, (Py_ssize_t)i, call);
    }
    Array *batch = self->batch;
    PyObject *result = Py_BuildValue("(NNNNN)", calls, array_bytes(&batch[BATCH_TOKENS], 0, tokens_done),
                                     array_bytes(&batch[BATCH_POSITIONS], 0, tokens_done),
                                     array_bytes(&batch[BATCH_SEQ_IDS], 0, tokens_done),
                                     array_bytes(&batch[BATCH_OUTPUTS], 0, tokens_done));
    if (!result) return NULL;
    /* keep the call still running, and its tokens, at the front */
    for (int c = 0; c < BATCH_COLUMNS; c++) {
        Array *a = &batch[c];
        memmove(a->items, a->items + tokens_done * a->item_size, (a->count - tokens_done) * a->item_size);
        a->count -= tokens_done;
    }
    if (self->decode_open) {
        DecodeRecord running = ARRAY_AT(self->decodes, DecodeRecord, n_done);
        running.first_token = 0;
        ARRAY_AT(self->decodes, DecodeRecord, 0) = running;
    }
    self->decodes.count -= n_done;
    return result;
}

/* drop_open(): forget the graph in flight (recording failed inside it), keep the closed ones. */
static PyObject *Recorder_drop_open(Recorder *self, PyObject *unused) {
    size_t n_graphs = self->graph_node_start.count;
    if (self->graph_leaf_start.count != n_graphs || self->graph_buffer_start.count != n_graphs ||
        self->graph_struct_start.count != n_graphs ||
        self->graph_tick_start.count != n_graphs || self->graph_boundary.count != n_graphs ||
        self->graph_same.count != n_graphs || self->graph_stats_start.count != n_graphs ||
        self->graph_capture_start.count != n_graphs || self->graph_capture_data_start.count != n_graphs) {
        reset_recorded(self); /* failed while closing a graph: nothing is whole */
        Py_RETURN_NONE;
    }
    self->nodes.count = self->graph_first_struct;
    self->node_ptrs.count = self->starts.count = self->ends.count = self->node_flags.count = self->graph_first_node;
    self->leaves.count = self->leaf_ptrs.count = self->graph_first_leaf;
    self->buffers.count = self->graph_first_buffer;
    self->tick_ns.count = self->tick_asked.count = self->graph_first_tick;
    self->stats.count = self->graph_first_stats;
    self->capture_records.count = self->graph_first_capture;
    self->capture_data.count = self->graph_first_capture_byte;
    open_graph(self);
    Py_RETURN_NONE;
}

static PyObject *Recorder_get_open_nodes(Recorder *self, void *closure) {
    return PyLong_FromSize_t(self->node_flags.count - self->graph_first_node);
}

static PyObject *Recorder_take_counted(Recorder *self, PyObject *unused) {
    unsigned long long counted = self->counted_nodes;
    self->counted_nodes = 0;
    return PyLong_FromUnsignedLongLong(counted);
}

static PyObject *Recorder_discard(Recorder *self, PyObject *unused) {
    /* Python never saw the previous graph: the next graph is new to it */
    self->previous_nodes.count = self->previous_node_ptrs.count = 0;
    self->decodes.count = self->decode_open = self->taken_buffers.count = 0;
    for (int c = 0; c < BATCH_COLUMNS; c++) self->batch[c].count = 0;
    reset_recorded(self);
    Py_RETURN_NONE;
}

/* set_values(stats, capture_patterns, capture_budget, (is_host, is_contiguous, nbytes, fp16_to_fp32)) */
static PyObject *Recorder_set_values(Recorder *self, PyObject *args) {
    int stats;
    PyObject *patterns;
    long long budget;
    unsigned long long f[4];
    if (!PyArg_ParseTuple(args, "pOL(KKKK)", &stats, &patterns, &budget, &f[0], &f[1], &f[2], &f[3])) return NULL;
    if (!PyTuple_Check(patterns) || PyTuple_GET_SIZE(patterns) > MAX_CAPTURES) {
        PyErr_SetString(PyExc_ValueError, "captures: a tuple of at most 16 name patterns");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (!f[i]) {
            PyErr_SetString(PyExc_ValueError, "a ggml function address is null");
            return NULL;
        }
    }
    int n = (int)PyTuple_GET_SIZE(patterns);
    for (int i = 0; i < n; i++) {
        const char *text = PyUnicode_AsUTF8(PyTuple_GET_ITEM(patterns, i));
        if (!text) return NULL;
        if (strlen(text) >= NAME_LEN) {
            PyErr_SetString(PyExc_ValueError, "captures: a pattern is longer than 63 bytes");
            return NULL;
        }
        strcpy(self->captures[i], text);
    }
    self->buffer_is_host = (tensor_bool_fn)(uintptr_t)f[0];
    self->is_contiguous = (tensor_bool_fn)(uintptr_t)f[1];
    self->nbytes_of = (size_fn)(uintptr_t)f[2];
    self->fp16_to_fp32 = (fp16_fn)(uintptr_t)f[3];
    if (!self->fp16_table) {
        self->fp16_table = malloc(65536 * sizeof(float));
        if (!self->fp16_table) return PyErr_NoMemory();
        for (uint32_t i = 0; i < 65536; i++) self->fp16_table[i] = self->fp16_to_fp32((uint16_t)i);
    }
    self->n_captures = n;
    self->capture_budget = budget;
    self->values_mode = stats;
    Py_RETURN_NONE;
}

static PyObject *Recorder_chain_abort(Recorder *self, PyObject *args) {
    unsigned long long function, data;
    if (!PyArg_ParseTuple(args, "KK", &function, &data)) return NULL;
    self->chained_abort = (abort_fn)(uintptr_t)function;
    self->chained_abort_data = (void *)(uintptr_t)data;
    Py_RETURN_NONE;
}

static PyObject *Recorder_get_address(Recorder *self, void *closure) {
    return PyLong_FromVoidPtr(self);
}

static PyMethodDef Recorder_methods[] = {
    {"take", (PyCFunction)Recorder_take, METH_O, "take(boundary_ns): the graphs recorded since the last take"},
    {"close", (PyCFunction)Recorder_close, METH_O, "close(boundary_ns): end the graph in flight; graphs closed"},
    {"drop_open", (PyCFunction)Recorder_drop_open, METH_NOARGS, "forget the graph in flight"},
    {"set_filters", (PyCFunction)Recorder_set_filters, METH_VARARGS,
     "set_filters(ops, layer_ranges, select_no_layer, name_patterns)"},
    {"take_counted", (PyCFunction)Recorder_take_counted, METH_NOARGS, "nodes counted (count mode) since last call"},
    {"set_decode_rules", (PyCFunction)Recorder_set_decode_rules, METH_VARARGS,
     "set_decode_rules(detail_graph, sample, graphs_per_write, write_interval_ns, batch_offsets)"},
    {"begin_decode", (PyCFunction)Recorder_begin_decode, METH_O, "begin_decode(batch_address): a call begins"},
    {"end_decode", (PyCFunction)Recorder_end_decode, METH_O,
     "end_decode(return_code): the call returned; 1: write the graphs now, 0: not yet, -1: failed"},
    {"take_decodes", (PyCFunction)Recorder_take_decodes, METH_NOARGS, "the calls closed since the last take"},
    {"discard", (PyCFunction)Recorder_discard, METH_NOARGS, "forget what was recorded since the last take"},
    {"set_values", (PyCFunction)Recorder_set_values, METH_VARARGS,
     "set_values(stats, capture_patterns, capture_budget, functions): read node outputs"},
    {"chain_abort", (PyCFunction)Recorder_chain_abort, METH_VARARGS,
     "chain_abort(function, data): the program's abort callback, called after ours (0: none)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Recorder_members[] = {
    {"mode", T_INT, offsetof(Recorder, mode), 0, "0 off, 1 record, 2 count"},
    {"time_nodes", T_INT, offsetof(Recorder, time_nodes), 0, "time the nodes of the graphs to come"},
    {"inline_timing", T_INT, offsetof(Recorder, inline_timing), 0, "time nodes by abort-callback ticks"},
    {"out_of_memory", T_INT, offsetof(Recorder, out_of_memory), READONLY, "recording stopped for lack of memory"},
    {"fail_after_nodes", T_LONGLONG, offsetof(Recorder, fail_after_nodes), 0, "tests: fail at this many nodes"},
    {"captures_skipped", T_LONGLONG, offsetof(Recorder, captures_skipped), READONLY, "captures over the budget"},
    {"capture_bytes_skipped", T_LONGLONG, offsetof(Recorder, capture_bytes_skipped), READONLY, "their bytes"},
    {"capture_budget", T_LONGLONG, offsetof(Recorder, capture_budget), READONLY, "capture bytes still allowed"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Recorder_getset[] = {
    {"address", (getter)Recorder_get_address, NULL, "the user_data pointer for the callback", NULL},
    {"open_nodes", (getter)Recorder_get_open_nodes, NULL, "nodes of the graph in flight", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ggml_viz.capture._native.Recorder",
    .tp_doc = "Native eval-callback recorder for one llama context",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Recorder_init,
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_methods = Recorder_methods,
    .tp_members = Recorder_members,
    .tp_getset = Recorder_getset,
};

/* ---- tensor description ids ------------------------------------------------------------ */

/* graph_decoder.TensorCatalog's memory of tensor descriptions: a struct's bytes (with what
   does not describe the tensor cleared) and the id of the tensor a view looks into, each
   given an id the first time it comes. A process's first graphs bring thousands of new
   descriptions, in the traced program's time; a dict of 340-byte keys cost milliseconds. */
typedef struct {
    PyObject_HEAD
    size_t struct_size; /* bytes of a description; the view source's id (int32) follows */
    Array keys;         /* struct_size + 4 bytes per description */
    Array ids, hashes;  /* int32 and uint64 per description */
    uint32_t *slots;    /* open addressing: description index + 1; 0 is empty */
    size_t n_slots;
} DescriptionIds;

static uint64_t hash_bytes(const uint8_t *data, size_t size) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ size, word;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        memcpy(&word, data + i, 8);
        h = (h ^ word) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    for (; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static int ids_rehash(DescriptionIds *self, size_t n_slots) {
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots) return -1;
    for (size_t k = 0; k < self->ids.count; k++) {
        size_t i = (size_t)ARRAY_AT(self->hashes, uint64_t, k) & (n_slots - 1);
        while (slots[i]) i = (i + 1) & (n_slots - 1);
        slots[i] = (uint32_t)(k + 1);
    }
    free(self->slots);
    self->slots = slots;
    self->n_slots = n_slots;
    return 0;
}

/* The id of `key` (struct_size + 4 bytes), given `*next_id` (then counted) if it is new. */
static int ids_lookup(DescriptionIds *self, const uint8_t *key, int32_t *next_id, int32_t *id, bool *is_new) {
    size_t key_size = self->keys.item_size;
    uint64_t h = hash_bytes(key, key_size);
    size_t i = (size_t)h & (self->n_slots - 1);
    for (; self->slots[i]; i = (i + 1) & (self->n_slots - 1)) {
        size_t k = self->slots[i] - 1;
        if (ARRAY_AT(self->hashes, uint64_t, k) == h && !memcmp(self->keys.items + k * key_size, key, key_size)) {
            *id = ARRAY_AT(self->ids, int32_t, k);
            *is_new = false;
            return 0;
        }
    }
    uint8_t *stored = array_push(&self->keys);
    int32_t *stored_id = array_push(&self->ids);
    uint64_t *stored_hash = array_push(&self->hashes);
    if (!stored || !stored_id || !stored_hash) return -1;
    memcpy(stored, key, key_size);
    *stored_id = *id = (*next_id)++;
    *stored_hash = h;
    self->slots[i] = (uint32_t)self->ids.count;
    *is_new = true;
    return (self->ids.count * 2 > self->n_slots) ? ids_rehash(self, self->n_slots * 2) : 0;
}

static int DescriptionIds_init(DescriptionIds *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t struct_size;
    if (!PyArg_ParseTuple(args, "n", &struct_size)) return -1;
    if (struct_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "DescriptionIds: the struct size must be positive");
        return -1;
    }
    self->struct_size = (size_t)struct_size;
    array_init(&self->keys, (size_t)struct_size + 4);
    array_init(&self->ids, sizeof(int32_t));
    array_init(&self->hashes, sizeof(uint64_t));
    if (ids_rehash(self, 4096) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void DescriptionIds_dealloc(DescriptionIds *self) {
    array_free(&self->keys);
    array_free(&self->ids);
    array_free(&self->hashes);
    free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* assign(structs, view_rows, next_id) -> (ids, new_rows, new_view_source_ids, next_id).
   structs: n descriptions of struct_size bytes; view_rows: int64[n], the row of the tensor
   each looks into (-1: not a view, or not in this graph). Rows go in order, so a view's
   source (an earlier row) has its id before the view's key is made. ids: int32[n]; new_rows:
   int32, the rows whose description was new (each distinct one once), with the id of the
   tensor each looks into (-1: none). */
static PyObject *DescriptionIds_assign(DescriptionIds *self, PyObject *args) {
    Py_buffer structs, view_rows;
    int next_id;
    if (!PyArg_ParseTuple(args, "y*y*i", &structs, &view_rows, &next_id)) return NULL;
    PyObject *result = NULL, *ids = NULL, *new_rows = NULL, *new_sources = NULL;
    uint8_t *key = NULL;
    size_t n = (size_t)structs.len / self->struct_size;
    if ((size_t)structs.len != n * self->struct_size || (size_t)view_rows.len != n * sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "DescriptionIds.assign: sizes do not match");
        goto done;
    }
    ids = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    new_rows = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    new_sources = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    key = malloc(self->keys.item_size);
    if (!ids || !new_rows || !new_sources || !key) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int32_t *id_of = (int32_t *)PyBytes_AS_STRING(ids), *rows = (int32_t *)PyBytes_AS_STRING(new_rows);
    int32_t *sources = (int32_t *)PyBytes_AS_STRING(new_sources);
    const int64_t *view_row = view_rows.buf;
    size_t n_new = 0;
    for (size_t r = 0; r < n; r++) id_of[r] = -1;
    for (size_t r = 0; r < n; r++) {
        int64_t v = view_row[r];
        int32_t source = (v >= 0 && (size_t)v < n) ? id_of[v] : -1;
        memcpy(key, (const uint8_t *)structs.buf + r * self->struct_size, self->struct_size);
        memcpy(key + self->struct_size, &source, 4);
        bool is_new;
        if (ids_lookup(self, key, &next_id, &id_of[r], &is_new) != 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (is_new) {
            rows[n_new] = (int32_t)r;
            sources[n_new++] = source;
        }
    }
    if (_PyBytes_Resize(&new_rows, (Py_ssize_t)(n_new * 4)) == 0 &&
        _PyBytes_Resize(&new_sources, (Py_ssize_t)(n_new * 4)) == 0) {
        result = Py_BuildValue("(OOOi)", ids, new_rows, new_sources, next_id);
    }
done:
    free(key);
    Py_XDECREF(ids);
    Py_XDECREF(new_rows);
    Py_XDECREF(new_sources);
    PyBuffer_Release(&structs);
    PyBuffer_Release(&view_rows);
    return result;
}

static PyObject *DescriptionIds_clear(DescriptionIds *self, PyObject *unused) {
    self->keys.count = self->ids.count = self->hashes.count = 0;
    memset(self->slots, 0, self->n_slots * sizeof *self->slots);
    Py_RETURN_NONE;
}

static Py_ssize_t DescriptionIds_len(DescriptionIds *self) {
    return (Py_ssize_t)self->ids.count;
}

static PyMethodDef DescriptionIds_methods[] = {
    {"assign", (PyCFunction)DescriptionIds_assign, METH_VARARGS,
     "assign(structs, view_rows, next_id) -> (ids, new_rows, new_view_source_ids, next_id)"},
    {"clear", (PyCFunction)DescriptionIds_clear, METH_NOARGS, "forget every description"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods DescriptionIds_sequence = {.sq_length = (lenfunc)DescriptionIds_len};

static PyTypeObject DescriptionIdsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ggml_viz.capture._native.DescriptionIds",
    .tp_doc = "Ids of tensor descriptions, given the first time each is seen",
    .tp_basicsize = sizeof(DescriptionIds),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DescriptionIds_init,
    .tp_dealloc = (destructor)DescriptionIds_dealloc,
    .tp_methods = DescriptionIds_methods,
    .tp_as_sequence = &DescriptionIds_sequence,
};

static PyObject *native_layer_of(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    char padded[NAME_LEN + 1] = {0};
    strncpy(padded, name, NAME_LEN);
    return PyLong_FromLongLong(layer_of(padded));
}

/* layers_of(names) -> int32 bytes: layer_of for each name of NAME_LEN bytes (a ggml_tensor's
   name field, as copied: a C string, perhaps with stale bytes after its end). */
static PyObject *native_layers_of(PyObject *module, PyObject *arg) {
    Py_buffer names;
    if (!PyArg_Parse(arg, "y*", &names)) return NULL;
    size_t n = (size_t)names.len / NAME_LEN;
    PyObject *layers = NULL;
    if ((size_t)names.len != n * NAME_LEN) {
        PyErr_SetString(PyExc_ValueError, "layers_of: names of 64 bytes each");
    } else if ((layers = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4)))) {
        int32_t *out = (int32_t *)PyBytes_AS_STRING(layers);
        char padded[NAME_LEN + 1] = {0};
        for (size_t i = 0; i < n; i++) {
            memcpy(padded, (const char *)names.buf + i * NAME_LEN, NAME_LEN);
            out[i] = (int32_t)layer_of(padded);
        }
    }
    PyBuffer_Release(&names);
    return layers;
}

/* read_batch(address, (token, pos, n_seq_id, seq_id, logits offsets)) -> (n_tokens,
   lowest position, token_id, pos, seq_id, output), the columns as bytes of int32, int32,
   int32, uint8: a llama_batch, copied (see copy_batch). */
static PyObject *native_read_batch(PyObject *module, PyObject *args) {
    unsigned long long address;
    Py_ssize_t offsets[5];
    if (!PyArg_ParseTuple(args, "K(nnnnn)", &address, &offsets[0], &offsets[1], &offsets[2], &offsets[3],
                          &offsets[4])) {
        return NULL;
    }
    const uint8_t *batch = (const uint8_t *)(uintptr_t)address;
    int32_t n = batch_size(batch);
    PyObject *columns[4] = {
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4), PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4),
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4), PyBytes_FromStringAndSize(NULL, n)};
    if (!columns[0] || !columns[1] || !columns[2] || !columns[3]) {
        for (int i = 0; i < 4; i++) Py_XDECREF(columns[i]);
        return NULL;
    }
    long long lowest = copy_batch(batch, offsets, n, (int32_t *)PyBytes_AS_STRING(columns[0]),
                                  (int32_t *)PyBytes_AS_STRING(columns[1]), (int32_t *)PyBytes_AS_STRING(columns[2]),
                                  (uint8_t *)PyBytes_AS_STRING(columns[3]));
    return Py_BuildValue("(iLNNNN)", (int)n, lowest, columns[0], columns[1], columns[2], columns[3]);
}

static PyMethodDef module_methods[] = {
    {"layer_of", native_layer_of, METH_O, "the layer the native recorder reads in a tensor name"},
    {"layers_of", native_layers_of, METH_O, "layers_of(names): layer_of for each 64-byte name, as int32 bytes"},
    {"read_batch", native_read_batch, METH_VARARGS, "read_batch(address, offsets): a llama_batch's columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "ggml_viz.capture._native", "ggml-viz's native eval-callback recorder", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&RecorderType) < 0 || PyType_Ready(&DescriptionIdsType) < 0) return NULL;
    PyObject *module = PyModule_Create(&native_module);
    if (!module) return NULL;
    Py_INCREF(&RecorderType);
    Py_INCREF(&DescriptionIdsType);
    if (PyModule_AddObject(module, "Recorder", (PyObject *)&RecorderType) < 0 ||
        PyModule_AddObject(module, "DescriptionIds", (PyObject *)&DescriptionIdsType) < 0 ||
        PyModule_AddObject(module, "CALLBACK_ADDRESS", PyLong_FromVoidPtr((void *)ggml_viz_eval_callback)) < 0 ||
        PyModule_AddObject(module, "ABORT_CALLBACK_ADDRESS", PyLong_FromVoidPtr((void *)ggml_viz_abort_callback)) < 0 ||
        PyModule_AddObject(module, "TIMING_FLOOR_CALLBACK_ADDRESS",
                           PyLong_FromVoidPtr((void *)ggml_viz_timing_floor_callback)) < 0 ||
        PyModule_AddObject(module, "GRAPH_FLOOR_CALLBACK_ADDRESS",
                           PyLong_FromVoidPtr((void *)ggml_viz_graph_floor_callback)) < 0 ||
        PyModule_AddIntConstant(module, "MODE_OFF", MODE_OFF) < 0 ||
        PyModule_AddIntConstant(module, "MODE_RECORD", MODE_RECORD) < 0 ||
        PyModule_AddIntConstant(module, "MODE_COUNT", MODE_COUNT) < 0 ||
        PyModule_AddIntConstant(module, "NODE_TIMED", NODE_TIMED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
