"""What one run measured that predicts other placements of the same model on the same machine.

A placement is what llama.cpp's flags decide: which device computes each block of the model
(`-ngl N`: the last N blocks, the layers then the output, on the device beside the CPU; the
input, the embedding lookup, stays on the CPU), where each layer's experts are (`--n-cpu-moe
N`: those of the first N layers on the CPU), how many CPU threads compute a step (`-t`, `-tb`)
and how many tokens a prompt step holds (`-ub`). The run measured, for every step:

- each *part* of the model's work: a (block, group, device), the group being the layer's
  experts (the nodes that read them: MUL_MAT_ID, ADD_ID) or the rest of it (`dense`), and its
  time on the device that computed it (the union of nothing: CPU nodes follow one another, a
  worker's nodes too);
- the time crossing between the devices (the CPU's `waiting for transfers` and `launches and
  scheduling`, steps.py) and the host's time outside the compute call.

Each is a line in the step's tokens, `a + b × tokens`, fitted through the mean of the steps of
each token count (a decode step is one of 1 token; a prompt step one of its ubatch's): what a
part costs at another ubatch size follows. Only warm steps count: the warm-up graph, and a
phase's first graph where no warm-up came before it, are left out when the phase has others.

Where the run holds this machine's limits at several thread counts (`ggml-viz limits --threads
1,2,...`), each CPU node is also costed at every thread count measured: its time less a node's
step at the threads it ran on (node_step: dispatch and the barrier between threads, measured on a
chain of small nodes) scaled by how much faster its limit is there (a compute-bound node by the
matrix product's FLOP/s for its weight type, a memory-bound product by the matrix-vector
kernel's read rate for its type, any other memory-bound node by the memory's read bandwidth;
roofline.py decides which), plus a node's step at the new count.

Nothing here depends on a model's names: blocks are the run's own `layer` column, experts the
ops that read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..._errors import GgmlVizError
from ...runformat.reader import Run
from ..buffer_device import device_of_buffer
from ..roofline import Limits, node_floors, phase_threads, run_limits
from .activity import COMPUTE
from .steps import HOST, SCHEDULING, TRANSFERS, step_windows

INPUT = -1  # the block before the first layer; the output block is numbered n_layer
DENSE, EXPERTS = "dense", "experts"
EXPERT_OPS = frozenset({"MUL_MAT_ID", "ADD_ID"})
PHASES = ("prompt", "decode")
RECORDED = 0  # the key of the costs as recorded (a thread count is 1 or more)


@dataclass(frozen=True)
class Placement:
    """One setting of llama.cpp's flags, as far as a prediction goes (None: as recorded)."""

    ngl: int = 0  # blocks on the devices beside the CPU, counted from the output
    n_cpu_moe: int = 0  # layers, counted from the first, whose experts stay on the CPU
    threads: int | None = None  # decode's CPU threads (-t)
    threads_batch: int | None = None  # the prompt's CPU threads (-tb)
    ubatch: int | None = None  # tokens in one prompt step (-ub)
    split: tuple[float, ...] | None = None  # -ts: each device's share of the blocks on them (None: even)
    experts_on: tuple[tuple[int, str], ...] = ()  # -ot: (layer, device) for experts moved by name

    def flags(self, others: tuple[str, ...], experts: bool) -> str:
        """The flags as llama.cpp spells them."""
        said = [f"-ngl {self.ngl}"] if others else []
        if experts and others:
            said.append(f"--n-cpu-moe {self.n_cpu_moe}")
        if self.split and len(others) > 1:
            said.append("-ts " + ",".join(f"{share:g}" for share in self.split))
        by_device: dict[str, list[int]] = {}
        for layer, device in self.experts_on:
            by_device.setdefault(device, []).append(layer)
        for device, layers in by_device.items():
            said.append(f"-ot <the experts of layers {_ranges(layers)}>={device}")
        if self.threads:
            said.append(f"-t {self.threads}")
        if self.threads_batch:
            said.append(f"-tb {self.threads_batch}")
        if self.ubatch:
            said.append(f"-ub {self.ubatch}")
        return " ".join(said)


