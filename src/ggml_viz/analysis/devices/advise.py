"""The flags that make this model fastest on this machine, predicted from one run.

Searches the placements llama.cpp's flags can make (prediction.py predicts each): every `-ngl`
where the run had a device beside the CPU; for an MoE model, `--n-cpu-moe` with every block on
that device (the usual way to run a model whose experts do not fit there); and for each, the
decode threads (`-t`) and the prompt's threads and ubatch (`-tb`, `-ub`) that are fastest among
those the run's limits were measured at. A placement counts where every device's memory fits
what was given; ranked by the goal's rate (decode unless told).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict

import numpy as np

from .placement import Placement, PlacementModel, devices_of
from .prediction import DeviceMemory, PlacementCheck, PlacementPrediction, predict_one, recorded_check

UBATCHES = (32, 64, 128, 256, 512, 1024, 2048)
SPLIT_STEPS = 8  # two devices beside the CPU: -ts 1/8 ... 7/8 of the offloaded blocks on the first


class Advice(TypedDict):
    """The fastest placements that fit a memory budget (advise)."""

    goal: str  # "decode" or "prompt": the rate ranked by
    recorded: PlacementPrediction  # the recorded placement, predicted
    check: dict[str, PlacementCheck]  # per phase: its prediction against its own steps
    best: list[PlacementPrediction]  # the fastest first, each with its best threads and ubatch
    placements: int  # placements predicted
    not_fitting: int  # of those, the ones whose memory does not fit
    budget: dict[str, int]  # bytes per device


def rate_of(row: PlacementPrediction, goal: str) -> float | None:
    """A placement's predicted tokens per second for `goal` (decode or prompt)."""
    return row.get("decode_tokens_per_s") if goal == "decode" else row.get("prompt_tokens_per_s")


def shown(advice: Advice, top: int) -> list[PlacementPrediction]:
    """The recorded placement as it ran, then the `top` fastest others (of an `advise` asked for
    one more): the recorded placement is among them again only where other threads or another
    ubatch serve it better (otherwise it would show twice, spelled with every flag it was ranked by)."""

    def settings(row: PlacementPrediction) -> tuple[object, ...]:
        return (row["recorded"], row["threads"], row["threads_batch"], row["ubatch"])

    as_recorded = settings(advice["recorded"])
    return [advice["recorded"], *[row for row in advice["best"] if settings(row) != as_recorded][:top]]


def candidates(model: PlacementModel) -> list[Placement]:
    """Every placement of blocks and experts worth predicting, each once."""
    if not model.others:
        return [Placement(0, 0)]
    splits: list[tuple[float, ...] | None] = [None]
    if len(model.others) == 2:  # (more devices: the recorded split and an even one)
        splits += [(share, 1 - share) for share in np.arange(1, SPLIT_STEPS) / SPLIT_STEPS]
    elif len(model.others) > 2:
        splits.append(model.recorded.split)
    found = [Placement(ngl, 0, split=split) for ngl in range(model.n_layer + 2) for split in splits]
    if model.has_experts:
        found += [Placement(model.n_layer + 1, n, split=split) for n in range(1, model.n_layer + 1) for split in splits]
    seen, unique = set(), []
    for placement in found:
        key = tuple(sorted(devices_of(model, placement).items()))
        if key not in seen:
            seen.add(key)
            unique.append(placement)
    return unique


