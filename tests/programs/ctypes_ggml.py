"""A Python program calling ggml's C API through ctypes with no binding package, for the tests: it
loads llama-cpp-python's ggml libraries itself (ctypes.CDLL, so RTLD_LOCAL: none of their symbols
joins the process's global scope, unlike llama-cpp-python's own loader, which uses RTLD_GLOBAL),
declares the few functions it calls, and computes output = relu(weight x + bias) * 0.5, the graph
of tests/native/simple_ctx_program.c, RUNS times with new inputs by ggml_graph_compute_with_ctx:
every tensor's data in one ggml context, no backend.

    python ctypes_ggml.py [RUNS [LIB_DIR]]   (20 runs; llama-cpp-python's lib/ folder by default)

Prints "run N: sum S" after each compute: the same sums as the C program's.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

import numpy as np

IN, OUT, COLUMNS, THREADS = 64, 32, 4, 2
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
GGML_STATUS_SUCCESS = 0


class GgmlInitParams(ctypes.Structure):
    """struct ggml_init_params, passed by value to ggml_init."""

    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def llama_cpp_lib_dir() -> Path:
    """llama-cpp-python's lib/ folder, found without importing llama_cpp (which would load the
    libraries itself, globally)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        sys.exit("llama-cpp-python is not installed: give its lib/ folder")
    return Path(spec.origin).parent / "lib"


def load(lib_dir: Path) -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """ggml's base library (tensors, contexts, graphs) and its CPU library (the compute), in the
    order they depend on each other, then libggml (the backend registry), as a program loading
    ggml by hand would; each function is declared on the library that defines it."""
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
    cpu = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"))
    ctypes.CDLL(str(lib_dir / "libggml.so"))
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    signatures = {
        "ggml_tensor_overhead": ([], size),
        "ggml_graph_overhead": ([], size),
        "ggml_init": ([GgmlInitParams], pointer),
        "ggml_free": ([pointer], None),
        "ggml_new_tensor_1d": ([pointer, ctypes.c_int, ctypes.c_int64], pointer),
        "ggml_new_tensor_2d": ([pointer, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], pointer),
        "ggml_set_name": ([pointer, ctypes.c_char_p], pointer),
        "ggml_get_data": ([pointer], pointer),
        "ggml_mul_mat": ([pointer, pointer, pointer], pointer),
        "ggml_add": ([pointer, pointer, pointer], pointer),
        "ggml_relu": ([pointer, pointer], pointer),
        "ggml_scale": ([pointer, pointer, ctypes.c_float], pointer),
        "ggml_new_graph": ([pointer], pointer),
        "ggml_build_forward_expand": ([pointer, pointer], None),
    }
    for name, (argtypes, restype) in signatures.items():
        function = getattr(base, name)
        function.argtypes, function.restype = argtypes, restype
    cpu.ggml_graph_compute_with_ctx.argtypes = [pointer, pointer, ctypes.c_int]
    cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    return base, cpu


def main(runs: int, lib_dir: Path) -> None:
    base, cpu = load(lib_dir)
    # the tensors' data and the graph, then every compute's work buffer (under 1 KiB each)
    size = 1024 * 1024 + base.ggml_graph_overhead() + runs * (base.ggml_tensor_overhead() + 16 * 1024)
    ctx = base.ggml_init(GgmlInitParams(size, None, False))
    weight = base.ggml_set_name(base.ggml_new_tensor_2d(ctx, GGML_TYPE_F16, IN, OUT), b"layer.weight")
    bias = base.ggml_set_name(base.ggml_new_tensor_1d(ctx, GGML_TYPE_F32, OUT), b"layer.bias")
    x = base.ggml_set_name(base.ggml_new_tensor_2d(ctx, GGML_TYPE_F32, IN, COLUMNS), b"input")
    product = base.ggml_set_name(base.ggml_mul_mat(ctx, weight, x), b"product")
    total = base.ggml_set_name(base.ggml_add(ctx, product, bias), b"sum")
    relu = base.ggml_set_name(base.ggml_relu(ctx, total), b"relu")
    y = base.ggml_set_name(base.ggml_scale(ctx, relu, 0.5), b"output")
    graph = base.ggml_new_graph(ctx)
    base.ggml_build_forward_expand(graph, y)

    def write(tensor: int, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values)
        ctypes.memmove(base.ggml_get_data(tensor), values.ctypes.data, values.nbytes)

    write(weight, ((np.arange(IN * OUT) * 7 % 13 - 6) / 10).astype(np.float32).astype(np.float16))
    write(bias, (np.arange(OUT) % 5 / 10).astype(np.float32))
    output = np.empty(OUT * COLUMNS, dtype=np.float32)
    for run in range(runs):
        write(x, (((np.arange(IN * COLUMNS) + run) % 11 - 5) / 10).astype(np.float32))
        status = cpu.ggml_graph_compute_with_ctx(ctx, graph, THREADS)
        if status != GGML_STATUS_SUCCESS:
            sys.exit(f"run {run}: compute failed (status {status})")
        ctypes.memmove(output.ctypes.data, base.ggml_get_data(y), output.nbytes)
        # summed in float64 in index order, as the C program does
        print(f"run {run}: sum {sum(float(value) for value in output):.4f}", flush=True)
    base.ggml_free(ctx)


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if runs < 1:
        sys.exit(__doc__)
    main(runs, Path(sys.argv[2]) if len(sys.argv) > 2 else llama_cpp_lib_dir())