@dataclass(frozen=True)
class Line:
    """A cost in a step's tokens: a + b × tokens (ns); an experts' part's, c × the experts a step
    of that many tokens reads besides (`experts`: of how many, how many per token)."""

    a: float
    b: float
    c: float = 0.0
    experts: tuple[int, int] | None = None

    def at(self, tokens: float) -> float:
        read = experts_read(tokens, *self.experts) if self.experts else 0.0
        return max(self.a + self.b * tokens + self.c * read, 0.0)


def experts_read(tokens: float, n_expert: int, used: int) -> float:
    """The experts a step of `tokens` tokens reads where each token picks `used` of `n_expert`
    at random (a decode step: `used`; a long prompt's: nearly all of them)."""
    if tokens <= 0 or n_expert <= 0:
        return 0.0
    return n_expert * (1 - (1 - min(used, n_expert) / n_expert) ** tokens)


@dataclass(frozen=True)
class PlacementModel:
    """What a prediction needs, measured in one run."""

    n_layer: int
    others: tuple[str, ...]  # the devices beside the CPU, in llama.cpp's order (none: the CPU alone)
    recorded: Placement
    # per CPU thread count (RECORDED: as recorded), per part (block, group, device): its line
    parts: dict[int, dict[tuple[int, str, str], Line]]
    crossing: Line  # one move of a step's activations between the devices
    fixed: Line  # the host's time, and (one device) the time between its nodes in the compute call
    measured: dict[str, dict[str, float]]  # per phase: steps, tokens, ns of the warm steps
    prompt_steps: list[int]  # the tokens of each warm prompt step
    cold_prompt: bool  # the only prompt step was the run's first graph, with no warm-up before it
    weights: pd.DataFrame  # block, group, name, bytes (placement.py's _weights)
    logits_bytes_per_token: int  # in the compute buffer of the output's device, per token of the ubatch
    output_device: str  # the output block's device in the run
    kv_bytes_per_layer_cell: float
    n_ctx: int
    n_ubatch: int
    compute_bytes: dict[str, int]  # per device, as recorded
    activation_bytes: dict[tuple[int, str], int]  # per (block, group): its largest node output
    recorded_devices: dict[tuple[int, str], str]  # per (block, group): the device it ran on
    has_experts: bool
    threads: dict[str, int | None] = field(default_factory=dict)  # per phase, as recorded
    limit_doubts: tuple[str, ...] = ()  # limits slower at more threads (Limits.slower_with_more_threads)

    @property
    def thread_counts(self) -> list[int]:
        return sorted(t for t in self.parts if t != RECORDED)

    @property
    def devices(self) -> list[str]:
        return ["CPU", *self.others]

    def flags(self, placement: Placement) -> str:
        return placement.flags(self.others, self.has_experts)


def block_of_nodes(nodes: pd.DataFrame) -> pd.Series:
    """Each node's block: its layer; before the graph's first layer, the input; after, the output."""
    layer = pd.to_numeric(nodes["layer"], errors="coerce")
    first = nodes.loc[layer.notna()].groupby("graph_id")["node_index"].min()
    first_of = nodes["graph_id"].map(first).fillna(np.iinfo(np.int64).max)
    n_layer = int(layer.max()) + 1 if layer.notna().any() else 0
    unlayered = np.where(nodes["node_index"] < first_of, INPUT, n_layer)
    return pd.Series(np.where(layer.notna(), layer.fillna(0), unlayered).astype(np.int64), index=nodes.index)


def groups_of(compute: pd.DataFrame) -> np.ndarray:
    """Each compute row's group: `experts` for the ops that read experts, and for every node of a
    layer on the device its experts ran on where the rest of the layer ran elsewhere (the
    scheduler keeps the ops between the expert products with them); else `dense`."""
    expert = compute["op"].isin(EXPERT_OPS).to_numpy()
    group = np.where(expert, EXPERTS, DENSE)
    if not expert.any():
        return group
    time = compute.assign(expert=expert).groupby(["block", "expert", "device"])["ns"].sum().reset_index()
    main = time.sort_values("ns").drop_duplicates(["block", "expert"], keep="last").set_index(["block", "expert"])
    apart = {
        int(block): str(row["device"])
        for (block, is_expert), row in main.iterrows()
        if is_expert and main["device"].get((block, False)) != row["device"]
    }
    experts_device = compute["block"].map(apart)
    group[(experts_device == compute["device"]).to_numpy()] = EXPERTS
    return group


