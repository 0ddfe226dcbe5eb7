from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CommandError
from .base import Command
from .render import format_bytes, format_ms

if TYPE_CHECKING:
    from ..analysis.devices.prediction import PlacementCheck


def count_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of counts: {text!r} (say 0,8,16)") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"counts are 0 or more: {text!r}")
    return values


def positive_list(text: str) -> list[int]:
    values = count_list(text)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"counts are 1 or more: {text!r}")
    return values


def split_list(text: str) -> list[tuple[float, ...]]:
    """'1/1,3/1' -> [(1.0, 1.0), (3.0, 1.0)] (llama-bench's way of listing -ts values)."""
    try:
        splits = [tuple(float(share) for share in part.split("/")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of splits: {text!r} (say 1/1,3/1)") from None
    if not splits or any(min(split) < 0 or sum(split) <= 0 for split in splits):
        raise argparse.ArgumentTypeError(f"a split's shares are 0 or more, not all 0: {text!r}")
    return splits


def add_prediction_options(parser: argparse.ArgumentParser) -> None:
    """What every prediction is asked at: the context the memory is for, the prompt's length."""
    parser.add_argument("--ctx", type=int, help="the context the KV cache is sized for (default: the run's)")
    parser.add_argument("--prompt-tokens", type=int, help="the prompt the prompt rate is for (default: the run's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def open_model(path: str) -> Any:
    """A run's (or joined run's) placement model (analysis/devices/placement.py)."""
    from ..analysis.devices import open_activity
    from ..analysis.devices.placement import placement_model
    from ..analysis.devices.steps import device_parts, step_windows

    if not Path(path).exists():
        raise CommandError(f"no run at {path}")
    head, activity = open_activity(Path(path), sample=True)
    return placement_model(head, activity, device_parts(step_windows(head.graphs), activity))


class WhatifCommand(Command):
    """Predict the prompt and decode rates, and each device's memory, under placements you name.

    From one run (on the CPU alone, or on the CPU and other devices: CUDA GPUs, RPC workers, given
    as the joined run), each part of the model's measured cost on its device, the cost of crossing
    between the devices and the host's time predict a prompt step and a decode step under other
    flags: `--ngl` (llama.cpp's rule: the last N blocks, the output counted as one, on the other
    devices), `-ts` (their split between two devices or more, as llama-bench writes a list of
    them: 1/1,3/1), `--n-cpu-moe` (the experts of the first N layers on the CPU), `-ot` (experts
    moved by their weights' names, as llama.cpp's -ot PATTERN=DEVICE), `-t`/`-tb`
    (thread counts this machine's limits were measured at, kept in the run) and `-ub` (the
    prompt's ubatch). Each list is crossed with the others; a flag left out stays as recorded.
    The first line checks the recorded placement's prediction against what the run measured.

    example:
      ggml-viz whatif split.joined --ngl 0,8,24,31
      ggml-viz whatif moe.joined --ngl 49 --n-cpu-moe 0,8,16 --ctx 8192
      ggml-viz whatif cpu.ggmlviz -t 1,2,4 -ub 64,512 --json
    """

    name = "whatif"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="a run (NAME.ggmlviz), or a joined distributed run that used two devices")
        parser.add_argument("--ngl", type=count_list, help="blocks on the other devices: 0,8,24")
        parser.add_argument(
            "-ts", "--tensor-split", type=split_list, help="splits between the devices beside the CPU: 1/1,3/1"
        )
        parser.add_argument("--n-cpu-moe", type=count_list, help="layers whose experts stay on the CPU: 0,4,8")
        parser.add_argument("-t", "--threads", type=positive_list, help="decode's CPU threads: 1,2,4")
        parser.add_argument("-tb", "--threads-batch", type=positive_list, help="the prompt's CPU threads")
        parser.add_argument("-ub", "--ubatch", type=positive_list, help="tokens in one prompt step: 64,512")
        parser.add_argument(
            "-ot",
            "--override-tensor",
            action="append",
            default=[],
            metavar="PATTERN=DEVICE",
            help="experts whose weights' names match, moved to DEVICE (repeatable), as llama.cpp's "
            "-ot: 'blk\\.[0-7]\\.ffn_.*_exps=CPU'",
        )
        add_prediction_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..analysis.devices.placement import Placement
        from ..analysis.devices.prediction import LEFT_OUT, predict, recorded_check

        model = open_model(args.run)
        recorded = model.recorded
        lists: list[list[Any]] = [
            args.ngl or [recorded.ngl],
            args.n_cpu_moe or [recorded.n_cpu_moe],
            args.threads or [None],
            args.threads_batch or [None],
            args.ubatch or [None],
            args.tensor_split or [recorded.split],
        ]
        moved = tuple(pair for override in args.override_tensor for pair in _experts_moved(model, override))
        placements = [
            recorded,
            *(
                Placement(ngl, n_cpu_moe, threads, threads_batch, ubatch, split, moved)
                for ngl, n_cpu_moe, threads, threads_batch, ubatch, split in itertools.product(*lists)
            ),
        ]
        unique = list(dict.fromkeys(placements))
        table = predict(model, unique, args.ctx, args.prompt_tokens)
        check = recorded_check(model, table.iloc[0].to_dict())
        if args.json:
            print(
                json.dumps(
                    {
                        "recorded": model.flags(recorded),
                        "recorded_placement": dataclasses.asdict(recorded),
                        "n_layer": model.n_layer,
                        "others": model.others,
                        "check": check,
                        "limit_doubts": model.limit_doubts,
                        "predictions": table.to_dict(orient="records"),
                        "left_out": LEFT_OUT,
                    },
                    indent=2,
                    default=str,
                )
            )
            return 0
        print_predictions(model, table.to_dict(orient="records"), f"predicted from the run ({model.n_layer} layers)")
        print_check(check, model)
        return 0


def _experts_moved(model: Any, override: str) -> tuple[tuple[int, str], ...]:
    from ..analysis.devices.placement import experts_matching

    pattern, _, device = override.rpartition("=")
    if not pattern or not device:
        raise CommandError(f"-ot {override}: say PATTERN=DEVICE, as llama.cpp does")
    return experts_matching(model, pattern, device)


def print_predictions(model: Any, rows: Sequence[Mapping[str, Any]], title: str) -> None:
    """One row per placement: flags, where the blocks are, each phase's step and rate, memory."""
    from rich.console import Console
    from rich.table import Table

    from ..analysis.devices.prediction import LEFT_OUT

    devices = model.devices
    phases = [p for p in ("prompt", "decode") if any(f"{p}_tokens_per_s" in row for row in rows)]
    layers = [f"layers on {device}" for device in model.others]
    experts = ["expert layers on CPU"] if model.has_experts and model.others else []
    out = Table(
        "flags",
        *layers,
        *experts,
        *(f"{p} tok/s" for p in phases),
        "decode step, where it goes",
        *(f"{d} memory" for d in devices),
        title=title,
        title_justify="left",
    )
    for row in rows:
        rates = [row.get(f"{p}_tokens_per_s") for p in phases]
        parts = row.get("decode_parts") or {}
        step = sum(parts.values())
        where = ", ".join(
            f"{name} {ns / step:.0%}"
            for name, ns in sorted(parts.items(), key=lambda kv: -kv[1])
            if step and ns / step >= 0.05
        )
        cells = [f"{row['flags'] or '(as recorded)'}{' (recorded)' if row['recorded'] else ''}"]
        cells += [str(row["layers_on"][device]) for device in model.others]
        cells += [str(row["cpu_expert_layers"])] if experts else []
        cells += [f"{r:,.1f}" if r else "—" for r in rates]
        cells += [f"{format_ms(step)}: {where}" if step else "—"]
        cells += [_memory(row["memory"][d]) for d in devices]
        out.add_row(*cells)
    console = Console()
    console.print(out)
    tokens = rows[0].get("prompt_tokens") if rows else None
    if tokens:
        console.print(f"prompt rates for a prompt of {tokens} tokens", highlight=False)
    console.print(f"left out: {LEFT_OUT}", markup=False, highlight=False)


def print_check(check: dict[str, PlacementCheck], model: Any) -> None:
    """The recorded placement predicted against what the run measured, in one line."""
    said = [
        f"{phase} {c['predicted_tokens_per_s']:,.1f} predicted, {c['measured_tokens_per_s']:,.1f} measured "
        f"({c['ratio'] - 1:+.1%})"
        for phase, c in check.items()
    ]
    cold = " (the only prompt step was the run's first graph, cold)" if model.cold_prompt else ""
    if said:
        print(f"the recorded placement: {'; '.join(said)}{cold}")
    if model.limit_doubts:
        print(
            f"the run's limits are slower at more threads ({'; '.join(model.limit_doubts)}): measured while the "
            "cores were busy? other thread counts are predicted from them (`ggml-viz limits --again --for RUN`)"
        )


def _memory(memory: dict[str, int]) -> str:
    if not memory["total"]:
        return "—"
    return (
        f"{format_bytes(memory['total'])} (weights {format_bytes(memory['weights'])}, KV "
        f"{format_bytes(memory['kv_cache'])}, compute {format_bytes(memory['compute'])})"
    )
