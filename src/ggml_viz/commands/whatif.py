from __future__ import annotations

import argparse
import json

from .._errors import CommandError
from .base import Command
from .render import format_bytes, format_ms


def ngl_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of layer counts: {text!r} (say 0,8,16)") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"layer counts are 0 or more: {text!r}")
    return values


class WhatifCommand(Command):
    """Predict the step time and memory of other splits of the model between the CPU and another device.

    From one run that computed some layers on the CPU and some on another device (a CUDA GPU,
    an RPC worker: give the joined run), each layer's measured cost on each device, the cost of
    crossing between them and the host's time predict a prompt step and a decode step under
    other `-ngl` values (llama.cpp's rule: the last N blocks, the output counted as one, on the
    other device), with the bytes each device needs (weights, KV cache, compute buffer).

    example:
      ggml-viz whatif split.joined --ngl 0,8,24,31
      ggml-viz whatif gpu-half.ggmlviz --ngl 20,24,28 --json
    """

    name = "whatif"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="a run (NAME.ggmlviz) or a joined distributed run that used two devices")
        parser.add_argument("--ngl", type=ngl_list, required=True, help="layer counts on the other device: 0,8,24")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    def run(self, args: argparse.Namespace) -> int:
        from pathlib import Path

        from rich.console import Console
        from rich.table import Table

        from ..analysis.devices import open_activity
        from ..analysis.devices.placement import LEFT_OUT, placement_model, predict
        from ..analysis.devices.steps import device_parts, step_windows

        if not Path(args.run).exists():
            raise CommandError(f"no run at {args.run}")
        head, activity = open_activity(Path(args.run))
        model = placement_model(head, activity, device_parts(step_windows(head.graphs), activity))
        table = predict(model, sorted(set([model.recorded_ngl, *args.ngl])))
        if args.json:
            print(json.dumps({"recorded_ngl": model.recorded_ngl, "n_layer": model.n_layer, "other": model.other,
                              "predictions": table.to_dict(orient="records"), "left_out": LEFT_OUT},
                             indent=2, default=str))  # fmt: skip
            return 0
        console = Console()
        phases = [p for p in ("prompt", "decode") if f"{p}_step_ns" in table]
        out = Table("ngl", "CPU layers", f"{model.other} layers", "output on",
                    *(f"{p} step" for p in phases), *(f"{p} tok/s" for p in phases), "CPU bytes",
                    f"{model.other} bytes", title=f"predicted from the run's -ngl {model.recorded_ngl} "
                    f"({model.n_layer} layers)", title_justify="left")  # fmt: skip
        for row in table.to_dict(orient="records"):
            rates = [row[f"{p}_tokens_per_s"] for p in phases]
            out.add_row(f"{row['ngl']}{' (recorded)' if row['recorded'] else ''}", str(row["cpu_layers"]),
                        str(row["other_layers"]), row["output_on"], *(format_ms(row[f"{p}_step_ns"]) for p in phases),
                        *(f"{r:,.1f}" if r else "—" for r in rates), format_bytes(row["CPU_bytes"]),
                        format_bytes(row[f"{model.other}_bytes"]))  # fmt: skip
        console.print(out)
        tokens = model.tokens.get("prompt")
        if tokens:
            console.print(f"the prompt step is one of {tokens:.0f} tokens, as recorded", highlight=False)
        console.print(f"left out: {LEFT_OUT}", markup=False, highlight=False)
        return 0
