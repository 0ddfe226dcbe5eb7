"""Node layers from a run's tables: `structure_nodes.layer` for runs written before the
recorder stored it (the recorder infers it from the graph it holds, with the same rule)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..layers import Wiring, leaf_classes, node_layers


def structure_layers(
    structure_nodes: pd.DataFrame, edges: pd.DataFrame, tensors: pd.DataFrame, buffers: pd.DataFrame
) -> np.ndarray:
    """The inferred layer of each row of `structure_nodes` (int32, in its row order)."""
    result = np.full(len(structure_nodes), -1, dtype=np.int32)
    if structure_nodes.empty:
        return result
    weights_buffers = set(buffers.loc[buffers["usage"] == "weights", "buffer_id"].tolist())
    described = tensors.set_index("tensor_id")
    in_weights = described["buffer_id"].isin(weights_buffers).to_numpy()
    classes, layers = leaf_classes(described["name"].tolist(), in_weights.tolist())
    leaf_class = pd.Series(classes, index=described.index)
    leaf_layer = pd.Series(layers, index=described.index)
    hint = described["layer"]
    edges_by_structure = dict(tuple(edges.groupby("structure_id", sort=False)))
    for structure_id, rows in structure_nodes.groupby("structure_id", sort=False):
        rows = rows.sort_values("node_index")
        tensor_ids = rows["tensor_id"].to_numpy()
        wires = edges_by_structure.get(structure_id, edges.iloc[:0])
        readers = wires["node_index"].to_numpy(np.int64)
        source_ids = wires["src_tensor_id"].to_numpy()
        sources = _producers(tensor_ids, readers, source_ids)
        leaf = sources < 0
        wiring = Wiring(
            hints=hint.reindex(tensor_ids).fillna(-1).to_numpy(np.int64),
            edge_node=readers,
            edge_source=sources,
            edge_leaf_class=np.where(leaf, leaf_class.reindex(source_ids).fillna(0).to_numpy(np.int64), 0),
            edge_leaf_layer=np.where(leaf, leaf_layer.reindex(source_ids).fillna(-1).to_numpy(np.int64), -1),
        )
        result[structure_nodes.index.get_indexer(rows.index)] = node_layers(wiring)
    return result


def _producers(node_tensors: np.ndarray, readers: np.ndarray, source_ids: np.ndarray) -> np.ndarray:
    """Per edge, the node whose output it reads: the latest node before the reader with the
    source's tensor id (ids describe tensors, so two nodes may share one); -1 for a leaf."""
    order = np.lexsort((np.arange(len(node_tensors)), node_tensors))
    sorted_ids = node_tensors[order]
    lo = np.searchsorted(sorted_ids, source_ids, side="left")
    hi = np.searchsorted(sorted_ids, source_ids, side="right")
    producers = np.full(len(source_ids), -1, dtype=np.int64)
    single = np.flatnonzero(hi - lo == 1)
    found = order[lo[single]]
    producers[single] = np.where(found < readers[single], found, -1)
    for edge in np.flatnonzero(hi - lo > 1).tolist():
        candidates = order[lo[edge] : hi[edge]]  # node indexes, ascending
        earlier = candidates[candidates < readers[edge]]
        producers[edge] = earlier[-1] if len(earlier) else -1
    return producers
