"""A placement's predicted steps and memory, from what one run measured (placement.py):

    step(tokens) = Σ part(tokens, its device) + crossings × crossing(tokens) + fixed(tokens)

summed over the model's parts (each block's experts and the rest of it) on the device the
placement gives them. Decode is a step of one token, at the decode threads; a prompt of P tokens
is P // ubatch steps of `ubatch` tokens and one of the rest, at the batch threads.

A part never measured on a device costs there its measured cost elsewhere times the ratio of
the two devices' mean cost of that part of a layer (experts, or the rest) at the same tokens;
where that part was measured on one device only, the other part's ratio (layers of a model are
alike: a hybrid's less so).

Memory per device: the weights of the parts on it (from the run's own graph, each tensor once),
the KV cache of the layers on it at the context asked for (the run's bytes per layer and cell),
and the compute buffer: the larger of the logits of a ubatch, where the output is, and the
recorded buffer of a device (less the logits) scaled by the largest activation of the parts now
on the device against the largest of the parts that device held; scaled with the ubatch.
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np
import pandas as pd

from ..._errors import GgmlVizError
from .placement import (
    DENSE,
    EXPERTS,
    INPUT,
    RECORDED,
    Line,
    Placement,
    PlacementModel,
    boundaries_of,
    devices_of,
)


class PlacementCheck(TypedDict):
    """The recorded placement's predicted rate against the rate its own steps ran at (recorded_check)."""

    measured_tokens_per_s: float
    predicted_tokens_per_s: float
    ratio: float
    steps: float


class DeviceMemory(TypedDict):
    """One device's memory under a placement, in bytes (memory_of)."""

    weights: int
    kv_cache: int
    compute: int
    total: int


class _Placed(TypedDict):
    flags: str  # as llama.cpp spells them (a flag left out: as recorded)
    ngl: int
    n_cpu_moe: int
    split: list[float] | None  # -ts, the offloaded blocks' shares
    layers_on: dict[str, int]  # blocks per device
    threads: int | None
    threads_batch: int | None
    ubatch: int
    recorded: bool  # the recorded placement
    cpu_layers: int
    other_layers: int
    output_on: str
    cpu_expert_layers: int
    crossings: int


class _Rates(TypedDict, total=False):
    decode_step_ns: float  # where the run measured decode steps
    decode_tokens_per_s: float | None
    decode_parts: dict[str, float]  # ns of a decode step: each device's compute, "crossings", "fixed"
    prompt_tokens: int  # where it measured prompt steps
    prompt_ns: float
    prompt_tokens_per_s: float | None


class PlacementPrediction(_Placed, _Rates):
    """One placement predicted (predict_one): where its blocks are, each measured phase's step and
    rate, and each device's memory."""

    memory: dict[str, DeviceMemory]


LEFT_OUT = (
    "a part never measured on a device is estimated from the devices' speed ratio on the parts measured on "
    "each; a step's cost is a line in its tokens (attention's growth with the context is not followed); the "
    "host's time is fixed, whatever the placement (an RPC head serializes a larger graph when more of it is "
    "remote); every crossing between devices costs the recorded crossings' mean; contention between devices "
    "sharing cores or memory stays as recorded; other thread counts are costed by the limits and a node's step "
    "measured at them (other programs on the cores are not); a compute buffer is scaled from a recorded one by "
    "the parts' largest activations; what recording cost the run is in its rates; -sm row, -ot patterns other "
    "than the experts', --no-op-offload and the way weights are held (mmap, mlock) are not modelled"
)
KV_PAD = 256  # llama.cpp rounds a context up to a multiple of this


def predict(
    model: PlacementModel, placements: list[Placement], ctx: int | None = None, prompt_tokens: int | None = None
) -> pd.DataFrame:
    """One row per placement: its flags, where its blocks are, each phase's predicted step and
    rate, each device's busy time in a decode step, and the memory each device needs."""
    return pd.DataFrame([predict_one(model, placement, ctx, prompt_tokens) for placement in placements])


