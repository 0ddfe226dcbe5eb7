"""Bulk decoding of a `RawGraph` into the run's normalized tables.

Tensor descriptions (name, op, type, shape, strides, buffer, view source) and buffers
get a small integer id the first time a recording sees them; later graphs refer to the
ids. The work is vectorized: each copied struct, with the fields that do not describe
the tensor cleared (data and source pointers, op parameters), is its own key; the keys
are looked up in one table (DescriptionIds, in C), and only descriptions never seen
before are decoded, column by column. A view's key also holds its source's id, so views
are resolved after their sources.
"""

from __future__ import annotations

import struct as struct_module
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import layers
from ...runformat.schema import NO_ID
from .extension import extension
from .ggml_api import (
    TENSOR_SIZE,
    BufferInfo,
    field_bytes,
    op_desc,
    op_name,
    ops_with_subop,
    raw_bytes,
    tensor_name,
    tensor_structs,
    type_block,
    type_name,
)
from .raw_graph import RawGraph


class PythonDescriptionIds:
    """Ids of tensor descriptions, given the first time each is seen: the C extension's
    DescriptionIds in Python (where the extension is missing, and as its test oracle).
    A description is a struct's bytes (what does not describe the tensor cleared) and
    the id of the tensor a view looks into."""

    def __init__(self, struct_size: int) -> None:
        self._struct_size = struct_size
        self._ids: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def clear(self) -> None:
        self._ids.clear()

    def assign(self, structs: Any, view_rows: Any, next_id: int) -> tuple[bytes, bytes, bytes, int]:
        """(ids, new_rows, new_view_source_ids, next_id), as int32 bytes: see _recorder.c."""
        keys = np.frombuffer(structs, np.uint8).reshape(-1, self._struct_size)
        rows_of = np.frombuffer(view_rows, np.int64).tolist()
        ids = [NO_ID] * len(rows_of)
        new_rows: list[int] = []
        new_sources: list[int] = []
        for row, (key, view_row) in enumerate(zip(keys, rows_of, strict=True)):
            source = ids[view_row] if 0 <= view_row < len(ids) else NO_ID
            description = key.tobytes() + _VIEW_ID.pack(source)
            tensor_id = self._ids.get(description)
            if tensor_id is None:
                tensor_id = self._ids[description] = next_id
                next_id += 1
                new_rows.append(row)
                new_sources.append(source)
            ids[row] = tensor_id
        return (
            np.array(ids, dtype=np.int32).tobytes(),
            np.array(new_rows, dtype=np.int32).tobytes(),
            np.array(new_sources, dtype=np.int32).tobytes(),
            next_id,
        )


def python_layers_of(names: Any) -> bytes:
    """The layer of each 64-byte name field (a C string), as int32 bytes: the C extension's
    layers_of in Python."""
    fields = np.frombuffer(names, "S64").tolist()
    return np.array([layers.layer_of(tensor_name(field)) for field in fields], dtype=np.int32).tobytes()


# the C twins of python_layers_of and PythonDescriptionIds (tests hold them equal), many times faster
if extension is not None:
    layers_of = extension.layers_of
    _DescriptionIds = extension.DescriptionIds
else:  # pragma: no cover - exercised when the build failed
    layers_of = python_layers_of
    _DescriptionIds = PythonDescriptionIds  # type: ignore[misc,assignment]

# Descriptions remembered before the catalog starts afresh: keeps a long recording's
# memory flat (a description seen again after that is stored again, with a new id).
MAX_REMEMBERED = 200_000
# Graph shapes remembered per context, newest first: prompt and decode graphs alternate
# (each new prompt, then its decode graphs), so a shape often comes back after another.
RECENT_SHAPES = 8
_VIEW_ID = struct_module.Struct("<i")
_NO_INDEX = np.zeros(0, dtype=np.int32)
_NO_TIMES = np.zeros(0, dtype=np.int64)
# Bytes of a struct that do not change what the tensor is: which tensors feed it (edges
# say that), op parameters past the first, backend extras, padding. (Where its data sits
# is part of it: the run tells which bytes of which buffer each tensor occupies.)
_NOT_DESCRIPTIVE = [
    field_bytes("src"),
    field_bytes("view_src"),
    slice(field_bytes("op_params").start + 4, field_bytes("op_params").stop),
    slice(field_bytes("type").stop, field_bytes("buffer").start),
    slice(field_bytes("name").stop, TENSOR_SIZE),
]


