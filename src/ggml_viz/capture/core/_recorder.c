/*
 * ggml_viz.capture.core._recorder: the CPython side of the C recorder. The hot path lives in
 * recorder.c (no Python there; the preload library for native programs builds on it too); this file only hands its records to Python, as named record types:
 *
 *   GraphRecord   one graph taken (the parts recorder.h's GraphTake names, as bytes)
 *   RepeatRecord  a plain repeat of the graph before it: n_nodes, start_ns, end_ns
 *   DecodesRecord the llama_decode calls closed since the last take, and their tokens
 *
 * The records' layouts and the numbers both sides use are the contract's (ggml_viz_contract.h, written
 * from ggml_viz/capture/contract/ at build time): CONTRACT_DIGEST says which, and the Python side
 * refuses a build made from other declarations at import.
 *
 * Built on CPython's limited API as of 3.10 (setup.py: Py_LIMITED_API), so that one build serves every
 * CPython from 3.10 (an abi3 wheel): heap types from PyType_Spec, the function forms of the tuple and
 * bytes macros, and buffers read with "y#" (Py_buffer is in the limited API only from 3.11): bytes, or
 * objects such as NumPy's arrays whose buffer needs no release.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdlib.h>
#include <string.h>

#include "recorder.h"

typedef struct {
    PyObject_HEAD Recorder core;
    int ready; /* core initialized: dealloc frees it */
} PyRecorder;

static PyTypeObject *GraphRecordType, *RepeatRecordType, *DecodesRecordType;

/* The named records' fields, declared in ggml_viz/capture/contract/records.py. */
static PyStructSequence_Field graph_record_fields[] = {GRAPH_RECORD_FIELDS, {NULL, NULL}};
static PyStructSequence_Desc graph_record_desc = {"ggml_viz.capture.core._recorder.GraphRecord", GRAPH_RECORD_DOC,
                                                  graph_record_fields, GRAPH_RECORD_FIELD_COUNT};
static PyStructSequence_Field repeat_record_fields[] = {REPEAT_RECORD_FIELDS, {NULL, NULL}};
static PyStructSequence_Desc repeat_record_desc = {"ggml_viz.capture.core._recorder.RepeatRecord", REPEAT_RECORD_DOC,
                                                   repeat_record_fields, REPEAT_RECORD_FIELD_COUNT};
static PyStructSequence_Field decodes_record_fields[] = {DECODES_RECORD_FIELDS, {NULL, NULL}};
static PyStructSequence_Desc decodes_record_desc = {"ggml_viz.capture.core._recorder.DecodesRecord", DECODES_RECORD_DOC,
                                                    decodes_record_fields, DECODES_RECORD_FIELD_COUNT};

/* A bytes-like argument read with "y#": bytes, or an object whose buffer needs no release (NumPy's arrays;
   not bytearray or memoryview). */
typedef struct {
    const char *buf;
    Py_ssize_t len;
} ReadBuffer;

/* *bytes cut to its first `size` bytes, as _PyBytes_Resize (not in the limited API) does it: in a copy. On
   failure *bytes is NULL and -1 returned. */
static int bytes_cut(PyObject **bytes, Py_ssize_t size) {
    PyObject *cut = PyBytes_FromStringAndSize(PyBytes_AsString(*bytes), size);
    Py_DECREF(*bytes);
    *bytes = cut;
    return cut ? 0 : -1;
}

static PyObject *bytes_of(Bytes b) {
    return PyBytes_FromStringAndSize((const char *)b.data, (Py_ssize_t)b.size);
}