def warm_steps(graphs: pd.DataFrame) -> pd.DataFrame:
    """The prompt and decode graphs that count: not the warm-up, and not a phase's first graph
    where it was the run's first and the phase has others (its weights' pages, its threads, cold)."""
    graphs = graphs.sort_values("graph_id")
    first = graphs["graph_id"].iloc[0] if len(graphs) else None
    chosen = graphs[graphs["phase"].isin(PHASES)]
    cold = chosen["graph_id"] == first
    if cold.any() and (chosen["phase"] == chosen.loc[cold, "phase"].iloc[0]).sum() > 1:
        chosen = chosen[~cold]
    return chosen


def predicting_graphs(graphs: pd.DataFrame, most: int = 64) -> list[int]:
    """The graphs a prediction reads where a whole run would be too many: the last `most` warm
    steps of each phase (their mean is the figure; a long run's hours add nothing to it)."""
    steps = warm_steps(graphs)
    return [int(g) for g in steps.groupby("phase")["graph_id"].apply(lambda ids: ids.tail(most)).explode()]


def placement_model(head: Run, activity: pd.DataFrame, parts: pd.DataFrame) -> PlacementModel:
    """The measured costs of a run that computed on the CPU alone, or on the CPU and other devices
    (GPUs, RPC workers)."""
    compute = activity[activity["kind"] == COMPUTE]
    devices = set(compute["device"])
    others = tuple(sorted(devices - {"CPU"}, key=_device_order))
    if (others and "CPU" not in devices) or not devices:
        found = ", ".join(sorted(devices)) or "none"
        raise GgmlVizError(
            f"a placement is predicted from a run that computed on the CPU, alone or beside other "
            f"devices (GPUs, RPC workers); this run's devices: {found}"
        )
    compute_bytes = _compute_bytes(head)
    untimed = sorted(set(compute_bytes) - devices)
    if untimed:
        raise GgmlVizError(
            f"this run also computed on {', '.join(untimed)}, whose nodes have no time in it (an RPC "
            "worker's: record the worker too and give the joined run, `ggml-viz join`)"
        )
    steps = warm_steps(head.graphs)
    steps = steps[steps["graph_id"].isin(compute["graph_id"].unique())].reset_index(drop=True)
    if steps.empty:
        raise GgmlVizError("the run has no timed prompt or decode step to predict from")
    compute = compute[compute["graph_id"].isin(steps["graph_id"])]
    compute = compute.assign(block=block_of_nodes(compute), ns=(compute["end_ns"] - compute["start_ns"]).astype(float))
    compute = compute.assign(group=groups_of(compute))
    n_layer = int(compute["block"].max())  # the output block's number
    tokens = steps.set_index("graph_id")["n_tokens"].astype(float)
    threads = phase_threads(head)
    limits = run_limits(head)
    scaled = {RECORDED: compute["ns"]}
    if limits is not None:
        scaled.update(_at_thread_counts(head, limits, compute, threads))
    nodes, edges = _largest_graph(head)
    experts = _expert_counts(nodes, edges)
    lines = {count: _part_lines(compute.assign(ns=ns), tokens, experts) for count, ns in scaled.items()}
    recorded = _recorded_placement(compute, others, n_layer, head)
    recorded_devices = devices_of_blocks(compute)
    crossing, fixed = _crossing_and_fixed(parts, tokens, crossings_along(recorded_devices, n_layer))
    windows = step_windows(steps)
    length = (windows["end_ns"] - windows["start_ns"]).clip(lower=0).to_numpy(float)
    measured = {
        str(phase): {
            "steps": float(len(mine)),
            "tokens": float(steps["n_tokens"].to_numpy()[mine.index].sum()),
            "ns": float(length[mine.index].sum()),
        }
        for phase, mine in windows.reset_index(drop=True).groupby("phase")
    }
    prompt = steps[steps["phase"] == "prompt"]
    weights = _weights(nodes, edges)
    context = (head.manifest.get("contexts") or [{}])[0]
    first_graph = int(head.graphs["graph_id"].min())
    return PlacementModel(
        n_layer=n_layer,
        others=others,
        recorded=recorded,
        parts=lines,
        crossing=crossing,
        fixed=fixed,
        measured=measured,
        prompt_steps=[int(n) for n in prompt["n_tokens"]],
        cold_prompt=len(prompt) == 1 and int(prompt["graph_id"].iloc[0]) == first_graph,
        weights=weights,
        logits_bytes_per_token=_logits_per_token(weights, n_layer),
        output_device=str(recorded_devices.get((n_layer, DENSE), "CPU")),
        kv_bytes_per_layer_cell=_kv_per_layer_cell(head, n_layer, context),
        n_ctx=int(context.get("n_ctx") or 0),
        n_ubatch=int(context.get("n_ubatch") or 512),
        compute_bytes=compute_bytes,
        activation_bytes=_activations(nodes),
        recorded_devices=recorded_devices,
        has_experts=bool((compute["group"] == EXPERTS).any()),
        threads=threads,
        limit_doubts=tuple(limits.slower_with_more_threads()) if limits is not None else (),
    )