@dataclass
class DecodedGraph:
    """Rows for each table, as column arrays, ready for RunWriter.append."""

    node_times: dict[str, Any]  # node_index, start_ns, end_ns, wait_ns of the nodes timed on their own
    new_structure_nodes: dict[str, Any]  # the nodes of a structure not seen before (else empty)
    new_edges: dict[str, Any]  # and its wiring
    structure_id: int
    new_tensors: dict[str, list[Any]]
    new_buffers: dict[str, list[Any]]


class TensorCatalog:
    """Ids of every tensor description and buffer seen so far in one recording."""

    def __init__(self) -> None:
        self._descriptions = _DescriptionIds(TENSOR_SIZE)
        self._n_tensors = 0
        self._buffers: dict[tuple[int, BufferInfo], int] = {}
        self._recent: dict[int, list[_GraphShape]] = {}  # per context: the last shapes, newest first
        self._n_structures = 0
        # per structure, the phase of a graph computed outside any llama call (_structure_phase)
        self.structure_phases: dict[int, str] = {}
        self._last_buffers: tuple[dict[int, BufferInfo] | None, dict[int, int]] = (None, {})
        self._arange = np.arange(0, dtype=np.int32)

    def decode(self, raw: RawGraph, graph_id: int, context_id: int) -> DecodedGraph:
        # Decode graphs usually repeat the previous graph and its buffers: then nothing is
        # new, and no row is built (empty mappings: RunWriter.append writes nothing for them).
        new_buffers: dict[str, list[Any]] = {}
        buffer_ids = self._buffer_ids(raw.buffers, graph_id, context_id, new_buffers)
        recent = self._recent.setdefault(context_id, [])
        shape = recent[0] if recent else None
        new_tensors: dict[str, Any] = {}
        new_edges: dict[str, Any] = {}
        new_structure_nodes: dict[str, Any] = {}
        if raw.same_as_previous and shape is None:
            raise ValueError("a graph came as a repeat of one that was never decoded")
        if not raw.same_as_previous and (shape is None or shape.fingerprint != raw.fingerprint):
            # Not a rerun or an identical rebuild of the previous graph (as decode graphs are).
            shape = _recall(recent, raw.fingerprint)
        if shape is None:
            structs = tensor_structs(raw.leaves, raw.nodes)
            ptrs = np.concatenate([raw.leaf_ptrs, raw.node_ptrs]).astype(np.uint64)
            keyed = _description_keys(structs, ops_with_subop())  # the graph's ggml's (ggml_api.use_library)
            bases = {address: info.base for address, info in raw.buffers.items()}
            ids = self._tensor_ids(structs, keyed, ptrs, buffer_ids, bases, new_tensors)
            shape = _GraphShape(raw.fingerprint, ids, self._n_structures)
            recent.insert(0, shape)
            del recent[RECENT_SHAPES:]
            self._n_structures += 1
            new_edges = _edges(raw.nodes["src"], ptrs, ids, shape.structure_id)
            node_ids = ids[len(raw.leaves) :]
            self.structure_phases[shape.structure_id] = _structure_phase(structs, len(raw.leaves), ptrs, raw.buffers)
            new_structure_nodes = {
                "structure_id": np.full(len(node_ids), shape.structure_id, dtype=np.int32),
                "node_index": np.arange(len(node_ids), dtype=np.int32),
                "tensor_id": node_ids,
                "layer": _node_layers(structs, raw.nodes["src"], ptrs, len(raw.leaves), raw.buffers),
            }
        assert shape is not None
        n = raw.n_nodes
        wait_ns = raw.wait_ns if raw.wait_ns is not None else np.full(n, -1, dtype=np.int64)
        if raw.n_timed == n:
            node_times = {
                "node_index": self._node_indexes(n),
                "start_ns": raw.start_ns,
                "end_ns": raw.end_ns,
                "wait_ns": wait_ns,
            }
        elif raw.n_timed == 0:
            node_times = {"node_index": _NO_INDEX, "start_ns": _NO_TIMES, "end_ns": _NO_TIMES, "wait_ns": _NO_TIMES}
        else:
            index = np.flatnonzero(raw.timed).astype(np.int32)
            node_times = {
                "node_index": index,
                "start_ns": raw.start_ns[index],
                "end_ns": raw.end_ns[index],
                "wait_ns": wait_ns[index],
            }
        return DecodedGraph(
            node_times=node_times,
            new_structure_nodes=new_structure_nodes,
            new_edges=new_edges,
            structure_id=shape.structure_id,
            new_tensors=new_tensors,
            new_buffers=new_buffers,
        )

    def repeated_structure(self, context_id: int) -> int:
        """The structure of a graph that repeats the graph decoded before it in its context."""
        recent = self._recent.get(context_id)
        if not recent:
            raise ValueError("a graph came as a repeat of one that was never decoded")
        return recent[0].structure_id

    def _node_indexes(self, n: int) -> np.ndarray:
        if len(self._arange) < n:
            self._arange = np.arange(max(n, 2 * len(self._arange)), dtype=np.int32)
        return self._arange[:n]

    def _buffer_ids(
        self, buffers: dict[int, BufferInfo], graph_id: int, context_id: int, new: dict[str, list[Any]]
    ) -> dict[int, int]:
        if buffers is self._last_buffers[0]:  # the very buffers of the previous graph
            return self._last_buffers[1]
        ids = {0: NO_ID}
        for address, info in buffers.items():
            key = (address, info)
            if key not in self._buffers:
                self._buffers[key] = len(self._buffers)
                if not new:
                    new.update({name: [] for name in _BUFFER_COLUMNS})
                # keys hold buffer addresses: this one may now mean another buffer, and so may
                # the shapes remembered before it (all but the latest, which a repeat names)
                self._descriptions.clear()
                for recent in self._recent.values():
                    del recent[1:]
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
        self._last_buffers = (buffers, ids)
        return ids

    def _tensor_ids(
        self,
        structs: np.ndarray,
        keyed: np.ndarray,
        ptrs: np.ndarray,
        buffer_ids: dict[int, int],
        buffer_bases: dict[int, int],
        new: dict[str, Any],
    ) -> np.ndarray:
        if len(self._descriptions) > MAX_REMEMBERED:
            self._descriptions.clear()
        view_rows = _rows_of(structs["view_src"], ptrs)
        ids, new_rows, new_view_sources, self._n_tensors = self._descriptions.assign(keyed, view_rows, self._n_tensors)
        tensor_ids = np.frombuffer(ids, dtype=np.int32)
        rows = np.frombuffer(new_rows, dtype=np.int32)
        if len(rows):
            sources = np.frombuffer(new_view_sources, dtype=np.int32)
            _describe(structs[rows], tensor_ids[rows], sources, buffer_ids, buffer_bases, new)
        return tensor_ids