static int Recorder_init(PyRecorder *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"layout", "functions", NULL};
    PyObject *layout, *functions;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", keywords, &layout, &functions)) return -1;
    TensorLayout l;
    unsigned long long f[8];
    if (!PyArg_ParseTuple(layout, "nnnnnnnnnnn", &l.tensor_size, &l.buffer_offset, &l.op_offset, &l.src_offset,
                          &l.n_src, &l.view_src_offset, &l.name_offset, &l.type_offset, &l.ne_offset, &l.nb_offset,
                          &l.data_offset) ||
        !PyArg_ParseTuple(functions, "KKKKKKKK", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7])) {
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        if (!f[i]) {
            PyErr_SetString(PyExc_ValueError, "a ggml function address is null");
            return -1;
        }
    }
    if (l.tensor_size < l.name_offset + NAME_LEN) {
        PyErr_SetString(PyExc_ValueError, "tensor layout: the name lies past the struct");
        return -1;
    }
    GgmlFunctions ggml = {
        .buffer_name = (name_fn)(uintptr_t)f[0],
        .buffer_usage = (usage_fn)(uintptr_t)f[1],
        .buffer_size = (size_fn)(uintptr_t)f[2],
        .buffer_base = (ptr_fn)(uintptr_t)f[3],
        .buffer_type = (ptr_fn)(uintptr_t)f[4],
        .buft_name = (name_fn)(uintptr_t)f[5],
        .op_desc = (name_fn)(uintptr_t)f[6],
        .op_name = (op_name_fn)(uintptr_t)f[7],
    };
    if (self->ready) recorder_free(&self->core);
    self->ready = 0;
    if (recorder_init(&self->core, &l, &ggml) != 0) {
        recorder_free(&self->core);
        PyErr_NoMemory();
        return -1;
    }
    self->ready = 1;
    return 0;
}

/* Frees an instance of one of this module's heap types, and lets go of the type it holds. */
static void free_instance(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DECREF(type);
}

static void Recorder_dealloc(PyRecorder *self) {
    if (self->ready) recorder_free(&self->core);
    free_instance((PyObject *)self);
}

static PyObject *graph_record(const GraphTake *g) {
    if (g->plain_repeat) {
        PyObject *record = PyStructSequence_New(RepeatRecordType);
        if (!record) return NULL;
        PyStructSequence_SetItem(record, 0, PyLong_FromUnsignedLongLong(g->n_nodes));
        PyStructSequence_SetItem(record, 1, PyLong_FromLongLong(g->start_ns));
        PyStructSequence_SetItem(record, 2, PyLong_FromLongLong(g->end_ns));
        return record;
    }
    PyObject *record = PyStructSequence_New(GraphRecordType);
    if (!record) return NULL;
    for (int p = 0; p < GRAPH_PARTS; p++) PyStructSequence_SetItem(record, p, bytes_of(g->parts[p]));
    PyStructSequence_SetItem(record, GRAPH_PARTS, PyLong_FromLongLong(g->boundary_ns));
    PyStructSequence_SetItem(record, GRAPH_PARTS + 1, PyBool_FromLong(g->same));
    PyStructSequence_SetItem(record, GRAPH_PARTS + 2, PyLong_FromLongLong(g->n_timed));
    PyStructSequence_SetItem(record, GRAPH_PARTS + 3, PyLong_FromLongLong(g->end_ns));
    for (int i = 0; i < GRAPH_PARTS + 4; i++) {
        if (!PyStructSequence_GetItem(record, i)) {
            Py_DECREF(record);
            return NULL;
        }
    }
    return record;
}

/* take(boundary_ns) -> [GraphRecord | RepeatRecord]: the graphs recorded since the last take. */
static PyObject *Recorder_take(PyRecorder *self, PyObject *arg) {
    long long boundary = PyLong_AsLongLong(arg);
    if (boundary == -1 && PyErr_Occurred()) return NULL;
    long long n_graphs = recorder_take_begin(&self->core, boundary);
    if (n_graphs < 0) return PyErr_NoMemory();
    PyObject *graphs = PyList_New((Py_ssize_t)n_graphs);
    if (!graphs) return NULL;
    for (long long g = 0; g < n_graphs; g++) {
        GraphTake taken;
        if (recorder_take_graph(&self->core, (size_t)g, &taken) != 0) {
            Py_DECREF(graphs);
            return PyErr_NoMemory();
        }
        PyObject *record = graph_record(&taken);
        if (!record) {
            Py_DECREF(graphs);
            return NULL;
        }
        PyList_SetItem(graphs, (Py_ssize_t)g, record);
    }
    recorder_take_end(&self->core);
    return graphs;
}

