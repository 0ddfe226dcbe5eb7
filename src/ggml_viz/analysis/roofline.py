"""How far each node, op, layer, phase and step is from what this machine can do.

The limits are the ones `ggml-viz limits` measured with ggml's own kernels and kept with the run
(`manifest["limits"]`, runformat/limits.py). Each node is held against the roofline of its
device at the threads its phase ran on:

    floor = max(FLOPs / peak, bytes / bandwidth)

the least time its work could take: `bandwidth` the memory's read bandwidth (memory_read);
`peak` the matrix product's FLOP/s for the node's weight type (matmul of that type: a
MUL_MAT's src0, FLASH_ATTN_EXT's K; F32's for every other op, and for a type not measured). A
node is memory-bound where the bytes term is the larger (its FLOPs per byte below the ridge
point, peak / bandwidth), compute-bound where the FLOPs term is. Its distance to the limit is
`floor / time`: 1 at the limit, 0.1 ten times slower than it. Over many nodes (an op, a layer,
a phase) the floors and times are summed, so the share is the time that could be saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from .._typing import Required
from ..runformat.limits import check_limits, recorded_on, same_machine
from ..runformat.reader import Run
from .breakdowns import WeightReads, timed_totals
from .buffer_device import device_of_buffer
from .flops import ThroughputRow, events_work
from .rows import plain, records_as

# the source whose type picks the compute roof (the weights' slot); every other op: F32's
WEIGHT_SLOT = {"MUL_MAT": 0, "MUL_MAT_ID": 0, "OUT_PROD": 0, "FLASH_ATTN_EXT": 1}
CPU = "CPU"


class LimitMeasurement(TypedDict):
    """One limit `ggml-viz limits` measured (runformat/limits.py)."""

    device: str  # "CPU", "CUDA0"
    threads: int | None
    what: str  # memory_read, matvec, matmul, page_cache_read, disk_read
    type: str | None  # the ggml type measured (matvec, matmul)
    gb_per_s: float | None
    gflop_per_s: float | None
    bytes: float | None
    flops: float | None
    seconds: float | None
    repeats: int | None
    note: str | None


class RooflineLimits(TypedDict):
    """The limits a run is judged against, and at which threads."""

    measured: str | None
    machine: dict[str, Any]
    same_machine: bool  # measured on the machine that recorded the run
    threads: dict[str, int | None]  # per phase, the threads it ran on
    judged_at: list[int]  # the measured thread counts the nodes were judged at
    weight_types: list[str]  # the types whose matrix-product peaks judge the nodes (F32 and the weights')
    device: str  # the device holding most of the node time: the one whose roofs a chart draws
    measurements: list[LimitMeasurement]


class DecodeFloor(TypedDict):
    """The decode step's weights read at the measured bandwidth, against its median time."""

    bytes: int
    median_ns: float
    gb_per_s: float
    bandwidth_gb_per_s: float
    floor_ns: float
    of_limit: float
    threads: int | None
    weight_type: str | None
    kernel_gb_per_s: float | None  # the matrix-vector kernel of that type at best


class PromptFloor(TypedDict):
    """The prompt's FLOPs at the matrix product's peak for its main weight type, against its time."""

    flops: float
    time_ns: float
    gflop_per_s: float
    peak_gflop_per_s: float
    weight_type: str | None
    peak_type: str | None  # the type whose peak it is held to (F32's where its own was not measured)
    of_limit: float
    threads: int | None


class FurthestOp(TypedDict):
    op: str
    of_limit: float
    bound: str | None
    share: float  # of node time
    gflop_per_s: float
    gb_per_s: float


class _RooflineRow(ThroughputRow):
    """An op's, a phase's or a layer's nodes against their floor at the limits (roofline_by)."""

    floor_ns: float | None
    bound: str | None
    of_limit: float | None


class RooflineOp(_RooflineRow):
    op: str


class RooflinePhase(_RooflineRow):
    phase: str


class RooflineLayer(_RooflineRow):
    layer: int


