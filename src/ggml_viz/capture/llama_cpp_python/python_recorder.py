"""The pure-Python eval-callback recorder: the fallback and the test oracle.

It does what the C recorder (core/recorder.c) does, in the same order and with the same
rules, so that both record the same run. ggml's scheduler calls the callback with
ask=True before computing a node; answering True makes it compute the slice of nodes
ending with that one, synchronize, and call back with ask=False.
"""

from __future__ import annotations

import ctypes
import fnmatch
from time import perf_counter_ns
from typing import Any

import numpy as np

from ...layers import layer_of
from ..contract.constants import (
    NODE_ANSWERED,
    NODE_CAPTURE,
    NODE_ROUTING,
    NODE_SELECTED,
    NODE_TIMED,
    NODE_VALUES,
    ROUTING_NO_WEIGHTS,
    ROUTING_READ,
    ROUTING_UNREADABLE,
)
from ..contract.records import STATS
from ..core.ggml_api import (
    TENSOR_DTYPE,
    TENSOR_SIZE,
    BufferInfo,
    buffer_info,
    field_bytes,
    libggml,
    op_desc,
    op_name,
    raw_bytes,
    routing_ops,
    tensor_name,
    tensor_structs,
)
from ..core.inline_times import InlineClock
from ..core.raw_graph import Capture, Mode, RawGraph, Routing
from ..settings import NodeSelection, ValueSettings

_INITIAL_CAPACITY = 2048


_STRIDED_TYPES = {0: np.float32, 1: np.float16, 26: np.int32}  # ggml_type ids: F32, F16, I32
_BUFFER_USAGE_WEIGHTS = 1
_MAX_INPUT_IDS = 1 << 16  # plain_tokens.c's bound


def _strided(address: int, ggml_type: int, ne: np.ndarray, nb: np.ndarray) -> np.ndarray:
    """A tensor's elements (f32, f16 or i32) in place, as a numpy view with ggml's byte strides."""
    dtype = np.dtype(_STRIDED_TYPES[ggml_type])
    shape = tuple(int(x) for x in ne[::-1])  # ne3, ne2, ne1, ne0
    strides = tuple(int(x) for x in nb[::-1])
    span = sum((n - 1) * stride for n, stride in zip(shape, strides, strict=True)) + dtype.itemsize
    memory = memoryview((ctypes.c_char * span).from_address(address)).cast("B")
    return np.ndarray(shape, dtype=dtype, buffer=memory, strides=strides)


def _struct(tensor: int) -> np.void:
    return np.frombuffer(ctypes.string_at(tensor, TENSOR_SIZE), dtype=TENSOR_DTYPE)[0]


def _elements(struct: np.void) -> int:
    return int(np.prod(struct["ne"].astype(np.int64)))


def _in_weights(buffer: int) -> bool:
    return bool(buffer) and libggml().ggml_backend_buffer_get_usage(buffer) == _BUFFER_USAGE_WEIGHTS


def _read_elements(struct: np.void) -> np.ndarray | None:
    """A tensor's elements in order (ne0 fastest), from host memory; None where it is not there
    or not f32, f16 or i32."""
    buffer, data, ggml_type = int(struct["buffer"]), int(struct["data"]), int(struct["type"])
    if not data or ggml_type not in _STRIDED_TYPES or (buffer and not libggml().ggml_backend_buffer_is_host(buffer)):
        return None
    return _strided(data, ggml_type, struct["ne"], struct["nb"]).ravel().copy()


_OP_OFFSET = field_bytes("op").start
_NAME_OFFSET = field_bytes("name").start