/* take_decodes() -> DecodesRecord: the calls whose graphs were closed (one still running stays). */
static PyObject *Recorder_take_decodes(PyRecorder *self, PyObject *Py_UNUSED(unused)) {
    DecodesTake taken;
    recorder_decodes_view(&self->core, &taken);
    PyObject *record = PyStructSequence_New(DecodesRecordType);
    if (!record) return NULL;
    PyStructSequence_SetItem(record, 0, bytes_of((Bytes){taken.calls, taken.n_calls * sizeof(DecodeRecord)}));
    for (int c = 0; c < BATCH_COLUMNS; c++) PyStructSequence_SetItem(record, c + 1, bytes_of(taken.columns[c]));
    for (int i = 0; i <= BATCH_COLUMNS; i++) {
        if (!PyStructSequence_GetItem(record, i)) {
            Py_DECREF(record);
            return NULL;
        }
    }
    recorder_decodes_done(&self->core);
    return record;
}

/* Strings of a tuple, each at most 63 bytes (checked by the core), for the core's settings. */
static int utf8_items(PyObject *tuple, const char **out, Py_ssize_t limit) {
    if (!PyTuple_Check(tuple) || PyTuple_Size(tuple) > limit) {
        PyErr_Format(PyExc_ValueError, "a tuple of at most %zd strings", limit);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_Size(tuple); i++) {
        out[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(tuple, i), NULL);
        if (!out[i]) return -1;
    }
    return (int)PyTuple_Size(tuple);
}