class RooflineSummary(TypedDict, total=False):
    """The run against this machine's measured limits (roofline_summary): only
    `limits` (None) where the run holds none (`ggml-viz limits --for RUN` measures them)."""

    limits: Required[RooflineLimits | None]
    by_op: list[RooflineOp]  # the top ops by time
    by_phase: list[RooflinePhase]
    by_layer: list[RooflineLayer]
    decode_step: DecodeFloor | None
    prompt: PromptFloor | None
    furthest: FurthestOp | None


@dataclass(frozen=True)
class Limits:
    """A machine's measured limits (runformat/limits.py), looked up by device, threads and type."""

    table: pd.DataFrame
    measured: str | None
    machine: dict[str, Any]

    @classmethod
    def from_json(cls, limits: dict[str, Any], where: str = "the run's manifest") -> Limits:
        checked = check_limits(limits, where)
        table = pd.DataFrame(checked["measurements"])
        table["type"] = table["type"].str.upper()
        return cls(table=table, measured=checked.get("measured"), machine=checked.get("machine") or {})

    def threads_measured(self, device: str = CPU) -> list[int]:
        rows = self.table[(self.table["device"] == device) & (self.table["what"] == "memory_read")]
        return sorted({int(n) for n in rows["threads"].dropna()})

    def nearest_threads(self, threads: int | None, device: str = CPU) -> int | None:
        """The measured thread count to judge `threads` by: the same, else the largest below it,
        else the smallest (None: a GPU, or nothing measured)."""
        measured = self.threads_measured(device)
        if not measured or device != CPU:
            return None
        if threads is None:
            return measured[-1]
        below = [n for n in measured if n <= threads]
        return below[-1] if below else measured[0]

    def _rows(self, device: str, threads: int | None, what: str) -> pd.DataFrame:
        rows = self.table[(self.table["device"] == device) & (self.table["what"] == what)]
        if device == CPU:
            rows = rows[rows["threads"] == threads]
        return rows

    def bandwidth(self, device: str, threads: int | None) -> float | None:
        """GB/s read from memory (memory_read), None where not measured."""
        rows = self._rows(device, threads, "memory_read")
        return float(rows["gb_per_s"].max()) if len(rows) else None

    def peak(self, device: str, threads: int | None, ggml_type: str | None) -> tuple[float | None, str | None]:
        """(GFLOP/s, the type it was measured for): the matmul of this type, else F32's."""
        rows = self._rows(device, threads, "matmul")
        for wanted in (str(ggml_type or "F32").upper(), "F32"):
            found = rows[rows["type"] == wanted]
            if len(found):
                return float(found["gflop_per_s"].max()), wanted
        return None, None

    def slower_with_more_threads(self, device: str = CPU) -> list[str]:
        """The measurements that came out slower at more threads than at fewer ("matmul F32: 44.8
        GFLOP/s at 2 threads, 56.3 at 1"): a sign that other work had the cores while they ran."""
        rows = self.table[(self.table["device"] == device) & self.table["threads"].notna()]
        said = []
        for (what, kind), group in rows.groupby(["what", rows["type"].fillna("")]):
            rate = group["gflop_per_s"] if what == "matmul" else group["gb_per_s"]
            by_threads = pd.Series(rate.to_numpy(), index=group["threads"].astype(int)).dropna().sort_index()
            for fewer, more in zip(by_threads.index[:-1], by_threads.index[1:], strict=True):
                if by_threads[more] < by_threads[fewer]:
                    unit = "GFLOP/s" if what == "matmul" else "GB/s"
                    said.append(
                        f"{what} {kind}".strip() + f": {by_threads[more]:,.1f} {unit} at {more} threads, "
                        f"{by_threads[fewer]:,.1f} at {fewer}"
                    )
        return said

    def node_step_ns(self, threads: int) -> float | None:
        """ns a CPU node costs beyond its work at `threads` threads (node_step), None where not measured."""
        rows = self._rows(CPU, threads, "node_step")
        return float(rows["seconds"].min()) * 1e9 if len(rows) else None

    def kernel_read(self, device: str, threads: int | None, ggml_type: str) -> float | None:
        """GB/s of weights the program's matrix-vector kernel for this type reads at best (matvec)."""
        rows = self._rows(device, threads, "matvec")
        rows = rows[rows["type"] == ggml_type.upper()]
        return float(rows["gb_per_s"].max()) if len(rows) else None