@dataclass
class _GraphShape:
    """The previous graph, to recognize the next one as the same."""

    fingerprint: tuple[bytes, ...]  # every copied struct and address, byte for byte
    ids: np.ndarray
    structure_id: int


def _recall(recent: list[_GraphShape], fingerprint: tuple[bytes, ...]) -> _GraphShape | None:
    """A remembered shape with this fingerprint, moved to the front; None if none."""
    for index, shape in enumerate(recent):
        if shape.fingerprint == fingerprint:
            recent.insert(0, recent.pop(index))
            return shape
    return None


def _description_keys(structs: np.ndarray, subop_ops: tuple[int, ...]) -> np.ndarray:
    """Struct bytes with what does not describe the tensor cleared: one key per row."""
    keyed = raw_bytes(structs).copy()
    for cleared in _NOT_DESCRIPTIVE:
        keyed[:, cleared] = 0
    first_param = field_bytes("op_params").start
    has_subop = np.logical_or.reduce([structs["op"] == op for op in subop_ops])
    keyed[~has_subop, first_param : first_param + 4] = 0
    return keyed


def _describe(
    structs: np.ndarray,
    tensor_ids: np.ndarray,
    view_src_ids: np.ndarray,
    buffer_ids: dict[int, int],
    buffer_bases: dict[int, int],
    new: dict[str, Any],
) -> None:
    """The descriptions of tensors seen for the first time, column by column: numpy where
    it can, since a process's first graphs bring thousands of them, in the program's time."""
    ops = structs["op"].astype(np.int64)
    op_base = _labels(ops, op_name)
    op = op_base.copy()
    with_subop = np.isin(ops, ops_with_subop())
    if with_subop.any():
        pairs = np.stack([ops[with_subop], structs["op_params"][with_subop, 0].astype(np.int64)], axis=1)
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        op[with_subop] = np.array([op_desc(int(o), int(p)) for o, p in distinct], dtype=object)[inverse.ravel()]
    types = structs["type"].astype(np.int64)
    ne = structs["ne"].astype(np.int64)
    buffers, inverse = np.unique(structs["buffer"], return_inverse=True)
    buffer_id = np.array([buffer_ids.get(int(b), NO_ID) for b in buffers], dtype=np.int32)[inverse]
    base = np.array([buffer_bases.get(int(b), -1) for b in buffers], dtype=np.int64)[inverse]
    data = structs["data"].astype(np.int64)
    # as ggml_api.tensor_name reads a name (its C string ends at the NUL), written out: thousands of rows
    names = [name.split(b"\0", 1)[0].decode("utf-8", "replace") for name in structs["name"].tolist()]
    new.update(
        {
            "tensor_id": np.asarray(tensor_ids, dtype=np.int32),
            "name": names,
            "op": op,
            "op_base": op_base,
            "type": _labels(types, type_name),
            **{f"ne{dim}": ne[:, dim] for dim in range(4)},
            "nbytes": _nbytes(types, ne, structs["nb"].astype(np.int64)),
            "flags": structs["flags"].astype(np.int32),
            "buffer_id": buffer_id,
            "buffer_offset": np.where((base >= 0) & (data != 0), data - base, NO_ID),
            "layer": np.frombuffer(layers_of(np.ascontiguousarray(structs["name"])), dtype=np.int32),
            "view_src_id": np.asarray(view_src_ids, dtype=np.int32),
            "view_offs": structs["view_offs"].astype(np.int64),
        }
    )