static PyObject *Recorder_set_filters(PyRecorder *self, PyObject *args) {
    PyObject *ops, *layers, *names;
    int select_no_layer;
    if (!PyArg_ParseTuple(args, "OOpO", &ops, &layers, &select_no_layer, &names)) return NULL;
    const char *op_items[MAX_OPS], *name_items[MAX_NAMES];
    int64_t ranges[MAX_LAYER_RANGES][2];
    int n_ops = utf8_items(ops, op_items, MAX_OPS), n_names = utf8_items(names, name_items, MAX_NAMES);
    if (n_ops < 0 || n_names < 0) return NULL;
    if (!PyTuple_Check(layers) || PyTuple_Size(layers) > MAX_LAYER_RANGES) {
        PyErr_SetString(PyExc_ValueError, "filters: tuples of at most 32 ops, 64 layer ranges, 32 names");
        return NULL;
    }
    int n_ranges = (int)PyTuple_Size(layers);
    for (int i = 0; i < n_ranges; i++) {
        long long low, high;
        if (!PyArg_ParseTuple(PyTuple_GetItem(layers, i), "LL", &low, &high)) return NULL;
        ranges[i][0] = low;
        ranges[i][1] = high;
    }
    const char *problem = recorder_set_filters(&self->core, op_items, n_ops, (const int64_t (*)[2])ranges, n_ranges,
                                               select_no_layer, name_items, n_names);
    if (problem) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* close(boundary_ns) -> graphs closed and not yet taken: the graph in flight ends here
   (-1 once the recorder ran out of memory: Python writes what it closed before, and stops). */
static PyObject *Recorder_close(PyRecorder *self, PyObject *arg) {
    long long boundary = PyLong_AsLongLong(arg);
    if (boundary == -1 && PyErr_Occurred()) return NULL;
    long long closed = recorder_close(&self->core, boundary);
    if (closed == -2) return PyErr_NoMemory();
    return PyLong_FromLongLong(closed);
}

/* set_decode_rules(detail_graph, sample, graphs_per_write, write_interval_ns, batch_offsets) */
static PyObject *Recorder_set_decode_rules(PyRecorder *self, PyObject *args) {
    int detail_graph;
    long long sample, per_write, interval;
    Py_ssize_t o[5];
    if (!PyArg_ParseTuple(args, "pLLL(nnnnn)", &detail_graph, &sample, &per_write, &interval, &o[0], &o[1], &o[2],
                          &o[3], &o[4])) {
        return NULL;
    }
    size_t offsets[5];
    for (int i = 0; i < 5; i++) offsets[i] = (size_t)o[i];
    recorder_set_decode_rules(&self->core, detail_graph, sample, per_write, interval, offsets);
    Py_RETURN_NONE;
}

/* begin_decode(batch_address): llama_decode is about to run this llama_batch. */
static PyObject *Recorder_begin_decode(PyRecorder *self, PyObject *arg) {
    unsigned long long address = PyLong_AsUnsignedLongLong(arg);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    recorder_begin_decode(&self->core, (const uint8_t *)(uintptr_t)address);
    Py_RETURN_NONE;
}

/* end_decode(return_code) -> 1 when the graphs waiting should be written now (enough of
   them, or enough time since the last take), 0 if not, -1 once the recorder failed. */
static PyObject *Recorder_end_decode(PyRecorder *self, PyObject *arg) {
    long return_code = PyLong_AsLong(arg);
    if (return_code == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(recorder_end_decode(&self->core, (int32_t)return_code));
}

static PyObject *Recorder_drop_open(PyRecorder *self, PyObject *Py_UNUSED(unused)) {
    recorder_drop_open(&self->core);
    Py_RETURN_NONE;
}

static PyObject *Recorder_get_open_nodes(PyRecorder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t(recorder_open_nodes(&self->core));
}

static PyObject *Recorder_take_counted(PyRecorder *self, PyObject *Py_UNUSED(unused)) {
    return PyLong_FromUnsignedLongLong(recorder_take_counted(&self->core));
}

static PyObject *Recorder_discard(PyRecorder *self, PyObject *Py_UNUSED(unused)) {
    recorder_discard(&self->core);
    Py_RETURN_NONE;
}

/* set_values(stats, capture_patterns, capture_budget, (is_host, is_contiguous, nbytes, fp16_to_fp32)) */
static PyObject *Recorder_set_values(PyRecorder *self, PyObject *args) {
    int stats;
    PyObject *patterns;
    long long budget;
    unsigned long long f[4];
    if (!PyArg_ParseTuple(args, "pOL(KKKK)", &stats, &patterns, &budget, &f[0], &f[1], &f[2], &f[3])) return NULL;
    const char *items[MAX_CAPTURES];
    int n = utf8_items(patterns, items, MAX_CAPTURES);
    if (n < 0) return NULL;
    ValueFunctions functions = {.buffer_is_host = (tensor_bool_fn)(uintptr_t)f[0],
                                .is_contiguous = (tensor_bool_fn)(uintptr_t)f[1],
                                .nbytes = (size_fn)(uintptr_t)f[2],
                                .fp16_to_fp32 = (fp16_fn)(uintptr_t)f[3]};
    const char *problem = recorder_set_values(&self->core, stats, items, n, budget, &functions);
    if (problem) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* set_routing(on, op_mul_mat_id, op_get_rows, (is_host, tensor_get, fp16_to_fp32)) */
static PyObject *Recorder_set_routing(PyRecorder *self, PyObject *args) {
    int on, op_mul_mat_id, op_get_rows;
    unsigned long long f[3];
    if (!PyArg_ParseTuple(args, "pii(KKK)", &on, &op_mul_mat_id, &op_get_rows, &f[0], &f[1], &f[2])) return NULL;
    const char *problem = recorder_set_routing(&self->core, on, op_mul_mat_id, op_get_rows,
                                               (tensor_bool_fn)(uintptr_t)f[0], (tensor_get_fn)(uintptr_t)f[1],
                                               (fp16_fn)(uintptr_t)f[2]);
    if (problem) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* set_input_reads(is_host): read the ids each graph of a call of several tokens looks up */
static PyObject *Recorder_set_input_reads(PyRecorder *self, PyObject *args) {
    unsigned long long is_host;
    if (!PyArg_ParseTuple(args, "K", &is_host)) return NULL;
    recorder_set_input_reads(&self->core, (tensor_bool_fn)(uintptr_t)is_host);
    Py_RETURN_NONE;
}

static PyObject *Recorder_chain_abort(PyRecorder *self, PyObject *args) {
    unsigned long long function, data;
    if (!PyArg_ParseTuple(args, "KK", &function, &data)) return NULL;
    recorder_chain_abort(&self->core, (abort_fn)(uintptr_t)function, (void *)(uintptr_t)data);
    Py_RETURN_NONE;
}

static PyObject *Recorder_get_address(PyRecorder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromVoidPtr(&self->core);
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
    {"set_input_reads", (PyCFunction)Recorder_set_input_reads, METH_VARARGS,
     "set_input_reads(is_host): read the ubatch each graph of a call of several tokens looks up"},
    {"set_routing", (PyCFunction)Recorder_set_routing, METH_VARARGS,
     "set_routing(on, op_mul_mat_id, op_get_rows, functions): read each MoE layer's routing"},
    {"chain_abort", (PyCFunction)Recorder_chain_abort, METH_VARARGS,
     "chain_abort(function, data): the program's abort callback, called after ours (0: none)"},
    {NULL, NULL, 0, NULL},
};

#define CORE_MEMBER(field) offsetof(PyRecorder, core) + offsetof(Recorder, field)
static PyMemberDef Recorder_members[] = {
    {"mode", T_INT, CORE_MEMBER(mode), 0, "0 off, 1 record, 2 count"},
    {"time_nodes", T_INT, CORE_MEMBER(time_nodes), 0, "time the nodes of the graphs to come"},
    {"inline_timing", T_INT, CORE_MEMBER(inline_timing), 0, "time nodes by abort-callback ticks"},
    {"tick_reads", T_INT, CORE_MEMBER(tick_reads), 0,
     "graphs read at their compute call are timed by ticks too (the CPU splits beside a GPU)"},
    {"out_of_memory", T_INT, CORE_MEMBER(out_of_memory), READONLY, "recording stopped for lack of memory"},
    {"fail_after_nodes", T_LONGLONG, CORE_MEMBER(fail_after_nodes), 0, "tests: fail at this many nodes"},
    {"captures_skipped", T_LONGLONG, CORE_MEMBER(captures_skipped), READONLY, "captures over the budget"},
    {"capture_bytes_skipped", T_LONGLONG, CORE_MEMBER(capture_bytes_skipped), READONLY, "their bytes"},
    {"capture_budget", T_LONGLONG, CORE_MEMBER(capture_budget), READONLY, "capture bytes still allowed"},
    {"routing_answered", T_LONGLONG, CORE_MEMBER(routing_answered), READONLY, "MoE layers read when answered"},
    {"routing_at_ticks", T_LONGLONG, CORE_MEMBER(routing_at_ticks), READONLY, "... read at their tick"},
    {"routing_dropped", T_LONGLONG, CORE_MEMBER(routing_dropped), READONLY, "... read at a tick that did not hold"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Recorder_getset[] = {
    {"address", (getter)Recorder_get_address, NULL, "the user_data pointer for the callback", NULL},
    {"open_nodes", (getter)Recorder_get_open_nodes, NULL, "nodes of the graph in flight", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Recorder_slots[] = {
    {Py_tp_doc, "Native eval-callback recorder for one llama context"},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, (void *)Recorder_init},
    {Py_tp_dealloc, (void *)Recorder_dealloc},
    {Py_tp_methods, Recorder_methods},
    {Py_tp_members, Recorder_members},
    {Py_tp_getset, Recorder_getset},
    {0, NULL},
};

static PyType_Spec RecorderSpec = {"ggml_viz.capture.core._recorder.Recorder", sizeof(PyRecorder), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, Recorder_slots};

/* ---- tensor description ids ------------------------------------------------------------ */

/* graph_decoder.TensorCatalog's memory of tensor descriptions: a struct's bytes (with what
   does not describe the tensor cleared) and the id of the tensor a view looks into, each
   given an id the first time it comes. A process's first graphs bring thousands of new
   descriptions, in the traced program's time; a dict of 340-byte keys cost milliseconds. */
typedef struct {
    PyObject_HEAD size_t struct_size; /* bytes of a description; the view source's id (int32) follows */
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

static int DescriptionIds_init(DescriptionIds *self, PyObject *args, PyObject *Py_UNUSED(kwargs)) {
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
    free_instance((PyObject *)self);
}

/* assign(structs, view_rows, next_id) -> (ids, new_rows, new_view_source_ids, next_id).
   structs: n descriptions of struct_size bytes; view_rows: int64[n], the row of the tensor
   each looks into (-1: not a view, or not in this graph). Rows go in order, so a view's
   source (an earlier row) has its id before the view's key is made. ids: int32[n]; new_rows:
   int32, the rows whose description was new (each distinct one once), with the id of the
   tensor each looks into (-1: none). */
static PyObject *DescriptionIds_assign(DescriptionIds *self, PyObject *args) {
    ReadBuffer structs, view_rows;
    int next_id;
    if (!PyArg_ParseTuple(args, "y#y#i", &structs.buf, &structs.len, &view_rows.buf, &view_rows.len, &next_id)) {
        return NULL;
    }
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
    int32_t *id_of = (int32_t *)PyBytes_AsString(ids), *rows = (int32_t *)PyBytes_AsString(new_rows);
    int32_t *sources = (int32_t *)PyBytes_AsString(new_sources);
    const int64_t *view_row = (const int64_t *)view_rows.buf;
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
    if (bytes_cut(&new_rows, (Py_ssize_t)(n_new * 4)) == 0 && bytes_cut(&new_sources, (Py_ssize_t)(n_new * 4)) == 0) {
        result = Py_BuildValue("(OOOi)", ids, new_rows, new_sources, next_id);
    }
done:
    free(key);
    Py_XDECREF(ids);
    Py_XDECREF(new_rows);
    Py_XDECREF(new_sources);
    return result;
}

static PyObject *DescriptionIds_clear(DescriptionIds *self, PyObject *Py_UNUSED(unused)) {
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

static PyType_Slot DescriptionIds_slots[] = {
    {Py_tp_doc, "Ids of tensor descriptions, given the first time each is seen"},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, (void *)DescriptionIds_init},
    {Py_tp_dealloc, (void *)DescriptionIds_dealloc},
    {Py_tp_methods, DescriptionIds_methods},
    {Py_sq_length, (void *)DescriptionIds_len},
    {0, NULL},
};

static PyType_Spec DescriptionIdsSpec = {"ggml_viz.capture.core._recorder.DescriptionIds", sizeof(DescriptionIds), 0,
                                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, DescriptionIds_slots};

static PyObject *module_layer_of(PyObject *Py_UNUSED(module), PyObject *arg) {
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name) return NULL;
    char padded[NAME_LEN + 1] = {0};
    strncpy(padded, name, NAME_LEN);
    return PyLong_FromLongLong(layer_of(padded));
}

/* weight_fingerprint(data) -> int: the fingerprint the C recorder gives a weight's bytes */
static PyObject *module_weight_fingerprint(PyObject *Py_UNUSED(module), PyObject *arg) {
    ReadBuffer view;
    if (!PyArg_Parse(arg, "y#", &view.buf, &view.len)) return NULL;
    uint64_t fingerprint = weight_fingerprint((const uint8_t *)view.buf, (uint64_t)view.len);
    return PyLong_FromUnsignedLongLong(fingerprint);
}

/* layers_of(names) -> int32 bytes: layer_of for each name of NAME_LEN bytes (a ggml_tensor's
   name field, as copied: a C string, perhaps with stale bytes after its end). */
static PyObject *module_layers_of(PyObject *Py_UNUSED(module), PyObject *arg) {
    ReadBuffer names;
    if (!PyArg_Parse(arg, "y#", &names.buf, &names.len)) return NULL;
    size_t n = (size_t)names.len / NAME_LEN;
    PyObject *layers = NULL;
    if ((size_t)names.len != n * NAME_LEN) {
        PyErr_SetString(PyExc_ValueError, "layers_of: names of 64 bytes each");
    } else if ((layers = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4)))) {
        int32_t *out = (int32_t *)PyBytes_AsString(layers);
        char padded[NAME_LEN + 1] = {0};
        for (size_t i = 0; i < n; i++) {
            memcpy(padded, (const char *)names.buf + i * NAME_LEN, NAME_LEN);
            out[i] = (int32_t)layer_of(padded);
        }
    }
    return layers;
}

/* read_batch(address, (token, pos, n_seq_id, seq_id, logits offsets)) -> (n_tokens,
   lowest position, token_id, pos, seq_id, output), the columns as bytes of int32, int32,
   int32, uint8: a llama_batch, copied (see copy_batch). */
static PyObject *module_read_batch(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned long long address;
    Py_ssize_t o[5];
    if (!PyArg_ParseTuple(args, "K(nnnnn)", &address, &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    size_t offsets[5];
    for (int i = 0; i < 5; i++) offsets[i] = (size_t)o[i];
    const uint8_t *batch = (const uint8_t *)(uintptr_t)address;
    int32_t n = batch_size(batch);
    PyObject *columns[4] = {PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4),
                            PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4),
                            PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4), PyBytes_FromStringAndSize(NULL, n)};
    if (!columns[0] || !columns[1] || !columns[2] || !columns[3]) {
        for (int i = 0; i < 4; i++) Py_XDECREF(columns[i]);
        return NULL;
    }
    long long lowest = copy_batch(batch, offsets, n, (int32_t *)PyBytes_AsString(columns[0]),
                                  (int32_t *)PyBytes_AsString(columns[1]), (int32_t *)PyBytes_AsString(columns[2]),
                                  (uint8_t *)PyBytes_AsString(columns[3]));
    return Py_BuildValue("(iLNNNN)", (int)n, lowest, columns[0], columns[1], columns[2], columns[3]);
}

static PyObject *module_hook_barriers(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    return PyLong_FromLong(recorder_hook_barriers());
}

static PyMethodDef module_methods[] = {
    {"hook_barriers", module_hook_barriers, METH_NOARGS,
     "route the loaded ggml's barrier through the recorder (node ends); slots redirected, -1 on failure"},
    {"layer_of", module_layer_of, METH_O, "the layer the C recorder reads in a tensor name"},
    {"layers_of", module_layers_of, METH_O, "layers_of(names): layer_of for each 64-byte name, as int32 bytes"},
    {"weight_fingerprint", module_weight_fingerprint, METH_O, "the fingerprint the C recorder gives a weight's bytes"},
    {"read_batch", module_read_batch, METH_VARARGS, "read_batch(address, offsets): a llama_batch's columns"},
    {NULL, NULL, 0, NULL},
};

/* _recorder_gpu.c */
extern PyMethodDef gpu_methods[];

static struct PyModuleDef recorder_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ggml_viz.capture.core._recorder",
    .m_doc = "ggml-viz's eval-callback recorder, in C",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *module, const char *name, PyTypeObject *type) {
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* The module's types: heap types (the limited API has no static ones), made once (the module keeps them). */
static PyTypeObject *RecorderType, *DescriptionIdsType;

PyMODINIT_FUNC PyInit__recorder(void) {
    if (!(RecorderType = (PyTypeObject *)PyType_FromSpec(&RecorderSpec)) ||
        !(DescriptionIdsType = (PyTypeObject *)PyType_FromSpec(&DescriptionIdsSpec)) ||
        !(GraphRecordType = PyStructSequence_NewType(&graph_record_desc)) ||
        !(RepeatRecordType = PyStructSequence_NewType(&repeat_record_desc)) ||
        !(DecodesRecordType = PyStructSequence_NewType(&decodes_record_desc))) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&recorder_module);
    if (!module) return NULL;
    if (add_type(module, "Recorder", RecorderType) < 0 || add_type(module, "DescriptionIds", DescriptionIdsType) < 0 ||
        add_type(module, "GraphRecord", GraphRecordType) < 0 ||
        add_type(module, "RepeatRecord", RepeatRecordType) < 0 ||
        add_type(module, "DecodesRecord", DecodesRecordType) < 0 ||
        PyModule_AddObject(module, "CALLBACK_ADDRESS", PyLong_FromVoidPtr((void *)recorder_eval_callback)) < 0 ||
        PyModule_AddObject(module, "ABORT_CALLBACK_ADDRESS", PyLong_FromVoidPtr((void *)recorder_abort_callback)) < 0 ||
        PyModule_AddObject(module, "TIMING_FLOOR_CALLBACK_ADDRESS",
                           PyLong_FromVoidPtr((void *)recorder_timing_floor_callback)) < 0 ||
        PyModule_AddObject(module, "GRAPH_FLOOR_CALLBACK_ADDRESS",
                           PyLong_FromVoidPtr((void *)recorder_graph_floor_callback)) < 0 ||
        PyModule_AddStringConstant(module, "CONTRACT_DIGEST", CONTRACT_DIGEST) < 0 ||
        PyModule_AddFunctions(module, gpu_methods) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