def predict_one(
    model: PlacementModel, placement: Placement, ctx: int | None = None, prompt_tokens: int | None = None
) -> PlacementPrediction:
    where = devices_of(model, placement)
    crossings = boundaries_of(model, where)
    layers_on = {d: sum(1 for b in range(model.n_layer) if where[(b, DENSE)] == d) for d in model.devices}
    row: _Placed = {
        "flags": model.flags(placement),
        "ngl": placement.ngl,
        "n_cpu_moe": placement.n_cpu_moe,
        "split": list(placement.split) if placement.split else None,
        "layers_on": layers_on,
        "threads": placement.threads or model.threads.get("decode"),
        "threads_batch": placement.threads_batch or model.threads.get("prompt"),
        "ubatch": placement.ubatch or model.n_ubatch,
        "recorded": _is_recorded(model, placement),
        "cpu_layers": layers_on["CPU"],
        "other_layers": model.n_layer - layers_on["CPU"],
        "output_on": where[(model.n_layer, DENSE)],
        "cpu_expert_layers": sum(1 for b in range(model.n_layer) if where[(b, EXPERTS)] == "CPU")
        if model.has_experts
        else 0,
        "crossings": crossings,
    }
    rates: _Rates = {}
    if "decode" in model.measured:
        lines = _lines(model, placement.threads, "decode")
        parts = _step_parts(model, lines, where, crossings, 1.0)
        step = sum(parts.values())
        rates["decode_step_ns"] = step
        rates["decode_tokens_per_s"] = 1e9 / step if step > 0 else None
        rates["decode_parts"] = parts
    if model.prompt_steps:
        lines = _lines(model, placement.threads_batch, "prompt")
        tokens = prompt_tokens or max(model.prompt_steps)
        ubatch = placement.ubatch or model.n_ubatch
        chunks = [ubatch] * (tokens // ubatch) + ([tokens % ubatch] if tokens % ubatch else [])
        total = _steps_ns(model, lines, where, crossings, chunks)
        rates["prompt_tokens"] = tokens
        rates["prompt_ns"] = total
        rates["prompt_tokens_per_s"] = tokens / (total / 1e9) if total > 0 else None
    return {**row, **rates, "memory": memory_of(model, where, ctx or model.n_ctx, placement.ubatch or model.n_ubatch)}


def recorded_check(model: PlacementModel, prediction: PlacementPrediction) -> dict[str, PlacementCheck]:
    """Per phase, the recorded placement's predicted rate against the rate the run measured in
    the same warm steps (`ratio` 1: every nanosecond of its steps is in a part, a crossing or
    the fixed time, once)."""
    result: dict[str, PlacementCheck] = {}
    for phase, seen in model.measured.items():
        if phase == "decode" and prediction.get("decode_step_ns"):
            predicted_ns = prediction["decode_step_ns"] * seen["steps"]
        elif phase == "prompt" and model.prompt_steps:
            where = devices_of(model, model.recorded)
            predicted_ns = _steps_ns(
                model, _lines(model, None, "prompt"), where, boundaries_of(model, where), model.prompt_steps
            )
        else:
            continue
        measured_rate = seen["tokens"] / (seen["ns"] / 1e9) if seen["ns"] else None
        predicted_rate = seen["tokens"] / (predicted_ns / 1e9) if predicted_ns else None
        if measured_rate and predicted_rate:
            result[phase] = {
                "measured_tokens_per_s": measured_rate,
                "predicted_tokens_per_s": predicted_rate,
                "ratio": predicted_rate / measured_rate,
                "steps": seen["steps"],
            }
    return result


def memory_of(
    model: PlacementModel, where: dict[tuple[int, str], str], ctx: int, ubatch: int
) -> dict[str, DeviceMemory]:
    """Per device: weights, KV cache and compute buffer, in bytes, and their total."""
    cells = math.ceil(ctx / KV_PAD) * KV_PAD if ctx else 0
    pairs = zip(model.weights["block"], model.weights["group"], strict=True)
    weights = model.weights.assign(device=[where.get((int(b), str(g)), "CPU") for b, g in pairs])
    result: dict[str, DeviceMemory] = {}
    for device in model.devices:
        held = int(weights[weights["device"] == device].drop_duplicates("name")["bytes"].sum())
        layers = sum(1 for b in range(model.n_layer) if where[(b, DENSE)] == device)
        used = device == "CPU" or any(d == device for d in where.values())
        kv = int(model.kv_bytes_per_layer_cell * cells * layers)
        compute = _compute_buffer(model, device, where, ubatch) if used else 0
        result[device] = {"weights": held, "kv_cache": kv, "compute": compute, "total": held + kv + compute}
    return result


def _compute_buffer(model: PlacementModel, device: str, where: dict[tuple[int, str], str], ubatch: int) -> int:
    """A device's compute buffer: the larger of the logits of a ubatch, where the output is
    (llama.cpp sizes it for a ubatch whose every token is an output), and its parts' share: a
    recorded buffer (less the logits, where the output was there) times the largest activation
    of the parts now on the device over the largest of the parts it held then; scaled with the
    ubatch."""
    logits = model.logits_bytes_per_token * model.n_ubatch

    def layers_part(held: str) -> float:
        recorded = model.compute_bytes.get(held, 0)
        return max(recorded - logits, 0) if held == model.output_device else recorded

    def largest(placed: dict[tuple[int, str], str], on: str) -> int:
        held = (n for key, n in model.activation_bytes.items() if placed.get(key) == on and key[0] != model.n_layer)
        return max(held, default=0)

    now = largest(where, device)
    references = [device, *(d for d in model.compute_bytes if d != device)]
    share = 0.0
    for reference in references:
        then = largest(model.recorded_devices, reference)
        if then and layers_part(reference):
            share = layers_part(reference) * now / then
            break
    output = model.logits_bytes_per_token * ubatch if where[(model.n_layer, DENSE)] == device else 0
    return int(max(share * ubatch / model.n_ubatch, output))


def _is_recorded(model: PlacementModel, placement: Placement) -> bool:
    recorded = model.recorded
    return (
        devices_of(model, placement) == devices_of(model, recorded)
        and placement.threads in (None, recorded.threads)
        and placement.threads_batch in (None, recorded.threads_batch)
        and placement.ubatch in (None, recorded.ubatch)
    )


def _lines(model: PlacementModel, threads: int | None, phase: str) -> dict[tuple[int, str, str], Line]:
    """The parts' lines at a thread count (None, or the count the phase ran on: as recorded)."""
    if threads is None or threads == model.threads.get(phase):
        return model.parts[RECORDED]
    if threads not in model.parts:
        measured = ", ".join(map(str, model.thread_counts)) or "none"
        raise GgmlVizError(
            f"{threads} CPU threads: this run's limits were measured at {measured} "
            f"(`ggml-viz limits --threads 1,{threads}` before recording measures them)"
        )
    return model.parts[threads]


def _steps_ns(
    model: PlacementModel,
    lines: dict[tuple[int, str, str], Line],
    where: dict[tuple[int, str], str],
    crossings: int,
    tokens: list[int],
) -> float:
    """Steps of these token counts (a prompt's ubatches), predicted, summed."""
    return sum(sum(_step_parts(model, lines, where, crossings, float(n)).values()) for n in tokens)


def _step_parts(
    model: PlacementModel,
    lines: dict[tuple[int, str, str], Line],
    where: dict[tuple[int, str], str],
    crossings: int,
    tokens: float,
) -> dict[str, float]:
    """A step's time by where it goes: each device's compute, the crossings, the fixed time."""
    ratio = _speed_ratio(model, lines, tokens)
    parts = {device: 0.0 for device in model.devices}
    measured: dict[tuple[int, str], dict[str, float]] = {}
    for (block, group, device), line in lines.items():
        measured.setdefault((block, group), {})[device] = line.at(tokens)
    for (block, group), on in measured.items():
        device = where.get((block, group), "CPU")
        if device in on:
            parts[device] += on[device]
            continue
        source = max(on, key=lambda d: on[d])
        if (group, source, device) not in ratio:
            missing = device if device != "CPU" else source
            raise GgmlVizError(
                f"no layer's {group} part ran on {missing} in this run: its cost there is unknown "
                "(record a placement with layers on both devices)"
            )
        parts[device] += on[source] * ratio[(group, source, device)]
    parts["crossings"] = crossings * model.crossing.at(tokens)
    parts["fixed"] = model.fixed.at(tokens)
    return parts


def _speed_ratio(model: PlacementModel, lines: dict[tuple[int, str, str], Line], tokens: float) -> dict:
    """(group, from, to) -> the ratio of the group's mean layer cost on `to` to that on `from`;
    where a group was measured on one device only, the other group's ratio."""
    ratios: dict[str, dict[tuple[str, str], float]] = {}
    for group in (DENSE, EXPERTS):
        means = {}
        for device in model.devices:
            costs = [
                line.at(tokens)
                for (b, g, d), line in lines.items()
                if d == device and g == group and INPUT < b < model.n_layer
            ]
            if costs and np.mean(costs) > 0:
                means[device] = float(np.mean(costs))
        ratios[group] = {(a, b): means[b] / means[a] for a in means for b in means}
    result = {}
    for group, other in ((DENSE, EXPERTS), (EXPERTS, DENSE)):
        for pair, value in {**ratios[other], **ratios[group]}.items():
            result[(group, *pair)] = value
    return result
