"""Devices side by side: what each computed in each step, where each waited and why
(steps.py), and what other flags would do: what one run measured (placement.py), a placement's
predicted steps and memory (prediction.py), the best placements found (advise.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import pandas as pd

from ..._errors import GgmlVizError
from ...runformat.reader import Run, open_run
from ..buffer_device import device_of_buffer
from ..join import JoinedSummary, is_joined, open_joined
from ..roofline import run_limits
from .activity import COMPUTE, joined_activity, run_activity
from .advise import Advice, advice_finding, advise
from .placement import PlacementModel, placement_model, predicting_graphs
from .prediction import PlacementCheck
from .steps import TRANSFERS, DevicePhase, device_parts, phase_breakdown, step_windows


class DeviceSummary(TypedDict):
    """Where a step's time goes per device (device_summary)."""

    phases: list[DevicePhase]
    finding: str | None


class PlacementAdvice(TypedDict):
    """Other flags predicted from the run (placement_advice)."""

    recorded_flags: str
    check: dict[str, PlacementCheck]  # per phase
    best_flags: str | None
    best_decode_tokens_per_s: float | None
    recorded_decode_tokens_per_s: float | None
    finding: str | None


class JoinedDevicesSummary(JoinedSummary):
    """A joined run's summary with its devices' steps and other flags (`ggml-viz summary` of a joined run)."""

    devices: DeviceSummary | None
    placement: PlacementAdvice | None


def open_activity(path: Path, sample: bool = False) -> tuple[Run, pd.DataFrame]:
    """A run's (or a joined distributed run's) head run and every device's activity in its steps
    (a single run's in the steps a prediction reads only, where `sample`: predicting_graphs)."""
    if not is_joined(path):
        run = open_run(path)
        return run, run_activity(run, predicting_graphs(run.graphs) if sample else None)
    description, runs, tables = open_joined(path)
    roles = [member.get("role") for member in description["members"]]
    head = runs[roles.index("head")]
    remote = pd.read_parquet(tables["remote_nodes"]) if "remote_nodes" in tables else pd.DataFrame()
    transfers = pd.read_parquet(tables["transfers"]) if "transfers" in tables else pd.DataFrame()
    return head, joined_activity(head, remote, transfers)


def run_devices(run: Run) -> pd.DataFrame | None:
    """A single run's activity where it computed on more than one device (None: one device, whose
    story the rest of the summary tells; checked on the buffers before any node is read)."""
    buffers = run.buffers
    compute = buffers[buffers["kind"] == "compute"]["name"].map(device_of_buffer)
    if compute.nunique() < 2 and not run.has_gpu_times:
        return None
    return run_activity(run)


def device_summary(head: Run, activity: pd.DataFrame) -> DeviceSummary | None:
    """Where a step's time goes per device (steps.phase_breakdown) and, in words, the longest wait
    of a device for another; None for a run that computed on one device."""
    devices = set(activity.loc[activity["kind"] == COMPUTE, "device"])
    if len(devices) < 2:
        return None
    steps = step_windows(head.graphs)
    phases = phase_breakdown(device_parts(steps, activity), steps)
    return {"phases": phases, "finding": _longest_wait(phases, activity)}


def _longest_wait(phases: list[DevicePhase], activity: pd.DataFrame) -> str | None:
    """'RPC0[...] is idle 55 % of a decode step, 38 % waiting for CPU (its 16 layers there)': the
    device that waits for another the largest share of a step, in the phase most steps are of."""
    if not phases:
        return None
    phase = max(phases, key=lambda p: p["steps"])
    waits = [
        (ns, device["device"], part, device["idle_share"])
        for device in phase["devices"]
        for part, ns in device["parts"].items()
        if part.startswith("waiting for ") and part != TRANSFERS
    ]
    if not waits or not phase["step_ns"]:
        return None
    ns, device, part, idle = max(waits)
    other = part.removeprefix("waiting for ")
    compute = activity[(activity["kind"] == COMPUTE) & activity["layer"].notna()]
    per_layer = compute.assign(ns=compute["end_ns"] - compute["start_ns"]).groupby(["layer", "device"])["ns"].sum()
    mostly = per_layer.reset_index().sort_values("ns").drop_duplicates("layer", keep="last")
    layers = int((mostly["device"] == other).sum())
    what = f" (the {layers} layers computed there)" if layers else ""
    return (
        f"{device} is idle {idle:.0%} of a {phase['phase']} step; {ns / phase['step_ns']:.0%} of the step it "
        f"waits for {other}{what}"
    )


NOTHING_TO_PREDICT = ("nothing to predict: the run computed on one device and its limits were not measured at "
                      "several thread counts (`ggml-viz limits --for RUN` measures them)")  # fmt: skip


def run_advice(head: Run, activity: pd.DataFrame | None, top: int) -> tuple[PlacementModel, Advice]:
    """A run's placement model and the `top` placements advise finds for it (no memory bound);
    `activity` None: the run computed on one device, whose steps are read only where other
    thread counts can be predicted. GgmlVizError says why nothing can be predicted."""
    if activity is None:
        limits = run_limits(head)
        if limits is None or len(limits.threads_measured()) < 2:
            raise GgmlVizError(NOTHING_TO_PREDICT)
        activity = run_activity(head, predicting_graphs(head.graphs))
    model = placement_model(head, activity, device_parts(step_windows(head.graphs), activity))
    return model, advise(model, {}, top=top)


def placement_advice(head: Run, activity: pd.DataFrame | None) -> PlacementAdvice | None:
    """What the summary says of other flags: the best placement found for decode against the
    recorded one, and the check of the recorded one's prediction; None where nothing can be
    predicted (one device and limits at one thread count, or a run the model cannot read)."""
    try:
        model, advice = run_advice(head, activity, top=1)
    except GgmlVizError:
        return None
    best = advice["best"][0] if advice["best"] else None
    return {
        "recorded_flags": model.flags(model.recorded),
        "check": advice["check"],
        "best_flags": best["flags"] if best else None,
        "best_decode_tokens_per_s": best.get("decode_tokens_per_s") if best else None,
        "recorded_decode_tokens_per_s": advice["recorded"].get("decode_tokens_per_s"),
        "finding": advice_finding(model, advice),
    }
