"""Where a step's time goes, device by device: each device's busy time, and its idle time by cause.

For every step (a head graph, from its llama call's start to its end) and every device that
computed in the run, each moment of the step is one of:

- `busy`: the device was computing (a node of its own; the union of its intervals: time
  counted once however many of its nodes or kernels overlapped);
- `waiting for D`: idle while another device D computed (the GPU waiting for the CPU's layers,
  the CPU for the GPU's); where several others computed at once, the one busiest in the run;
- `waiting for transfers`: idle, no device computing, data moving (the scheduler's copies
  between splits, weight uploads, the RPC wire);
- `launches and scheduling`: idle with nothing of the above, inside the scheduler's compute
  call: the host launching work, the scheduler moving from one split to the next (an RPC
  head serializing its graph);
- `host`: idle, outside the compute call: the llama call building the graph and reading its
  outputs.

So a device's parts add up to the step exactly. The same rule serves a CUDA run (GPU kernels
beside CPU nodes timed by ticks), a joined distributed run (the workers' nodes on the head's
clock) and a CPU run (one device: busy, and host).
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from .activity import COMPUTE, TRANSFER

BUSY, HOST, TRANSFERS, SCHEDULING = "busy", "host", "waiting for transfers", "launches and scheduling"


class DeviceTime(TypedDict):
    """One device's part of a phase's mean step (phase_breakdown)."""

    device: str
    busy_ns: float
    idle_share: float
    parts: dict[str, float]  # idle time by cause: "waiting for D", "waiting for transfers", ...


class DevicePhase(TypedDict):
    """A phase's mean step, per device (phase_breakdown)."""

    phase: str
    steps: int
    step_ns: float  # the mean step: each device's busy time and parts add up to it
    devices: list[DeviceTime]


# A step's times relative to its start fit in 2**40 ns (18 minutes) beside its rank in the upper bits.
_SPAN_BITS = 40


def step_windows(graphs: pd.DataFrame) -> pd.DataFrame:
    """Each graph's step: from its llama call's start to its end where the call computed this graph
    alone, else the graph's own compute call (a call of several micro-batches shares its start)."""
    per_call = graphs.groupby(["context_id", "decode_start_ns"])["graph_id"].transform("size")
    alone = (per_call == 1) & graphs["decode_start_ns"].gt(0) & graphs["decode_end_ns"].gt(0)
    start = np.where(alone, np.minimum(graphs["decode_start_ns"], graphs["start_ns"]), graphs["start_ns"])
    end = np.where(alone, np.maximum(graphs["decode_end_ns"], graphs["end_ns"]), graphs["end_ns"])
    return pd.DataFrame(
        {
            "graph_id": graphs["graph_id"].to_numpy(np.int64),
            "phase": graphs["phase"].to_numpy(),
            "start_ns": start.astype(np.int64),
            "end_ns": end.astype(np.int64),
            "compute_start_ns": graphs["start_ns"].to_numpy(np.int64),
            "compute_end_ns": graphs["end_ns"].to_numpy(np.int64),
        }
    )


