/* The recorder's hot path: see recorder.h. No Python here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder.h"

#include "got_hook.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- growable arrays -------------------------------------------------------------- */

int array_reserve(Array *a, size_t extra) {
    if (a->count + extra <= a->capacity) return 0;
    size_t capacity = a->capacity ? a->capacity : 1024;
    while (capacity < a->count + extra) capacity *= 2;
    uint8_t *items = realloc(a->items, capacity * a->item_size);
    if (!items) return -1;
    a->items = items;
    a->capacity = capacity;
    return 0;
}

void *array_push(Array *a) {
    if (array_reserve(a, 1) != 0) return NULL;
    return a->items + (a->count++) * a->item_size;
}


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

static bool is_selected(Recorder *r, const uint8_t *tensor) {
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
static int buffer_usage_of(const Recorder *r, const void *buffer) {
    return r->ggml.buffer_usage ? r->ggml.buffer_usage(buffer) : -1;
}

static int describe_buffer(Recorder *r, uint64_t buffer) {
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
    if (!buffer || set_find(r, buffer)) return 0;
    if (set_add(r, buffer, 3) != 0) return -1;
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

/* ---- weights without a name ------------------------------------------------------------ */

/* BUFFER_USAGE_WEIGHTS: GGML_BACKEND_BUFFER_USAGE_WEIGHTS, the same in ggml 0.13.1 and 0.25.3 */
enum { FINGERPRINT_SAMPLE = 64, BUFFER_USAGE_WEIGHTS = 1 };

static uint64_t fnv1a(uint64_t hash, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    return hash;
}

uint64_t weight_fingerprint(const uint8_t *bytes, uint64_t nbytes) {
    size_t k = nbytes < FINGERPRINT_SAMPLE ? (size_t)nbytes : FINGERPRINT_SAMPLE;
    uint64_t hash = fnv1a(0xcbf29ce484222325ULL, bytes, k);
    hash = fnv1a(hash, bytes + (nbytes - k) / 2, k);
    return fnv1a(hash, bytes + nbytes - k, k);
}

/* Where `key` is, or goes, in a sorted array of uint64; whether it is there. */
static bool sorted_find(const Array *a, uint64_t key, size_t *at) {
    size_t low = 0, high = a->count;
    while (low < high) {
        size_t mid = (low + high) / 2;
        if (ARRAY_AT(*a, uint64_t, mid) < key) low = mid + 1;
        else high = mid;
    }
    *at = low;
    return low < a->count && ARRAY_AT(*a, uint64_t, low) == key;
}

/* A leaf the program left unnamed (ggml names it leaf_N in the graph) in a weights buffer the
   host can read: fingerprinted once, the first time a graph reads it. */
static int print_weight(Recorder *r, const uint8_t *tensor) {
    const char *name = (const char *)tensor + r->layout.name_offset;
    if (name[0] && strncmp(name, "leaf_", 5) != 0) return 0;
    const void *buffer = (const void *)(uintptr_t)field_u64(tensor, r->layout.buffer_offset);
    const uint8_t *data = (const uint8_t *)(uintptr_t)field_u64(tensor, r->layout.data_offset);
    if (!buffer || !data || buffer_usage_of(r, buffer) != BUFFER_USAGE_WEIGHTS || !r->print_buffer_is_host(buffer)) {
        return 0;
    }
    size_t at;
    if (sorted_find(&r->printed, (uint64_t)(uintptr_t)data, &at)) return 0;
    if (array_reserve(&r->printed, 1) != 0) return -1;
    memmove(r->printed.items + (at + 1) * sizeof(uint64_t), r->printed.items + at * sizeof(uint64_t),
            (r->printed.count - at) * sizeof(uint64_t));
    ARRAY_AT(r->printed, uint64_t, at) = (uint64_t)(uintptr_t)data;
    r->printed.count++;
    WeightPrint *print = array_push(&r->weight_prints);
    if (!print) return -1;
    uint64_t nbytes = r->print_nbytes(tensor);
    *print = (WeightPrint){(uint64_t)(uintptr_t)data, nbytes, weight_fingerprint(data, nbytes)};
    return 0;
}

static int copy_leaf(Recorder *r, uint64_t address) {
    if (!address || set_find(r, address)) return 0;
    const uint8_t *copied;
    uint64_t *ptr = array_push(&r->leaf_ptrs);
    if (!ptr || copy_tensor(r, &r->leaves, address, &copied) != 0) return -1;
    *ptr = address;
    if (set_add(r, address, 2) != 0) return -1;
    if (r->print_nbytes && print_weight(r, copied) != 0) return -1;
    return note_buffer(r, copied);
}

/* ---- repeating the previous graph ------------------------------------------------------ */

/* Whether a live tensor struct equals a copied one (a name's bytes after its NUL aside).
   Nearly always the bytes are all equal: one comparison, the name's end sought only if not. */
static bool same_struct(Recorder *r, const uint8_t *live, const uint8_t *copied) {
    if (memcmp(live, copied, r->layout.tensor_size) == 0) return true;
    size_t name_end = r->layout.name_offset + NAME_LEN;
    return memcmp(live, copied, r->layout.name_offset) == 0 &&
           strncmp((const char *)live + r->layout.name_offset, (const char *)copied + r->layout.name_offset, NAME_LEN) == 0 &&
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
    if (!same_struct(r, (const uint8_t *)(uintptr_t)address, r->previous_nodes.items + i * r->layout.tensor_size)) return 0;
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
    r->graph_first_routing = r->routing_records.count;
    r->graph_first_routing_byte = r->routing_data.count;
    r->routing_chains.count = r->routing_reads.count = 0;
    r->planned_next = r->routing_plan_at = 0;
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
   repeats the previous graph struct for struct (then the reader reuses what it decoded). */
static int settle_routing(Recorder *r);

static int close_graph(Recorder *r, int64_t boundary) {
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
    int64_t *boundary_ns = array_push(&r->graph_boundary);
    uint8_t *same_flag = array_push(&r->graph_same);
    if (!node_start || !struct_start || !leaf_start || !buffer_start || !tick_start || !boundary_ns || !same_flag ||
        !stats_start || !capture_start || !capture_data_start || !routing_start || !routing_data_start) {
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
    memcpy(name, tensor + r->layout.name_offset, NAME_LEN);
    name[NAME_LEN] = 0;
    for (int i = 0; i < r->n_captures; i++) {
        if (fnmatch(r->captures[i], name, 0) == 0) return true;
    }
    return false;
}

static bool host_readable(Recorder *r, const uint8_t *tensor) {
    uint64_t buffer = field_u64(tensor, r->layout.buffer_offset);
    return field_u64(tensor, r->layout.data_offset) != 0 && (!buffer || r->values.buffer_is_host((const void *)(uintptr_t)buffer));
}

/* Statistics of a computed node's output, read in place (any strides), f32 and f16. */
static int record_stats(Recorder *r, const uint8_t *tensor, uint32_t node) {
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
    memcpy(r->capture_data.items + r->capture_data.count, (const void *)(uintptr_t)field_u64(tensor, r->layout.data_offset),
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
    memcpy(&op, tensor + r->layout.op_offset, sizeof op);
    return op == r->first_op && strncmp((const char *)tensor + r->layout.name_offset, r->first_name, NAME_LEN) == 0;
}

/* ---- the tokens of a graph computed outside llama ------------------------------------------ */

enum { MAX_INPUT_IDS = 4096 };

static bool in_weights(Recorder *r, const uint8_t *tensor) {
    const void *buffer = (const void *)(uintptr_t)field_u64(tensor, r->layout.buffer_offset);
    return buffer && buffer_usage_of(r, buffer) == BUFFER_USAGE_WEIGHTS;
}

/* A plain program's graph (whisper.cpp's decoder) takes its tokens as an input: the integer
   ids a GET_ROWS looks up in a weight. Those ids, in host memory and set before the graph
   runs, become the call's tokens; where a graph looks up two tables (token and positional
   embeddings), the larger table's ids are the tokens and the other's their positions. */
static int note_input_ids(Recorder *r, const uint8_t *node) {
    const char *op = r->ggml.op_desc ? r->ggml.op_desc(node) : NULL;
    if (!op || strcmp(op, "GET_ROWS") != 0 || !r->print_buffer_is_host) return 0;
    const uint8_t *table = (const uint8_t *)(uintptr_t)field_u64(node, r->layout.src_offset);
    const uint8_t *ids = (const uint8_t *)(uintptr_t)field_u64(node, r->layout.src_offset + 8);
    if (!table || !ids || !in_weights(r, table) || in_weights(r, ids)) return 0;
    int32_t type;
    int64_t ne[4], table_ne[4];
    memcpy(&type, ids + r->layout.type_offset, sizeof type);
    memcpy(ne, ids + r->layout.ne_offset, sizeof ne);
    memcpy(table_ne, table + r->layout.ne_offset, sizeof table_ne);
    const void *buffer = (const void *)(uintptr_t)field_u64(ids, r->layout.buffer_offset);
    const int32_t *values = (const int32_t *)(uintptr_t)field_u64(ids, r->layout.data_offset);
    if (type != TYPE_I32 || ne[0] <= 0 || ne[0] > MAX_INPUT_IDS || ne[1] != 1 || ne[2] != 1 || ne[3] != 1 ||
        field_u64(ids, r->layout.nb_offset) != sizeof(int32_t) || !values || !buffer || !r->print_buffer_is_host(buffer)) {
        return 0;
    }
    DecodeRecord *call = &ARRAY_AT(r->decodes, DecodeRecord, r->decodes.count - 1);
    size_t n = (size_t)ne[0];
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
        r->ids_table_rows = table_ne[1];
    } else if ((size_t)call->n_tokens == n && call->first_token + n == r->batch[BATCH_TOKENS].count) {
        int32_t *tokens = &ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, call->first_token);
        int32_t *positions = &ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, call->first_token);
        if (table_ne[1] > r->ids_table_rows) { /* the larger table is the vocabulary */
            memcpy(positions, tokens, n * sizeof(int32_t));
            memcpy(tokens, values, n * sizeof(int32_t));
            r->ids_table_rows = table_ne[1];
        } else {
            memcpy(positions, values, n * sizeof(int32_t));
        }
    }
    return 0;
}

/* ---- mixture of experts: the experts each token chose ------------------------------------- */

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
static int note_routing(Recorder *r, const uint8_t *tensor, uint64_t address, uint32_t node, bool can_plan,
                        uint8_t *flags) {
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
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) memcpy(out + i0 * element_size, data + offset + i0 * nb[0], element_size);
                }
                out += row;
            }
    return true;
}

