from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .base import Command
from .common import positive_int
from .render import render_summary

if TYPE_CHECKING:
    from ..analysis.devices import JoinedDevicesSummary


class SummaryCommand(Command):
    """Summarize a run: model, prompt, prompt vs decode speed, time by op, layer and tensor, memory.

    example:
      ggml-viz summary france.ggmlviz
      ggml-viz summary france.ggmlviz --json | jq .time_by_op
    """

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz), or a joined distributed run (ggml-viz join)")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
        parser.add_argument("--top", type=positive_int, default=10, help="rows in each top list (default: 10)")

    def run(self, args: argparse.Namespace) -> int:
        from pathlib import Path

        from ..analysis.devices import device_summary, open_activity, placement_advice
        from ..analysis.join import is_joined, open_joined
        from ..analysis.summary import summarize
        from ..capture.preload.opening import collect_and_open
        from .progress import spinner
        from .render import render_joined

        if is_joined(Path(args.run)):  # a distributed run: its summary across hosts
            with spinner(f"summarizing {args.run}"):
                across = open_joined(Path(args.run))[0]["summary"]
                head, activity = open_activity(Path(args.run))
                joined: JoinedDevicesSummary = {
                    **across,
                    "devices": device_summary(head, activity),
                    "placement": placement_advice(head, activity),
                }
            print(json.dumps(joined, indent=2, default=str)) if args.json else render_joined(joined)
            return 0
        with spinner(f"summarizing {args.run}"):
            summary = summarize(collect_and_open(args.run), top=args.top)
        if args.json:
            print(json.dumps(summary, indent=2, default=str))
        else:
            render_summary(summary)
        return 0
