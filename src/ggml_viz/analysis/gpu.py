"""What the GPU did, from its own records (CUDA: CUPTI's; Vulkan: the layer's timestamp queries):
pure functions over a run's GPU
tables. Node times by op, layer and tensor come from run.node_totals, where GPU nodes carry
the GPU's time (`clock` gpu); here: the GPU timer itself, the decode step from the GPU's side
(busy against the host's time), the kernels, and the kernels a node runs besides its main one.

The timer traces a few graphs of each new structure and a few every 256: shares of the GPU's
time over the run are estimates, each traced graph weighted by how many graphs of its phase
and structure ran per traced one (Run.gpu_graph_weights), as node totals' `est_ns` are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

import pandas as pd

from ..runformat.reader import Run
from .rows import records_as


class GpuDecodeStep(TypedDict):
    """The median traced decode step from the GPU's side (decode_step)."""

    steps: int
    busy_ns: float
    span_ns: float
    host_ns: float
    host_of: str  # whose host time: untraced steps, or the traced ones
    busy_share: float


class GpuKernelRow(TypedDict):
    """A kernel function's GPU time (kernel_table)."""

    function: str
    count: int  # in the traced graphs
    busy_ns: int  # over the run, estimated (the traced graphs weighted by how often each structure ran)
    share: float  # of that
    mean_ns: float  # in the traced graphs


class GpuSideKernel(TypedDict):
    """A kernel an op's nodes run besides their main one (side_kernels)."""

    op: str
    function: str
    main: str
    busy_ns: int
    share: float


class GpuTimerCost(TypedDict):
    """What the GPU timer cost the run (timer_cost)."""

    attach_ns: float
    traced_extra_ns: float
    compared: int
    graph_ns: float
    share: float


class GpuTimerSummary(TypedDict):
    """The GPU timer's account of a run (gpu_summary)."""

    mode: str | None
    timer: str  # what timed the GPU's nodes: cupti (CUDA) or vulkan (ggml-viz's Vulkan layer)
    source: str  # where the times come from, in words: "CUPTI kernel records", "Vulkan timestamp queries"
    cupti: str | None
    clock: str | None
    problem: str | None
    devices: list[int]
    graphs: int
    graphs_traced: int
    windows: int
    unattributed_graphs: int
    kernels: int
    attributed_kernels: int
    estimate: str | None  # how its shares over the run are estimated from the traced graphs (None: none traced)
    warnings: list[str]  # records the timer dropped or left without times: the traced graphs' times are incomplete
    decode_step: GpuDecodeStep | None
    top_kernels: list[GpuKernelRow]
    side_kernels: list[GpuSideKernel]
    cost: GpuTimerCost | None


def gpu_summary(run: Run, top: int = 8) -> GpuTimerSummary | None:
    """The GPU timer's account of a run (None: the run computed on no GPU the timer saw)."""
    info = dict(run.manifest.get("gpu") or {})
    if not info and not run.has_gpu_times:
        return None
    graphs = run.gpu_graphs
    kernels = run.gpu_kernels
    is_kernel = kernels["kind"] == "kernel"
    weights = run.gpu_graph_weights
    return {
        "mode": info.get("mode"),
        "timer": info.get("timer") or "cupti",
        "source": run.gpu_timer.source,
        "cupti": info.get("cupti") or None,
        "clock": info.get("clock"),
        "problem": info.get("problem"),
        "devices": sorted(int(d) for d in graphs["device"].unique()),
        "graphs": int(len(run.graphs)),
        "graphs_traced": int(graphs["graph_id"].nunique()),
        "windows": int(info.get("windows") or 0),
        "unattributed_graphs": int((graphs["mapping"] == "unattributed").sum()),
        "kernels": int(is_kernel.sum()),
        "attributed_kernels": int((is_kernel & (kernels["node_index"] >= 0)).sum()),
        "estimate": estimate_note(run.graphs, weights.index) if len(weights) else None,
        "warnings": record_warnings(info, run.gpu_timer.agent),
        "decode_step": decode_step(run),
        "top_kernels": records_as(kernel_table(kernels, weights).head(top), GpuKernelRow),
        "side_kernels": records_as(side_kernels(run).head(top), GpuSideKernel),
        "cost": timer_cost(run, info),
    }