def _part_lines(
    compute: pd.DataFrame, tokens: pd.Series, experts: tuple[int, int] | None
) -> dict[tuple[int, str, str], Line]:
    """Each part's cost as a line in the step's tokens, through the mean cost of each token count;
    the experts' in the experts a step reads and its tokens."""
    parts = ["block", "group", "device"]
    per_step = compute.groupby(["graph_id", *parts])["ns"].sum().unstack(parts).fillna(0.0)
    apart = [column for column in per_step.columns if column[1] == EXPERTS] if experts else []
    fitted = _fit(per_step.drop(columns=apart), tokens)
    if experts and apart:
        fitted.update(_fit_experts(per_step[apart], tokens, experts))
    return {(int(b), str(g), str(d)): line for (b, g, d), line in fitted.items()}


def _means_by_tokens(per_step: pd.DataFrame, tokens: pd.Series) -> tuple[pd.DataFrame, np.ndarray]:
    """A steps × costs table's mean at each token count, and the counts."""
    means = per_step.groupby(tokens.reindex(per_step.index).to_numpy()).mean()
    return means, means.index.to_numpy(dtype=float)


def _fit_experts(per_step: pd.DataFrame, tokens: pd.Series, experts: tuple[int, int]) -> dict[Any, Line]:
    """Per column: cost = c × experts read + b × tokens, least squares through the mean at each
    token count (one count: all of it by the experts read)."""
    means, x = _means_by_tokens(per_step, tokens)
    read = np.array([experts_read(n, *experts) for n in x])
    if len(x) == 1:
        return {column: Line(0.0, 0.0, float(v) / read[0], experts) for column, v in means.iloc[0].items()}
    design = np.column_stack([read, x])
    solution, *_ = np.linalg.lstsq(design, means.to_numpy(), rcond=None)
    return {
        column: Line(0.0, float(b), float(c), experts)
        for column, c, b in zip(means.columns, solution[0], solution[1], strict=True)
    }


def _fit(per_step: pd.DataFrame, tokens: pd.Series) -> dict[Any, Line]:
    """Per column of a steps × costs table: the least-squares line through its mean at each token
    count (a single count: the cost per step where it is one token, else per token)."""
    means, x = _means_by_tokens(per_step, tokens)
    if len(x) == 1:
        per_token = x[0] > 1
        return {
            column: Line(0.0 if per_token else float(v), float(v) / x[0] if per_token else 0.0)
            for column, v in means.iloc[0].items()
        }
    dx = x - x.mean()
    slope = (dx[:, None] * (means.to_numpy() - means.to_numpy().mean(axis=0))).sum(axis=0) / (dx**2).sum()
    intercept = means.to_numpy().mean(axis=0) - slope * x.mean()
    return {column: Line(float(a), float(b)) for column, a, b in zip(means.columns, intercept, slope, strict=True)}


