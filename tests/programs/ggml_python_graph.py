"""A Python program computing with ggml through ggml-python (ctypes bindings, with a ggml build of
their own), for the tests: output = relu(weight x + bias) * 0.5, computed RUNS times with new inputs,
the same graph and values as tests/native/simple_ctx_program.c.

    python ggml_python_graph.py [backend|with_ctx [RUNS]]      (backend, 20 runs by default)

    backend   the tensors in a CPU backend's buffer (ggml_backend_cpu_init,
              ggml_backend_alloc_ctx_tensors), computed by ggml_backend_graph_compute
    with_ctx  the tensors' data in the ggml context itself, computed by
              ggml_graph_compute_with_ctx (which takes its work buffer from that context)

ggml-python is not installed in the virtual environment: run it with one version's folder on
PYTHONPATH (tests/integration/native.py's ggml_python()). It works with 0.0.45 (ggml 0.15.3) and
0.0.37 (a ggml of the first half of 2024, whose ggml_tensor is 368 bytes). First line: the
version, ggml's own version where that ggml can tell it, and the size of its ggml_tensor; then
"run N: sum S" after each compute (the same sums as the C program's).
"""

from __future__ import annotations

import ctypes
import sys

import ggml
import numpy as np

IN, OUT, COLUMNS, THREADS = 64, 32, 4, 2
MODES = ("backend", "with_ctx")


def weight_values() -> np.ndarray:
    """(OUT, IN): ggml's {ne0 = IN, ne1 = OUT}, in F16."""
    return ((np.arange(IN * OUT) * 7 % 13 - 6) / 10).astype(np.float32).astype(np.float16).reshape(OUT, IN)


def input_values(run: int) -> np.ndarray:
    return (((np.arange(IN * COLUMNS) + run) % 11 - 5) / 10).astype(np.float32).reshape(COLUMNS, IN)


def main(mode: str, runs: int) -> None:
    ggml_version = ggml.ggml_version().decode() if hasattr(ggml, "ggml_version") else "unknown"
    print(f"ggml-python {ggml.__version__}, ggml {ggml_version}, ggml_tensor {ctypes.sizeof(ggml.ggml_tensor)} bytes")
    on_backend = mode == "backend"
    # The data lives in a backend buffer (the context holds the tensors' descriptions alone) or in
    # the context, with room for every compute's work buffer (under 1 KiB each).
    size = 16 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead()
    if not on_backend:
        size += 1024 * 1024 + runs * (ggml.ggml_tensor_overhead() + 16 * 1024)
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=on_backend))
    weight = ggml.ggml_new_tensor_2d(ctx, ggml.GGML_TYPE_F16, IN, OUT)
    bias = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, OUT)
    x = ggml.ggml_new_tensor_2d(ctx, ggml.GGML_TYPE_F32, IN, COLUMNS)
    for tensor, name in ((weight, b"layer.weight"), (bias, b"layer.bias"), (x, b"input")):
        ggml.ggml_set_name(tensor, name)
    product = ggml.ggml_set_name(ggml.ggml_mul_mat(ctx, weight, x), b"product")
    total = ggml.ggml_set_name(ggml.ggml_add(ctx, product, bias), b"sum")
    relu = ggml.ggml_set_name(ggml.ggml_relu(ctx, total), b"relu")
    y = ggml.ggml_set_name(ggml.ggml_scale(ctx, relu, 0.5), b"output")
    graph = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(graph, y)

    backend = buffer = None
    if on_backend:
        backend = ggml.ggml_backend_cpu_init()
        ggml.ggml_backend_cpu_set_n_threads(backend, THREADS)
        buffer = ggml.ggml_backend_alloc_ctx_tensors(ctx, backend)

    def write(tensor: ggml.ggml_tensor_p, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values)
        if on_backend:
            ggml.ggml_backend_tensor_set(tensor, values.ctypes.data_as(ctypes.c_void_p), 0, values.nbytes)
        else:
            ctypes.memmove(ggml.ggml_get_data(tensor), values.ctypes.data, values.nbytes)

    def read(tensor: ggml.ggml_tensor_p) -> np.ndarray:
        values = np.empty((COLUMNS, OUT), dtype=np.float32)
        if on_backend:
            ggml.ggml_backend_tensor_get(tensor, values.ctypes.data_as(ctypes.c_void_p), 0, values.nbytes)
        else:
            ctypes.memmove(values.ctypes.data, ggml.ggml_get_data(tensor), values.nbytes)
        return values

    write(weight, weight_values())
    write(bias, (np.arange(OUT) % 5 / 10).astype(np.float32))
    for run in range(runs):
        write(x, input_values(run))
        if on_backend:
            status = ggml.ggml_backend_graph_compute(backend, graph)
        else:
            status = ggml.ggml_graph_compute_with_ctx(ctx, graph, THREADS)
        # (ggml-python 0.0.37 declares ggml_graph_compute_with_ctx as returning nothing: None)
        if status not in (ggml.GGML_STATUS_SUCCESS, None):
            sys.exit(f"run {run}: compute failed (status {status})")
        # summed in float64 in index order, as the C program does
        print(f"run {run}: sum {sum(float(value) for value in read(y).ravel()):.4f}", flush=True)

    if on_backend:
        ggml.ggml_backend_buffer_free(buffer)
        ggml.ggml_backend_free(backend)
    ggml.ggml_free(ctx)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "backend"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    if mode not in MODES or runs < 1:
        sys.exit(__doc__)
    main(mode, runs)
