"""Bulk decoding of a `RawGraph` into the run's normalized tables.

Tensor descriptions (name, op, type, shape, buffer, view source) and buffers get a
small integer id the first time they are seen in a recording; later graphs refer to
the ids. Two lookups keep this cheap: the raw struct bytes (identical when llama.cpp
rebuilds or reuses a graph) and, on a miss, the decoded description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..layers import layer_of
from ..runformat.schema import NO_ID
from .ggml_api import (
    GGML_MAX_NAME,
    NAME_OFFSET,
    TENSOR_DTYPE,
    BufferInfo,
    op_desc,
    op_name,
    tensor_name,
    tensor_structs,
    type_block,
    type_name,
)
from .raw_graph import RawGraph

_KEY_END = NAME_OFFSET + GGML_MAX_NAME  # struct bytes up to the end of the name


@dataclass
class DecodedGraph:
    """Rows for each table, as column arrays, ready for RunWriter.append."""

    nodes: dict[str, Any]
    edges: dict[str, Any]
    new_tensors: dict[str, list[Any]]
    new_buffers: dict[str, list[Any]]
    n_nodes: int
    start_ns: int
    end_ns: int


class TensorCatalog:
    """Ids of every tensor description and buffer seen so far in one recording."""

    def __init__(self) -> None:
        self._by_bytes: dict[bytes, int] = {}
        self._by_description: dict[tuple[Any, ...], int] = {}
        self._buffers: dict[tuple[int, BufferInfo], int] = {}

    def decode(self, raw: RawGraph, graph_id: int, context_id: int) -> DecodedGraph:
        new_tensors: dict[str, list[Any]] = {name: [] for name in _TENSOR_COLUMNS}
        new_buffers: dict[str, list[Any]] = {name: [] for name in _BUFFER_COLUMNS}
        buffer_ids = self._buffer_ids(raw.buffers, graph_id, context_id, new_buffers)
        if len(new_buffers["buffer_id"]):
            self._by_bytes.clear()  # a buffer address may now mean another buffer

        structs = tensor_structs(raw.leaves, raw.nodes)
        ptrs = np.concatenate([raw.leaf_ptrs, raw.node_ptrs])
        ids = self._tensor_ids(structs, ptrs, buffer_ids, new_tensors)
        node_ids = ids[len(raw.leaves) :]

        n = raw.n_nodes
        graph_ids = np.full(n, graph_id, dtype=np.int32)
        nodes = {
            "graph_id": graph_ids,
            "node_index": np.arange(n, dtype=np.int32),
            "start_ns": raw.start_ns,
            "end_ns": raw.end_ns,
            "tensor_id": node_ids,
            "timed": raw.timed,
        }
        edges = _edges(raw.nodes["src"], ptrs, ids, graph_id)
        return DecodedGraph(
            nodes=nodes,
            edges=edges,
            new_tensors=new_tensors,
            new_buffers=new_buffers,
            n_nodes=n,
            start_ns=int(raw.start_ns[0]) if n else 0,
            end_ns=int(raw.end_ns.max()) if n else 0,
        )

    def _buffer_ids(
        self, buffers: dict[int, BufferInfo], graph_id: int, context_id: int, new: dict[str, list[Any]]
    ) -> dict[int, int]:
        ids = {0: NO_ID}
        for address, info in buffers.items():
            key = (address, info)
            if key not in self._buffers:
                self._buffers[key] = len(self._buffers)
                row = (
                    self._buffers[key],
                    context_id,
                    info.name,
                    info.buffer_type,
                    info.usage,
                    info.size,
                    info.base,
                    graph_id,
                )
                for column, value in zip(_BUFFER_COLUMNS, row, strict=True):
                    new[column].append(value)
            ids[address] = self._buffers[key]
        return ids

    def _tensor_ids(
        self, structs: np.ndarray, ptrs: np.ndarray, buffer_ids: dict[int, int], new: dict[str, list[Any]]
    ) -> np.ndarray:
        ids = np.empty(len(structs), dtype=np.int32)
        row_of = {ptr: row for row, ptr in enumerate(ptrs.tolist())}
        keyed = structs.copy()
        keyed["data"] = 0  # where the data sits does not change what the tensor is
        raw_bytes = keyed.tobytes()
        assert len(raw_bytes) == len(structs) * TENSOR_DTYPE.itemsize
        for row in range(len(structs)):
            key = raw_bytes[row * TENSOR_DTYPE.itemsize : row * TENSOR_DTYPE.itemsize + _KEY_END]
            known = self._by_bytes.get(key)
            if known is None:
                known = self._describe(structs[row], row_of, ids, buffer_ids, new)
                self._by_bytes[key] = known
            ids[row] = known
        return ids

    def _describe(
        self,
        struct: np.void,
        row_of: dict[int, int],
        ids: np.ndarray,
        buffer_ids: dict[int, int],
        new: dict[str, list[Any]],
    ) -> int:
        name = tensor_name(struct["name"])
        op, ggml_type = int(struct["op"]), int(struct["type"])
        ne = [int(v) for v in struct["ne"]]
        view_row = row_of.get(int(struct["view_src"]))
        description = (
            name,
            op_desc(op, int(struct["op_params"][0])),
            op_name(op),
            type_name(ggml_type),
            *ne,
            _nbytes(ggml_type, ne, [int(v) for v in struct["nb"]]),
            int(struct["flags"]),
            buffer_ids.get(int(struct["buffer"]), NO_ID),
            layer_of(name),
            int(ids[view_row]) if view_row is not None else NO_ID,
            int(struct["view_offs"]),
        )
        tensor_id = self._by_description.get(description)
        if tensor_id is None:
            tensor_id = self._by_description[description] = len(self._by_description)
            new["tensor_id"].append(tensor_id)
            for column, value in zip(_TENSOR_COLUMNS[1:], description, strict=True):
                new[column].append(value)
        return tensor_id


_TENSOR_COLUMNS = (
    "tensor_id", "name", "op", "op_base", "type", "ne0", "ne1", "ne2", "ne3",
    "nbytes", "flags", "buffer_id", "layer", "view_src_id", "view_offs",
)  # fmt: skip
_BUFFER_COLUMNS = ("buffer_id", "context_id", "name", "buffer_type", "usage", "size", "base", "first_graph_id")


def _nbytes(ggml_type: int, ne: list[int], nb: list[int]) -> int:
    """ggml_nbytes: the bytes a tensor spans, strides included (views may be sparse)."""
    if any(n <= 0 for n in ne):
        return 0
    block_elements, block_bytes = type_block(ggml_type)
    if block_elements == 1:
        return block_bytes + sum((ne[i] - 1) * nb[i] for i in range(4))
    return ne[0] * nb[0] // block_elements + sum((ne[i] - 1) * nb[i] for i in range(1, 4))


def _edges(sources: np.ndarray, ptrs: np.ndarray, ids: np.ndarray, graph_id: int) -> dict[str, Any]:
    """One row per non-null source slot of each node; every source was copied, so each resolves."""
    node_index, slot = np.nonzero(sources)
    source_ptrs = sources[node_index, slot]
    src_ids = np.empty(len(source_ptrs), dtype=np.int32)
    if len(source_ptrs):
        order = np.argsort(ptrs, kind="stable")
        found = order[np.searchsorted(ptrs, source_ptrs, sorter=order).clip(max=len(ptrs) - 1)]
        src_ids = np.where(ptrs[found] == source_ptrs, ids[found], NO_ID).astype(np.int32)
    return {
        "graph_id": np.full(len(node_index), graph_id, dtype=np.int32),
        "node_index": node_index.astype(np.int32),
        "src_slot": slot.astype(np.int8),
        "src_tensor_id": src_ids,
    }