def device_parts(steps: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """Per step, device and part (busy, waiting for D, waiting for transfers, host): its time.
    Only steps with some device activity count (a CUDA run's untraced steps have none)."""
    columns = ["graph_id", "phase", "device", "part", "ns"]
    steps = steps[steps["graph_id"].isin(activity["graph_id"])].reset_index(drop=True)
    if steps.empty:
        return pd.DataFrame(columns=columns)
    rank = pd.Series(np.arange(len(steps)), index=steps["graph_id"].to_numpy())
    act = activity[activity["graph_id"].isin(rank.index)]
    row = rank.loc[act["graph_id"].to_numpy()].to_numpy()
    origin = steps["start_ns"].to_numpy(np.int64)
    length = (steps["end_ns"] - steps["start_ns"]).clip(lower=0).to_numpy(np.int64)
    # intervals as keys (the step's rank above, the time since its start below), clipped to the step
    offset = row.astype(np.int64) << _SPAN_BITS
    start = offset + np.clip(act["start_ns"].to_numpy(np.int64) - origin[row], 0, length[row])
    end = offset + np.clip(act["end_ns"].to_numpy(np.int64) - origin[row], 0, length[row])
    compute = (act["kind"] == COMPUTE).to_numpy()
    device = act["device"].to_numpy()
    busiest = (
        act[compute]
        .assign(ns=end[compute] - start[compute])
        .groupby("device")["ns"]
        .sum()
        .sort_values(ascending=False)
        .index.tolist()
    )
    lanes = {name: _union(start[compute & (device == name)], end[compute & (device == name)]) for name in busiest}
    transfers = _union(start[(act["kind"] == TRANSFER).to_numpy()], end[(act["kind"] == TRANSFER).to_numpy()])
    steps_at = np.arange(len(steps), dtype=np.int64) << _SPAN_BITS
    calls = _union(
        steps_at + np.clip(steps["compute_start_ns"].to_numpy(np.int64) - origin, 0, length),
        steps_at + np.clip(steps["compute_end_ns"].to_numpy(np.int64) - origin, 0, length),
    )
    # the step's elementary segments: between every boundary of every lane's union
    bounds = np.unique(
        np.concatenate(
            [
                np.arange(len(steps), dtype=np.int64) << _SPAN_BITS,
                (np.arange(len(steps), dtype=np.int64) << _SPAN_BITS) + length,
                *(np.concatenate(lane) for lane in lanes.values()),
                np.concatenate(transfers),
                np.concatenate(calls),
            ]
        )
    )
    seg_start, seg_end = bounds[:-1], bounds[1:]
    inside = (seg_start >> _SPAN_BITS) == (seg_end >> _SPAN_BITS)
    inside &= (seg_end & ((1 << _SPAN_BITS) - 1)) <= length[seg_start >> _SPAN_BITS]
    seg_start, seg_end = seg_start[inside], seg_end[inside]
    seg_row, seg_ns = seg_start >> _SPAN_BITS, seg_end - seg_start
    covered = {name: _covers(lane, seg_start) for name, lane in lanes.items()}
    moving = _covers(transfers, seg_start)
    in_call = _covers(calls, seg_start)
    rows: list[pd.DataFrame] = []
    for name in busiest:
        cause = np.where(in_call, SCHEDULING, HOST).astype(object)
        cause[moving] = TRANSFERS
        for other in reversed([o for o in busiest if o != name]):  # the busiest other last: it wins
            cause[covered[other]] = f"waiting for {other}"
        cause[covered[name]] = BUSY
        parts = pd.DataFrame({"row": seg_row, "part": cause, "ns": seg_ns}).groupby(["row", "part"])["ns"].sum()
        parts = parts.reset_index()
        rows.append(parts.assign(device=name))
    table = pd.concat(rows, ignore_index=True)
    table["graph_id"] = steps["graph_id"].to_numpy()[table["row"].to_numpy()]
    table["phase"] = steps["phase"].to_numpy()[table["row"].to_numpy()]
    return table[columns]


def phase_breakdown(parts: pd.DataFrame, steps: pd.DataFrame) -> list[DevicePhase]:
    """Per phase and device, the mean step's parts (they add up to the mean step) and the share idle."""
    if parts.empty:
        return []
    length = (steps.set_index("graph_id")["end_ns"] - steps.set_index("graph_id")["start_ns"]).clip(lower=0)
    result: list[DevicePhase] = []
    for phase, mine in parts.groupby("phase", sort=False):
        graphs = mine["graph_id"].unique()
        step_ns = float(length.loc[graphs].mean())
        devices: list[DeviceTime] = []
        for device, theirs in mine.groupby("device", sort=False):
            per_part = (theirs.groupby("part")["ns"].sum() / len(graphs)).sort_values(ascending=False)
            busy = float(per_part.get(BUSY, 0.0))
            devices.append(
                {
                    "device": device,
                    "busy_ns": busy,
                    "idle_share": 1 - busy / step_ns if step_ns else 0.0,
                    "parts": {part: float(ns) for part, ns in per_part.items() if part != BUSY},
                }
            )
        result.append({"phase": phase, "steps": len(graphs), "step_ns": step_ns, "devices": devices})
    return result


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals (keys), as disjoint sorted intervals."""
    keep = end > start
    start, end = start[keep], end[keep]
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.concatenate(([True], start[1:] > reach[:-1]))
    first = np.flatnonzero(new)
    return start[first], np.maximum.reduceat(end, first)


def _covers(lane: tuple[np.ndarray, np.ndarray], points: np.ndarray) -> np.ndarray:
    """Whether each point lies inside one of the lane's disjoint sorted intervals."""
    start, end = lane
    if not len(start):
        return np.zeros(len(points), dtype=bool)
    at = np.searchsorted(start, points, side="right") - 1
    return (at >= 0) & (end[np.maximum(at, 0)] > points)