def estimate_note(graphs: pd.DataFrame, traced: Iterable[int]) -> str:
    """How the GPU's shares over the run are estimated, in words (`graphs`: the run's; `traced`:
    the graph ids traced), with the graphs of the phases and structures never traced, which
    count nowhere."""
    traced_ids = set(traced)
    kinds = graphs.assign(traced=graphs["graph_id"].isin(traced_ids)).groupby(["phase", "structure_id"])["traced"]
    never = kinds.sum() == 0
    note = (
        f"estimated from {len(traced_ids):,} traced graphs of {len(graphs):,}, weighted by how often each "
        "graph structure ran"
    )
    if never.any():
        untraced = int(kinds.size()[never].sum())
        note += f"; {int(never.sum()):,} graph structures never traced ({untraced:,} graphs) count nowhere"
    return note


def record_warnings(info: dict[str, Any], agent: str = "CUPTI") -> list[str]:
    """What the timer (`agent`: CUPTI, the Vulkan layer) could not keep (the manifest's counts),
    as warnings beside the GPU's figures."""
    said = []
    if info.get("dropped_records"):
        said.append(
            f"{agent} dropped {int(info['dropped_records']):,} records: node times of the traced graphs are incomplete"
        )
    if info.get("invalid_records"):
        said.append(
            f"{agent} left {int(info['invalid_records']):,} records without times: node times of the traced "
            "graphs are incomplete"
        )
    return said


def decode_step(run: Run) -> GpuDecodeStep | None:
    """The median decode step from the GPU's side: how long the GPU was busy with it, and from
    its first kernel to its last, in the steady state (CUDA-graph replays, where the traced
    steps hold any); beside the host's time for a step (from the compute call to the end of
    its llama call), taken from the steps of those structures that were not traced (tracing
    lengthens a step's host time) where there are enough of them."""
    graphs = run.gpu_graphs
    decode = graphs[graphs["phase"] == "decode"]
    if decode.empty:
        return None
    steady = decode[decode["mapping"] == "replay"]
    traced = steady if len(steady) else decode
    per_graph = traced.groupby("graph_id").agg(
        busy_ns=("busy_ns", "sum"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), host_ns=("host_ns", "first")
    )
    steps = run.graphs[run.graphs["phase"] == "decode"]
    structures = steps.loc[steps["graph_id"].isin(traced["graph_id"]), "structure_id"].unique()
    untraced = steps[~steps["graph_id"].isin(graphs["graph_id"]) & steps["structure_id"].isin(structures)]
    enough = len(untraced) >= 3
    host_times = (untraced["end_ns"] - untraced["start_ns"]) if enough else per_graph["host_ns"]
    host = float(host_times.median())
    busy = float(per_graph["busy_ns"].median())
    return {
        "steps": int(len(per_graph)),
        "busy_ns": busy,
        "span_ns": float((per_graph["end_ns"] - per_graph["start_ns"]).median()),
        "host_ns": host,
        "host_of": "untraced steps" if enough else "traced steps (tracing lengthens them)",
        "busy_share": busy / host if host > 0 else 0.0,
    }


def kernel_table(kernels: pd.DataFrame, weights: pd.Series | None = None) -> pd.DataFrame:
    """The GPU's work by kernel function (copies and memsets by their kind): how many ran in the
    traced graphs and the mean time each was the one running, as measured; their busy time over
    the run and its share, estimated with `weights` (per graph_id: Run.gpu_graph_weights; work
    outside any graph, and every kernel without weights, counted as traced)."""
    work = kernels.assign(function=kernels["kernel"].where(kernels["kind"] == "kernel", kernels["kind"]))
    weight = work["graph_id"].map(weights).fillna(1.0) if weights is not None else 1.0
    work = work.assign(estimated=work["busy_ns"] * weight)
    table = work.groupby("function").agg(
        count=("busy_ns", "size"), traced_ns=("busy_ns", "sum"), busy_ns=("estimated", "sum")
    )
    total = table["busy_ns"].sum()
    table["share"] = table["busy_ns"] / total if total else 0.0
    table["mean_ns"] = table["traced_ns"] / table["count"]
    table["busy_ns"] = table["busy_ns"].round().astype("int64")
    table = table[["count", "busy_ns", "share", "mean_ns"]]
    return table.sort_values("busy_ns", ascending=False).reset_index()


