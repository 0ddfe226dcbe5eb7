"""The native recorder: the C extension's hot path behind the same interface as
PythonGraphRecorder. It is the default; when the extension cannot load, ggml-viz says so
once and records with the Python recorder instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .ggml_api import BUFFER_USAGE_NAMES, TENSOR_DTYPE, BufferInfo, address_of, field_bytes, libggml, tensor_name
from .inline_times import InlineClock
from .raw_graph import (
    BUFFER_DTYPE,
    CAPTURE_DTYPE,
    DECODE_DTYPE,
    VALUES_DTYPE,
    Capture,
    Mode,
    RawGraph,
    RepeatedGraph,
)
from .settings import NodeSelection, ValueSettings

try:
    from . import _native
except ImportError as error:  # pragma: no cover - exercised when the build failed
    _native = None  # type: ignore[assignment]
    IMPORT_ERROR: str | None = str(error)
else:
    IMPORT_ERROR = None
    # The records' layouts come from C: the dtypes that read them must agree.
    for _dtype, _size in ((BUFFER_DTYPE, "BUFFER_RECORD_SIZE"), (DECODE_DTYPE, "DECODE_RECORD_SIZE"),
                          (VALUES_DTYPE, "STATS_RECORD_SIZE"), (CAPTURE_DTYPE, "CAPTURE_RECORD_SIZE")):  # fmt: skip
        if _dtype.itemsize != getattr(_native, _size):
            raise ImportError(f"ggml_viz.capture._native's {_size} is {getattr(_native, _size)}, not {_dtype.itemsize}")


def native_available() -> bool:
    return _native is not None


def _layout() -> tuple[int, ...]:
    return (
        TENSOR_DTYPE.itemsize,
        field_bytes("buffer").start,
        field_bytes("op").start,
        field_bytes("src").start,
        TENSOR_DTYPE.fields["src"][0].shape[0],  # type: ignore[index]
        field_bytes("view_src").start,
        field_bytes("name").start,
        field_bytes("type").start,
        field_bytes("ne").start,
        field_bytes("nb").start,
        field_bytes("data").start,
    )


def _functions() -> tuple[int, ...]:
    lib = libggml()
    return tuple(
        address_of(getattr(lib, name))
        for name in (
            "ggml_backend_buffer_name",
            "ggml_backend_buffer_get_usage",
            "ggml_backend_buffer_get_size",
            "ggml_backend_buffer_get_base",
            "ggml_backend_buffer_get_type",
            "ggml_backend_buft_name",
            "ggml_op_desc",
            "ggml_op_name",
        )
    )


class NativeGraphRecorder:
    """Records the graphs of one llama context with the C extension."""

    def __init__(
        self, selection: NodeSelection | None = None, inline_timing: bool = True, values: ValueSettings | None = None
    ) -> None:
        import llama_cpp.llama_cpp as llama_cpp

        if _native is None:
            raise ImportError(IMPORT_ERROR or "ggml_viz.capture._native is missing")
        self._recorder = _native.Recorder(_layout(), _functions())
        selection = selection or NodeSelection()
        self._recorder.set_filters(selection.ops, selection.layers, selection.no_layer, selection.names)
        self.user_data: int | None = self._recorder.address
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(_native.CALLBACK_ADDRESS)
        self._recorder.inline_timing = int(inline_timing)
        self.inline_timing = inline_timing
        self.abort_callback = llama_cpp.ggml_abort_callback(_native.ABORT_CALLBACK_ADDRESS)
        self._chained: Any = None  # the program's abort callback, kept alive while chained
        self.reader = GraphRecordReader(inline_timing)
        self.clock = self.reader.clock
        values = values or ValueSettings()
        self.values = values
        if values.wanted:
            self._recorder.set_values(values.stats, values.captures, values.capture_bytes, value_functions())

    @property
    def native(self) -> Any:
        """The C recorder, for the decode bracket (NativeContextTracer)."""
        return self._recorder

    @property
    def mode(self) -> Mode:
        return Mode(self._recorder.mode)

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self._recorder.mode = int(mode)

    @property
    def time_nodes(self) -> bool:
        return bool(self._recorder.time_nodes)

    @time_nodes.setter
    def time_nodes(self, on: bool) -> None:
        self._recorder.time_nodes = int(on)

    @property
    def failure(self) -> str | None:
        return "the native recorder ran out of memory" if self._recorder.out_of_memory else None

    def chain_abort(self, callback: Any, data: Any) -> None:
        """Call the program's abort callback from ours (None: no longer)."""
        self._chained = callback
        self._recorder.chain_abort(address_of(callback) if callback else 0, address_of(data) if data else 0)

    def hook_barriers(self) -> None:
        """See each node's end: ggml's barrier after it, routed through the recorder."""
        _native.hook_barriers()

    def take_graphs(self, boundary_ns: int) -> list[RawGraph | RepeatedGraph]:
        return self.reader.graphs(self._recorder.take(boundary_ns))

    @property
    def open_nodes(self) -> int:
        return int(self._recorder.open_nodes)

    @property
    def captures_skipped(self) -> tuple[int, int]:
        """Captures left out for the byte budget: how many, and their bytes."""
        return int(self._recorder.captures_skipped), int(self._recorder.capture_bytes_skipped)

    def close_graph(self, boundary_ns: int) -> int:
        """End the graph in flight; returns how many graphs wait to be taken (-1 once failed)."""
        return int(self._recorder.close(boundary_ns))

    def drop_open(self) -> None:
        """Forget the graph in flight (recording failed inside it)."""
        self._recorder.drop_open()

    def take_counted(self) -> int:
        return int(self._recorder.take_counted())

    def discard(self) -> None:
        self._recorder.discard()


