/*
 * ggml_viz.capture.core._recorder, GPU part: what a Python program needs for GPU time (the C side
 * is capture/gpu/, shared with the preload library). A llama context on a GPU backend gets
 * no eval callback: its graphs are read at the scheduler's compute call, which libllama
 * calls through its GOT, redirected here (hook_graph_compute); ggml-cuda's per-node
 * ggml_is_empty calls likewise reach the GPU timer, and so do the scheduler's calls that compute
 * each split (libggml-base's own call of ggml_backend_graph_compute_async), which mark where the
 * splits of a traced compute began, and, where the recorder's tick_reads is on (a GPU or an RPC
 * server beside the CPU), where the CPU splits' ticks end and which nodes ran elsewhere. Around
 * each llama_decode Python says which recorder the call's graphs go to (gpu_begin_call, gpu_end_call).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "got_hook.h"
#include "../gpu/cupti_activity.h"
#include "../gpu/gpu_timer.h"
#include "graph_compute.h"

/* The llama_decode call running on this thread: its recorder, context, and whether CUDA. */
static __thread struct {
    Recorder *recorder;
    uint32_t context_id;
    int timed_device; /* GPU_DEVICE_*: CUDA's or Vulkan's nodes timed */
    void *sched; /* the scheduler its graphs ran on, to synchronize when a window closes */
} current;

static GraphAccess graph_access;
static void (*sched_synchronize)(void *);
static sched_compute_fn compute_async_original;
static bool (*is_empty_original)(const void *);

/* The recorder whose graph computes now on this thread (read at the call): its splits are marked. */
static __thread Recorder *splits_of;

static int compute_async_hooked(void *sched, void *graph) {
    Recorder *r = current.recorder;
    if (!r || r->mode == MODE_OFF) return compute_async_original(sched, graph);
    current.sched = sched;
    splits_of = r;
    int status = compute_reading_graph(r, current.context_id, current.timed_device, &graph_access,
                                       compute_async_original, sched, graph);
    splits_of = NULL;
    r->tick_split_end = 0; /* ticks after the compute: the whole graph's */
    return status;
}

static bool (*alloc_graph_original)(void *, void *);

static bool alloc_graph_hooked(void *sched, void *graph) {
    if (current.recorder) current.recorder->graph_allocated = 1; /* a graph (re)built: read at its compute */
    return alloc_graph_original(sched, graph);
}

static void *alloc_graph_replacement(void *original, void *context) {
    (void)context;
    if (!alloc_graph_original) alloc_graph_original = (bool (*)(void *, void *))original;
    return alloc_graph_original == (bool (*)(void *, void *))original ? (void *)alloc_graph_hooked : NULL;
}

static bool is_empty_hooked(const void *tensor) {
    gpu_node_call(tensor, __builtin_return_address(0));
    return is_empty_original(tensor);
}

static void *compute_replacement(void *original, void *context) {
    (void)context;
    if (!compute_async_original) compute_async_original = (sched_compute_fn)original;
    return compute_async_original == (sched_compute_fn)original ? (void *)compute_async_hooked : NULL;
}

/* A split's backend, whether a CPU: libggml-base's device functions (GGML_BACKEND_DEVICE_TYPE_CPU is 0). */
static void *(*backend_device)(void *);
static int (*device_type)(void *);
static sched_compute_fn split_compute_original;

/* A split of a graph read at its compute call: where the recorder times its CPU splits by ticks (a GPU
   or an RPC server beside the CPU), the split is marked in its graph (a CPU split's ticks end where it
   ends; another backend's nodes are marked as computed elsewhere); on a device the GPU timer times,
   its call is marked for the timer (nothing unless a traced compute runs here). */
static int split_compute_hooked(void *backend, void *graph) {
    Recorder *ticked = splits_of && splits_of->tick_reads ? splits_of : NULL;
    int n_nodes = current.timed_device || ticked ? graph_access.n_nodes(graph) : 0;
    if (n_nodes <= 0) return split_compute_original(backend, graph);
    void *first_node = graph_access.node(graph, 0);
    int on_cpu = device_type(backend_device(backend)) == 0;
    if (ticked) recorder_split_computed(ticked, graph, n_nodes, graph_access.node, on_cpu, now_ns());
    if (current.timed_device) gpu_split_call(first_node, on_cpu);
    int status = split_compute_original(backend, graph);
    if (current.timed_device) gpu_split_done(first_node, on_cpu);
    return status;
}

