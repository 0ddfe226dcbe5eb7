"""Whether the numbers are right: where non-finite values first appear, and what fed them.

Needs a run recorded with `--values stats`. A source that is a node of the same graph is
described by its own statistics; a weight is read from the model file (dequantized with
the gguf package) and described the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from .._errors import GgmlVizError
from .._typing import Required
from ..runformat.captures import decode_tensor
from ..runformat.reader import Run

STAT_COLUMNS = ("n", "nan", "inf", "min", "max", "mean", "std", "mean_abs")


class ValueStats(TypedDict):
    """A tensor's values, as --values stats describes them (None: not known)."""

    n: int | None  # finite values
    nan: int | None
    inf: int | None
    min: float | None  # of the finite values
    max: float | None
    mean: float | None
    std: float | None
    mean_abs: float | None


# One source of the first non-finite output: described by its own statistics where it is a node of
# the same graph (node_index), by the model file's bytes where it is a weight read from there
# ("from": "model file"; "note" where that file is not found), else by its name alone
NonFiniteSource = TypedDict(
    "NonFiniteSource",
    {
        "slot": Required[int],
        "name": Required[str],
        "op": Required[str],
        "type": Required[str],
        "memory": Required[str],
        "node_index": int,
        "n": int | None,
        "nan": int | None,
        "inf": int | None,
        "min": float | None,
        "max": float | None,
        "mean": float | None,
        "std": float | None,
        "mean_abs": float | None,
        "from": str,
        "note": str,
    },
    total=False,
)


# A weight's statistics read from the model file (or why they were not)
_FileStats = TypedDict(
    "_FileStats",
    {
        "n": int | None,
        "nan": int | None,
        "inf": int | None,
        "min": float | None,
        "max": float | None,
        "mean": float | None,
        "std": float | None,
        "mean_abs": float | None,
        "from": str,
        "note": str,
    },
    total=False,
)


class NonFiniteOutput(ValueStats):
    """The first node event whose output holds a NaN or an Inf (first_non_finite), its
    statistics, and what it read."""

    graph_id: int
    node_index: int
    name: str
    op: str
    layer: int | None
    sources: list[NonFiniteSource]
    non_finite_events: int  # node events whose output holds some


def non_finite(run: Run) -> pd.DataFrame:
    values = run.values
    return values[(values["nan"] > 0) | (values["inf"] > 0)]


def first_non_finite(run: Run) -> NonFiniteOutput | None:
    """The first node event (graph, index order) whose output holds a NaN or an Inf, with its
    sources and their statistics; None when every value read was finite."""
    if run.raw("node_values").empty:
        raise GgmlVizError(f"{run.path} holds no node statistics: record with --values stats")
    bad = non_finite(run)
    if bad.empty:
        return None
    first = bad.iloc[0]
    graph_id, node_index = int(first["graph_id"]), int(first["node_index"])
    values = run.values
    in_graph = values[values["graph_id"] == graph_id].set_index("node_index")
    structure = run.graphs.set_index("graph_id").loc[graph_id, "structure_id"]
    nodes = run.raw("structure_nodes")
    producer = dict(
        zip(*nodes.loc[nodes["structure_id"] == structure, ["tensor_id", "node_index"]].T.values, strict=True)
    )
    sources: list[NonFiniteSource] = []
    for edge in run.edges_of(graph_id, node_index).itertuples():
        source: NonFiniteSource = {
            "slot": int(edge.src_slot),
            "name": edge.src_name,
            "op": edge.src_op,
            "type": edge.src_type,
            "memory": edge.memory,
        }
        producing = producer.get(int(edge.src_tensor_id))
        if producing is not None and producing in in_graph.index:
            source.update({"node_index": int(producing), **_stats_of(in_graph.loc[producing])})
        elif edge.memory == "disk" and pd.notna(edge.file_offset):
            source.update(_file_stats(run, edge))
        sources.append(source)
    return {
        "graph_id": graph_id,
        "node_index": node_index,
        "name": first["name"],
        "op": first["op"],
        "layer": None if pd.isna(first["layer"]) else int(first["layer"]),
        **_stats_of(first),
        "sources": sources,
        "non_finite_events": int(len(bad)),
    }


def _stats_of(row: pd.Series) -> ValueStats:
    def value(column: str) -> Any:
        return None if pd.isna(row[column]) else row[column].item()

    return {
        "n": value("n"),
        "nan": value("nan"),
        "inf": value("inf"),
        "min": value("min"),
        "max": value("max"),
        "mean": value("mean"),
        "std": value("std"),
        "mean_abs": value("mean_abs"),
    }


def _file_stats(run: Run, edge: Any) -> _FileStats:
    """Statistics of a weight, read from the model file where the run's map says it lies."""
    paths = [str(c.get("model", {}).get("path")) for c in run.manifest.get("contexts", [])]
    path = next((p for p in paths if p and Path(p).exists()), None)
    if path is None:
        return {"note": "model file not found"}
    with open(path, "rb") as file:
        file.seek(int(edge.file_offset))
        data = file.read(int(edge.file_end) - int(edge.file_offset))
    shape = tuple(int(getattr(edge, f"src_ne{d}")) for d in (3, 2, 1, 0))
    values = decode_tensor(data, str(edge.src_type), shape).astype(np.float64).ravel()
    finite = values[np.isfinite(values)]
    return {
        "n": int(len(finite)),
        "nan": int(np.isnan(values).sum()),
        "inf": int(np.isinf(values).sum()),
        "min": float(finite.min()) if len(finite) else None,
        "max": float(finite.max()) if len(finite) else None,
        "mean": float(finite.mean()) if len(finite) else None,
        "std": float(finite.std()) if len(finite) else None,
        "mean_abs": float(np.abs(finite).mean()) if len(finite) else None,
        "from": "model file",
    }