/* A routing read noted at a MUL_MAT_ID, done now that the node ran. */
static int read_routing(Recorder *r, RoutingRead *pending) {
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
    *record = (RoutingRecord){.node = pending->node, .n_used = (int32_t)ne[0], .n_tokens = (int32_t)(n / ne[0]),
                              .n_expert = pending->experts, .status = ROUTING_READ,
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
static int read_answered_routing(Recorder *r, uint32_t node) {
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
static int read_planned_routing(Recorder *r, size_t ticks) {
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
static int settle_routing(Recorder *r) {
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

/* ---- asking ------------------------------------------------------------------------------- */

/* Record a node the scheduler asks about; returns the answer, or -1 out of memory. */
static int on_ask(Recorder *r, uint64_t address) {
    if (r->fail_after_nodes > 0 && (long long)r->node_flags.count >= r->fail_after_nodes) return -1;
    const uint8_t *tensor = (const uint8_t *)(uintptr_t)address; /* live; the copy once there is one */
    bool asked = !r->reading_at_compute; /* else the graph is read whole, at its compute call */
    if (asked && starts_next_graph(r, tensor) && close_graph(r, now_ns()) != 0) return -1;
    int repeat = check_repeat(r, address);
    if (asked && repeat == 0 && set_find(r, address) == 1) { /* a node again: the next graph begins */
        if (close_graph(r, now_ns()) != 0) return -1;
        repeat = check_repeat(r, address);
    }
    if (repeat < 0) return -1;
    if (!repeat) {
        if (copy_tensor(r, &r->nodes, address, &tensor) != 0) return -1;
        if (set_add(r, address, 1) != 0 || note_buffer(r, tensor) != 0) return -1;
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
    for (int i = 0; i < n_nodes; i++) {
        if (on_ask(r, (uint64_t)(uintptr_t)node_at(graph, i)) < 0) goto failed;
    }
    r->reading_at_compute = 0;
    if (n_nodes > 0) ARRAY_AT(r->starts, int64_t, r->graph_first_node) = ARRAY_AT(r->ends, int64_t, r->graph_first_node) = start_ns;
    if (n_nodes > 0 && r->tick_reads) ARRAY_AT(r->starts, int64_t, r->node_flags.count - 1) = start_ns; /* the split's last ask */
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

/* Inline timing: the CPU backend's thread 0 calls this after each node it computes (not
   after views, which it skips, and once for nodes it fuses), before the barrier that
   ends the node. It always runs on the thread that called llama_decode. The barrier
   that follows, on this thread, is the node's end (recorder_barrier_passed). */
static __thread Recorder *barrier_recorder; /* the tick waiting for its barrier, on this thread */
static __thread size_t barrier_tick;

bool recorder_abort_callback(void *user_data) {
    Recorder *r = (Recorder *)user_data;
    if (r->mode == MODE_RECORD && r->inline_timing && r->time_nodes) {
        int64_t *tick = array_push(&r->tick_ns);
        uint32_t *asked = array_push(&r->tick_asked);
        int64_t *barrier = array_push(&r->tick_barrier_ns);
        if (!tick || !asked || !barrier) {
            r->out_of_memory = 1;
            r->mode = MODE_OFF;
        } else {
            *tick = now_ns();
            *asked = (uint32_t)(r->tick_split_end ? r->tick_split_end : r->node_flags.count - r->graph_first_node);
            *barrier = 0;
            barrier_recorder = r;
            barrier_tick = r->tick_ns.count - 1;
            if (r->routing && read_planned_routing(r, r->tick_ns.count - r->graph_first_tick) != 0) {
                r->out_of_memory = 1;
                r->mode = MODE_OFF;
            }
        }
    }
    return r->chained_abort ? r->chained_abort(r->chained_abort_data) : false;
}

/* Called right after every ggml_barrier returns, on the thread that called it. The first
   one after a tick on the ticking thread is the barrier ending that node: every thread
   finished it then. Barriers inside an op (a matrix multiplication converting its input
   first) come before the op's tick, and other threads never tick: neither is taken. */
void recorder_barrier_passed(void) {
    Recorder *r = barrier_recorder;
    if (!r) return;
    barrier_recorder = NULL;
    if (barrier_tick < r->tick_barrier_ns.count) ARRAY_AT(r->tick_barrier_ns, int64_t, barrier_tick) = now_ns();
}

/* Every ggml_barrier call passes through one of these (recorder_hook_barriers): one per
   library defining a ggml_barrier of its own (ggml-cpu; its variants when several load). */
typedef void (*barrier_fn)(void *threadpool);
enum { MAX_BARRIER_LIBRARIES = 4 };
static barrier_fn barrier_originals[MAX_BARRIER_LIBRARIES];
#define BARRIER_TRAMPOLINE(i)                          \
    static void barrier_##i(void *threadpool) {        \
        barrier_originals[i](threadpool);              \
        recorder_barrier_passed();                     \
    }
BARRIER_TRAMPOLINE(0)
BARRIER_TRAMPOLINE(1)
BARRIER_TRAMPOLINE(2)
BARRIER_TRAMPOLINE(3)
static barrier_fn const barrier_trampolines[MAX_BARRIER_LIBRARIES] = {barrier_0, barrier_1, barrier_2, barrier_3};

static void *barrier_replacement(void *original, void *context) {
    (void)context;
    for (int i = 0; i < MAX_BARRIER_LIBRARIES; i++) {
        if (!barrier_originals[i]) barrier_originals[i] = (barrier_fn)original;
        if (barrier_originals[i] == (barrier_fn)original) return (void *)barrier_trampolines[i];
    }
    return NULL;
}

int recorder_hook_barriers(void) {
    int failed = 0;
    int hooked = got_hook("ggml_barrier", barrier_replacement, NULL, &failed);
    return failed ? -1 : hooked;
}

/* The floor of per-node timing, for benchmarks: a callback that takes the time and asks
   for every node, recording nothing. What it costs is what ggml's slicing costs. */
static volatile int64_t floor_last_ns;
bool recorder_timing_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)ask;
    (void)user_data;
    floor_last_ns = now_ns();
    return true;
}

/* The floor of graph-level recording: a callback that declines every node, so each graph
   runs in one piece, and records nothing. What it costs is what ggml's asking costs. */
bool recorder_graph_floor_callback(void *tensor, bool ask, void *user_data) {
    (void)tensor;
    (void)user_data;
    return !ask;
}

/* ---- llama_batch ----------------------------------------------------------------------- */

int32_t batch_size(const uint8_t *batch) {
    int32_t n;
    memcpy(&n, batch, sizeof n);
    return n < 0 ? 0 : n;
}

/* Copy a llama_batch's columns (offsets of its token, pos, n_seq_id, seq_id and logits
   pointers): token ids, positions, each token's first sequence id, whether llama.cpp
   computes its logits. What a pointer the batch leaves NULL gives is -1 (outputs: the last
   token only, as llama.cpp does). Returns the lowest position (-1: no token). */
long long copy_batch(const uint8_t *batch, const size_t *offsets, int32_t n, int32_t *token_out,
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
    if ((r->decode_open || r->node_flags.count > r->graph_first_node) && close_decode(r, 0, now) != 0) return OPEN_FAILED;
    for (int c = 0; c < BATCH_COLUMNS; c++) {
        if (array_reserve(&r->batch[c], (size_t)n) != 0) return OPEN_FAILED;
    }
    DecodeRecord *record = array_push(&r->decodes);
    if (!record) return OPEN_FAILED;
    size_t first = r->batch[BATCH_TOKENS].count;
    long long lowest = NO_BATCH; /* a graph computed outside llama: tokens only from its inputs */
    r->plain_call = batch == NULL;
    r->ids_table_rows = 0;
    if (batch) {
        lowest = copy_batch(batch, r->batch_offsets, n, &ARRAY_AT(r->batch[BATCH_TOKENS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_POSITIONS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_SEQ_IDS], int32_t, first),
                            &ARRAY_AT(r->batch[BATCH_OUTPUTS], uint8_t, first));
    }
    for (int c = 0; c < BATCH_COLUMNS; c++) r->batch[c].count += (size_t)n;
    *record = (DecodeRecord){.index = index, .start_ns = now, .end_ns = now, .n_tokens = n,
                             .lowest_position = (int32_t)lowest, .first_token = first};
    r->decode_open = 1;
    return lowest;
}

/* Whether a llama_batch holds a prompt, as context_tracer.batch_phase says: a decode step
   has each token alone in its sequence, past the sequence's start, with its logits computed
   (a server's slots step together so); a batch that starts a sequence, or holds several
   tokens of one, or does not compute every token's logits, holds a prompt. */
static bool is_prompt_batch(const uint8_t *batch, const size_t *offsets, int32_t n) {
    if (!batch || n <= 0) return false;
    const int32_t *pos, *n_seq;
    const int32_t *const *seq;
    const int8_t *logits;
    memcpy(&pos, batch + offsets[1], sizeof pos);
    memcpy(&n_seq, batch + offsets[2], sizeof n_seq);
    memcpy(&seq, batch + offsets[3], sizeof seq);
    memcpy(&logits, batch + offsets[4], sizeof logits);
    if (n == 1) return pos && pos[0] == 0;
    if (!pos || !logits || n > 256) return true;
    for (int32_t i = 0; i < n; i++) {
        if (logits[i] <= 0 || pos[i] <= 0) return true;
        int32_t s = (seq && n_seq && n_seq[i] > 0 && seq[i]) ? seq[i][0] : -1;
        for (int32_t j = 0; j < i; j++) {
            if (s == ((seq && n_seq && n_seq[j] > 0 && seq[j]) ? seq[j][0] : -1)) return true;
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
void array_init(Array *a, size_t item_size) {
    memset(a, 0, sizeof *a);
    a->item_size = item_size;
}

void array_free(Array *a) {
    free(a->items);
    a->items = NULL;
    a->count = a->capacity = 0;
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
    X(r, graph_routing_data_start, sizeof(size_t))
#define ARRAY_INIT(r, field, item_size) array_init(&(r)->field, item_size);
#define ARRAY_FREE(r, field, item_size) array_free(&(r)->field);
static void reset_recorded(Recorder *r) {
    r->nodes.count = r->leaves.count = r->node_ptrs.count = r->leaf_ptrs.count = 0;
    r->starts.count = r->ends.count = r->node_flags.count = 0;
    r->tick_ns.count = r->tick_asked.count = r->tick_barrier_ns.count = r->graph_tick_start.count = 0;
    r->stats.count = r->capture_records.count = r->capture_data.count = 0;
    r->graph_stats_start.count = r->graph_capture_start.count = r->graph_capture_data_start.count = 0;
    r->routing_records.count = r->routing_data.count = 0;
    r->graph_routing_start.count = r->graph_routing_data_start.count = 0;
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
    if (set_grow(r) != 0) return -1;
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
    if (barrier_recorder == r) barrier_recorder = NULL;
    RECORDER_ARRAYS(ARRAY_FREE, r)
    free(r->set_keys);
    free(r->set_kinds);
    free(r->previous_selection);
    free(r->fp16_table);
    r->set_keys = NULL;
    r->set_kinds = NULL;
    r->previous_selection = NULL;
    r->fp16_table = NULL;
}

void recorder_set_weight_prints(Recorder *r, tensor_bool_fn buffer_is_host, size_fn nbytes) {
    r->print_buffer_is_host = buffer_is_host;
    r->print_nbytes = buffer_is_host ? nbytes : NULL;
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

const char *recorder_set_values(Recorder *r, int stats, const char *const *patterns, int n_patterns,
                                long long budget, const ValueFunctions *functions) {
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
    size_t n0, n1, m0, m1, l0, l1, b0, b1, k0, k1, v0, v1, c0, c1, d0, d1, e0, e1, f0, f1;
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
    bool same_buffers = r->taken_buffers.count == b1 - b0 && !memcmp(r->taken_buffers.items, buffers.data, buffers.size);
    if (!same_buffers) {
        r->taken_buffers.count = 0;
        if (array_reserve(&r->taken_buffers, b1 - b0) != 0) return -1;
        memcpy(r->taken_buffers.items, buffers.data, buffers.size);
        r->taken_buffers.count = b1 - b0;
    }
    out->plain_repeat = out->same && same_buffers && !out->n_timed && !n_selected && k1 == k0 && v1 == v0 && c1 == c0 &&
                        e1 == e0;
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
    return 0;
}

void recorder_take_end(Recorder *r) {
    reset_recorded(r);
}

void recorder_decodes_view(Recorder *r, DecodesTake *out) {
    size_t n_done = r->decodes.count - (r->decode_open ? 1 : 0);
    size_t tokens_done =
        r->decode_open ? ARRAY_AT(r->decodes, DecodeRecord, n_done).first_token : r->batch[BATCH_TOKENS].count;
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
        r->graph_routing_data_start.count != n_graphs) {
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
