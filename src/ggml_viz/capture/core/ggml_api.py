"""Everything ggml-viz needs from libggml-base, declared once (argtypes/restype), plus
the `ggml_tensor` layout this build expects and the guard that checks it at attach.

The layout (ggml.h, x86-64 and every LP64 platform):

    offset  field                      offset  field
         0  enum ggml_type type           152  struct ggml_tensor * src[10]
         8  ggml_backend_buffer * buffer  232  struct ggml_tensor * view_src
        16  int64_t ne[4]                 240  size_t view_offs
        48  size_t nb[4]                  248  void * data
        80  enum ggml_op op               256  char name[64]
        84  int32_t op_params[16]         320  void * extra
       148  int32_t flags                 328  char padding[8]   (336 bytes in all)
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._errors import CaptureError, LlamaCppPythonMissing
from ..contract.records import GGML_TENSOR_FIELDS, GGML_TENSOR_SIZE

GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64
GGML_OBJECT_HEADER_SIZE = 32  # struct ggml_object precedes each tensor in a context (ggml.c, 0.13.1 and 0.25.3)

# ggml_tensor as the contract declares it (ggml's own layout: the C recorder reads it by the same offsets)
TENSOR_DTYPE = np.dtype(
    {
        "names": [name for name, _, _, _ in GGML_TENSOR_FIELDS],
        "formats": [kind if count == 1 else (kind, count) for _, kind, count, _ in GGML_TENSOR_FIELDS],
        "offsets": [offset for _, _, _, offset in GGML_TENSOR_FIELDS],
        "itemsize": GGML_TENSOR_SIZE,
    }
)
TENSOR_SIZE = TENSOR_DTYPE.itemsize
NAME_OFFSET = TENSOR_DTYPE.fields["name"][1]  # type: ignore[index]


def tensor_structs(*parts: np.ndarray) -> np.ndarray:
    """Concatenate arrays of tensor structs byte for byte (np.concatenate would repack the
    fields, dropping the offsets, and copy field by field)."""
    rows = sum(len(part) for part in parts)
    result = np.empty((rows, TENSOR_SIZE), dtype=np.uint8)
    start = 0
    for part in parts:
        result[start : start + len(part)] = raw_bytes(part)
        start += len(part)
    return result.view(TENSOR_DTYPE).reshape(rows)


def raw_bytes(structs: np.ndarray) -> np.ndarray:
    """An array of tensor structs as a (rows, 336) uint8 view."""
    return np.ascontiguousarray(structs).view(np.uint8).reshape(len(structs), TENSOR_SIZE)


def field_bytes(field: str) -> slice:
    """The byte range of a TENSOR_DTYPE field."""
    dtype, offset = TENSOR_DTYPE.fields[field][:2]  # type: ignore[index]
    return slice(offset, offset + dtype.itemsize)


def tensor_name(raw: bytes) -> str:
    """A tensor's name: the C string ends at the first NUL (stale bytes may follow)."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


# enum ggml_backend_buffer_usage (ggml-backend.h): the same in ggml 0.13.1 and 0.25.3
BUFFER_USAGE_NAMES = {0: "any", 1: "weights", 2: "compute"}


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def address_of(pointer: Any) -> int:
    """A pointer as an int: from an int, None, a c_void_p or a ctypes function object."""
    if pointer is None or isinstance(pointer, int):
        return pointer or 0
    if isinstance(pointer, ctypes.c_void_p):
        return pointer.value or 0
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _declare(lib: ctypes.CDLL, name: str, restype: object, *argtypes: object) -> None:
    """Declare `name` where this ggml has it (an older one lacks some: ggml_swiglu, the buffers' usage)."""
    function = getattr(lib, name, None)
    if function is None:
        return
    function.restype = restype
    function.argtypes = list(argtypes)


_library_path: str | None = None  # another libggml-base than llama-cpp-python's (use_library)


def use_library(path: str) -> None:
    """Read op and type names from this libggml-base (a native program's own) from now on:
    op numbers change between ggml versions (UNARY is 86 in ggml 0.13.1, 91 in 0.25.3; type ids
    and the tensor layout did not change between those). Loaded by its path, it is a library of
    its own beside llama-cpp-python's, which must be loaded first: a later load by soname
    (libllama's libggml-base.so.0) would take whichever of that soname is loaded already."""
    global _library_path
    if path == _library_path:
        return
    _library_path = path
    for cached in (libggml, op_name, type_name, type_block, op_desc, ops_with_subop, cpu_walk_ops, routing_ops):
        cached.cache_clear()


