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

from typing import Any

import pandas as pd

from ..runformat.manifest import recorder_of
from ..runformat.reader import Run
from .breakdowns import backends, phase_stats, timed_totals


def settings(run: Run) -> dict[str, Any]:
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


def clocks(a: Run, b: Run) -> dict[str, Any]:
    """Which clock each side's node times come from, and, where they differ, what that means
    for the comparison of times per op, layer and tensor."""
    left, right = node_clock(a), node_clock(b)
    same = left == right or left is None or right is None
    note = None
    if not same:
        note = (f"A's node times come from the {left} clock, B's from the {right} clock: the time per op, "
                f"layer and tensor compares different measures (a GPU node's time is its kernels' share of "
                f"the GPU's busy time; a host node's, the host's time around its compute)")  # fmt: skip
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


def compare(a: Run, b: Run, top: int = 15) -> dict[str, Any]:
    left, right = settings(a), settings(b)
    differing = {name: {"a": left[name], "b": right[name]} for name in left if left[name] != right[name]}
    speed: dict[str, dict[str, float]] = {}
    for side, run in (("a", a), ("b", b)):
        for row in phase_stats(run).itertuples():
            if row.tokens_per_s is not None:  # the phases that make a rate
                speed.setdefault(row.phase, {})[side] = float(row.tokens_per_s)
    deltas: dict[str, list[dict[str, Any]]] = {}
    for key in ("op", "layer", "name"):
        table = (
            per_graph_time(a, key)
            .merge(per_graph_time(b, key), on=["phase", key], how="outer", suffixes=("_a", "_b"))
            .fillna(0.0)
        )
        table["delta_ns"] = table["per_graph_ns_b"] - table["per_graph_ns_a"]
        table["ratio"] = table["per_graph_ns_b"] / table["per_graph_ns_a"].where(table["per_graph_ns_a"] > 0)
        table = table.reindex(table["delta_ns"].abs().sort_values(ascending=False).index).head(top)
        deltas[key] = [
            {
                "phase": row.phase,
                key: row[key] if key != "layer" else str(row[key]),
                "a_ns": float(row.per_graph_ns_a),
                "b_ns": float(row.per_graph_ns_b),
                "delta_ns": float(row.delta_ns),
                "ratio": None if pd.isna(row.ratio) else float(row.ratio),
            }
            for _, row in table.iterrows()
        ]
    return {
        "a": str(a.path),
        "b": str(b.path),
        "settings_that_differ": differing,
        "tokens_per_s": speed,
        "per_graph_time_by": deltas,
    }