def _labels(values: np.ndarray, label: Any) -> np.ndarray:
    """label(value) for each value, asked once per distinct value."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([label(int(value)) for value in distinct], dtype=object)[inverse]


_BUFFER_COLUMNS = ("buffer_id", "context_id", "name", "buffer_type", "usage", "size", "base", "first_graph_id")


def _rows_of(pointers: np.ndarray, ptrs: np.ndarray) -> np.ndarray:
    """The row of each pointer in `ptrs`, -1 where it is null or absent."""
    rows = np.full(len(pointers), -1, dtype=np.int64)
    if len(ptrs) == 0:
        return rows
    order = np.argsort(ptrs, kind="stable")
    found = order[np.searchsorted(ptrs, pointers, sorter=order).clip(max=len(ptrs) - 1)]
    hit = (ptrs[found] == pointers) & (pointers != 0)
    rows[hit] = found[hit]
    return rows


def _nbytes(types: np.ndarray, ne: np.ndarray, nb: np.ndarray) -> np.ndarray:
    """ggml_nbytes, vectorized: the bytes each tensor spans, strides included (views may be sparse)."""
    distinct, inverse = np.unique(types, return_inverse=True)
    blocks = np.array([type_block(int(ggml_type)) for ggml_type in distinct], dtype=np.int64).reshape(-1, 2)
    blocks = blocks[inverse.ravel()]
    block_elements, block_bytes = blocks[:, 0], blocks[:, 1]
    rest = ((ne[:, 1:] - 1) * nb[:, 1:]).sum(axis=1)
    unblocked = block_bytes + (ne[:, 0] - 1) * nb[:, 0] + rest
    blocked = ne[:, 0] * nb[:, 0] // np.maximum(block_elements, 1) + rest
    nbytes = np.where(block_elements == 1, unblocked, blocked)
    nbytes[(ne <= 0).any(axis=1)] = 0
    return nbytes


def _structure_phase(structs: np.ndarray, n_leaves: int, ptrs: np.ndarray, buffers: dict[int, BufferInfo]) -> str:
    """The phase of a graph computed outside any llama call (a whisper.cpp graph, anyone's
    ggml code), from what it computes: `decode` when it looks tokens up in a weight (GET_ROWS
    of a weight by integer ids: a decoder's step), `encode` when it computes with the model's
    weights otherwise (an encoder over audio or an image), `other` when it reads no weight."""
    weights_buffers = {address for address, info in buffers.items() if info.usage == "weights"}
    leaves = structs[:n_leaves]
    is_weight = np.isin(leaves["buffer"], np.fromiter(weights_buffers, dtype=np.uint64, count=len(weights_buffers)))
    if not is_weight.any():
        return "other"
    nodes = structs[n_leaves:]
    get_rows = [code for code in np.unique(nodes["op"]).tolist() if op_name(int(code)) == "GET_ROWS"]
    for node in np.flatnonzero(np.isin(nodes["op"], get_rows)).tolist():
        table, ids = _rows_of(nodes["src"][node, :2], ptrs).tolist()
        if 0 <= table < n_leaves and is_weight[table] and 0 <= ids < n_leaves and not is_weight[ids]:
            if type_name(int(leaves["type"][ids])) == "i32":
                return "decode"
    return "encode"


def _node_layers(
    structs: np.ndarray, sources: np.ndarray, ptrs: np.ndarray, n_leaves: int, buffers: dict[int, BufferInfo]
) -> np.ndarray:
    """Each node's layer, inferred from the graph (layers.node_layers): from the leaves each
    node reads (`blk.N.` weights, per-layer caches) and its neighbours; names are hints."""
    node_index, slot = np.nonzero(sources)
    rows = _rows_of(sources[node_index, slot], ptrs)
    leaf = (rows >= 0) & (rows < n_leaves)
    leaf_rows, which = np.unique(rows[leaf], return_inverse=True)
    weights_buffers = {address for address, info in buffers.items() if info.usage == "weights"}
    names = [tensor_name(field) for field in structs["name"][leaf_rows].tolist()]
    in_weights = [int(address) in weights_buffers for address in structs["buffer"][leaf_rows].tolist()]
    classes, leaf_layers = layers.leaf_classes(names, in_weights)
    edge_class = np.full(len(rows), layers.LEAF_OTHER, dtype=np.int32)
    edge_layer = np.full(len(rows), layers.NO_LAYER, dtype=np.int32)
    edge_class[leaf] = classes[which.ravel()]
    edge_layer[leaf] = leaf_layers[which.ravel()]
    wiring = layers.Wiring(
        hints=np.frombuffer(layers_of(np.ascontiguousarray(structs["name"][n_leaves:])), dtype=np.int32),
        edge_node=node_index,
        edge_source=np.where(rows >= n_leaves, rows - n_leaves, -1),
        edge_leaf_class=edge_class,
        edge_leaf_layer=edge_layer,
    )
    return layers.node_layers(wiring)


def _edges(sources: np.ndarray, ptrs: np.ndarray, ids: np.ndarray, structure_id: int) -> dict[str, np.ndarray]:
    """One row per non-null source slot of each node; every source was copied, so each resolves."""
    node_index, slot = np.nonzero(sources)
    rows = _rows_of(sources[node_index, slot], ptrs)
    return {
        "structure_id": np.full(len(node_index), structure_id, dtype=np.int32),
        "node_index": node_index.astype(np.int32),
        "src_slot": slot.astype(np.int8),
        "src_tensor_id": np.where(rows >= 0, ids[rows], NO_ID).astype(np.int32),
    }