def _at_thread_counts(
    head: Run, limits: Limits, compute: pd.DataFrame, threads: dict[str, int | None]
) -> dict[int, pd.Series]:
    """Each compute row's time at every CPU thread count the limits were measured at: a CPU
    node's time scaled by its limit there against its limit at the threads it ran on."""
    counts = limits.threads_measured()
    if len(counts) < 2:
        return {}
    floors = node_floors(head, limits)
    graphs = head.graphs.set_index("graph_id")
    keys = pd.DataFrame(
        {
            "phase": compute["graph_id"].map(graphs["phase"]).to_numpy(),
            "structure_id": compute["graph_id"].map(graphs["structure_id"]).to_numpy(),
            "node_index": compute["node_index"].to_numpy(),
        }
    )
    described = keys.merge(
        floors[["phase", "structure_id", "node_index", "bound", "weight_type", "op"]],
        on=["phase", "structure_id", "node_index"],
        how="left",
    )
    on_cpu = (compute["device"] == "CPU").to_numpy()
    rates = {count: _limit_rates(limits, described, count) for count in counts}
    result = {}
    steps = {count: limits.node_step_ns(count) for count in counts}
    nearest = {phase: limits.nearest_threads(threads.get(phase)) for phase in PHASES}
    for count in counts:
        ran_at = described["phase"].map(nearest).fillna(count).to_numpy(np.int64)
        before, step_before = np.ones(len(compute)), np.zeros(len(compute))
        for at in set(ran_at.tolist()):
            before[ran_at == at] = rates[at][ran_at == at]
            step_before[ran_at == at] = steps[at] or 0.0
        ratio = np.where(on_cpu & np.isfinite(before) & np.isfinite(rates[count]), rates[count] / before, 1.0)
        ratio = np.where(ratio > 0, ratio, 1.0)
        # a node's step (its dispatch, the barrier after it) does not scale with its work: taken out
        # at the threads it ran on, and the step at `count` put back (where both were measured)
        stepped = on_cpu & bool(steps[count]) & (step_before > 0)
        work = np.where(stepped, np.maximum(compute["ns"].to_numpy() - step_before, 0.0), compute["ns"].to_numpy())
        result[count] = pd.Series(work / ratio + np.where(stepped, steps[count] or 0.0, 0.0), index=compute.index)
    return result


def _limit_rates(limits: Limits, described: pd.DataFrame, count: int) -> np.ndarray:
    """Per node, the rate of the limit that binds it at `count` threads (NaN: unknown)."""
    rate = np.full(len(described), np.nan)
    bandwidth = limits.bandwidth("CPU", count) or np.nan
    for (bound, kind, op), index in described.groupby(["bound", "weight_type", "op"], dropna=False).groups.items():
        place = described.index.get_indexer(index)
        if bound == "compute":
            rate[place] = limits.peak("CPU", count, kind if isinstance(kind, str) else None)[0] or np.nan
        elif bound == "memory" and isinstance(kind, str) and str(op).startswith("MUL_MAT"):
            rate[place] = limits.kernel_read("CPU", count, kind) or bandwidth
        elif bound == "memory":
            rate[place] = bandwidth
    return rate


def _device_order(name: str) -> tuple[str, int, str]:
    """llama.cpp's order of its devices: by backend, then number (RPC0 before RPC1, CUDA0 before CUDA1)."""
    match = re.match(r"([A-Za-z_]+?)(\d+)", name)
    return (match.group(1), int(match.group(2)), name) if match else (name, 0, name)


def _recorded_placement(compute: pd.DataFrame, others: tuple[str, ...], n_layer: int, head: Run) -> Placement:
    """The placement the run had: its blocks' and experts' devices, its split, threads and ubatch."""
    context = (head.manifest.get("contexts") or [{}])[0]
    threads = phase_threads(head)
    ubatch = int(context.get("n_ubatch") or 0) or None
    if not others:
        return Placement(0, 0, threads.get("decode"), threads.get("prompt"), ubatch)
    where = devices_of_blocks(compute)
    offloaded = [b for (b, g), d in where.items() if g == DENSE and d != "CPU" and b != INPUT]
    experts_cpu = [b for (b, g), d in where.items() if g == EXPERTS and d == "CPU" and b in offloaded]
    n_cpu_moe = max(experts_cpu) + 1 if experts_cpu else 0
    held = [sum(1 for b in offloaded if where[(b, DENSE)] == device) for device in others]
    split = tuple(n / len(offloaded) for n in held) if len(others) > 1 and offloaded else None
    return Placement(len(offloaded), n_cpu_moe, threads.get("decode"), threads.get("prompt"), ubatch, split)