def advise(
    model: PlacementModel,
    budget: dict[str, int],
    ctx: int | None = None,
    prompt_tokens: int | None = None,
    goal: str = "decode",
    top: int = 5,
) -> Advice:
    """The best placements that fit `budget` (bytes per device; a device not named: no limit),
    each with its best threads and ubatch, ranked by `goal`; the recorded placement as predicted
    and as measured, for comparison."""
    recorded = predict_one(model, model.recorded, ctx, prompt_tokens)
    # None: as recorded (a flag is printed only where it changes); a ubatch of the prompt's size or
    # more computes it in one step, as the recorded one does where it is that large
    threads = [None, *(t for t in model.thread_counts if t != model.recorded.threads)]
    tokens = prompt_tokens or max(model.prompt_steps, default=0)
    ubatches = [None, *(u for u in UBATCHES if u < min(tokens, model.n_ubatch) or model.n_ubatch < u <= tokens)]
    rows: list[PlacementPrediction] = []
    refused = 0
    for base in candidates(model):
        best = _best_settings(model, base, threads, ubatches, ctx, prompt_tokens, budget)
        if best is None:
            refused += 1
            continue
        rows.append(best)
    rows.sort(key=lambda row: rate_of(row, goal) or 0.0, reverse=True)
    return {
        "goal": goal,
        "recorded": recorded,
        "check": recorded_check(model, recorded),
        "best": rows[:top],
        "placements": len(rows) + refused,
        "not_fitting": refused,
        "budget": budget,
    }


def _best_settings(
    model: PlacementModel,
    base: Placement,
    threads: list[int | None],
    ubatches: list[int | None],
    ctx: int | None,
    prompt_tokens: int | None,
    budget: dict[str, int],
) -> PlacementPrediction | None:
    """A placement with its fastest decode threads, and its fastest prompt threads and ubatch
    among those whose memory fits (None: none fits)."""
    decode = [predict_one(model, replace(base, threads=t), ctx, prompt_tokens) for t in threads]
    fitting = [row for row in decode if _fits(row["memory"], budget)]
    if not fitting:
        return None
    chosen = max(fitting, key=lambda row: row.get("decode_tokens_per_s") or 0.0)
    if not model.prompt_steps:
        return chosen
    prompts = [
        predict_one(model, replace(base, threads_batch=t, ubatch=u), ctx, prompt_tokens)
        for t in threads
        for u in ubatches
    ]
    prompts = [row for row in prompts if _fits(row["memory"], budget)]
    if not prompts:
        return None
    prompt = max(prompts, key=lambda row: row.get("prompt_tokens_per_s") or 0.0)
    placement = replace(
        base,
        threads=_changed(chosen["threads"], model.recorded.threads),
        threads_batch=_changed(prompt["threads_batch"], model.recorded.threads_batch),
        ubatch=_changed(prompt["ubatch"], model.recorded.ubatch),
    )
    result = chosen.copy()  # the prompt's settings in their places (chosen has every key: a prompt was measured)
    result["threads_batch"], result["ubatch"] = prompt["threads_batch"], prompt["ubatch"]
    result["prompt_tokens"], result["prompt_ns"] = prompt["prompt_tokens"], prompt["prompt_ns"]
    result["prompt_tokens_per_s"], result["memory"] = prompt["prompt_tokens_per_s"], prompt["memory"]
    result["flags"] = model.flags(placement)
    result["recorded"] = bool(chosen["recorded"] and prompt["recorded"])
    return result


def _changed(value: int | None, recorded: int | None) -> int | None:
    return None if value == recorded else value


def _fits(memory: dict[str, DeviceMemory], budget: dict[str, int]) -> bool:
    return all(memory[device]["total"] <= limit for device, limit in budget.items() if device in memory)


def advice_finding(model: PlacementModel, advice: Advice, least_gain: float = 1.15) -> str | None:
    """In words, where the best placement found is at least `least_gain` times the recorded one's
    predicted rate for the goal: its flags, the rates, the memory it moves."""
    if not advice["best"]:
        return None
    goal = advice["goal"]
    best, recorded = advice["best"][0], advice["recorded"]
    best_rate, recorded_rate = rate_of(best, goal), rate_of(recorded, goal)
    if not best_rate or not recorded_rate or best_rate < least_gain * recorded_rate:
        return None
    more = [
        f"{_gib(best['memory'][d]['total'] - recorded['memory'][d]['total'])} more on {d}"
        for d in best["memory"]
        if best["memory"][d]["total"] > recorded["memory"][d]["total"]
    ]
    needs = f"; it needs {', '.join(more)}" if more else ""
    return (
        f"Predicted from this run: `{best['flags']}` would take {goal} from {recorded_rate:,.1f} to "
        f"{best_rate:,.1f} tokens/s{needs} (`ggml-viz advise` lists the others)."
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