def value_functions() -> tuple[int, int, int, int]:
    lib = libggml()
    return tuple(  # type: ignore[return-value]
        address_of(getattr(lib, name))
        for name in ("ggml_backend_buffer_is_host", "ggml_is_contiguous", "ggml_nbytes", "ggml_fp16_to_fp32")
    )


class GraphRecordReader:
    """Turns the C recorder's graph records (GraphRecord, RepeatRecord, or the same fields
    read back from a native program's spool) into RawGraph and RepeatedGraph."""

    def __init__(self, inline_timing: bool) -> None:
        self.inline_timing = inline_timing
        self.clock = InlineClock()
        # The buffers as the recorder last described them, and as BufferInfo: the decoder
        # recognizes an unchanged dict by identity.
        self._last_buffers: tuple[bytes, dict[int, BufferInfo]] = (b"", {})

    def graphs(self, records: Sequence[Any]) -> list[RawGraph | RepeatedGraph]:
        graphs: list[RawGraph | RepeatedGraph] = []
        for record in records:
            if not hasattr(record, "nodes"):  # a RepeatRecord: a plain repeat
                graphs.append(RepeatedGraph(record.n_nodes, record.start_ns, record.end_ns))
                continue
            if record.buffers != self._last_buffers[0]:  # buffers described otherwise than last time
                self._last_buffers = (record.buffers, _describe_buffers(record.buffers))
            raw = _raw_graph(record, self._last_buffers[1])
            if len(record.stats) or len(record.capture_records):
                raw = replace(raw, values=np.frombuffer(record.stats, VALUES_DTYPE).copy(),
                              captures=_captures(record.capture_records, record.capture_bytes))  # fmt: skip
            if self.inline_timing:
                raw = self.clock.apply(raw, np.frombuffer(record.tick_ns, np.int64),
                                       np.frombuffer(record.tick_asked, np.uint32),
                                       np.frombuffer(record.tick_barrier_ns, np.int64))  # fmt: skip
            graphs.append(raw)
        return graphs


def decode_calls(record: Any) -> list[tuple[int, int, int, int, int, tuple[Any, ...] | None]]:
    """The llama_decode calls of a DecodesRecord: (index, start_ns, end_ns, return_code,
    graphs_closed, batch), batch as llama_info.BatchCopy (None: graphs outside any call)."""
    calls = []
    for call in np.frombuffer(record.calls, DECODE_DTYPE).tolist():
        index, start_ns, end_ns, return_code, n_tokens, lowest, graphs_closed, first = call
        batch = None
        if index >= 0:
            int32s = slice(4 * first, 4 * (first + n_tokens))
            batch = (n_tokens, lowest, record.token_ids[int32s], record.positions[int32s], record.seq_ids[int32s],
                     record.outputs[first : first + n_tokens])  # fmt: skip
        calls.append((index, start_ns, end_ns, return_code, graphs_closed, batch))
    return calls


def _captures(records: bytes, data: bytes) -> list[Capture]:
    return [
        Capture(int(r["node"]), tensor_name(bytes(r["name"])), int(r["type"]),
                tuple(int(x) for x in r["ne"]),  # type: ignore[arg-type]
                data[int(r["offset"]) : int(r["offset"]) + int(r["nbytes"])])
        for r in np.frombuffer(records, CAPTURE_DTYPE)
    ]  # fmt: skip


def _describe_buffers(records: bytes) -> dict[int, BufferInfo]:
    return {
        int(b["address"]): BufferInfo(tensor_name(b["name"]), tensor_name(b["buffer_type"]) or "?",
                                      BUFFER_USAGE_NAMES.get(int(b["usage"]), "other"), int(b["size"]), int(b["base"]))
        for b in np.frombuffer(records, BUFFER_DTYPE)
    }  # fmt: skip


def _raw_graph(record: Any, buffers: dict[int, BufferInfo]) -> RawGraph:
    """A RawGraph from a GraphRecord."""
    nodes, leaves, node_ptrs, leaf_ptrs = record.nodes, record.leaves, record.node_ptrs, record.leaf_ptrs
    return RawGraph(
        node_ptrs=np.frombuffer(node_ptrs, dtype=np.uint64),
        nodes=np.frombuffer(nodes, dtype=TENSOR_DTYPE),
        start_ns=np.frombuffer(record.starts, dtype=np.int64),
        end_ns=np.frombuffer(record.ends, dtype=np.int64),
        flags=np.frombuffer(record.flags, dtype=np.uint8),
        leaf_ptrs=np.frombuffer(leaf_ptrs, dtype=np.uint64),
        leaves=np.frombuffer(leaves, dtype=TENSOR_DTYPE),
        buffers=buffers,
        boundary_ns=record.boundary_ns,
        fingerprint=(nodes, leaves, node_ptrs, leaf_ptrs),  # no copy: the bytes the recorder made
        same_as_previous=bool(record.same),
        n_timed=record.n_timed,
        end_of_graph_ns=record.end_ns,
    )
