from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Command
from .common import positive_int

if TYPE_CHECKING:
    from ..analysis.devices import JoinedDevicesSummary


class SummaryCommand(Command):
    """Summarize a run: model, prompt, prompt vs decode speed, time by op, layer and tensor, memory.

    The summary is computed once and kept in the run directory (summary-cache.json): asked again,
    it is answered from there while the run and ggml-viz are as they were (a run still recording,
    or with a findings plugin installed, is summarized each time).

    example:
      ggml-viz summary france.ggmlviz
      ggml-viz summary france.ggmlviz --json | jq .time_by_op
    """

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz), or a joined distributed run (ggml-viz join)")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
        parser.add_argument("--top", type=positive_int, default=10, help="rows in each top list (default: 10)")
        parser.add_argument(
            "--recompute",
            action="store_true",
            help="compute the summary from the run's tables even where the run keeps one (and keep it anew)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from .stored_summary import read_summary

        run_dir = Path(args.run)
        summary = None if args.recompute else read_summary(run_dir, args.top)
        if summary is None:
            summary = self._computed(args, run_dir)
            if summary is None:  # a joined run: printed
                return 0
        if args.json:
            from .stored_summary import as_json

            print(as_json(summary))
        else:
            from .render import render_summary

            render_summary(summary)  # type: ignore[arg-type]
        return 0

    def _computed(self, args: argparse.Namespace, run_dir: Path) -> dict[str, Any] | None:
        """The run's summary computed from its tables (as plain JSON data), and kept in it where it
        can be; None for a joined run, whose summary across hosts is printed here."""
        import json

        from ..analysis.devices import device_summary, open_activity, placement_advice
        from ..analysis.join import is_joined, open_joined
        from ..analysis.summary import summarize
        from ..capture.preload.opening import collect_and_open
        from .progress import spinner
        from .render import render_joined
        from .stored_summary import keep_summary, plain, summary_key

        if is_joined(run_dir):  # a distributed run: its summary across hosts
            with spinner(f"summarizing {args.run}"):
                across = open_joined(run_dir)[0]["summary"]
                head, activity = open_activity(run_dir)
                joined: JoinedDevicesSummary = {
                    **across,
                    "devices": device_summary(head, activity),
                    "placement": placement_advice(head, activity),
                }
            print(json.dumps(joined, indent=2, default=str)) if args.json else render_joined(joined)
            return None
        with spinner(f"summarizing {args.run}"):
            run = collect_and_open(args.run)  # (a spool is collected first: the key is the run's after)
            key = summary_key(run_dir, args.top)
            summary: dict[str, Any] = plain(summarize(run, top=args.top))
        keep_summary(run_dir, args.top, key, summary)
        return summary