def side_kernels(run: Run) -> pd.DataFrame:
    """Kernels a node runs besides its main one (the one with most of its time), in the decode
    steps where any were traced: per op and function, their share of the GPU's busy time there
    (estimated over the run's decode steps), and the main kernel they ran beside most often. A
    quantized matrix multiplication quantizes its activations first; a node may convert a type
    or copy before it computes."""
    kernels = run.gpu_kernels
    if (kernels["phase"] == "decode").any():
        kernels = kernels[kernels["phase"] == "decode"]
    # each decode structure as often as it ran (busy_ns estimated over the run)
    kernels = kernels.assign(busy_ns=kernels["busy_ns"] * kernels["graph_id"].map(run.gpu_graph_weights).fillna(1.0))
    total = float(kernels["busy_ns"].sum())
    kernels = kernels[(kernels["kind"] == "kernel") & (kernels["node_index"] >= 0)]
    if kernels.empty or not total:
        return pd.DataFrame(columns=["op", "function", "main", "busy_ns", "share"])
    per_function = kernels.groupby(["graph_id", "node_index", "kernel"], as_index=False)["busy_ns"].sum()
    ranked = per_function.sort_values("busy_ns", ascending=False)
    main = ranked.drop_duplicates(["graph_id", "node_index"]).rename(columns={"kernel": "main"})
    sides = per_function.merge(main[["graph_id", "node_index", "main"]], on=["graph_id", "node_index"])
    sides = sides[sides["kernel"] != sides["main"]].merge(_node_ops(run), on=["graph_id", "node_index"], how="left")
    table = sides.groupby(["op", "kernel"]).agg(busy_ns=("busy_ns", "sum"), main=("main", lambda m: m.mode()[0]))
    table["share"] = table["busy_ns"] / total
    table = table.reset_index().rename(columns={"kernel": "function"}).astype({"busy_ns": "float64"})
    table["busy_ns"] = table["busy_ns"].round().astype("int64")
    return table[["op", "function", "main", "busy_ns", "share"]].sort_values(
        "busy_ns", ascending=False, ignore_index=True
    )


def _node_ops(run: Run) -> pd.DataFrame:
    """The op of each traced graph's nodes."""
    graphs = run.graphs[run.graphs["graph_id"].isin(run.gpu_graphs["graph_id"])][["graph_id", "structure_id"]]
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    ops = run.raw("tensors")[["tensor_id", "op"]]
    return graphs.merge(nodes, on="structure_id").merge(ops, on="tensor_id")[["graph_id", "node_index", "op"]]


def timer_cost(run: Run, info: dict[str, Any]) -> GpuTimerCost | None:
    """What the GPU timer cost this run, as seen from inside it: the host's time attaching,
    flushing and detaching CUPTI, and how much longer traced graphs took than the untraced
    graphs of their structure and phase (the median of at least three), against the run's
    graph time."""
    graphs = run.graphs.assign(host_ns=run.graphs["end_ns"] - run.graphs["start_ns"])
    total = float(graphs["host_ns"].sum())
    if not total or not info.get("windows"):
        return None
    traced = graphs["graph_id"].isin(run.gpu_graphs["graph_id"])
    baseline = graphs[~traced].groupby(["structure_id", "phase"])["host_ns"].agg(["median", "size"])
    baseline = baseline[baseline["size"] >= 3]["median"]
    keys = pd.MultiIndex.from_frame(graphs.loc[traced, ["structure_id", "phase"]])
    extra = pd.Series(graphs.loc[traced, "host_ns"].to_numpy() - baseline.reindex(keys).to_numpy()).clip(lower=0)
    compared = int(extra.notna().sum())  # traced graphs with untraced ones of their kind to compare with
    traced_extra = float(extra.fillna(0).sum())
    attach = float(info.get("overhead_ns") or 0)
    return {
        "attach_ns": attach,
        "traced_extra_ns": traced_extra,
        "compared": compared,
        "graph_ns": total,
        "share": (attach + traced_extra) / total,
    }


def gpu_findings(summary: GpuTimerSummary | None) -> list[str]:
    """The GPU's findings in words: launch-bound decode steps, work besides the ops' own."""
    if not summary:
        return []
    said = []
    step = summary.get("decode_step")
    if step and step["host_ns"] and step["busy_share"] < 0.75:
        said.append(
            f"The GPU is busy {step['busy_share']:.0%} of a decode step ({step['busy_ns'] / 1e6:,.3f} ms of the "
            f"{step['host_ns'] / 1e6:,.3f} ms a step takes, {step['host_of']}): launching kernels and the host's "
            "work between steps, not the GPU's compute, bound decoding."
        )
    for side in summary.get("side_kernels") or []:
        if side["share"] < 0.05:
            break
        said.append(
            f"{side['function']} runs beside {side['main']} in {side['op']} nodes and takes {side['share']:.0%} "
            "of the GPU's busy time in decode steps: work besides the op's own."
        )
    return said