/* Only where a split's backend can be told: by the device functions of the original's library. */
static void *split_compute_replacement(void *original, void *context) {
    (void)context;
    if (!split_compute_original) {
        Dl_info where;
        void *library = dladdr(original, &where) && where.dli_fname ? dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD)
                                                                    : NULL;
        if (library) {
            *(void **)&backend_device = dlsym(library, "ggml_backend_get_device");
            *(void **)&device_type = dlsym(library, "ggml_backend_dev_type");
            dlclose(library);
        }
        if (!backend_device || !device_type) return NULL;
        split_compute_original = (sched_compute_fn)original;
    }
    return split_compute_original == (sched_compute_fn)original ? (void *)split_compute_hooked : NULL;
}

static void *is_empty_replacement(void *original, void *context) {
    (void)context;
    if (!is_empty_original) is_empty_original = (bool (*)(const void *))original;
    return is_empty_original == (bool (*)(const void *))original ? (void *)is_empty_hooked : NULL;
}

/* hook_graph_compute(graph_n_nodes, graph_node, buffer_offset, data_offset, sched_synchronize, sched_set_eval_callback)
   -> slots redirected: the loaded libraries' calls of the scheduler's compute (and of its graph
   allocation, of ggml_is_empty, and of a split's compute). */
static PyObject *hook_graph_compute(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned long long n_nodes, node, synchronize, set_callback;
    Py_ssize_t buffer_offset, data_offset;
    if (!PyArg_ParseTuple(args, "KKnnKK", &n_nodes, &node, &buffer_offset, &data_offset, &synchronize, &set_callback)) {
        return NULL;
    }
    if (!n_nodes || !node || !synchronize || !set_callback) {
        PyErr_SetString(PyExc_ValueError, "a ggml function address is null");
        return NULL;
    }
    graph_access = (GraphAccess){(int (*)(void *))(uintptr_t)n_nodes, (void *(*)(void *, int))(uintptr_t)node,
                                 (size_t)buffer_offset, (size_t)data_offset,
                                 (void (*)(void *, bool (*)(void *, bool, void *), void *))(uintptr_t)set_callback};
    sched_synchronize = (void (*)(void *))(uintptr_t)synchronize;
    int failed = 0, more = 0;
    int hooked = got_hook("ggml_backend_sched_graph_compute_async", compute_replacement, NULL, &failed);
    got_hook("ggml_backend_sched_alloc_graph", alloc_graph_replacement, NULL, &more);
    got_hook("ggml_is_empty", is_empty_replacement, NULL, &more);
    got_hook("ggml_backend_graph_compute_async", split_compute_replacement, NULL, &more);
    return PyLong_FromLong(failed ? -1 : hooked);
}

/* configure_gpu(mode, window, period, detach, cupti_paths or None) */
static PyObject *configure_gpu(PyObject *Py_UNUSED(module), PyObject *args) {
    GpuTraceSettings settings;
    const char *paths = NULL;
    if (!PyArg_ParseTuple(args, "iiip|z", &settings.mode, &settings.window, &settings.period, &settings.finalize,
                          &paths)) {
        return NULL;
    }
    settings.cupti_paths = paths;
    gpu_configure(&settings);
    Py_RETURN_NONE;
}

/* gpu_begin_call(recorder_address, context_id, device): a llama_decode begins on this thread, on a
   device of kind `device` (GPU_DEVICE_*: 0 none timed). */
static PyObject *gpu_begin_call(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned long long recorder;
    unsigned int context_id;
    int device;
    if (!PyArg_ParseTuple(args, "KIi", &recorder, &context_id, &device)) return NULL;
    current.recorder = (Recorder *)(uintptr_t)recorder;
    current.context_id = context_id;
    current.timed_device = device;
    Py_RETURN_NONE;
}

static void synchronize_current(void *sched) {
    if (sched && sched_synchronize) sched_synchronize(sched);
}

/* gpu_end_call() -> whether a closed window waits to be taken (gpu_take). */
static PyObject *gpu_end_call(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    int timed = current.timed_device;
    void *sched = current.sched;
    current.recorder = NULL;
    return PyBool_FromLong(timed && gpu_call_done(synchronize_current, sched));
}

