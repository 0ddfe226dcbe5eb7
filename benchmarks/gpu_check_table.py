"""The GPU check's table (benchmarks/gpu_check.sh prints it): every claim ggml-viz makes about a
GPU, the figure measured for it, and PASS, FAIL or SKIP with the reason.

    python benchmarks/gpu_check_table.py WORK [--out TABLE.md]

WORK as gpu_check.sh leaves it: steps.tsv (each step: name, ok | fail | skip, seconds, reason),
machine.tsv (key, value), and per part of the check the programs' outputs and runs (CLAIMS says
which claim reads which). A claim whose steps did not all go well is SKIP (a step skipped) or
FAIL (a step failed), with that step's reason; else its figure is computed from the files by
the functions below, each of parsed inputs (a run, llama-bench's results, the tally's records,
...), which tests/unit/test_gpu_check_table.py calls without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # gpu_report (imported where used: it imports ggml_viz, which a broken machine may lack)
sys.path.insert(0, str(HERE.parent))  # tests.vulkan_perf_log

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
# Steps that run no ggml-viz (the references: programs untraced, the tally, llama-bench's sweeps):
# one that failed leaves its claims unjudged (SKIP), where a failed step of ggml-viz's fails them.
REFERENCE_STEPS = ("dense-untraced", "dense-tally", "half-bench", "moe-bench", "vulkan-untraced")
SHARE_POINTS = 3.0  # op and kernel shares agree within this many percentage points
COST_GOAL = 1.05  # the default's cost, untraced rate / traced rate
STEP_SUM = 0.01  # a device's parts add up to the step within this share of it
CHECK_TOLERANCE = 0.03  # whatif's recorded placement against its own steps (docs/advise.md)
PREDICTION_TOLERANCE = 0.15  # whatif's predictions against llama-bench (docs/advise.md: 44 of 54 within 15 %)
BANDWIDTH_RANGE = (0.60, 1.00)  # measured read bandwidth, of the published figure
PEAK_RANGE = (0.25, 1.00)  # measured F16 matrix product, of the published dense peak
# cuBLAS's kernels (nvjet_*, sm90_xmma_gemm_*, cutlass3x_*): the ones it launches through the driver API
CUBLAS_KERNEL = re.compile(r"nvjet|gemm|cutlass|xmma|cublas", re.IGNORECASE)
# (pattern in nvidia-smi's name, the part, HBM TB/s, dense FP16/BF16 TFLOP/s), NVIDIA's datasheets
PUBLISHED = (
    (r"H200 NVL", "H200 NVL", 4.8, 835.0),
    (r"H200", "H200 SXM", 4.8, 989.0),
    (r"H100 NVL", "H100 NVL", 3.9, 835.0),
    (r"H100 PCIe", "H100 PCIe", 2.0, 756.0),
    (r"H100", "H100 SXM", 3.35, 989.0),
)


class Result(NamedTuple):
    verdict: str
    figure: str
    reason: str = ""


@dataclass
class Claim:
    key: str
    title: str
    verdict: str
    figure: str = ""
    reason: str = ""


@dataclass
class Step:
    status: str  # ok | fail | skip
    seconds: int
    reason: str


# -- reading WORK --------------------------------------------------------------------------------


def read_steps(work: Path) -> dict[str, Step]:
    steps: dict[str, Step] = {}
    path = work / "steps.tsv"
    for line in path.read_text().splitlines() if path.exists() else []:
        name, status, seconds, reason = (line.split("\t") + ["", "", ""])[:4]
        steps[name] = Step(status, int(seconds or 0), reason)
    return steps


def read_machine(work: Path) -> dict[str, str]:
    path = work / "machine.tsv"
    lines = path.read_text().splitlines() if path.exists() else []
    return dict((line.split("\t", 1) + [""])[:2] for line in lines if line)


@functools.lru_cache(maxsize=8)
def open_run(path: Path) -> Any:
    """A run, opened once for all the claims that read it."""
    import ggml_viz

    return ggml_viz.open(path)


def traced_graphs(run: Any) -> list[int]:
    """The graphs the GPU timer traced."""
    return sorted(int(g) for g in run.raw("gpu_graphs")["graph_id"].unique() if g >= 0)


def program_text(path: Path) -> str:
    """A program's standard output as saved (ggml-viz speaks on standard error; a line it may
    print there once the run is written is left out, as gpu.sh does)."""
    text = path.read_text(errors="replace")
    return text.split("\nrun written to ", 1)[0]


# -- the figures ---------------------------------------------------------------------------------


def text_result(untraced: str, traced: str) -> Result:
    """Greedy text, untraced against traced: the same, byte for byte."""
    if not untraced.strip():
        return Result(FAIL, "", "the untraced program printed no text")
    digest = [hashlib.sha256(text.encode()).hexdigest()[:10] for text in (untraced, traced)]
    if untraced == traced:
        return Result(PASS, f"{len(untraced):,} characters, sha256 {digest[0]} both")
    same = [a == b for a, b in zip(untraced, traced, strict=False)]
    at = same.index(False) if False in same else len(same)
    return Result(
        FAIL,
        f"{len(untraced):,} / {len(traced):,} characters, sha256 {digest[0]} / {digest[1]}",
        f"they differ from character {at:,}",
    )


def node_coverage(run: Any, graph_ids: Sequence[int]) -> pd.DataFrame:
    """Every node of the graphs named that is not a view (views compute nothing): its op, the
    device its output lives on, whether the host timed it (a CPU node's ticks: start_ns) and
    whether the GPU's records did (gpu_node_times: a row's kernels compute node_index..group_end)."""
    from ggml_viz.analysis.buffer_device import device_of_buffer
    from ggml_viz.runformat.memory_sources import VIEW_OPS

    nodes = run.nodes_of(list(graph_ids))
    nodes = nodes[~nodes["op_base"].isin(VIEW_OPS) & nodes["op"].notna()]
    times = run.raw("gpu_node_times")
    times = times[times["graph_id"].isin(list(graph_ids))]
    first = times["node_index"].to_numpy(np.int64)
    size = np.maximum(times["group_end"].to_numpy(np.int64) - first, 0) + 1
    offset = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
    on_gpu = pd.DataFrame(
        {
            "graph_id": np.repeat(times["graph_id"].to_numpy(np.int64), size),
            "node_index": np.repeat(first, size) + offset,
        }
    ).drop_duplicates()
    nodes = nodes.astype({"graph_id": "int64", "node_index": "int64"})
    nodes = nodes.merge(on_gpu.assign(gpu_timed=True), on=["graph_id", "node_index"], how="left")
    return pd.DataFrame(
        {
            "graph_id": nodes["graph_id"],
            "node_index": nodes["node_index"],
            "op": nodes["op"],
            "device": nodes["buffer_name"].map(device_of_buffer).fillna("?"),
            "host_timed": nodes["start_ns"].notna().to_numpy(bool),
            "gpu_timed": nodes["gpu_timed"].fillna(False).to_numpy(bool),
        }
    )


def coverage_result(coverage: pd.DataFrame, on_own_device: bool = False) -> Result:
    """Whether every node of the traced steps was timed (on_own_device: a CPU node by the host's
    ticks, any other by the GPU's records)."""
    if coverage.empty:
        return Result(FAIL, "", "no traced step: the GPU timer traced no graph")
    if on_own_device:  # (a node whose buffer is not known: timed either way)
        on_cpu, unknown = coverage["device"] == "CPU", coverage["device"] == "?"
        either = coverage["host_timed"] | coverage["gpu_timed"]
        timed = (on_cpu & coverage["host_timed"]) | (~on_cpu & ~unknown & coverage["gpu_timed"]) | (unknown & either)
    else:
        timed = coverage["host_timed"] | coverage["gpu_timed"]
    steps = coverage["graph_id"].nunique()
    by_device = coverage.assign(timed=timed).groupby("device")["timed"].agg(["sum", "size"])
    devices = ", ".join(f"{device} {int(row['sum']):,}/{int(row['size']):,}" for device, row in by_device.iterrows())
    figure = f"{int(timed.sum()):,}/{len(coverage):,} nodes of {steps} traced steps ({devices})"
    if timed.all():
        return Result(PASS, figure)
    missed = coverage.loc[~timed, "op"].value_counts()
    said = ", ".join(f"{op} {count}" for op, count in missed.head(4).items())
    return Result(
        FAIL, figure, f"{int((~timed).sum()):,} untimed{' on their own device' if on_own_device else ''}: {said}"
    )


def step_activity(run: Any, graph_ids: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The traced steps' windows and every device's activity in them (analysis/devices/)."""
    from ggml_viz.analysis.devices.activity import run_activity
    from ggml_viz.analysis.devices.steps import step_windows

    steps = step_windows(run.graphs[run.graphs["graph_id"].isin(list(graph_ids))])
    return steps, run_activity(run, list(graph_ids))


def breakdown_result(steps: pd.DataFrame, activity: pd.DataFrame) -> Result:
    """Per step and device, busy and waiting parts (analysis/devices/steps.py) against the step's
    time: they must add up to it within STEP_SUM, on two devices or more."""
    from ggml_viz.analysis.devices.activity import COMPUTE
    from ggml_viz.analysis.devices.steps import device_parts, phase_breakdown

    if steps.empty:
        return Result(FAIL, "", "no traced step")
    devices = sorted(set(activity.loc[activity["kind"] == COMPUTE, "device"]))
    if len(devices) < 2:
        return Result(FAIL, f"devices computing: {', '.join(devices) or 'none'}", "fewer than two devices in the steps")
    parts = device_parts(steps, activity)
    length = (steps["end_ns"] - steps["start_ns"]).to_numpy(np.float64)
    sums = parts.groupby(["graph_id", "device"])["ns"].sum().unstack("device").reindex(steps["graph_id"])
    missing = int(sums.isna().to_numpy().sum())
    error = np.abs(sums.fillna(0).to_numpy() - length[:, None]) / np.maximum(length[:, None], 1)
    worst = float(error.max()) if error.size else 0.0
    phases = phase_breakdown(parts, steps)
    phase = next((p for p in phases if p["phase"] == "decode"), phases[0] if phases else None)
    said = ""
    if phase:
        busy = ", ".join(f"{d['device']} busy {d['busy_ns'] / phase['step_ns']:.0%}" for d in phase["devices"])
        said = f"; {phase['phase']} step {phase['step_ns'] / 1e6:,.3f} ms: {busy}"
    figure = f"{len(steps)} steps x {len(devices)} devices, parts within {worst:.2%} of the step{said}"
    if missing:
        return Result(FAIL, figure, f"{missing} (step, device) pairs without parts")
    if worst > STEP_SUM:
        return Result(FAIL, figure, f"a device's parts are {worst:.2%} off its step (at most {STEP_SUM:.0%})")
    return Result(PASS, figure)


def activation_bound(run: Any, graph_ids: Sequence[int]) -> pd.Series:
    """Per graph: the largest tensor its nodes write or read that is no weight and not the KV
    cache (an activation: its batch included), the most a copy between its splits can move."""
    graphs = run.graphs[run.graphs["graph_id"].isin(list(graph_ids))][["graph_id", "structure_id"]]
    nodes = run.raw("structure_nodes")[["structure_id", "tensor_id"]]
    sources = run.raw("edges")[["structure_id", "src_tensor_id"]].rename(columns={"src_tensor_id": "tensor_id"})
    tensors = run.tensors[["tensor_id", "nbytes", "buffer_usage"]]
    used = pd.concat([nodes, sources]).merge(tensors, on="tensor_id")
    used = used[~used["buffer_usage"].isin(["weights", "kv_cache"])]
    largest = used.groupby("structure_id")["nbytes"].max()
    return graphs.set_index("graph_id")["structure_id"].map(largest).fillna(0).astype("int64")


def step_transfers(run: Any, graph_ids: Sequence[int]) -> pd.DataFrame:
    """The traced steps' transfers: the copies of no node (gpu_kernels, kind memcpy, node -1),
    with the split each feeds where the run has that column."""
    kernels = run.raw("gpu_kernels")
    copies = kernels[(kernels["kind"] == "memcpy") & (kernels["node_index"] < 0)]
    return copies[copies["graph_id"].isin(list(graph_ids))]


def transfer_result(copies: pd.DataFrame, bound: pd.Series, steps: int) -> Result:
    """The scheduler's copies between splits in `steps` traced steps (step_transfers), each with
    the split it feeds (`split`) and plausible bytes: more than 0, at most its step's largest
    activation (`bound`, per graph_id: activation_bound)."""
    if copies.empty:
        return Result(FAIL, f"{steps} traced steps", "no transfer (a copy of no node) in them")
    limit = copies["graph_id"].map(bound).fillna(0).to_numpy()
    size = copies["bytes"].to_numpy(np.int64)
    figure = (
        f"{len(copies):,} transfers in {copies['graph_id'].nunique()} of {steps} steps, {_bytes(size.min())} to "
        f"{_bytes(size.max())} (largest activation {_bytes(float(bound.max()) if len(bound) else 0)})"
    )
    if "split" not in copies.columns:
        return Result(FAIL, figure, "no split column")
    split = copies["split"]
    if split.isna().all():
        return Result(FAIL, figure, "the split column is empty")
    fed = int((split >= 0).sum())
    figure += f"; split named for {fed:,}"
    if (size <= 0).any():
        return Result(FAIL, figure, f"{int((size <= 0).sum())} transfers of no bytes")
    if (size > limit).any():
        return Result(
            FAIL, figure, f"{int((size > limit).sum())} transfers larger than their step's largest activation"
        )
    if not fed:
        return Result(FAIL, figure, "no transfer names the split it feeds")
    return Result(PASS, figure)


def tally_records(path: Path) -> pd.DataFrame:
    """gpu_kernel_tally.c's records (GPU_TALLY_RECORDS): every kernel's start, end, device,
    stream and function (ggml-viz's kernel_function of its symbol, as gpu_kernels names it)."""
    from ggml_viz.capture.gpu.kernel_names import kernel_function

    frame = pd.read_csv(
        path, sep="\t", header=None, names=["start_ns", "end_ns", "device", "stream", "symbol"], quoting=3
    )
    names = {symbol: kernel_function(symbol) for symbol in frame["symbol"].unique()}
    return frame.assign(function=frame["symbol"].map(names))


def busy_once(records: pd.DataFrame) -> pd.Series:
    """Each record's share of its device's busy time, each moment counted once and given to the
    record that was running first (the rule docs/gpu.md states), computed here on its own."""
    device = records["device"].to_numpy()
    order = np.lexsort((records["start_ns"].to_numpy(), device))
    start = records["start_ns"].to_numpy(np.int64)[order]
    end = records["end_ns"].to_numpy(np.int64)[order]
    ordered = np.empty(len(order), np.int64)
    bounds = np.flatnonzero(np.concatenate(([True], device[order][1:] != device[order][:-1], [True])))
    for first, last in zip(bounds[:-1], bounds[1:], strict=True):  # each device's records, by start
        reach = np.maximum.accumulate(end[first:last])  # (int64 throughout: CUPTI's times need 61 bits)
        before = np.concatenate(([np.iinfo(np.int64).min], reach[:-1]))
        ordered[first:last] = np.maximum(end[first:last] - np.maximum(start[first:last], before), 0)
    busy = np.empty(len(order), np.int64)
    busy[order] = ordered
    return pd.Series(busy, index=records.index)


def gpu_op_shares(run: Any) -> pd.Series:
    """ggml-viz's time by op (its op table's labels, fused groups named by their ops, and its
    estimates over the run: est_ns), over the nodes the GPU timed; % by op."""
    from ggml_viz.analysis.breakdowns import fused_op_labels

    totals = run.node_totals
    on_gpu = (totals["timed"] > 0) & (totals["clock"] == "gpu")
    estimated = totals.loc[on_gpu, "est_ns"].groupby(fused_op_labels(totals)[on_gpu]).sum()
    return estimated * 100 / estimated.sum()


def function_ops(run: Any) -> pd.Series:
    """The GPU's busy time by (kernel function, op label) in the traced graphs, each graph
    weighted as ggml-viz weights it over the run: which ops each kernel function served."""
    from ggml_viz.analysis.breakdowns import fused_op_labels

    totals = run.node_totals
    labels = totals[["phase", "structure_id", "node_index"]].assign(op=fused_op_labels(totals))
    kernels = run.gpu_kernels
    kernels = kernels[(kernels["kind"] == "kernel") & (kernels["graph_id"] >= 0)]
    kernels = kernels.merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    kernels = kernels.merge(labels, on=["phase", "structure_id", "node_index"], how="left")
    weight = kernels["graph_id"].map(run.gpu_graph_weights).fillna(1.0)
    return (kernels["busy_ns"] * weight).groupby([kernels["kernel"], kernels["op"].fillna("(no node)")]).sum()


def tally_op_shares(records: pd.DataFrame, served: pd.Series) -> pd.Series:
    """The tally's kernels as op shares: each function's busy time (busy_once) split over the ops
    it served in ggml-viz's run (function_ops) in the same proportions; functions the run never
    saw under a row of their own. % by op."""
    busy = busy_once(records).groupby(records["function"]).sum().astype(float)
    share_of = served / served.groupby(level=0).transform("sum")
    functions = share_of.index.get_level_values(0)
    mapped = (share_of * busy.reindex(functions).fillna(0).to_numpy()).groupby(level=1).sum()
    unseen = float(busy[~busy.index.isin(functions)].sum())
    if unseen:
        mapped["(kernels ggml-viz never saw)"] = unseen
    return mapped * 100 / mapped.sum()


def shares_result(ours: pd.Series, theirs: pd.Series, names: tuple[str, str], limit: float = SHARE_POINTS) -> Result:
    """Two tables of shares (%) side by side: the largest difference in points, at most `limit`."""
    table = pd.DataFrame({"ours": ours, "theirs": theirs}).fillna(0.0)
    if table.empty or not table["ours"].sum() or not table["theirs"].sum():
        return Result(FAIL, "", f"nothing to compare ({names[0]}: {len(ours)} rows, {names[1]}: {len(theirs)})")
    difference = (table["ours"] - table["theirs"]).abs()
    worst = str(difference.idxmax())
    top = table.sort_values("theirs", ascending=False).head(4)
    said = ", ".join(f"{op} {row['ours']:.1f}/{row['theirs']:.1f}" for op, row in top.iterrows())
    figure = f"largest difference {difference.max():.2f} points ({worst}); {names[0]}/{names[1]} %: {said}"
    if difference.max() > limit:
        return Result(FAIL, figure, f"{worst} differs by {difference.max():.2f} points (at most {limit:g})")
    return Result(PASS, figure)


def bench_rates(paths: Sequence[Path]) -> tuple[list[float], int, int]:
    """llama-bench's decode rates (tg, tokens/s) in its result files, one per file; the tokens it
    decoded per repetition, and its repetitions."""
    from gpu_report import bench_results

    rates, tokens, repetitions = [], 0, 1
    for path in paths:
        for row in bench_results(path):
            if int(row.get("n_gen") or 0) > 0:
                rates.append(float(row["avg_ts"]))
                tokens, repetitions = int(row["n_gen"]), len(row.get("samples_ts") or [1])
    return rates, tokens, repetitions


def cost_account(run: Any) -> dict[str, float]:
    """What the GPU timer says it cost a traced run (analysis/gpu.py timer_cost): attaching and
    detaching (the manifest's overhead_ns), and traced graphs' extra time; ns."""
    from ggml_viz.analysis.gpu import timer_cost

    info = dict(run.manifest.get("gpu") or {})
    cost = timer_cost(run, info)
    return {
        "attach_ns": float(info.get("overhead_ns") or 0),
        "traced_extra_ns": float(cost["traced_extra_ns"]) if cost else 0.0,
        "windows": float(info.get("windows") or 0),
    }


def cost_result(
    untraced: Sequence[float], traced: Sequence[float], tokens: int, repetitions: int, account: dict[str, float] | None
) -> Result:
    """The default recording's cost: untraced median decode rate over the traced median, at most
    COST_GOAL; where not, what the timer's own account says it cost beside the rest."""
    if not untraced or not traced:
        return Result(FAIL, "", f"llama-bench results: {len(untraced)} untraced, {len(traced)} traced")
    base, mine = statistics.median(untraced), statistics.median(traced)
    ratio = base / mine
    rounds = min(len(untraced), len(traced))
    figure = f"{ratio:.3f}x over {rounds} rounds (tg{tokens}: {base:,.1f} untraced, {mine:,.1f} traced tokens/s)"
    if ratio <= COST_GOAL:
        return Result(PASS, figure)
    reason = f"above {COST_GOAL}x"
    if account:
        extra = tokens * repetitions * (1 / mine - 1 / base) * 1e9  # ns more per traced process's timed tokens
        attach, slower = account["attach_ns"], account["traced_extra_ns"]
        rest = extra - attach - slower
        biggest = max(
            ("the timer's attach/detach (overhead_ns)", attach),
            ("traced graphs' extra time", slower),
            ("the rest", rest),
            key=lambda pair: pair[1],
        )[0]
        reason += (
            f": {extra / 1e6:,.1f} ms more over {tokens * repetitions} tokens; the timer's attach/detach "
            f"{attach / 1e6:,.1f} ms in {account['windows']:.0f} windows, traced graphs' extra {slower / 1e6:,.1f} ms, "
            f"the rest {rest / 1e6:,.1f} ms: {biggest} dominates"
        )
    return Result(FAIL, figure, reason)


def placement_results(whatif: dict[str, Any], bench: list[dict[str, Any]], flag: str) -> tuple[Result, Result]:
    """whatif's check of the recorded placement (within CHECK_TOLERANCE), and its predictions at
    the placements llama-bench measured (`flag`: ngl or n_cpu_moe; each rate within
    PREDICTION_TOLERANCE)."""
    check = whatif.get("check") or {}
    if check:
        worst = max(abs(c["ratio"] - 1) for c in check.values())
        figure = "; ".join(
            f"{phase} {c['predicted_tokens_per_s']:,.1f} predicted, {c['measured_tokens_per_s']:,.1f} measured "
            f"({c['ratio'] - 1:+.1%})"
            for phase, c in check.items()
        )
        recorded = Result(PASS if worst <= CHECK_TOLERANCE else FAIL, figure)
        if worst > CHECK_TOLERANCE:
            recorded = recorded._replace(reason=f"off by {worst:.1%} (at most {CHECK_TOLERANCE:.0%})")
    else:
        recorded = Result(FAIL, "", "whatif gave no check of the recorded placement")
    blocks = int(whatif.get("n_layer") or 0) + 1
    pairs = []
    for row in bench:
        phase = "prompt" if int(row.get("n_prompt") or 0) else "decode"
        setting = min(int(row["n_gpu_layers"]), blocks) if flag == "ngl" else int(row.get("n_cpu_moe") or 0)
        match = [
            p
            for p in whatif.get("predictions") or []
            if int(p.get(flag) if p.get(flag) is not None else -1) == setting and p.get(f"{phase}_tokens_per_s")
        ]
        if match:
            pairs.append((phase, setting, float(match[0][f"{phase}_tokens_per_s"]) / float(row["avg_ts"])))
    if not pairs:
        return recorded, Result(FAIL, "", f"no prediction matches a llama-bench placement ({len(bench)} results)")
    said = "; ".join(
        f"{phase} " + ", ".join(f"{setting} {ratio:.2f}" for p, setting, ratio in pairs if p == phase)
        for phase in dict.fromkeys(p for p, _, _ in pairs)
    )
    worst = max(pairs, key=lambda pair: abs(pair[2] - 1))
    figure = f"predicted/measured by {flag}: {said}"
    if abs(worst[2] - 1) > PREDICTION_TOLERANCE:
        reason = f"{worst[0]} at {flag} {worst[1]}: {worst[2]:.2f} (within {PREDICTION_TOLERANCE:.0%} asked)"
        return recorded, Result(FAIL, figure, reason)
    return recorded, Result(PASS, figure)


def cublas_result(kernels: pd.DataFrame, tokens: int) -> Result:
    """A prompt of `tokens` through cuBLAS: every kernel of the traced graphs (gpu_kernels) attributed
    to its node, cuBLAS's own (launched through the driver API, cuLaunchKernelEx) among them."""
    kernels = kernels[(kernels["kind"] == "kernel") & (kernels["graph_id"] >= 0)]
    if kernels.empty:
        return Result(FAIL, "", "no kernel in a traced graph")
    attributed = kernels["node_index"] >= 0
    cublas = kernels["kernel"].str.contains(CUBLAS_KERNEL) | kernels["name"].str.contains(CUBLAS_KERNEL)
    functions = ", ".join(sorted(set(kernels.loc[cublas, "kernel"]))[:2])
    figure = (
        f"{int(attributed.sum()):,}/{len(kernels):,} kernels attributed in {kernels['graph_id'].nunique()} graphs "
        f"(largest {tokens} tokens); cuBLAS {int((cublas & attributed).sum()):,}/{int(cublas.sum()):,}"
        + (f" ({functions})" if functions else "")
    )
    if not cublas.any():
        return Result(FAIL, figure, "no cuBLAS kernel ran")
    if not attributed.all():
        missed = kernels.loc[~attributed, "kernel"].value_counts().head(3)
        return Result(FAIL, figure, "unattributed: " + ", ".join(f"{k} {n}" for k, n in missed.items()))
    return Result(PASS, figure)


def published(gpu_name: str) -> tuple[str, float, float] | None:
    """The part's published HBM bandwidth (TB/s) and dense FP16 peak (TFLOP/s), by nvidia-smi's name."""
    for pattern, part, bandwidth, peak in PUBLISHED:
        if re.search(pattern, gpu_name):
            return part, bandwidth, peak
    return None


def limits_results(limits: dict[str, Any], gpu_name: str) -> tuple[Result, Result]:
    """`ggml-viz limits` on the GPU: its read bandwidth (within BANDWIDTH_RANGE of the published
    figure) and its F16 matrix product (within PEAK_RANGE of the published dense peak)."""
    rows = [row for row in limits.get("measurements") or [] if row.get("device") not in (None, "CPU")]
    read = next((row for row in rows if row["what"] == "memory_read" and row.get("gb_per_s")), None)
    product = next((row for row in rows if row["what"] == "matmul" and (row.get("type") or "").upper() == "F16"), None)
    spec = published(gpu_name)
    results = []
    for row, unit, index, allowed, word in (
        (read, "GB/s", 1, BANDWIDTH_RANGE, "read bandwidth"),
        (product, "GFLOP/s", 2, PEAK_RANGE, "dense FP16 peak"),
    ):
        if row is None:
            results.append(Result(FAIL, "", f"limits measured no GPU {word.split()[-1]} ({len(rows)} GPU rows)"))
            continue
        value = float(row["gb_per_s"] if unit == "GB/s" else row["gflop_per_s"])
        measured = f"{row['device']} {value / 1000:,.2f} {'TB/s' if unit == 'GB/s' else 'TFLOP/s'}"
        if spec is None:
            results.append(Result(SKIP, measured, f"no published figure for {gpu_name or 'this GPU'}"))
            continue
        reference = float(spec[index]) * 1000
        share = value / reference
        published_unit = "TB/s" if unit == "GB/s" else "TFLOP/s"
        figure = f"{measured}: {share:.0%} of {spec[0]}'s published {spec[index]:g} {published_unit}"
        inside = allowed[0] <= share <= allowed[1]
        reason = "" if inside else f"outside {allowed[0]:.0%} to {allowed[1]:.0%} of the published {word}"
        results.append(Result(PASS if inside else FAIL, figure, reason))
    return results[0], results[1]


def vulkan_share_result(run: Any, stderr: str) -> Result:
    """One traced Vulkan process with ggml-vulkan's perf logger on: GPU time by op over the decode
    steps after the first, ggml-viz's (gpu_node_times) against the logger's (its report per graph),
    every op above 2 % of either within SHARE_POINTS."""
    from tests.vulkan_perf_log import ggml_op_of, perf_logger_reports

    reports = perf_logger_reports(stderr)
    graphs = run.graphs.sort_values("graph_id")
    decode = graphs.loc[graphs["phase"] == "decode", "graph_id"].tolist()[1:]
    if not reports or not decode:
        return Result(FAIL, "", f"{len(reports)} perf-logger reports, {len(decode)} later decode steps")
    note = ""
    if len(reports) == len(graphs):  # one report per graph, in order
        position = {int(g): i for i, g in enumerate(graphs["graph_id"])}
        chosen = [reports[position[g]] for g in decode]
    else:
        note = f" (reports {len(reports)} for {len(graphs)} graphs: the last {len(decode)} compared)"
        chosen = reports[-len(decode) :]
    ops = set(run.tensors["op"].dropna())
    theirs: dict[str, float] = {}
    for report in chosen:
        for name, total in report.items():
            op = ggml_op_of(name, ops)
            theirs[op] = theirs.get(op, 0.0) + total
    times = run.raw("gpu_node_times").merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    times = times[times["graph_id"].isin(decode)]
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    mine = times.merge(nodes, on=["structure_id", "node_index"]).merge(run.tensors[["tensor_id", "op"]], on="tensor_id")
    ours = mine.groupby("op")["gpu_ns"].sum().astype(float)
    ours, logged = ours * 100 / max(ours.sum(), 1), pd.Series(theirs, dtype=float)
    logged = logged * 100 / max(logged.sum(), 1)
    big = pd.DataFrame({"ours": ours, "theirs": logged}).fillna(0)
    big = big[(big["ours"] > 2) | (big["theirs"] > 2)]
    result = shares_result(big["ours"], big["theirs"], ("ggml-viz", "logger"))
    return result._replace(figure=f"{len(decode)} decode steps{note}; {result.figure}")


def _bytes(count: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{int(count)} B"


# -- the claims ----------------------------------------------------------------------------------


def _text(work: Path, folder: str) -> Result:
    return text_result(program_text(work / folder / "untraced.txt"), program_text(work / folder / "traced.txt"))


def _coverage(work: Path, folder: str, on_own_device: bool = False) -> Result:
    run = open_run(work / folder / "traced.ggmlviz")
    return coverage_result(node_coverage(run, traced_graphs(run)), on_own_device)


def _breakdown(work: Path, folder: str) -> Result:
    run = open_run(work / folder / "traced.ggmlviz")
    return breakdown_result(*step_activity(run, traced_graphs(run)))


def _transfers(work: Path, folder: str) -> Result:
    run = open_run(work / folder / "traced.ggmlviz")
    traced = traced_graphs(run)
    return transfer_result(step_transfers(run, traced), activation_bound(run, traced), len(traced))


def _op_shares(work: Path) -> Result:
    run = open_run(work / "dense" / "traced.ggmlviz")
    records = tally_records(work / "dense" / "tally-records.tsv")
    return shares_result(gpu_op_shares(run), tally_op_shares(records, function_ops(run)), ("ggml-viz", "tally"))


def _kernel_shares(work: Path) -> Result:
    from gpu_report import kernel_share_table, read_tally

    table = kernel_share_table(
        open_run(work / "dense" / "every.ggmlviz").raw("gpu_kernels"), read_tally(work / "dense" / "tally.tsv")
    )
    return shares_result(table["ggml-viz"], table["tally"], ("ggml-viz", "tally"))


def _cost(work: Path, folder: str) -> Result:
    bench = work / folder / "bench"
    untraced, tokens, repetitions = bench_rates(sorted(bench.glob("untraced.*.json")))
    traced, _, _ = bench_rates(sorted(bench.glob("default.*.json")))
    first = bench / "default.1.ggmlviz"
    account = cost_account(open_run(first)) if first.exists() else None
    return cost_result(untraced, traced, tokens, repetitions, account)


def _placement(work: Path, folder: str, flag: str, which: int) -> Result:
    from gpu_report import bench_results

    whatif = json.loads((work / folder / "whatif.json").read_text())
    return placement_results(whatif, bench_results(work / folder / "bench.json"), flag)[which]


def _cublas(work: Path) -> Result:
    run = open_run(work / "f16" / "every.ggmlviz")
    traced = run.graphs[run.graphs["graph_id"].isin(traced_graphs(run))]
    return cublas_result(run.gpu_kernels, int(traced["n_tokens"].max()) if len(traced) else 0)


def _limits(work: Path, which: int) -> Result:
    limits = json.loads((work / "limits" / "limits.json").read_text())
    return limits_results(limits, read_machine(work).get("gpu", ""))[which]


def _vulkan_shares(work: Path) -> Result:
    run = open_run(work / "vulkan" / "logged.ggmlviz")
    return vulkan_share_result(run, (work / "vulkan" / "logged.err").read_text(errors="replace"))


class Spec(NamedTuple):
    key: str
    title: str  # the claim, in words
    needs: tuple[str, ...]  # the steps whose outputs it reads
    compute: Callable[[Path], Result]


DENSE = "dense, every layer on the GPU"
HALF = "dense, half the layers on the GPU"
MOE = "MoE, the experts of half the layers on the CPU"
POINTS = f"within {SHARE_POINTS:g} points"


def _split_claims(part: str, folder: str, flag: str, option: str) -> list[Spec]:
    """The claims of a run split between the CPU and the GPU (HALF, MOE)."""
    traced, whatif, bench = (f"{folder}-{name}" for name in ("traced", "whatif", "bench"))
    return [
        Spec(
            f"{folder}.nodes",
            f"{part}: every node of a traced step timed on its own device",
            (traced,),
            lambda w: _coverage(w, folder, True),
        ),
        Spec(
            f"{folder}.steps",
            f"{part}: each device's parts add up to the step within {STEP_SUM:.0%}",
            (traced,),
            lambda w: _breakdown(w, folder),
        ),
        Spec(
            f"{folder}.transfers",
            f"{part}: transfers between splits, each with its split and plausible bytes",
            (traced,),
            lambda w: _transfers(w, folder),
        ),
        Spec(
            f"{folder}.check",
            f"{part}: whatif's recorded placement against its own steps, within {CHECK_TOLERANCE:.0%}",
            (whatif,),
            lambda w: _placement(w, folder, flag, 0),
        ),
        Spec(
            f"{folder}.predicted",
            f"{part}: whatif's {option} predictions against llama-bench, within {PREDICTION_TOLERANCE:.0%}",
            (whatif, bench),
            lambda w: _placement(w, folder, flag, 1),
        ),
    ]


CLAIMS: list[Spec] = [
    Spec(
        "dense.text",
        f"{DENSE}: greedy text the same traced and untraced",
        ("dense-untraced", "dense-traced"),
        lambda w: _text(w, "dense"),
    ),
    Spec(
        "dense.nodes", f"{DENSE}: every node of a traced step timed", ("dense-traced",), lambda w: _coverage(w, "dense")
    ),
    Spec(
        "dense.ops",
        f"{DENSE}: op shares (default run, estimated) against a CUPTI tally of every kernel, {POINTS}",
        ("dense-traced", "dense-tally"),
        _op_shares,
    ),
    Spec(
        "dense.kernels",
        f"{DENSE}: kernel shares (--gpu every) against the tally, {POINTS}",
        ("dense-every", "dense-tally"),
        _kernel_shares,
    ),
    Spec(
        "dense.cost",
        f"{DENSE}: cost of the default recording, llama-bench tg, at most {COST_GOAL}x",
        ("dense-bench",),
        lambda w: _cost(w, "dense"),
    ),
    *_split_claims(HALF, "half", "ngl", "-ngl"),
    *_split_claims(MOE, "moe", "n_cpu_moe", "--n-cpu-moe"),
    Spec(
        "cublas",
        "F16 prompt of 512 tokens through cuBLAS: every kernel attributed, cuBLAS's (driver API) too",
        ("f16-prompt",),
        _cublas,
    ),
    Spec(
        "limits.bandwidth",
        f"ggml-viz limits on the GPU: read bandwidth {BANDWIDTH_RANGE[0]:.0%} to {BANDWIDTH_RANGE[1]:.0%} "
        "of the published figure",
        ("limits",),
        lambda w: _limits(w, 0),
    ),
    Spec(
        "limits.peak",
        f"ggml-viz limits on the GPU: F16 matrix product {PEAK_RANGE[0]:.0%} to {PEAK_RANGE[1]:.0%} "
        "of the published dense peak",
        ("limits",),
        lambda w: _limits(w, 1),
    ),
    Spec(
        "vulkan.text",
        "Vulkan (NVIDIA's driver): greedy text the same traced and untraced",
        ("vulkan-untraced", "vulkan-traced"),
        lambda w: _text(w, "vulkan"),
    ),
    Spec(
        "vulkan.ops",
        f"Vulkan: op shares against GGML_VK_PERF_LOGGER's, {POINTS}",
        ("vulkan-logged",),
        _vulkan_shares,
    ),
    Spec(
        "vulkan.cost",
        f"Vulkan: cost of the default recording, llama-bench tg, at most {COST_GOAL}x",
        ("vulkan-bench",),
        lambda w: _cost(w, "vulkan"),
    ),
]


def evaluate(work: Path) -> list[Claim]:
    """Every claim of CLAIMS, judged from WORK."""
    steps = read_steps(work)
    claims = []
    for key, title, needed, compute in CLAIMS:
        claim = Claim(key, title, SKIP)
        blocking = [(name, steps.get(name)) for name in needed if steps.get(name) is None or steps[name].status != "ok"]
        if blocking:
            name, step = blocking[0]
            if step is None:
                claim.reason = f"step {name} did not run"
            elif step.status == "fail" and name in REFERENCE_STEPS:
                claim.reason = f"the reference could not be measured: step {name} failed: {step.reason}"
            elif step.status == "fail":
                claim.verdict, claim.reason = FAIL, f"step {name} failed: {step.reason}"
            else:
                claim.reason = step.reason or f"step {name} skipped"
        else:
            try:
                result = compute(work)
            except Exception as error:  # noqa: BLE001 - one claim that cannot be judged does not stop the table
                result = Result(FAIL, "", f"could not be judged: {type(error).__name__}: {error}")
            claim.verdict, claim.figure, claim.reason = result
        claims.append(claim)
    return claims


def render(claims: Sequence[Claim], machine: dict[str, str], steps: dict[str, Step]) -> str:
    """The one table: a heading naming the machine, a row per claim, the steps' tally under it."""
    mode = machine.get("mode", "")
    heading = f"## ggml-viz GPU check: {machine.get('gpu') or 'no NVIDIA GPU'}"
    facts = [
        f"driver {machine['driver']}" if machine.get("driver") else "",
        f"CUDA {machine['cuda']}" if machine.get("cuda") else "",
    ]
    facts += [
        f"{machine['cores']} cores" if machine.get("cores") else "",
        f"{machine['seconds']} s" if machine.get("seconds") else "",
    ]
    heading += "".join(f", {fact}" for fact in facts if fact)
    lines = [heading]
    if mode == "rehearsal":
        lines.append("REHEARSAL: llama.cpp's CPU build and Mesa's lavapipe stand in for the GPU; no figure is a GPU's")
    lines += ["", "| # | claim | measured | result |", "|---|---|---|---|"]
    for number, claim in enumerate(claims, 1):
        verdict = claim.verdict + (f": {claim.reason}" if claim.reason else "")
        lines.append(f"| {number} | {_cell(claim.title)} | {_cell(claim.figure) or '-'} | {_cell(verdict)} |")
    counts = {verdict: sum(c.verdict == verdict for c in claims) for verdict in (PASS, FAIL, SKIP)}
    done = {status: sum(s.status == status for s in steps.values()) for status in ("ok", "fail", "skip")}
    verdicts = f"{counts[PASS]} PASS, {counts[FAIL]} FAIL, {counts[SKIP]} SKIP"
    lines += ["", f"{verdicts}; steps: {done['ok']} ok, {done['fail']} failed, {done['skip']} skipped"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table there")
    args = parser.parse_args(argv)
    table = render(evaluate(args.work), read_machine(args.work), read_steps(args.work))
    print(table, end="")
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