@functools.cache
def libggml() -> ctypes.CDLL:
    """libggml-base from the llama-cpp-python installation (or the one use_library names),
    with its symbols declared."""
    if _library_path is not None:
        candidates = [pathlib.Path(_library_path)]
    else:
        lib_dir = _llama_lib_dir()
        candidates = (
            _loaded("libggml-base") + sorted(lib_dir.glob("libggml-base.*")) + sorted(lib_dir.glob("ggml-base.*"))
        )
        if not candidates:
            raise CaptureError(f"libggml-base was not found in {lib_dir}")
    lib = ctypes.CDLL(str(candidates[0]))
    p, i32, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
    _declare(lib, "ggml_tensor_overhead", sz)
    _declare(lib, "ggml_op_name", ctypes.c_char_p, i32)
    _declare(lib, "ggml_op_desc", ctypes.c_char_p, p)
    _declare(lib, "ggml_type_name", ctypes.c_char_p, i32)
    _declare(lib, "ggml_blck_size", ctypes.c_int64, i32)
    _declare(lib, "ggml_type_size", sz, i32)
    _declare(lib, "ggml_nbytes", sz, p)
    _declare(lib, "ggml_is_contiguous", ctypes.c_bool, p)
    _declare(lib, "ggml_backend_buffer_is_host", ctypes.c_bool, p)
    _declare(lib, "ggml_fp16_to_fp32", ctypes.c_float, ctypes.c_uint16)
    _declare(lib, "ggml_get_name", p, p)
    _declare(lib, "ggml_init", p, _InitParams)
    _declare(lib, "ggml_free", None, p)
    _declare(lib, "ggml_new_tensor_2d", p, p, i32, ctypes.c_int64, ctypes.c_int64)
    _declare(lib, "ggml_view_1d", p, p, p, ctypes.c_int64, sz)
    _declare(lib, "ggml_add", p, p, p, p)
    _declare(lib, "ggml_silu", p, p, p)
    _declare(lib, "ggml_swiglu", p, p, p)
    _declare(lib, "ggml_set_name", p, p, ctypes.c_char_p)
    _declare(lib, "ggml_reshape_2d", p, p, p, ctypes.c_int64, ctypes.c_int64)
    _declare(lib, "ggml_permute", p, p, p, i32, i32, i32, i32)
    _declare(lib, "ggml_transpose", p, p, p)
    _declare(lib, "ggml_rms_norm", p, p, p, ctypes.c_float)
    _declare(lib, "ggml_mul", p, p, p, p)
    _declare(lib, "ggml_mul_mat_id", p, p, p, p, p)
    _declare(lib, "ggml_get_rows", p, p, p, p)
    _declare(lib, "ggml_backend_tensor_get", None, p, p, sz, sz)
    _declare(lib, "ggml_backend_buffer_name", ctypes.c_char_p, p)
    _declare(lib, "ggml_backend_buffer_get_usage", i32, p)
    _declare(lib, "ggml_backend_buffer_get_size", sz, p)
    _declare(lib, "ggml_backend_buffer_get_base", p, p)
    _declare(lib, "ggml_backend_buffer_get_type", p, p)
    _declare(lib, "ggml_backend_buft_name", ctypes.c_char_p, p)
    _declare(lib, "ggml_graph_n_nodes", ctypes.c_int, p)
    _declare(lib, "ggml_graph_node", p, p, ctypes.c_int)
    _declare(lib, "ggml_backend_sched_synchronize", None, p)
    _declare(lib, "ggml_backend_sched_set_eval_callback", None, p, p, p)
    # what a graph of ggml's own needs, computed on a device (capture/limits.py measures with it)
    i64, status = ctypes.c_int64, ctypes.c_int
    _declare(lib, "ggml_graph_overhead", sz)
    _declare(lib, "ggml_new_graph", p, p)
    _declare(lib, "ggml_build_forward_expand", None, p, p)
    _declare(lib, "ggml_mul_mat", p, p, p, p)
    _declare(lib, "ggml_row_size", sz, i32, i64)
    _declare(lib, "ggml_quantize_chunk", sz, i32, p, p, i64, i64, i64, p)
    _declare(lib, "ggml_quantize_requires_imatrix", ctypes.c_bool, i32)
    _declare(lib, "ggml_backend_alloc_ctx_tensors", p, p, p)
    _declare(lib, "ggml_backend_cpu_buffer_from_ptr", p, p, sz)
    _declare(lib, "ggml_backend_tensor_alloc", status, p, p, p)
    _declare(lib, "ggml_backend_tensor_set", None, p, p, sz, sz)
    _declare(lib, "ggml_backend_graph_compute", status, p, p)
    _declare(lib, "ggml_backend_buffer_free", None, p)
    _declare(lib, "ggml_backend_free", None, p)
    _declare(lib, "ggml_backend_get_device", p, p)
    _declare(lib, "ggml_backend_dev_backend_reg", p, p)
    _declare(lib, "ggml_backend_reg_get_proc_address", p, p, ctypes.c_char_p)
    for optional in ("ggml_version", "ggml_commit"):
        if hasattr(lib, optional):
            _declare(lib, optional, ctypes.c_char_p)
    return lib


