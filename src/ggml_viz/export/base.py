"""What every exporter shares: its interface, its options, and the node events with their
trace arguments (name, op, type, shape, layer, where the node's sources live)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from ..runformat.reader import Run


@dataclass(frozen=True)
class ExportOptions:
    graph_id: int | None = None  # graph pictures: which graph (default: the first decode graph)
    layer: int | None = None  # graph pictures: one layer open (default: layers collapsed)
    tensors: tuple[str, ...] = ()  # tensor dumps: name globs of the captured tensors to write (default: all)
    progress: Callable[[int, int], None] = field(default=lambda done, total: None)  # long exports report here


class Exporter:
    """Base of every export format."""

    name: ClassVar[str] = ""
    extensions: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        raise NotImplementedError


def timed_events(run: Run) -> pd.DataFrame:
    """Timed node events in time order, with their graph's context and the trace arguments."""
    nodes = run.nodes
    nodes = nodes[nodes["timed"]].merge(run.graphs[["graph_id", "context_id"]], on="graph_id")
    events = pd.DataFrame(
        {
            "graph_id": nodes["graph_id"].to_numpy(np.int64),
            "node_index": nodes["node_index"].to_numpy(np.int64),
            "context_id": nodes["context_id"].to_numpy(np.int64),
            "start_ns": nodes["start_ns"].to_numpy(np.int64),
            "end_ns": nodes["end_ns"].to_numpy(np.int64),
            "wait_ns": nodes["wait_ns"].fillna(-1).to_numpy(np.int64),  # -1: not seen
            "name": nodes["name"].to_numpy(object),
            "op": nodes["op"].to_numpy(object),
            "type": nodes["type"].to_numpy(object),
            "shape": shapes(nodes),
            "layer": nodes["layer"].fillna(-1).to_numpy(np.int64),
            "buffer": nodes["buffer_name"].fillna("").to_numpy(object),
            "reads": _weights_read(run, nodes),
        }
    )
    return events.sort_values(["start_ns", "graph_id", "node_index"], kind="stable", ignore_index=True)


def shapes(frame: pd.DataFrame, prefix: str = "") -> np.ndarray:
    """'576×6' per row, from the ne0..ne3 columns (trailing 1s dropped)."""
    dims = frame[[f"{prefix}ne{d}" for d in range(4)]].to_numpy(np.int64)
    out = []
    for row in dims.tolist():
        while len(row) > 1 and row[-1] == 1:
            row.pop()
        out.append("×".join(map(str, row)))
    return np.asarray(out, dtype=object)


def _weights_read(run: Run, nodes: pd.DataFrame) -> np.ndarray:
    """Per node event: the model-file weights it reads, with their file offsets."""
    edges = run.raw("edges")
    tensors = run.tensors.set_index("tensor_id")
    weights = tensors.index[tensors["buffer_usage"] == "weights"]
    reads = edges[edges["src_tensor_id"].isin(weights)]
    if reads.empty:
        return np.full(len(nodes), "", dtype=object)
    regions = run.memory_map
    offsets = regions[regions["kind"] == "tensor"].drop_duplicates("name").set_index("name")["start"]
    names = tensors["name"].reindex(reads["src_tensor_id"]).to_numpy()
    labels = [f"{name} @ file {int(offsets[name])}" if name in offsets.index else str(name) for name in names]
    per_node = (
        pd.DataFrame(
            {
                "structure_id": reads["structure_id"].to_numpy(),
                "node_index": reads["node_index"].to_numpy(),
                "label": labels,
            }
        )
        .groupby(["structure_id", "node_index"])["label"]
        .agg(", ".join)
    )
    structure = run.raw("graphs").set_index("graph_id")["structure_id"]
    keys = pd.MultiIndex.from_arrays([structure.reindex(nodes["graph_id"]).to_numpy(), nodes["node_index"].to_numpy()])
    return per_node.reindex(keys).fillna("").to_numpy(object)
