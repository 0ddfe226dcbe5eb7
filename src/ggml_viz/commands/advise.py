from __future__ import annotations

import argparse
import json
import re

from .base import Command
from .whatif import add_prediction_options, open_model, print_check, print_predictions

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6, "MIB": 2**20,
          "G": 2**30, "GB": 10**9, "GIB": 2**30, "T": 2**40, "TB": 10**12, "TIB": 2**40}  # fmt: skip


def memory_budget(text: str) -> dict[str, int]:
    """'CUDA0=8GiB,CPU=24GiB' -> bytes per device."""
    budget = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        device, _, size = part.partition("=")
        found = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", size)
        if not device or not found or found.group(2).upper() not in _UNITS:
            raise argparse.ArgumentTypeError(f"not DEVICE=SIZE: {part!r} (say CUDA0=8GiB,CPU=24GiB)")
        budget[device.strip()] = int(float(found.group(1)) * _UNITS[found.group(2).upper()])
    return budget


class AdviseCommand(Command):
    """Say which flags make this model fastest on this machine, predicted from one run.

    Searches every `-ngl` (where the run had a device beside the CPU), `--n-cpu-moe` for an MoE
    model, and the CPU threads (`-t`, `-tb`: those this machine's limits were measured at) and
    prompt ubatch (`-ub`) for each, keeps the placements whose memory fits, and prints the
    fastest few as llama.cpp's flags, with predicted prompt and decode rates, where a decode
    step's time goes, and each device's memory. A device not named in --memory is not limited,
    except the CPU: this machine's available memory. `whatif` predicts placements you name.

    example:
      ggml-viz advise split.joined
      ggml-viz advise gpu.ggmlviz --memory CUDA0=8GiB,CPU=24GiB --ctx 8192
      ggml-viz advise run.ggmlviz --goal prompt --json
    """

    name = "advise"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="a run (NAME.ggmlviz), or a joined distributed run that used two devices")
        parser.add_argument(
            "--memory", type=memory_budget, default={}, help="bytes each device may hold: CUDA0=8GiB,CPU=24GiB"
        )
        parser.add_argument("--goal", choices=("decode", "prompt"), default="decode", help="the rate to rank by")
        parser.add_argument("--top", type=int, default=5, help="placements to print")
        add_prediction_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..analysis.devices.advise import advice_finding, advise, shown
        from ..analysis.devices.prediction import LEFT_OUT
        from ..runformat.machine import available_memory

        model = open_model(args.run)
        budget = dict(args.memory)
        host = available_memory()
        if "CPU" not in budget and host:
            budget["CPU"] = host
        advice = advise(model, budget, args.ctx, args.prompt_tokens, args.goal, args.top + 1)
        rows = shown(advice, args.top)
        advice["best"] = advice["best"][: args.top]
        finding = advice_finding(model, advice, least_gain=1.0)
        if args.json:
            print(
                json.dumps(
                    {**advice, "recorded_flags": model.flags(model.recorded), "finding": finding, "left_out": LEFT_OUT},
                    indent=2,
                    default=str,
                )
            )
            return 0
        fits = f"{advice['placements'] - advice['not_fitting']} of {advice['placements']} placements fit"
        limits = ", ".join(f"{d} {v / 2**30:,.2f} GiB" for d, v in budget.items())
        print_predictions(model, rows, f"the fastest {args.goal} ({fits} {limits or 'any memory'})")
        print_check(advice["check"], model)
        if finding:
            print(finding)
        return 0