def _loaded(stem: str) -> list[pathlib.Path]:
    """The file of a library this process has loaded already (libllama's libggml-base): a
    wheel ships its libraries as copies, not links, and loading another name of the same
    library would load a second copy of it."""
    try:
        import llama_cpp.llama_cpp  # noqa: F401 - loads libllama, and the ggml it needs

        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if f"/{stem}." in line}
    except (ImportError, OSError):
        return []
    return sorted(pathlib.Path(path) for path in paths if pathlib.Path(path).name.startswith(stem + "."))


def _llama_lib_dir() -> pathlib.Path:
    """Where llama-cpp-python loads llama.cpp's libraries from (LLAMA_CPP_LIB_PATH: another build)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return pathlib.Path(override)
    try:
        import llama_cpp
    except ImportError as error:
        raise LlamaCppPythonMissing(
            error,
            "loading ggml",
            "or set LLAMA_CPP_LIB_PATH to a llama.cpp build's folder of libggml-base.so, libggml.so",
        ) from None
    return pathlib.Path(llama_cpp.__file__).parent / "lib"


def require_llama_cpp_python(needed_for: str) -> None:
    """Raise LlamaCppPythonMissing (one line: how to get it) where llama_cpp cannot be imported."""
    try:
        found = importlib.util.find_spec("llama_cpp") is not None
    except ImportError as error:
        raise LlamaCppPythonMissing(error, needed_for) from None
    if not found:
        raise LlamaCppPythonMissing("no module named 'llama_cpp'", needed_for)


_DEVICE_GPU_TYPES = (1, 2)  # ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU (0.13.1 and 0.25.3)


@functools.cache
def backend_registry() -> ctypes.CDLL | None:
    """libggml, ggml's registry of backends and devices, from llama-cpp-python's installation
    (None where it has none: a ggml older than the registry)."""
    candidates = _loaded("libggml") + sorted(_llama_lib_dir().glob("libggml.so*"))
    if not candidates:
        return None
    lib = ctypes.CDLL(str(candidates[0]))  # loaded by libllama already
    p = ctypes.c_void_p
    _declare(lib, "ggml_backend_dev_count", ctypes.c_size_t)
    _declare(lib, "ggml_backend_dev_get", p, ctypes.c_size_t)
    _declare(lib, "ggml_backend_dev_type", ctypes.c_int, p)
    _declare(lib, "ggml_backend_dev_name", ctypes.c_char_p, p)
    _declare(lib, "ggml_backend_dev_description", ctypes.c_char_p, p)
    _declare(lib, "ggml_backend_dev_init", p, p, ctypes.c_char_p)
    return lib


DEVICE_CPU = 0  # ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_CPU


def device_handles(kinds: tuple[int, ...]) -> dict[str, int]:
    """The devices of these kinds (ggml_backend_dev_type) llama-cpp-python's ggml computes on, by
    name (CPU, CUDA0, Vulkan0, ...); none where it has no backend registry."""
    lib = backend_registry()
    if lib is None:
        return {}
    devices = (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
    return {
        (lib.ggml_backend_dev_name(d) or b"?").decode(): d for d in devices if lib.ggml_backend_dev_type(d) in kinds
    }


def gpu_device_handles() -> dict[str, int]:
    """The GPU devices llama-cpp-python's ggml computes on, by name; none on a CPU build."""
    return device_handles(_DEVICE_GPU_TYPES)


@functools.cache
def gpu_devices() -> tuple[str, ...]:
    """The names of the GPU devices llama-cpp-python's ggml computes on (CUDA0, Vulkan0, ...)."""
    return tuple(gpu_device_handles())


