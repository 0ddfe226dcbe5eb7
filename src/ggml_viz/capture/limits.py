"""Measure what this machine can do, with ggml itself: graphs of one large op, built and computed
by the very libraries the traced programs use, so each limit is one the program could reach.

- memory_read: the memory's read bandwidth. On the CPU, ggml-viz's own read kernel
  (memory_read.c: each thread sums its share of a buffer of `size_mib`, far larger than the
  caches, with wide loads), so that the roof does not depend on how one ggml kernel was compiled
  (ggml's F32 matrix-vector product read a third slower than plain reads on an AMD EPYC). On a
  GPU, ggml's F32 matrix-vector product over a matrix of that size.
- matvec, per weight type: the same product over quantized (or F16) weights: decode's kernel,
  which may run out of compute before it runs out of bandwidth.
- matmul, per weight type: those weights by 256 F32 columns: a prompt's kernel, whose FLOP/s are
  the compute roof for that type.
- page_cache_read, disk_read: the F32 product over a file mapped the way llama.cpp maps a model,
  first from the page cache, then once its pages were dropped (posix_fadvise), from the disk.
- node_step, on a CPU: what a node costs beyond its work, `seconds` per node: a chain of
  NODE_CHAIN additions of 64 floats (each node dispatched to every thread, then the barrier they
  all wait at before the next), the cost that grows with the threads where the work shrinks.

Each runs `repeats` times after one unmeasured run; the best run counts (as STREAM counts: the
limit is what the machine can reach, the rest is noise from a shared machine). On a CPU at each
thread count asked for; on each GPU device ggml has, with `GPU_NODES` products in one graph, so
that one graph lasts long enough to time from the host.

The weights are real blocks: 64 rows of normal random numbers quantized by ggml
(ggml_quantize_chunk), repeated over the matrix. Every byte is written, so none is a page the
kernel never mapped (reading those would read one shared zero page, from the cache).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import CaptureError
from ..runformat.limits import LIMITS_VERSION, this_machine
from ..runformat.manifest import utc_now
from .core import ggml_api

ROW = 4096  # elements per row (a hidden size of a few billion parameters' model)
MATMUL_ROWS, MATMUL_COLUMNS = 1024, 256  # matmul: a 4096x1024 weight by 256 columns (2.1 GFLOP)
GPU_MATMUL_ROWS, GPU_MATMUL_COLUMNS = 8192, 4096
GPU_NODES = 8
DEFAULT_TYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")
SAMPLE_ROWS = 64
NODE_CHAIN = 1000  # node_step: additions in the chain (a model's decode step has hundreds to thousands of nodes)
TYPE_COUNT_0_25 = 40  # GGML_TYPE_COUNT of ggml 0.25.3 (MXFP4 the last)
WORD = 0x0101010101010101  # what the read kernel's buffer holds (its sum is known)
ProgressFn = Callable[[str], None]


@dataclass
class Measurement:
    device: str
    threads: int | None
    what: str
    type: str | None
    gb_per_s: float | None
    gflop_per_s: float | None
    bytes: int
    flops: float
    seconds: float
    repeats: int
    note: str | None = None


def measure(
    threads: list[int],
    types: list[str] | tuple[str, ...] = DEFAULT_TYPES,
    size_mib: int = 512,
    repeats: int = 5,
    file_dir: Path | None = None,
    gpus: bool = True,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """This machine's limits (the JSON object runformat/limits.py describes)."""
    say = progress or (lambda _: None)
    lib = ggml_api.libggml()
    ids = type_ids([*types, "F32"])
    unknown = [name for name in types if name.upper() not in ids]
    if unknown:
        raise CaptureError(f"this ggml has no type {', '.join(unknown)}")
    types = [name.upper() for name in types if not lib.ggml_quantize_requires_imatrix(ids[name.upper()])]
    rows: list[Measurement] = []
    cpu = _cpu_device()
    with _backend(cpu) as backend:
        set_threads = _thread_setter(backend)
        for count in threads:
            set_threads(backend, count)
            bench = _Bench(backend, "CPU", count, repeats, 1, say, types)
            rows.append(cpu_memory_read(count, size_mib, repeats, say))
            for name in types:
                rows.append(bench.matvec(name, size_mib))
                rows.append(bench.matmul(name, MATMUL_ROWS, MATMUL_COLUMNS))
            rows.append(bench.node_step())
        set_threads(backend, max(threads))
        files = _Bench(backend, "CPU", max(threads), max(2, repeats // 2), 1, say, types)
        rows.extend(files.file_reads(size_mib, file_dir))
    if gpus:
        for name, device in ggml_api.gpu_device_handles().items():
            with _backend(device) as backend:
                bench = _Bench(backend, name, None, repeats, GPU_NODES, say, types)
                rows.append(bench.memory_read(max(size_mib, 2048)))
                for type_name in types:
                    rows.append(bench.matvec(type_name, max(size_mib, 2048)))
                    rows.append(bench.matmul(type_name, GPU_MATMUL_ROWS, GPU_MATMUL_COLUMNS))
    return {
        "version": LIMITS_VERSION,
        "measured": utc_now(),
        "machine": this_machine(),
        "ggml": {**ggml_api.ggml_build_info(), "library": str(getattr(lib, "_name", ""))},
        "settings": {"size_mib": size_mib, "repeats": repeats, "row": ROW},
        "measurements": [asdict(row) for row in rows],
    }


def cpu_memory_read(threads: int, size_mib: int, repeats: int, say: ProgressFn) -> Measurement:
    """The memory's read bandwidth at `threads` threads, by ggml-viz's read kernel: one unmeasured
    pass (the pages and the threads warm), then the best of `repeats`. Without the kernel (ggml-viz
    built without a C compiler), ggml's F32 matrix-vector product, as the note says."""
    try:
        from . import _memory_read
    except ImportError:
        with _backend(_cpu_device()) as backend:
            _thread_setter(backend)(backend, threads)
            fallback = _Bench(backend, "CPU", threads, repeats, 1, say, ["F32"]).memory_read(size_mib)
        fallback.note = "ggml's F32 matrix × vector: ggml-viz's read kernel is not built here"
        return fallback
    plural = "s" * (threads != 1)
    say(f"CPU at {threads} thread{plural}: memory read, {size_mib:,} MiB")
    # Anonymous memory in the system's default pages, as ggml's CPU buffers get: not numpy's own
    # allocation, which asks for huge pages (MADV_HUGEPAGE) and read 10-15 % faster here than
    # any buffer llama.cpp's weights live in.
    with mmap.mmap(-1, size_mib << 20) as memory:
        words = np.frombuffer(memory, dtype=np.uint64)
        words.fill(WORD)  # every page written: none is the kernel's shared zero page
        expected = WORD * words.size % 2**64  # wrapped, as the kernel's sums are
        passes = []
        for _ in range(repeats + 1):
            elapsed_ns, checksum = _memory_read.read_pass(words.ctypes.data, words.nbytes, threads)
            if checksum != expected:
                raise CaptureError(f"the memory read kernel summed {checksum:#x}, not {expected:#x}: it missed bytes")
            passes.append(elapsed_ns)
        size = words.nbytes
        del words  # (the mapping closes only once no array holds it)
    seconds = max(min(passes[1:]), 1) / 1e9
    note = f"ggml-viz's read kernel: {threads} thread{plural} summing 64-bit words"
    return Measurement(
        "CPU", threads, "memory_read", None, size / seconds / 1e9, None, size, 0.0, seconds, repeats, note
    )


def type_ids(wanted: list[str] | tuple[str, ...]) -> dict[str, int]:
    """ggml's type numbers of these type names (F32, Q4_K, ...). ggml_type_name does not check
    its argument, and ggml.h's GGML_TYPE_COUNT is not in the library: the scan stops once it has
    found every wanted name, at a name that is not one, or at TYPE_COUNT_0_25 (type numbers stay
    the same between ggml versions; newer ones only add)."""
    lib = ggml_api.libggml()
    left, names = {name.upper() for name in wanted}, {}
    for number in range(TYPE_COUNT_0_25):
        if not left:
            break
        raw = lib.ggml_type_name(number) or b""
        if raw == b"NONE" or not raw.replace(b"_", b"").isalnum() and b" " not in raw:
            break
        name = raw.decode("ascii", "replace").upper()
        if name in left and lib.ggml_type_size(number) > 0:
            names[name] = number
            left.discard(name)
    return names


def _cpu_device() -> int:
    if ggml_api.backend_registry() is None:
        raise CaptureError("this ggml has no backend registry (libggml): it is older than ggml-viz measures with")
    cpus = ggml_api.device_handles((ggml_api.DEVICE_CPU,))
    if not cpus:
        raise CaptureError("ggml has no CPU device")
    return int(next(iter(cpus.values())))


@contextlib.contextmanager
def _backend(device: int) -> Iterator[int]:
    registry = ggml_api.backend_registry()
    assert registry is not None
    backend = registry.ggml_backend_dev_init(device, None)
    if not backend:
        name = (registry.ggml_backend_dev_name(device) or b"?").decode()
        raise CaptureError(f"ggml could not start its {name} backend")
    try:
        yield backend
    finally:
        ggml_api.libggml().ggml_backend_free(backend)


def _thread_setter(backend: int) -> Callable[[int, int], None]:
    lib = ggml_api.libggml()
    registry = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_get_device(backend))
    address = lib.ggml_backend_reg_get_proc_address(registry, b"ggml_backend_set_n_threads")
    if not address:
        raise CaptureError("ggml's CPU backend does not say how to set its thread count")
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(address)  # type: ignore[return-value]


class _Bench:
    """Graphs of one op on one backend, timed."""

    def __init__(
        self,
        backend: int,
        device: str,
        threads: int | None,
        repeats: int,
        nodes: int,
        say: ProgressFn,
        types: list[str],
    ):
        self.backend, self.device, self.threads = backend, device, threads
        self.repeats, self.nodes, self.say = repeats, nodes, say
        self._landing = ctypes.create_string_buffer(4)  # where _compute reads an output's first bytes
        self.lib = ggml_api.libggml()
        self.ids = type_ids([*DEFAULT_TYPES, *types])

    def memory_read(self, size_mib: int) -> Measurement:
        measurement = self.matvec("F32", size_mib)
        measurement.what, measurement.gflop_per_s = "memory_read", None
        return measurement

    def matvec(self, type_name: str, size_mib: int) -> Measurement:
        rows = max(1, (size_mib << 20) // self.lib.ggml_row_size(self.ids[type_name], ROW))
        return self._product("matvec", type_name, rows, 1)

    def matmul(self, type_name: str, rows: int, columns: int) -> Measurement:
        return self._product("matmul", type_name, rows, columns)

    def node_step(self) -> Measurement:
        """A node's cost beyond its work: NODE_CHAIN additions of 64 floats, each on the last."""
        lib = self.lib
        self.say(f"{self.device}{self._at()}: a chain of {NODE_CHAIN:,} nodes")
        ctx = lib.ggml_init(
            ggml_api._InitParams(
                mem_size=(NODE_CHAIN + 4) * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead(),
                mem_buffer=None,
                no_alloc=True,
            )
        )
        if not ctx:
            raise CaptureError("ggml_init failed")
        buffer = 0
        try:
            start = lib.ggml_new_tensor_2d(ctx, 0, 64, 1)
            step = lib.ggml_new_tensor_2d(ctx, 0, 64, 1)
            value = start
            for _ in range(NODE_CHAIN):
                value = lib.ggml_add(ctx, value, step)
            graph = lib.ggml_new_graph(ctx)
            lib.ggml_build_forward_expand(graph, value)
            buffer = lib.ggml_backend_alloc_ctx_tensors(ctx, self.backend)
            if not buffer:
                raise CaptureError(f"{self.device} has no room for a chain of small tensors")
            zeros = np.zeros(64, dtype=np.float32)
            for tensor in (start, step):
                lib.ggml_backend_tensor_set(tensor, zeros.ctypes.data, 0, zeros.nbytes)
            best = self._best_ns(graph)
        finally:
            if buffer:
                lib.ggml_backend_buffer_free(buffer)
            lib.ggml_free(ctx)
        per_node = best / 1e9 / NODE_CHAIN
        note = f"{per_node * 1e6:.2f} µs a node: a chain of {NODE_CHAIN:,} additions of 64 floats"
        return Measurement(
            self.device, self.threads, "node_step", None, None, None, 0, 0.0, per_node, self.repeats, note=note
        )

    def _product(self, what: str, type_name: str, rows: int, columns: int, weights_at: int = 0) -> Measurement:
        """`what`: the weights [ROW, rows] of `type_name` by `columns` F32 columns, `self.nodes`
        times in one graph (over the same weights); weights_at: a mapped file to read them from."""
        lib, kind = self.lib, self.ids[type_name]
        self.say(f"{self.device}{self._at()}: {what} {type_name}, {rows:,}x{ROW:,} by {columns:,}")
        ctx = lib.ggml_init(
            ggml_api._InitParams(
                mem_size=(4 + 2 * self.nodes) * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead(),
                mem_buffer=None,
                no_alloc=True,
            )
        )
        if not ctx:
            raise CaptureError("ggml_init failed")
        buffers: list[int] = []
        try:
            weights = lib.ggml_new_tensor_2d(ctx, kind, ROW, rows)
            weight_bytes = lib.ggml_row_size(kind, ROW) * rows
            if weights_at:
                mapped = lib.ggml_backend_cpu_buffer_from_ptr(weights_at, weight_bytes)
                buffers.append(mapped)
                if not mapped or lib.ggml_backend_tensor_alloc(mapped, weights, weights_at) != 0:
                    raise CaptureError("ggml could not compute over a mapped file")
            columns_in = [lib.ggml_new_tensor_2d(ctx, 0, ROW, columns) for _ in range(self.nodes)]
            outputs = [lib.ggml_mul_mat(ctx, weights, column) for column in columns_in]
            graph = lib.ggml_new_graph(ctx)
            for output in outputs:
                lib.ggml_build_forward_expand(graph, output)
            buffer = lib.ggml_backend_alloc_ctx_tensors(ctx, self.backend)
            if not buffer:
                raise CaptureError(f"{self.device} has no room for {weight_bytes / 2**20:,.0f} MiB of weights")
            buffers.append(buffer)
            if not weights_at:
                self._fill(weights, kind, weight_bytes)
            values = np.random.default_rng(1).standard_normal(ROW * columns).astype(np.float32)
            for column in columns_in:
                lib.ggml_backend_tensor_set(column, values.ctypes.data, 0, values.nbytes)
            if weights_at:
                return self._timed_once(graph, what, type_name, weight_bytes, rows, columns)
            return self._timed(graph, what, type_name, weight_bytes, rows, columns)
        finally:
            for buffer in buffers:
                lib.ggml_backend_buffer_free(buffer)
            lib.ggml_free(ctx)

    def _fill(self, weights: int, kind: int, weight_bytes: int) -> None:
        """Real blocks of `kind`: SAMPLE_ROWS rows quantized by ggml, repeated."""
        lib = self.lib
        sample = np.random.default_rng(0).standard_normal(ROW * SAMPLE_ROWS).astype(np.float32)
        block = ctypes.create_string_buffer(lib.ggml_row_size(kind, ROW) * SAMPLE_ROWS)
        written = lib.ggml_quantize_chunk(kind, sample.ctypes.data, block, 0, SAMPLE_ROWS, ROW, None)
        tile = block.raw[:written] * max(1, (8 << 20) // written)
        for offset in range(0, weight_bytes, len(tile)):
            lib.ggml_backend_tensor_set(weights, tile, offset, min(len(tile), weight_bytes - offset))

    def _compute(self, graph: int) -> int:
        """A compute's time, from its call until its last output can be read: a backend may return
        from its compute before the work is done (ggml's RPC backend sends the graph and returns;
        a GPU's synchronize is its own), and reading four bytes of the output waits for it on any."""
        start = time.perf_counter_ns()
        if self.lib.ggml_backend_graph_compute(self.backend, graph) != 0:
            raise CaptureError(f"ggml's {self.device} backend failed to compute a measuring graph")
        self.lib.ggml_backend_tensor_get(self.lib.ggml_graph_node(graph, -1), self._landing, 0, 4)
        return time.perf_counter_ns() - start

    def _best_ns(self, graph: int) -> int:
        """The best of `repeats` computes of a graph, after one unmeasured (the threads start, the caches warm)."""
        self._compute(graph)
        return min(self._compute(graph) for _ in range(self.repeats))

    def _timed(self, graph: int, what: str, type_name: str, weight_bytes: int, rows: int, columns: int) -> Measurement:
        best = self._best_ns(graph)
        return self._measurement(best, self.repeats, what, type_name, weight_bytes, rows, columns)

    def _timed_once(
        self, graph: int, what: str, type_name: str, weight_bytes: int, rows: int, columns: int
    ) -> Measurement:
        return self._measurement(self._compute(graph), 1, what, type_name, weight_bytes, rows, columns)

    def _measurement(
        self, best_ns: int, repeats: int, what: str, type_name: str, weight_bytes: int, rows: int, columns: int
    ) -> Measurement:
        seconds = max(best_ns, 1) / 1e9
        moved = self.nodes * (weight_bytes + 4 * ROW * columns + 4 * rows * columns)
        flops = 2.0 * ROW * rows * columns * self.nodes
        return Measurement(
            self.device,
            self.threads,
            what,
            type_name,
            moved / seconds / 1e9,
            flops / seconds / 1e9,
            moved,
            flops,
            seconds,
            repeats,
        )

    def file_reads(self, size_mib: int, file_dir: Path | None) -> list[Measurement]:
        """The F32 product over a mapped file: from the page cache, then from the disk."""
        folder = Path(file_dir or tempfile.gettempdir())
        rows = (size_mib << 20) // (4 * ROW)
        size = rows * ROW * 4
        handle, name = tempfile.mkstemp(prefix="ggml-viz-limits-", suffix=".bin", dir=folder)
        try:
            _write_file(handle, size)
            cached = [self._mapped_read(handle, size, rows) for _ in range(self.repeats)]
            page_cache = max(cached, key=lambda m: m.gb_per_s or 0)
            page_cache.what, page_cache.gflop_per_s, page_cache.repeats = "page_cache_read", None, len(cached)
            page_cache.note = f"a {size / 2**20:,.0f} MiB file in {folder}"
            disk = [self._mapped_read(handle, size, rows, drop=True) for _ in range(self.repeats)]
            from_disk = max(disk, key=lambda m: m.gb_per_s or 0)
            from_disk.what, from_disk.gflop_per_s, from_disk.repeats = "disk_read", None, len(disk)
            from_disk.note = page_cache.note + (from_disk.note or "")
            return [page_cache, from_disk]
        finally:
            os.close(handle)
            os.unlink(name)

    def _mapped_read(self, handle: int, size: int, rows: int, drop: bool = False) -> Measurement:
        os.fsync(handle)
        if drop:
            os.posix_fadvise(handle, 0, size, os.POSIX_FADV_DONTNEED)
        with _mapped(handle, size) as address:
            left = _resident_share(address, size)
            measurement = self._product("memory_read", "F32", rows, 1, weights_at=address)
        if drop and left > 0.05:
            measurement.note = f"; {left:.0%} of the file stayed in the page cache after dropping it"
        return measurement

    def _at(self) -> str:
        return f" at {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else ""


def _write_file(handle: int, size: int) -> None:
    values = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32).tobytes()
    for offset in range(0, size, len(values)):
        os.write(handle, values[: min(len(values), size - offset)])
    os.fsync(handle)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


@contextlib.contextmanager
def _mapped(handle: int, size: int) -> Iterator[int]:
    """The file mapped read-only and shared, as llama.cpp maps a model (without MAP_POPULATE:
    the kernel reads it as the product touches it)."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, handle, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise CaptureError(f"mmap failed: {os.strerror(ctypes.get_errno())}")
    try:
        yield int(address)
    finally:
        _libc.munmap(address, size)


def _resident_share(address: int, size: int) -> float:
    """The share of a mapping's pages in the page cache (mincore)."""
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    if _libc.mincore(address, size, vector) != 0:
        return 0.0
    return float(np.frombuffer(bytes(vector), dtype=np.uint8).astype(bool).mean())
