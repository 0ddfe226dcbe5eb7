"""The C recorder's records of graphs and decode calls, as RawGraphs and batches.

A GraphRecord (or RepeatRecord, DecodesRecord) comes from the extension in this process
(llama_cpp_python/c_recorder.py) or, with the same fields, from a native program's spool
(preload/spool.py): both are read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..contract.records import BUFFER, CAPTURE, DECODE, STATS
from .ggml_api import BUFFER_USAGE_NAMES, TENSOR_DTYPE, BufferInfo, tensor_name
from .inline_times import InlineClock
from .raw_graph import Capture, RawGraph, RepeatedGraph, routings


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
                raw = replace(
                    raw,
                    values=np.frombuffer(record.stats, STATS.dtype).copy(),
                    captures=_captures(record.capture_records, record.capture_bytes),
                )
            if len(record.routing_records):
                raw = replace(raw, routing=routings(record.routing_records, record.routing_bytes))
            if self.inline_timing:
                raw = self.clock.apply(
                    raw,
                    np.frombuffer(record.tick_ns, np.int64),
                    np.frombuffer(record.tick_asked, np.uint32),
                    np.frombuffer(record.tick_barrier_ns, np.int64),
                )
            graphs.append(raw)
        return graphs


def decode_calls(record: Any) -> list[tuple[int, int, int, int, int, tuple[Any, ...] | None]]:
    """The llama_decode calls of a DecodesRecord: (index, start_ns, end_ns, return_code,
    graphs_closed, batch), batch as context_tracer.BatchCopy (None: graphs outside any call)."""
    calls = []
    for call in np.frombuffer(record.calls, DECODE.dtype).tolist():
        index, start_ns, end_ns, return_code, n_tokens, lowest, graphs_closed, first = call
        batch = None
        if index >= 0:
            int32s = slice(4 * first, 4 * (first + n_tokens))
            batch = (
                n_tokens,
                lowest,
                record.token_ids[int32s],
                record.positions[int32s],
                record.seq_ids[int32s],
                record.outputs[first : first + n_tokens],
            )
        calls.append((index, start_ns, end_ns, return_code, graphs_closed, batch))
    return calls


def _captures(records: bytes, data: bytes) -> list[Capture]:
    return [
        Capture(
            int(r["node"]),
            tensor_name(bytes(r["name"])),
            int(r["type"]),
            tuple(int(x) for x in r["ne"]),  # type: ignore[arg-type]
            data[int(r["offset"]) : int(r["offset"]) + int(r["nbytes"])],
        )
        for r in np.frombuffer(records, CAPTURE.dtype)
    ]


def _describe_buffers(records: bytes) -> dict[int, BufferInfo]:
    return {
        int(b["address"]): BufferInfo(
            tensor_name(b["name"]),
            tensor_name(b["buffer_type"]) or "?",
            BUFFER_USAGE_NAMES.get(int(b["usage"]), "other"),
            int(b["size"]),
            int(b["base"]),
        )
        for b in np.frombuffer(records, BUFFER.dtype)
    }


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
        input_ids=np.frombuffer(record.input_ids, np.int32) if record.input_ids else None,
    )