class _StructBuffer:
    """A growable array of copied ggml_tensor structs."""

    def __init__(self) -> None:
        self.rows = np.zeros(_INITIAL_CAPACITY, dtype=TENSOR_DTYPE)
        self.address = self.rows.ctypes.data
        self.count = 0

    def copy_in(self, tensor: int) -> np.void:
        if self.count == len(self.rows):
            self.rows = tensor_structs(self.rows, np.zeros(len(self.rows), dtype=TENSOR_DTYPE))
            self.address = self.rows.ctypes.data
        ctypes.memmove(self.address + self.count * TENSOR_SIZE, tensor, TENSOR_SIZE)
        self.count += 1
        return self.rows[self.count - 1]

    def take(self) -> np.ndarray:
        """The structs copied so far, names cut at their NUL (ggml leaves stale bytes after it)."""
        taken = tensor_structs(self.rows[: self.count])
        names = raw_bytes(taken)[:, field_bytes("name")]
        names[np.cumsum(names == 0, axis=1) > 0] = 0
        self.count = 0
        return taken


class PythonGraphRecorder:
    """Records the graphs of one llama context, in Python."""

    def __init__(
        self,
        selection: NodeSelection | None = None,
        inline_timing: bool = True,
        values: ValueSettings | None = None,
        routing: bool = True,
    ) -> None:
        import llama_cpp.llama_cpp as llama_cpp

        self._routing_ops = routing_ops() if routing else None  # (as the C recorder: recorder.c's note_routing)
        self.mode = Mode.RECORD
        self.time_nodes = True
        self.inline_timing = inline_timing
        self.clock = InlineClock()
        self.values = values or ValueSettings()
        self._capture_budget = self.values.capture_bytes
        self._skipped = (0, 0)
        self._routing_read = 0
        self.selection = selection or NodeSelection()
        self._get_rows = routing_ops().get_rows
        # a llama_decode call of several tokens is open: read the ids each graph looks up (its ubatch's)
        self.read_input_ids = False
        self.failure: str | None = None
        self.user_data: int | None = None
        # llama.cpp keeps the raw function pointer: this object must outlive the context.
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_eval)
        self.abort_callback = llama_cpp.ggml_abort_callback(self._on_abort)
        self._chained: Any = None
        self._chained_data: Any = None
        self._finished: list[RawGraph] = []
        self._previous_selection: list[bool] = []
        self._counted = 0
        self._nodes = _StructBuffer()
        self._leaves = _StructBuffer()
        self._start_graph()

    def _start_graph(self) -> None:
        self._node_ptrs: list[int] = []
        self._leaf_ptrs: list[int] = []
        self._node_set: set[int] = set()
        self._known: set[int] = {0}
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._flags: list[int] = []
        self._pending = -1
        self._buffers: dict[int, BufferInfo] = {}
        self._values: list[np.void] = []
        self._captures: list[Capture] = []
        self._first: tuple[int, bytes] | None = None  # the first node's op and name, if it has one
        self._ticks: list[int] = []
        self._ticks_asked: list[int] = []
        self._chains: list[list[int]] = []  # [ids, head, elements]: GET_ROWS(·, ids) followed to the weights
        self._ids_read: set[int] = set()
        self._routing: list[Routing] = []
        self._pending_routing: tuple[int, int, int] = (0, 0, 0)  # ids, weights, experts
        self._input_ids: np.ndarray | None = None  # the ids its token lookup read (read_input_ids)

    # -- the callbacks ------------------------------------------------------------------

    def _on_abort(self, _user_data: Any) -> bool:
        """Inline timing: ggml's CPU thread 0 finished a node (see inline_times.py)."""
        try:
            if self.mode is Mode.RECORD and self.inline_timing and self.time_nodes:
                self._ticks.append(perf_counter_ns())
                self._ticks_asked.append(len(self._node_ptrs))
            return bool(self._chained(self._chained_data)) if self._chained else False
        except Exception as error:
            self.failure = f"the abort callback failed: {error!r}"
            self.mode = Mode.OFF
            return False

    def chain_abort(self, callback: Any, data: Any) -> None:
        """Call the program's abort callback from ours (None: no longer)."""
        self._chained, self._chained_data = callback, data

    def hook_barriers(self) -> None:
        """Node ends are not seen without the C recorder: a node's wait stays unknown."""

    def _on_eval(self, tensor: int, ask: bool, _user_data: Any) -> bool:
        try:
            return self._record(tensor, ask)
        except Exception as error:  # never raise into llama.cpp: stop, and say so between graphs
            self.failure = f"the eval callback failed: {error!r}"
            self.mode = Mode.OFF
            return not ask

    def _record(self, tensor: int, ask: bool) -> bool:
        if self.mode is not Mode.RECORD:
            if ask and self.mode is Mode.COUNT:
                self._counted += 1
            return not ask  # a result callback must answer True, or ggml stops the graph
        if not ask:
            now = perf_counter_ns()
            if self._pending >= 0:
                self._ends[self._pending] = now
                if self._flags[self._pending] & (NODE_VALUES | NODE_CAPTURE):
                    self._read_values(self._node_ptrs[self._pending], self._pending)
                if self._flags[self._pending] & NODE_ROUTING:
                    self._read_routing(self._pending)
                self._pending = -1
            return True
        if tensor in self._node_set or self._starts_next_graph(tensor):  # the scheduler began the next graph
            self._close_graph(perf_counter_ns())
        copied = self._nodes.copy_in(tensor)
        self._node_ptrs.append(tensor)
        self._node_set.add(tensor)
        self._known.add(tensor)
        if len(self._node_ptrs) == 1:
            name = bytes(copied["name"]).split(b"\0", 1)[0]
            self._first = (int(copied["op"]), name) if name else None
        self._note_buffer(int(copied["buffer"]))
        if self.read_input_ids and self._input_ids is None:
            self._input_ids = self._lookup_ids(copied)
        for source in copied["src"].tolist():
            if source not in self._known:
                self._copy_leaf(source)
        view_src = int(copied["view_src"])
        if view_src not in self._known:
            self._copy_leaf(view_src)
        index = len(self._starts)
        flags = 0
        answer = False
        if self.time_nodes:
            selected = self.selection.is_everything or self._is_selected(copied)
            flags |= NODE_SELECTED if selected else 0
            fence = index + 1 < len(self._previous_selection) and self._previous_selection[index + 1]
            answer = (selected or fence) and not self.inline_timing
        # Values are read after the node is computed: the scheduler must call back for it.
        if self.values.stats and not int(copied["view_src"]):  # views share their source's bytes
            flags |= NODE_VALUES
        if self.values.captures and any(
            fnmatch.fnmatchcase(tensor_name(bytes(copied["name"])), pattern) for pattern in self.values.captures
        ):
            flags |= NODE_CAPTURE
        if self._routing_ops is not None and self._note_routing(tensor, copied):
            flags |= NODE_ROUTING
        answer = answer or bool(flags & (NODE_VALUES | NODE_CAPTURE | NODE_ROUTING))
        if answer:
            flags |= NODE_ANSWERED
            alone = index == 0 or self._flags[index - 1] & NODE_ANSWERED
            if alone and flags & NODE_SELECTED:  # selected, not just a fence
                flags |= NODE_TIMED
            self._pending = index
        self._flags.append(flags)
        now = perf_counter_ns()
        self._starts.append(now)
        self._ends.append(now)
        return answer

    def _lookup_ids(self, copied: np.void) -> np.ndarray | None:
        """The ids a token lookup reads (as plain_tokens.c's lookup_ids): a GET_ROWS of a weight
        by a 1-D I32 tensor that is no weight, in host memory; None where this node is none."""
        if int(copied["op"]) != self._get_rows:
            return None
        table, ids = (int(source) for source in copied["src"][:2])
        if not table or not ids or not _in_weights(int(_struct(table)["buffer"])):
            return None
        described = _struct(ids)
        buffer, ne = int(described["buffer"]), described["ne"]
        if _in_weights(buffer) or int(described["type"]) != 26 or not 0 < int(ne[0]) <= _MAX_INPUT_IDS:
            return None
        if int(described["nb"][0]) != 4 or any(int(n) != 1 for n in ne[1:]) or not buffer:
            return None
        return _read_elements(described)

    def _note_routing(self, tensor: int, copied: np.void) -> bool:
        """Follow the experts' weights; whether this node is a MUL_MAT_ID whose ids were not read
        yet in this graph (then they are read right after it ran)."""
        ops = self._routing_ops
        assert ops is not None
        op, sources = int(copied["op"]), copied["src"].tolist()
        if op == ops.get_rows:
            ids = sources[1]
            described = _struct(ids) if ids else None
            if described is not None and int(described["type"]) == 26 and not _in_weights(int(described["buffer"])):
                self._chains.append([ids, tensor, _elements(copied)])
            return False
        if op == ops.mul_mat_id:
            ids = sources[2]
            if not ids or not sources[0] or ids in self._ids_read:
                return False
            self._ids_read.add(ids)
            weights = next((chain[1] for chain in reversed(self._chains) if chain[0] == ids), 0)
            self._pending_routing = (ids, weights, int(_struct(sources[0])["ne"][2]))
            return True
        for chain in self._chains[-2:]:
            if sources[0] and chain[1] == sources[0] and _elements(copied) == chain[2]:
                chain[1] = tensor
        return False

    def _read_routing(self, node: int) -> None:
        """The routing noted at this MUL_MAT_ID, read from host memory now that it ran."""
        ids, weights, n_expert = self._pending_routing
        ids_struct = _struct(ids)
        n_used = int(ids_struct["ne"][0])
        count = _elements(ids_struct)
        experts = _read_elements(ids_struct)
        status = ROUTING_READ if experts is not None else ROUTING_UNREADABLE
        experts = np.full(count, -1, np.int32) if experts is None else experts.astype(np.int32)
        read = _struct(weights) if weights else None
        values = _read_elements(read) if read is not None and _elements(read) == count else None
        if values is None and status == ROUTING_READ:
            status = ROUTING_NO_WEIGHTS
        values = np.full(count, np.nan, np.float32) if values is None else values.astype(np.float32)
        shape = (count // max(n_used, 1), n_used)
        self._routing.append(Routing(node, n_expert, experts.reshape(shape), values.reshape(shape), status))
        self._routing_read += 1

    def _read_values(self, tensor: int, node: int) -> None:
        """Statistics (NODE_VALUES) and a copy (NODE_CAPTURE) of a computed node's output."""
        struct = _struct(tensor)
        flags = self._flags[node]
        lib = libggml()
        buffer, data = int(struct["buffer"]), int(struct["data"])
        host = bool(data) and (not buffer or lib.ggml_backend_buffer_is_host(buffer))
        if flags & NODE_VALUES:
            record = np.zeros(1, dtype=STATS.dtype)[0]
            record["node"] = node
            ggml_type = int(struct["type"])
            if host and ggml_type in (0, 1):  # f32, f16 (ggml_type ids, the same in ggml 0.13.1 and 0.25.3)
                values = _strided(data, ggml_type, struct["ne"], struct["nb"]).astype(np.float64).ravel()
                finite = values[np.isfinite(values)]
                record["readable"], record["n"] = 1, len(finite)
                record["nan"], record["inf"] = int(np.isnan(values).sum()), int(np.isinf(values).sum())
                record["min"] = finite.min() if len(finite) else np.nan
                record["max"] = finite.max() if len(finite) else np.nan
                record["sum"], record["sum_squares"] = finite.sum(), (finite * finite).sum()
                record["sum_abs"] = np.abs(finite).sum()
            self._values.append(record)
        if flags & NODE_CAPTURE:
            nbytes = int(lib.ggml_nbytes(tensor))
            if host and lib.ggml_is_contiguous(tensor) and nbytes <= self._capture_budget:
                ne = tuple(int(x) for x in struct["ne"])
                name = tensor_name(bytes(struct["name"]))
                self._captures.append(Capture(node, name, int(struct["type"]), ne, ctypes.string_at(data, nbytes)))  # type: ignore[arg-type]
                self._capture_budget -= nbytes
            else:
                self._skipped = (self._skipped[0] + 1, self._skipped[1] + nbytes)

    @property
    def captures_skipped(self) -> tuple[int, int]:
        return self._skipped

    @property
    def routing_reads(self) -> tuple[int, int, int]:
        """MoE layers read: all at an answered node (no ticks here)."""
        return self._routing_read, 0, 0

    def _is_selected(self, struct: np.void) -> bool:
        selection = self.selection
        name = tensor_name(bytes(struct["name"]))
        if selection.ops:
            op = int(struct["op"])
            if op_desc(op, int(struct["op_params"][0])) not in selection.ops and op_name(op) not in selection.ops:
                return False
        if selection.layers or selection.no_layer:
            layer = layer_of(name)
            in_range = any(low <= layer <= high for low, high in selection.layers)
            if not (in_range or (layer < 0 and selection.no_layer)):
                return False
        if selection.names and not any(fnmatch.fnmatchcase(name, pattern) for pattern in selection.names):
            return False
        return True

    def _copy_leaf(self, tensor: int) -> None:
        copied = self._leaves.copy_in(tensor)
        self._leaf_ptrs.append(tensor)
        self._known.add(tensor)
        self._note_buffer(int(copied["buffer"]))

    def _note_buffer(self, buffer: int) -> None:
        # Described while the graph runs, when every buffer it uses is certainly alive.
        if buffer and buffer not in self._buffers:
            self._buffers[buffer] = buffer_info(buffer)

    def _starts_next_graph(self, tensor: int) -> bool:
        """This node begins the next graph the way the graph in flight began (its first node's
        op and name again), as in core/_recorder.c: llama.cpp may build a ubatch's graph in other
        memory, where no node pointer repeats."""
        if self._first is None or ctypes.c_int32.from_address(tensor + _OP_OFFSET).value != self._first[0]:
            return False
        return ctypes.string_at(tensor + _NAME_OFFSET, 64).split(b"\0", 1)[0] == self._first[1]

    def _close_graph(self, boundary_ns: int) -> None:
        if not self._node_ptrs:
            return
        flags = np.array(self._flags, dtype=np.uint8)
        raw = RawGraph(
            node_ptrs=np.array(self._node_ptrs, dtype=np.uint64),
            nodes=self._nodes.take(),
            start_ns=np.array(self._starts, dtype=np.int64),
            end_ns=np.array(self._ends, dtype=np.int64),
            flags=flags,
            leaf_ptrs=np.array(self._leaf_ptrs, dtype=np.uint64),
            leaves=self._leaves.take(),
            buffers=self._buffers,
            boundary_ns=boundary_ns,
            values=np.array(self._values, dtype=STATS.dtype) if self._values else None,
            captures=self._captures,
            routing=self._routing,
            input_ids=self._input_ids,
        )
        if self.inline_timing:
            ticks = np.array(self._ticks, dtype=np.int64)
            raw = self.clock.apply(raw, ticks, np.array(self._ticks_asked, dtype=np.uint32))
        self._finished.append(raw)
        self._previous_selection = ((flags & NODE_SELECTED) != 0).tolist()
        self._start_graph()

    # -- between graphs ------------------------------------------------------------------

    def take_graphs(self, boundary_ns: int) -> list[RawGraph]:
        """Every graph recorded since the last call; the one in flight ends at `boundary_ns`."""
        self._close_graph(boundary_ns)
        finished, self._finished = self._finished, []
        return finished

    @property
    def open_nodes(self) -> int:
        return len(self._node_ptrs)

    def close_graph(self, boundary_ns: int) -> int:
        """End the graph in flight; returns how many graphs wait to be taken (-1 once failed)."""
        if self.failure is not None:
            return -1
        self._close_graph(boundary_ns)
        return len(self._finished)

    def drop_open(self) -> None:
        """Forget the graph in flight (recording failed inside it)."""
        self._nodes.count = self._leaves.count = 0  # closing a graph takes all structs copied before
        self._start_graph()

    def take_counted(self) -> int:
        counted, self._counted = self._counted, 0
        return counted

    def discard(self) -> None:
        self._nodes.count = self._leaves.count = 0
        self._finished = []
        self._start_graph()
