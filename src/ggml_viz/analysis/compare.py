"""Two runs side by side: the settings that differ, and where the time moved.

Times are compared per timed graph of a phase (the mean time a decode step, or a prompt,
spends in each op, layer or tensor, over the graphs whose nodes were timed), so runs of
different lengths, sampled runs and runs whose GPU timer traced a window of their graphs
compare fairly.

Node times come from one of two clocks: the host's (the recorder's node times) or the GPU's
(CUPTI's kernel records: a node's share of the device's busy time). Two runs timed by the GPU
compare GPU time per op; a run timed on the GPU against one timed on the host compares two
different things, and the comparison says so (`clocks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import pandas as pd

from ..runformat.manifest import recorder_of
from ..runformat.reader import Run
from .breakdowns import backends, phase_stats, timed_totals

# What a comparison names when it differs (settings), by the names it prints
RunSettings = TypedDict(
    "RunSettings",
    {
        "model file": str | None,
        "model file hash": str | None,
        "model": str | None,
        "threads": int | None,
        "batch threads": int | None,
        "context size": int | None,
        "flash attention": Any,  # as the manifest holds it: a bool, or llama.cpp's "auto" and the like
        "backend": str,
        "recorder": str | None,
        "timing": str | None,
        "detail": str | None,
        "llama-cpp-python": str | None,
        "ggml": str,
        "node time clock": str | None,
    },
)


class SettingPair(TypedDict):
    a: Any  # a setting's value on each side: its type is the setting's (RunSettings)
    b: Any


class PhaseSpeeds(TypedDict, total=False):
    a: float  # tokens per second; a side without that phase has no entry
    b: float


class _TimeDelta(TypedDict):
    phase: str
    a_ns: float  # per graph
    b_ns: float
    delta_ns: float
    ratio: float | None  # None: A did not spend time there


class OpDelta(_TimeDelta):
    op: str


class LayerDelta(_TimeDelta):
    layer: str  # a layer's number, or "none" (outside every layer)


class TensorDelta(_TimeDelta):
    name: str


class TimeDeltas(TypedDict):
    """The largest changes of time per graph, by op, layer and tensor (compare's `top`)."""

    op: list[OpDelta]
    layer: list[LayerDelta]
    name: list[TensorDelta]


class RunComparison(TypedDict):
    """Two runs side by side (compare; GET /api/compare?a=&b=)."""

    a: str  # paths
    b: str
    settings_that_differ: dict[str, SettingPair]  # by RunSettings' names
    tokens_per_s: dict[str, PhaseSpeeds]  # by phase
    per_graph_time_by: TimeDeltas


class NodeClocks(TypedDict):
    """Which clock each side's node times come from (clocks)."""

    a: str | None  # node_clock's
    b: str | None
    same: bool
    note: str | None  # where they differ, what that means for the times compared


class ClockedComparison(RunComparison):
    """The comparison with which clock each side's node times come from (`ggml-viz diff --json`)."""

    clock: NodeClocks


def settings(run: Run) -> RunSettings:
    """What a comparison should name when it differs."""
    manifest = run.manifest
    context = (manifest.get("contexts") or [{}])[0]
    model = manifest.get("model") or {}
    files = manifest.get("model_files") or {}
    capture = manifest.get("capture") or {}
    return {
        "model file": model.get("path"),
        "model file hash": next((entry.get("content_hash") for entry in files.values()), None),
        "model": model.get("description"),
        "threads": context.get("n_threads"),
        "batch threads": context.get("n_threads_batch"),
        "context size": context.get("n_ctx"),
        "flash attention": context.get("flash_attn"),
        "backend": ", ".join(backends(run)),
        "recorder": recorder_of(manifest),
        "timing": capture.get("timing"),
        "detail": capture.get("detail"),
        "llama-cpp-python": (manifest.get("versions") or {}).get("llama_cpp_python"),
        "ggml": str((manifest.get("versions") or {}).get("ggml")),
        "node time clock": node_clock(run),
    }


def node_clock(run: Run) -> str | None:
    """Which clock the run's node times come from: `host`, `GPU`, `host and GPU` (some nodes
    each), or None (no node was timed)."""
    clocks = set(timed_totals(run)["clock"].dropna())
    if not clocks:
        return None
    if clocks == {"host"}:
        return "host"
    return "GPU" if clocks == {"gpu"} else "host and GPU"


def clocks(a: Run, b: Run) -> NodeClocks:
    """Which clock each side's node times come from, and, where they differ, what that means
    for the comparison of times per op, layer and tensor."""
    left, right = node_clock(a), node_clock(b)
    same = left == right or left is None or right is None
    note = None
    if not same:
        note = (
            f"A's node times come from the {left} clock, B's from the {right} clock: the time per op, "
            f"layer and tensor compares different measures (a GPU node's time is its kernels' share of "
            f"the GPU's busy time; a host node's, the host's time around its compute)"
        )
    return {"a": left, "b": right, "same": same, "note": note}


def timed_graphs(run: Run) -> pd.Series:
    """Per phase, the graphs whose nodes were timed (by the host or by the GPU timer)."""
    timed = run.graph_op_totals["graph_id"].unique()
    graphs = run.graphs[run.graphs["graph_id"].isin(timed)]
    return graphs.groupby("phase").size()


def per_graph_time(run: Run, key: str) -> pd.DataFrame:
    """Mean node time per timed graph of each phase, by `key` (op, layer or name)."""
    totals = timed_totals(run)
    totals = totals.assign(layer=totals["layer"].astype("object").where(totals["layer"].notna(), "none"))
    graphs = timed_graphs(run)
    total = totals.groupby(["phase", key])["time_ns"].sum().rename("duration_ns").reset_index()
    total["per_graph_ns"] = total["duration_ns"] / total["phase"].map(graphs)
    return total[["phase", key, "per_graph_ns"]]


def compare(a: Run, b: Run, top: int = 15) -> RunComparison:
    left: Mapping[str, Any] = settings(a)
    right: Mapping[str, Any] = settings(b)
    differing: dict[str, SettingPair] = {
        name: {"a": left[name], "b": right[name]} for name in left if left[name] != right[name]
    }
    rates = {side: _rates(run) for side, run in (("a", a), ("b", b))}
    speed: dict[str, PhaseSpeeds] = {}
    for phase in [*rates["a"], *(phase for phase in rates["b"] if phase not in rates["a"])]:
        speed[phase] = {}
        if phase in rates["a"]:
            speed[phase]["a"] = rates["a"][phase]
        if phase in rates["b"]:
            speed[phase]["b"] = rates["b"][phase]
    return {
        "a": str(a.path),
        "b": str(b.path),
        "settings_that_differ": differing,
        "tokens_per_s": speed,
        "per_graph_time_by": {
            "op": [
                {"phase": phase, "op": key, "a_ns": a_ns, "b_ns": b_ns, "delta_ns": delta, "ratio": ratio}
                for phase, key, a_ns, b_ns, delta, ratio in _largest_changes(a, b, "op", top)
            ],
            "layer": [
                {"phase": phase, "layer": str(key), "a_ns": a_ns, "b_ns": b_ns, "delta_ns": delta, "ratio": ratio}
                for phase, key, a_ns, b_ns, delta, ratio in _largest_changes(a, b, "layer", top)
            ],
            "name": [
                {"phase": phase, "name": key, "a_ns": a_ns, "b_ns": b_ns, "delta_ns": delta, "ratio": ratio}
                for phase, key, a_ns, b_ns, delta, ratio in _largest_changes(a, b, "name", top)
            ],
        },
    }


def _rates(run: Run) -> dict[str, float]:
    """Tokens per second of each phase that makes a rate."""
    return {row.phase: float(row.tokens_per_s) for row in phase_stats(run).itertuples() if row.tokens_per_s is not None}


def _largest_changes(a: Run, b: Run, key: str, top: int) -> list[tuple[str, Any, float, float, float, float | None]]:
    """The `top` largest changes of time per graph by `key` (op, layer or name), the largest first:
    (phase, key, A's, B's, B minus A, B over A: None where A spent nothing)."""
    table = (
        per_graph_time(a, key)
        .merge(per_graph_time(b, key), on=["phase", key], how="outer", suffixes=("_a", "_b"))
        .fillna(0.0)
    )
    table["delta_ns"] = table["per_graph_ns_b"] - table["per_graph_ns_a"]
    table["ratio"] = table["per_graph_ns_b"] / table["per_graph_ns_a"].where(table["per_graph_ns_a"] > 0)
    table = table.reindex(table["delta_ns"].abs().sort_values(ascending=False).index).head(top)
    return [
        (
            row.phase,
            row[key],
            float(row.per_graph_ns_a),
            float(row.per_graph_ns_b),
            float(row.delta_ns),
            None if pd.isna(row.ratio) else float(row.ratio),
        )
        for _, row in table.iterrows()
    ]