static PyObject *gpu_finish_now(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    return PyBool_FromLong(gpu_finish());
}

/* gpu_take() -> bytes (as the spool's SPOOL_GPU frame) or None. */
static PyObject *gpu_take_now(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    Array out;
    array_init(&out, 1);
    int taken = gpu_take_serialized(&out);
    PyObject *result = taken < 0 ? PyErr_NoMemory()
                       : taken   ? PyBytes_FromStringAndSize((const char *)out.items, (Py_ssize_t)out.count)
                                 : Py_NewRef(Py_None);
    array_free(&out);
    return result;
}

/* gpu_state() -> (cupti_path, cupti_version, reads_our_clock, problem or None, timer, vulkan_layer_path):
   timer "vulkan" or "cupti" */
static PyObject *gpu_state(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    const char *problem = gpu_problem();
    return Py_BuildValue("(sIOzss)", gpu_cupti_path(), gpu_cupti_version(), gpu_own_clock() ? Py_True : Py_False,
                         problem, gpu_device() == GPU_DEVICE_VULKAN ? "vulkan" : "cupti", gpu_vulkan_layer_path());
}

/* convert_cupti_records(records, clock_offset_ns) -> (activities, api_calls, name_lengths, names): CUPTI
   activity records laid out as cupti_abi.h says, turned into ggml-viz's as CUPTI's buffers
   are (tests build the records; kernel name pointers must point at NUL-terminated text). */
static PyObject *convert_cupti_records(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records;
    long long offset;
    if (!PyArg_ParseTuple(args, "O!L", &PyList_Type, &records, &offset)) return NULL;
    CuptiActivity a;
    memset(&a, 0, sizeof a);
    cupti_records_init(&a);
    a.clock_offset_ns = offset;
    a.own_clock = offset == 0;
    for (Py_ssize_t i = 0; i < PyList_Size(records); i++) {
        PyObject *record = PyList_GetItem(records, i);
        if (!PyBytes_Check(record)) {
            cupti_records_free(&a);
            PyErr_SetString(PyExc_TypeError, "records: a list of bytes");
            return NULL;
        }
        if (cupti_convert_record(&a, (const uint8_t *)PyBytes_AsString(record)) < 0) {
            cupti_records_free(&a);
            return PyErr_NoMemory();
        }
    }
    PyObject *result = Py_BuildValue("(y#y#y#y#K)", a.activities.items,
                                     (Py_ssize_t)(a.activities.count * a.activities.item_size), a.api_calls.items,
                                     (Py_ssize_t)(a.api_calls.count * a.api_calls.item_size), a.name_lengths.items,
                                     (Py_ssize_t)(a.name_lengths.count * a.name_lengths.item_size), a.names.items,
                                     (Py_ssize_t)a.names.count, (unsigned long long)a.invalid);
    cupti_records_free(&a);
    return result;
}

PyMethodDef gpu_methods[] = {
    {"hook_graph_compute", hook_graph_compute, METH_VARARGS,
     "hook_graph_compute(graph_n_nodes, graph_node, buffer_offset, sched_synchronize, sched_set_eval_callback): "
     "read graphs at their compute call (slots redirected, -1 on failure)"},
    {"configure_gpu", configure_gpu, METH_VARARGS, "configure_gpu(mode, window, period, detach, cupti_paths)"},
    {"gpu_begin_call", gpu_begin_call, METH_VARARGS,
     "gpu_begin_call(recorder_address, context_id, device): this thread's llama_decode records there (device: 0 none, 1 CUDA, 2 Vulkan)"},
    {"gpu_end_call", gpu_end_call, METH_NOARGS, "the call ended: whether a GPU window waits to be taken"},
    {"gpu_finish", gpu_finish_now, METH_NOARGS, "the recording ends: close the open window (whether one waits)"},
    {"gpu_take", gpu_take_now, METH_NOARGS, "a closed GPU window's records, as bytes, or None"},
    {"gpu_state", gpu_state, METH_NOARGS,
     "(cupti_path, cupti_version, reads_our_clock, problem, timer, vulkan_layer_path)"},
    {"convert_cupti_records", convert_cupti_records, METH_VARARGS,
     "convert_cupti_records(records, clock_offset_ns): CUPTI records as ggml-viz's (tests)"},
    {NULL, NULL, 0, NULL},
};