def run_limits(run: Run) -> Limits | None:
    """The limits the run was judged against (kept in its manifest), or None."""
    limits = run.manifest.get("limits")
    return Limits.from_json(limits) if limits else None


def phase_threads(run: Run) -> dict[str, int | None]:
    """The CPU threads each phase ran on, as the run's llama.cpp context says (decode: n_threads,
    prompt: n_threads_batch); None where no context said (another ggml program)."""
    context = (run.manifest.get("contexts") or [{}])[0]

    def count(key: str) -> int | None:
        value = context.get(key)
        return int(value) if isinstance(value, (int, float)) and value > 0 else None

    decode, batch = count("n_threads"), count("n_threads_batch")
    return {"decode": decode, "prompt": batch or decode, "encode": batch or decode}


def weight_types_used(run: Run) -> list[str]:
    """The types of the weights the run's matrix products read (upper case, as ggml-viz limits takes them)."""
    nodes = run.raw("structure_nodes").join(run.raw("tensors").set_index("tensor_id")["op_base"], on="tensor_id")
    return sorted(set(_weight_types(run, nodes.reset_index(drop=True)).dropna()))


def node_floors(run: Run, limits: Limits) -> pd.DataFrame:
    """The timed node totals (per phase, structure and node) with their work and roofline:
    flops, bytes, device, threads (the measured count judged at), weight_type, peak_gflop_per_s,
    bandwidth_gb_per_s, memory_ns and compute_ns (the work at the limit, every event), floor_ns
    (the larger), bound (memory | compute) and of_limit (floor / time). Nodes on a device whose
    limits were not measured have no floor (NaN)."""
    totals = timed_totals(run)
    rows = events_work(run, totals)
    rows["weight_type"] = _weight_types(run, rows)
    rows["device"] = _devices(rows, limits)
    threads = phase_threads(run)
    nearest = {
        (phase, device): limits.nearest_threads(threads.get(phase), device)
        for phase, device in rows[["phase", "device"]].drop_duplicates().itertuples(index=False)
    }
    rows["threads"] = [nearest[key] for key in zip(rows["phase"], rows["device"], strict=True)]
    rows["threads"] = rows["threads"].astype("Int64")
    peak = np.full(len(rows), np.nan)
    bandwidth = np.full(len(rows), np.nan)
    columns = ["device", "threads", "weight_type"]
    keys = rows[columns].astype(object).where(rows[columns].notna(), None)
    for (device, count, kind), index in keys.groupby(["device", "threads", "weight_type"], dropna=False).groups.items():
        count = None if count is None or count != count else int(count)
        place = rows.index.get_indexer(index)
        peak[place] = limits.peak(device, count, kind)[0] or np.nan
        bandwidth[place] = limits.bandwidth(device, count) or np.nan
    rows["peak_gflop_per_s"], rows["bandwidth_gb_per_s"] = peak, bandwidth
    timed = rows["timed"].to_numpy(np.float64)
    rows["compute_ns"] = timed * rows["flops"].fillna(0).to_numpy() / peak  # (GFLOP/s: FLOP per ns)
    rows["memory_ns"] = timed * rows["bytes"].fillna(0).to_numpy() / bandwidth
    rows["floor_ns"] = np.fmax(rows["compute_ns"], rows["memory_ns"]).where(np.isfinite(peak) & np.isfinite(bandwidth))
    rows["bound"] = np.where(rows["compute_ns"] > rows["memory_ns"], "compute", "memory")
    rows.loc[rows["floor_ns"].isna(), "bound"] = None
    rows["of_limit"] = (rows["floor_ns"] / rows["time_ns"]).where(rows["time_ns"] > 0)
    return rows


def _weight_types(run: Run, rows: pd.DataFrame) -> pd.Series:
    """Per row, the type of the source whose type picks its compute roof (None: F32's)."""
    edges = run.raw("edges")
    slot = rows["op_base"].map(WEIGHT_SLOT)
    wanted = rows.assign(src_slot=slot)[["structure_id", "node_index", "src_slot"]].dropna()
    if wanted.empty:
        return pd.Series([None] * len(rows), index=rows.index, dtype=object)
    wanted = wanted.astype({"src_slot": edges["src_slot"].dtype})
    types = run.raw("tensors").set_index("tensor_id")["type"]
    found = wanted.reset_index().merge(edges, on=["structure_id", "node_index", "src_slot"]).set_index("index")
    return found["src_tensor_id"].map(types).str.upper().reindex(rows.index)