def ggml_build_info() -> dict[str, str | None]:
    lib = libggml()
    return {
        name: (getattr(lib, f"ggml_{name}")() or b"").decode() if hasattr(lib, f"ggml_{name}") else None
        for name in ("version", "commit")
    }


def ggml_description() -> str:
    """The loaded ggml in words, for the message that says it is not one ggml-viz reads: "ggml
    0.25.3 (its file)", or of unknown version where it has no ggml_version (older than 2025)."""
    lib = libggml()
    version = ggml_build_info()["version"]
    return f"ggml {version} ({lib._name})" if version else f"ggml of unknown version ({lib._name})"


@functools.cache
def op_name(op: int) -> str:
    return (libggml().ggml_op_name(op) or b"?").decode()


@functools.cache
def type_name(ggml_type: int) -> str:
    return (libggml().ggml_type_name(ggml_type) or b"?").decode()


@functools.cache
def type_block(ggml_type: int) -> tuple[int, int]:
    """(elements per block, bytes per block) of a ggml type."""
    lib = libggml()
    return int(lib.ggml_blck_size(ggml_type)), int(lib.ggml_type_size(ggml_type))


@functools.cache
def op_desc(op: int, first_param: int) -> str:
    """The specific op name (SWIGLU rather than GLU); ggml_op_desc reads only op and op_params."""
    if op not in ops_with_subop():
        return op_name(op)
    probe = np.zeros(1, dtype=TENSOR_DTYPE)
    probe["op"], probe["op_params"][0, 0] = op, first_param
    return (libggml().ggml_op_desc(probe.ctypes.data) or b"?").decode()


@functools.cache
def ops_with_subop() -> tuple[int, ...]:
    """The ggml_op values (UNARY, GLU) whose specific op is op_params[0]."""
    glu = hasattr(libggml(), "ggml_swiglu")  # GLU ops came in 2025; UNARY was the only one before
    return _probe_ops(
        lambda lib, ctx, source: (lib.ggml_silu(ctx, source), *([lib.ggml_swiglu(ctx, source)] if glu else []))
    )


@dataclass(frozen=True)
class CpuWalkOps:
    """The op numbers that decide which nodes ggml's CPU backend computes one by one."""

    empty: tuple[int, ...]  # NONE, RESHAPE, VIEW, PERMUTE, TRANSPOSE: no work, skipped
    rms_norm: int  # RMS_NORM followed by a MUL of its result may run fused, as one node
    mul: int


@functools.cache
def cpu_walk_ops() -> CpuWalkOps:
    def build(lib: ctypes.CDLL, ctx: int, source: int) -> tuple[int, ...]:
        return (
            lib.ggml_reshape_2d(ctx, source, 2, 8),
            lib.ggml_view_1d(ctx, source, 4, 0),
            lib.ggml_permute(ctx, source, 1, 0, 2, 3),
            lib.ggml_transpose(ctx, source),
            lib.ggml_rms_norm(ctx, source, 1e-6),
            lib.ggml_mul(ctx, source, source),
        )

    reshape, view, permute, transpose, rms_norm, mul = _probe_ops(build)
    return CpuWalkOps(empty=(0, reshape, view, permute, transpose), rms_norm=rms_norm, mul=mul)


@dataclass(frozen=True)
class RoutingOps:
    """The op numbers that show a mixture of experts: MUL_MAT_ID selects each token's experts by
    its I32 ids; GET_ROWS of the router's probabilities by the same ids gives their weights."""

    mul_mat_id: int
    get_rows: int


@functools.cache
def routing_ops() -> RoutingOps:
    def build(lib: ctypes.CDLL, ctx: int, source: int) -> tuple[int, ...]:
        experts = lib.ggml_new_tensor_2d(ctx, 0, 8, 4)  # one expert's 8x4 matrix
        column = lib.ggml_new_tensor_2d(ctx, 0, 8, 1)
        ids = lib.ggml_new_tensor_2d(ctx, 26, 1, 1)  # GGML_TYPE_I32 (26 in every ggml read)
        return lib.ggml_mul_mat_id(ctx, experts, column, ids), lib.ggml_get_rows(ctx, experts, ids)

    mul_mat_id, get_rows = _probe_ops(build)
    return RoutingOps(mul_mat_id=mul_mat_id, get_rows=get_rows)