def devices_of_blocks(compute: pd.DataFrame) -> dict[tuple[int, str], str]:
    """The device each (block, group) of a run computed on (where it spent most of its time)."""
    ns = compute.groupby(["block", "group", "device"])["ns"].sum().reset_index().sort_values("ns")
    where = ns.drop_duplicates(["block", "group"], keep="last").set_index(["block", "group"])["device"]
    return {(int(b), str(g)): str(d) for (b, g), d in where.items()}


def devices_of(model: PlacementModel, placement: Placement) -> dict[tuple[int, str], str]:
    """The device of each (block, group) under a placement, by llama.cpp's rules: the last `ngl`
    blocks offloaded, the i-th of them to the first device whose cumulative share of the split
    exceeds i / ngl; the experts of the first `n_cpu_moe` layers on the CPU; then each layer's
    experts that `-ot` moved (experts_on) on its device."""
    offloaded = max(0, min(placement.ngl, model.n_layer + 1))
    first = model.n_layer + 1 - offloaded
    shares = np.asarray(placement.split or [1.0] * len(model.others), dtype=float)[: len(model.others)]
    bounds = np.cumsum(shares) / shares.sum() if len(shares) and shares.sum() > 0 else np.ones(len(model.others))
    where = {}
    for block in range(INPUT, model.n_layer + 1):
        dense = "CPU"
        if model.others and block >= first and block != INPUT:
            index = int(np.searchsorted(bounds, (block - first) / offloaded, side="right"))
            dense = model.others[min(index, len(model.others) - 1)]
        where[(block, DENSE)] = dense
        where[(block, EXPERTS)] = "CPU" if 0 <= block < placement.n_cpu_moe else dense
    for layer, device in placement.experts_on:
        if 0 <= layer < model.n_layer:
            where[(layer, EXPERTS)] = device
    return where


def experts_matching(model: PlacementModel, pattern: str, device: str) -> tuple[tuple[int, str], ...]:
    """`-ot PATTERN=DEVICE` as llama.cpp reads it (a regular expression searched in each weight's
    name), for the experts: (layer, device) for each layer whose expert weights it names. A pattern
    that names other weights too, or none, or a device the run did not have, is refused."""
    named_device = [d for d in model.devices if d == device or d.split("[")[0] == device]  # (RPC0 for RPC0[host:port])
    if len(named_device) != 1:
        raise GgmlVizError(f"-ot {pattern}={device}: this run's devices are {', '.join(model.devices)}")
    device = named_device[0]
    try:
        found = re.compile(pattern)
    except re.error as error:
        raise GgmlVizError(f"-ot {pattern}={device}: not a regular expression ({error})") from None
    named = model.weights[[bool(found.search(str(name))) for name in model.weights["name"]]]
    if named.empty:
        raise GgmlVizError(f"-ot {pattern}={device}: names none of this run's weights")
    others = named[named["group"] != EXPERTS]
    if len(others):
        raise GgmlVizError(
            f"-ot {pattern}={device}: moves experts only here, and it names "
            f"{', '.join(others['name'].astype(str).head(3))}"
        )
    return tuple((int(layer), device) for layer in sorted(set(named["block"].astype(int))))


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def crossings_along(where: dict[tuple[int, str], str], n_layer: int) -> int:
    """Moves of a step's activations between devices: each change of device along the model (the
    input, each layer and its experts, the output), and the logits back to the CPU."""
    path = [where.get((INPUT, DENSE), "CPU")]
    for block in range(n_layer):
        path += [where.get((block, DENSE), "CPU"), where.get((block, EXPERTS), where.get((block, DENSE), "CPU"))]
    path += [where.get((n_layer, DENSE), "CPU"), "CPU"]
    return sum(1 for a, b in zip(path, path[1:], strict=False) if a != b)


def boundaries_of(model: PlacementModel, where: dict[tuple[int, str], str]) -> int:
    return crossings_along(where, model.n_layer)


def _crossing_and_fixed(parts: pd.DataFrame, tokens: pd.Series, boundaries: int) -> tuple[Line, Line]:
    """One crossing's line (the CPU's transfers and scheduling over the recorded crossings) and
    the fixed time's (the host's; with no crossing, the scheduling too)."""
    cpu = parts[(parts["device"] == "CPU") & parts["graph_id"].isin(tokens.index)]
    if cpu.empty:
        return Line(0.0, 0.0), Line(0.0, 0.0)
    per_step = cpu.pivot_table(index="graph_id", columns="part", values="ns", aggfunc="sum").fillna(0.0)
    moving = per_step.get(TRANSFERS, 0.0) + per_step.get(SCHEDULING, 0.0)
    host = per_step.get(HOST, pd.Series(0.0, index=per_step.index))
    table = pd.DataFrame(
        {"crossing": moving / boundaries if boundaries else 0.0, "fixed": host + (0.0 if boundaries else moving)},
        index=per_step.index,
    )
    lines = _fit(table, tokens)
    return lines["crossing"], lines["fixed"]