def _devices(rows: pd.DataFrame, limits: Limits) -> pd.Series:
    """Each node's device: the measured GPU device its output's buffer belongs to (buffer_device.py:
    CUDA0 and CUDA0_Split are CUDA0's, CUDA0_Host the host's), else the CPU."""
    gpus = {name for name in limits.table["device"].unique() if name != CPU}
    owner = rows["buffer_name"].map(device_of_buffer)
    return owner.where(owner.isin(gpus), CPU).astype(object)


def roofline_by(floors: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per value of `key` (op, layer, phase, label): time, FLOPs, bytes, achieved GFLOP/s and GB/s,
    FLOPs per byte, the floor, the binding roof and the share of the limit reached (floor / time)."""
    timed = floors.assign(
        flops_all=floors["flops"].fillna(0) * floors["timed"], bytes_all=floors["bytes"].fillna(0) * floors["timed"]
    )
    groups = timed.groupby(key, dropna=True)
    table = groups.agg(
        time_ns=("time_ns", "sum"),
        flops=("flops_all", "sum"),
        bytes=("bytes_all", "sum"),
        floor_ns=("floor_ns", lambda s: s.sum(min_count=1)),
        memory_ns=("memory_ns", "sum"),
        compute_ns=("compute_ns", "sum"),
        upper_bound=("upper_bound", "any"),
    )
    seconds = table["time_ns"].astype(np.float64) / 1e9
    table["gflop_per_s"] = (table["flops"] / 1e9 / seconds).where(seconds > 0)
    table["gb_per_s"] = (table["bytes"] / 1e9 / seconds).where(seconds > 0)
    table["flops_per_byte"] = (table["flops"] / table["bytes"]).where(table["bytes"] > 0)
    table["bound"] = np.where(table["compute_ns"] > table["memory_ns"], "compute", "memory")
    table.loc[table["floor_ns"].isna(), "bound"] = None
    table["of_limit"] = (table["floor_ns"] / table["time_ns"]).where(table["time_ns"] > 0)
    return table.drop(columns=["memory_ns", "compute_ns"]).sort_values("time_ns", ascending=False).reset_index()


def median_decode_step_ns(run: Run) -> float | None:
    """The median decode step's time, first node to last (None: no decode step)."""
    graphs = run.arrow("graphs")
    decode = pc.equal(graphs.column("phase"), "decode").fill_null(False).to_numpy(zero_copy_only=False)
    if not decode.any():
        return None
    steps = graphs.filter(decode)  # (the decode steps' times, not a pandas frame of every graph)
    durations = steps.column("end_ns").to_numpy() - steps.column("start_ns").to_numpy()
    return float(np.median(durations.astype(np.float64)))


def roofline_summary(run: Run, reads: WeightReads, top: int = 10) -> RooflineSummary:
    """What the summary says of the run against this machine's limits: the limits judged by,
    distance by op, phase and layer, the decode step's floor and the prompt's; `limits` None
    (and nothing else) where the run holds none."""
    limits = run_limits(run)
    if limits is None:
        return {"limits": None}
    floors = node_floors(run, limits)
    by_op = roofline_by(floors[floors["time_ns"] > 0], "op")
    by_phase = roofline_by(floors, "phase")
    layered = floors[floors["layer"].notna()].astype({"layer": "int64"})
    by_layer = roofline_by(layered, "layer").sort_values("layer") if len(layered) else by_op.iloc[:0]
    return {
        "limits": _limits_described(run, limits, floors),
        "by_op": records_as(by_op.head(top), RooflineOp, _plain),
        "by_phase": records_as(by_phase, RooflinePhase, _plain),
        "by_layer": records_as(by_layer, RooflineLayer, _plain),
        "decode_step": _decode_floor(run, limits, floors, reads),
        "prompt": _prompt_floor(limits, floors),
        "furthest": _furthest(by_op),
    }


def _plain(value: Any) -> Any:
    """A value of a roofline table as plain data (its missing floors and bounds: None)."""
    return None if value is pd.NA else plain(value)


def _limits_described(run: Run, limits: Limits, floors: pd.DataFrame) -> RooflineLimits:
    """The limits the run is judged against, and at which threads: plain data."""
    table = limits.table.where(limits.table.notna(), None)
    return {
        "measured": limits.measured,
        "machine": limits.machine,
        "same_machine": _recorded_here(run, limits),
        "threads": {phase: (int(n) if n is not None else None) for phase, n in phase_threads(run).items()},
        "judged_at": sorted({int(n) for n in floors["threads"].dropna()}),
        # the device that holds most of the node time: the one whose roofs a chart draws
        "device": str(floors.groupby("device")["time_ns"].sum().idxmax()) if len(floors) else CPU,
        # the types whose peaks judge the run's nodes (F32's: every op but the products')
        "weight_types": sorted({"F32", *(str(t) for t in floors["weight_type"].dropna())}),
        "measurements": records_as(table, LimitMeasurement, _plain),
    }


def _recorded_here(run: Run, limits: Limits) -> bool:
    return same_machine(recorded_on(run.manifest), limits.machine)


def _main_type(rows: pd.DataFrame) -> str | None:
    """The weight type most of these rows' bytes are read as."""
    typed = rows[rows["weight_type"].notna()]
    if typed.empty:
        return None
    return str((typed["bytes"] * typed["timed"]).groupby(typed["weight_type"]).sum().idxmax())


def _decode_floor(run: Run, limits: Limits, floors: pd.DataFrame, reads: WeightReads) -> DecodeFloor | None:
    """The decode step's weights read at the measured bandwidth, against its median time."""
    step_bytes = reads.get("weight_bytes_per_decode_step")
    median_ns = median_decode_step_ns(run)
    decode = floors[(floors["phase"] == "decode") & (floors["device"] == CPU)]
    if not step_bytes or not median_ns or decode.empty:
        return None
    threads = decode["threads"].dropna()
    count = int(threads.iloc[0]) if len(threads) else None
    bandwidth = limits.bandwidth(CPU, count)
    if not bandwidth:
        return None
    kind = _main_type(decode)
    floor_ns = step_bytes / bandwidth  # (GB/s: bytes per ns)
    return {
        "bytes": int(step_bytes),
        "median_ns": median_ns,
        "gb_per_s": step_bytes / median_ns,
        "bandwidth_gb_per_s": bandwidth,
        "floor_ns": floor_ns,
        "of_limit": floor_ns / median_ns,
        "threads": count,
        "weight_type": kind,
        "kernel_gb_per_s": limits.kernel_read(CPU, count, kind) if kind else None,
    }


def _prompt_floor(limits: Limits, floors: pd.DataFrame) -> PromptFloor | None:
    """The prompt's FLOPs at the peak of its main weight type, against its node time."""
    prompt = floors[(floors["phase"] == "prompt") & (floors["device"] == CPU)]
    time_ns = float(prompt["time_ns"].sum())
    flops = float((prompt["flops"].fillna(0) * prompt["timed"]).sum())
    if prompt.empty or time_ns <= 0 or flops <= 0:
        return None
    threads = prompt["threads"].dropna()
    count = int(threads.iloc[0]) if len(threads) else None
    kind = _main_type(prompt)
    peak, measured_type = limits.peak(CPU, count, kind)
    if not peak:
        return None
    return {
        "flops": flops,
        "time_ns": time_ns,
        "gflop_per_s": flops / time_ns,
        "peak_gflop_per_s": peak,
        "weight_type": kind,
        "peak_type": measured_type,
        "of_limit": flops / peak / time_ns,
        "threads": count,
    }


def _furthest(by_op: pd.DataFrame, least_share: float = 0.05) -> FurthestOp | None:
    """The op furthest from its limit among those taking at least `least_share` of node time."""
    judged = by_op[by_op["of_limit"].notna()]
    total = by_op["time_ns"].sum()
    heavy = judged[judged["time_ns"] >= least_share * total] if total > 0 else judged.iloc[:0]
    if heavy.empty:
        return None
    row = heavy.loc[heavy["of_limit"].idxmin()]
    return {
        "op": row["op"],
        "of_limit": float(row["of_limit"]),
        "bound": row["bound"],
        "share": float(row["time_ns"] / total),
        "gflop_per_s": float(row["gflop_per_s"]),
        "gb_per_s": float(row["gb_per_s"]),
    }


def limit_findings(roofline: RooflineSummary) -> list[str]:
    """The run against this machine's limits, in words."""
    limits = roofline["limits"]
    if not limits:
        return []
    said = []
    step = roofline.get("decode_step")
    if step:
        kernel = (
            f"; the {step['weight_type']} matrix-vector kernel alone reads at most "
            f"{step['kernel_gb_per_s']:,.1f} GB/s here"
            if step.get("kernel_gb_per_s")
            else ""
        )
        said.append(
            f"Decode runs at {step['of_limit']:.0%} of this machine's read bandwidth: "
            f"{step['gb_per_s']:,.1f} of {step['bandwidth_gb_per_s']:,.1f} GB/s"
            f"{_at(step['threads'])}{kernel}."
        )
    prompt = roofline.get("prompt")
    if prompt:
        said.append(
            f"Prompt processing runs at {prompt['of_limit']:.0%} of the {prompt['peak_type']} matrix "
            f"product's peak: {prompt['gflop_per_s']:,.1f} of {prompt['peak_gflop_per_s']:,.1f} GFLOP/s"
            f"{_at(prompt['threads'])}."
        )
    furthest = roofline.get("furthest")
    if furthest:
        achieved = (
            f"{furthest['gflop_per_s']:,.1f} GFLOP/s"
            if furthest["bound"] == "compute"
            else f"{furthest['gb_per_s']:,.1f} GB/s"
        )
        limit = "peak" if furthest["bound"] == "compute" else "read bandwidth"
        said.append(
            f"{furthest['op']} is {furthest['bound']}-bound at {furthest['of_limit']:.0%} of {limit} "
            f"({achieved}, {furthest['share']:.0%} of node time): the op furthest from its limit."
        )
    return said + _threads_caveat(limits)


def _threads_caveat(limits: RooflineLimits) -> list[str]:
    """What to know where the run's thread counts are not the ones it was judged at."""
    judged = limits.get("judged_at") or []
    used = {n for n in (limits.get("threads") or {}).values() if n}
    if not judged:
        return []
    if not used:
        return [
            f"The run does not say how many threads computed it: it is judged{_at(max(judged))}, the most measured."
        ]
    missing = sorted(used - set(judged))
    if missing:
        counts = ", ".join(str(n) for n in missing)
        return [
            f"The run computed with {counts} threads, judged at the nearest measured below "
            f"({', '.join(str(n) for n in judged)}): `ggml-viz limits --for RUN` measures {counts}."
        ]
    return []


def _at(threads: int | None) -> str:
    return f" at {threads} thread{'s' * (threads != 1)}" if threads else ""


def graph_floors(run: Run, floors: pd.DataFrame) -> pd.DataFrame:
    """Per graph (a step): its time, first node to last, against the floor of its nodes' work at
    the limits (their floors per event summed; FLASH_ATTN_EXT's and the experts' at their
    averages over the graphs of that phase and structure)."""
    timed = floors[floors["timed"] > 0]
    per_event = (timed["floor_ns"] / timed["timed"]).groupby([timed["phase"], timed["structure_id"]]).sum(min_count=1)
    graphs = run.graphs[["graph_id", "phase", "structure_id", "n_tokens", "start_ns", "end_ns"]]
    keys = pd.MultiIndex.from_frame(graphs[["phase", "structure_id"]])
    duration = (graphs["end_ns"] - graphs["start_ns"]).astype("float64")
    floor = per_event.reindex(keys).to_numpy()
    return pd.DataFrame(
        {
            "graph_id": graphs["graph_id"],
            "phase": graphs["phase"],
            "n_tokens": graphs["n_tokens"],
            "duration_ns": duration,
            "floor_ns": floor,
            "of_limit": np.where(duration > 0, floor / duration.where(duration > 0), np.nan),
        }
    )