def _probe_ops(build: Callable[[ctypes.CDLL, int, int], tuple[int, ...]]) -> tuple[int, ...]:
    """The op numbers of probe tensors that ggml itself builds (the enum's numbering
    changes between versions): `build(lib, ctx, source)` makes them from an 8x2 f32 tensor."""
    lib = libggml()
    ctx = lib.ggml_init(_InitParams(mem_size=16 * int(lib.ggml_tensor_overhead()), mem_buffer=None, no_alloc=True))
    if not ctx:
        raise CaptureError("ggml_init failed while reading op numbers")
    try:
        source = lib.ggml_new_tensor_2d(ctx, 0, 8, 2)
        return tuple(
            int(np.frombuffer(ctypes.string_at(probe, TENSOR_SIZE), dtype=TENSOR_DTYPE)[0]["op"])
            for probe in build(lib, ctx, source)
        )
    finally:
        lib.ggml_free(ctx)


@dataclass(frozen=True)
class BufferInfo:
    name: str
    buffer_type: str
    usage: str
    size: int
    base: int


def buffer_info(buffer: int) -> BufferInfo:
    """Describe a live ggml_backend_buffer (call only while the buffer exists)."""
    lib = libggml()
    buft = lib.ggml_backend_buffer_get_type(buffer)
    return BufferInfo(
        name=(lib.ggml_backend_buffer_name(buffer) or b"?").decode(),
        buffer_type=(lib.ggml_backend_buft_name(buft) or b"?").decode() if buft else "?",
        usage=BUFFER_USAGE_NAMES.get(lib.ggml_backend_buffer_get_usage(buffer), "other"),
        size=int(lib.ggml_backend_buffer_get_size(buffer)),
        base=int(lib.ggml_backend_buffer_get_base(buffer) or 0),
    )


def check_tensor_layout(expected: np.dtype = TENSOR_DTYPE) -> None:
    """Refuse (CaptureError) unless the loaded ggml lays tensors out as `expected` says.

    Checks the size ggml reports and then every field this recorder reads, on a
    probe tensor built by ggml itself: a view of a 2-d tensor, named, used by an ADD.
    """
    lib = libggml()
    overhead = int(lib.ggml_tensor_overhead())
    if overhead != expected.itemsize + GGML_OBJECT_HEADER_SIZE:
        raise CaptureError(
            f"{ggml_description()} lays out ggml_tensor in {overhead - GGML_OBJECT_HEADER_SIZE} bytes, "
            f"ggml-viz expects {expected.itemsize}; recording is off (update ggml-viz)"
        )
    ctx = lib.ggml_init(_InitParams(mem_size=16 * overhead, mem_buffer=None, no_alloc=True))
    if not ctx:
        raise CaptureError("ggml_init failed while checking the tensor layout")
    try:
        problems = _probe_layout(lib, ctx, expected)
    finally:
        lib.ggml_free(ctx)
    if problems:
        raise CaptureError(
            f"the ggml_tensor layout of {ggml_description()} differs from the one ggml-viz was built for "
            f"({'; '.join(problems)}); recording is off, inference runs untraced"
        )


def _probe_layout(lib: ctypes.CDLL, ctx: int, expected: np.dtype) -> list[str]:
    f32, q4_1 = 0, 3  # ggml_type ids, the same in every ggml with ggml_op_desc (0.13.1 and 0.25.3 checked)
    base = lib.ggml_new_tensor_2d(ctx, q4_1, 64, 3)
    other = lib.ggml_new_tensor_2d(ctx, f32, 7, 5)
    lib.ggml_set_name(other, b"ggml_viz_probe")
    view = lib.ggml_view_1d(ctx, other, 7, 28)
    total = lib.ggml_add(ctx, view, view)
    read = lambda address: np.frombuffer(ctypes.string_at(address, expected.itemsize), dtype=expected)[0]  # noqa: E731
    seen_base, seen_other, seen_view, seen_total = read(base), read(other), read(view), read(total)
    checks = {
        "type": seen_base["type"] == q4_1 and seen_other["type"] == f32,
        "ne": list(seen_other["ne"]) == [7, 5, 1, 1],
        "nb": int(seen_base["nb"][1]) * 3 == int(lib.ggml_nbytes(base)),
        "op": op_name(int(seen_total["op"])) == "ADD",
        "src": int(seen_total["src"][0]) == view and int(seen_total["src"][1]) == view,
        "view_src": int(seen_view["view_src"]) == other and int(seen_view["view_offs"]) == 28,
        "name": seen_other["name"].decode() == "ggml_viz_probe" and lib.ggml_get_name(other) == other + NAME_OFFSET,
    }
    return [f"field '{field}' not where expected" for field, ok in checks.items() if not ok]