def _largest_graph(head: Run) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The nodes (with their block and group) and edges of the graph of the most tokens, then
    nodes (the latest of them): the one whose structure and activations are nearest a ubatch's,
    which llama.cpp sizes its compute buffers for. Read once for what follows."""
    graph = int(head.graphs.sort_values(["n_tokens", "n_nodes", "graph_id"])["graph_id"].iloc[-1])
    nodes = head.nodes_of(graph, times=False)
    nodes = nodes.assign(block=block_of_nodes(nodes), group=np.where(nodes["op"].isin(EXPERT_OPS), EXPERTS, DENSE))
    return nodes, head.edges_of(graph)


def _activations(nodes: pd.DataFrame) -> dict[tuple[int, str], int]:
    """Per (block, group), the largest output of one of its nodes in the largest graph, in bytes:
    what a part asks of its device's compute buffer, up to a factor the recorded buffer gives."""
    largest = nodes.groupby(["block", "group"])["nbytes"].max()
    return {(int(b), str(g)): int(n) for (b, g), n in largest.items()}


def _weights(nodes: pd.DataFrame, edges: pd.DataFrame) -> pd.DataFrame:
    """The weights the run's largest graph reads: block, group, name and bytes of each (a tensor
    read by two blocks, a tied embedding, once per block: a device holds one copy of a name)."""
    weights = edges[edges["src_buffer_kind"] == "weights"]
    reader = nodes.set_index("node_index").reindex(weights["node_index"].to_numpy())
    weights = weights.assign(
        block=reader["block"].to_numpy(),
        group=reader["group"].to_numpy(),
        op=reader["op"].to_numpy(),
        name=weights["src_name"].fillna(weights["src_tensor_id"].astype(str)),
    )
    table = weights.drop_duplicates(["block", "name"])[["block", "group", "name", "src_nbytes", "src_ne1", "op"]]
    return table.rename(columns={"src_nbytes": "bytes", "src_ne1": "rows"}).reset_index(drop=True)


def _expert_counts(nodes: pd.DataFrame, edges: pd.DataFrame) -> tuple[int, int] | None:
    """(experts, experts per token) of the run's MoE layers, from an expert product's sources:
    the experts' weights (ne2 experts) and the chosen ids (ne0 per token); None: no experts."""
    products = nodes.loc[nodes["op"] == "MUL_MAT_ID", "node_index"]
    if products.empty:
        return None
    first = edges[edges["node_index"] == int(products.iloc[0])].set_index("src_slot")
    if 0 not in first.index or 2 not in first.index:
        return None
    return int(first.loc[0, "src_ne2"]), int(first.loc[2, "src_ne0"])


def _logits_per_token(weights: pd.DataFrame, n_layer: int) -> int:
    """The output's logits per token, in bytes (F32): the rows of the output block's largest matrix."""
    output = weights[(weights["block"] == n_layer) & weights["op"].astype(str).str.startswith("MUL_MAT")]
    return int(output["rows"].max()) * 4 if len(output) else 0


def _kv_per_layer_cell(head: Run, n_layer: int, context: dict[str, Any]) -> float:
    """The KV cache's bytes per layer and cell (the run's KV buffers over its layers and context)."""
    buffers = head.buffers
    kv = buffers[buffers["kind"] == "kv_cache"]
    n_ctx = int(context.get("n_ctx") or 0)
    return float(kv["size"].sum()) / n_layer / n_ctx if n_layer and n_ctx else 0.0


def _compute_bytes(head: Run) -> dict[str, int]:
    buffers = head.buffers
    compute = buffers[buffers["kind"] == "compute"]
    device = compute["name"].map(device_of_buffer)
    return {str(d): int(size) for d, size in compute.groupby(device)["size"].sum().items()}
