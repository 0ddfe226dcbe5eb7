from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis.compare import ClockedComparison

from .base import Command
from .common import positive_int
from .render import format_ms


class DiffCommand(Command):
    """Compare two runs: settings that differ, speed, and where the time moved.

    Settings: model file, quantization, threads, backend, ...; tokens/s; the mean time per
    timed graph by op, layer and tensor (B minus A). Node times come from the host's clock or,
    for runs whose GPU timer traced them (CUDA), from the GPU's (each node's share of the
    GPU's busy time): the diff names each side's, and says so when they differ.

    example:
      ggml-viz diff one-thread.ggmlviz two-threads.ggmlviz
      ggml-viz diff a.ggmlviz b.ggmlviz --json | jq '.per_graph_time_by.op'
    """

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", help="the first run (A)")
        parser.add_argument("b", help="the second run (B)")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
        parser.add_argument("--top", type=positive_int, default=15, help="rows per table (default: 15)")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from ..analysis.compare import clocks, compare
        from ..capture.preload.opening import collect_and_open

        a, b = collect_and_open(args.a), collect_and_open(args.b)
        result: ClockedComparison = {**compare(a, b, top=args.top), "clock": clocks(a, b)}
        if args.json:
            print(json.dumps(result, indent=2, default=str))
            return 0
        console = Console()
        console.print(f"A: {result['a']}\nB: {result['b']}", markup=False, highlight=False)
        clock = result["clock"]
        if clock["note"]:
            console.print(f"[yellow]{clock['note']}[/]", highlight=False)
        elif "GPU" in (clock["a"] or "") + (clock["b"] or ""):
            console.print(f"node times: A {clock['a']} clock, B {clock['b']} clock", highlight=False)
        differ = Table("setting", "A", "B", title="settings that differ", title_justify="left")
        for name, values in result["settings_that_differ"].items():
            differ.add_row(name, str(values["a"]), str(values["b"]))
        console.print(differ if result["settings_that_differ"] else "settings: the same")
        speed = Table("phase", "A tok/s", "B tok/s", "B/A", title="speed", title_justify="left")
        for phase, rates in result["tokens_per_s"].items():
            rate_a, rate_b = rates.get("a"), rates.get("b")
            speed.add_row(
                phase,
                f"{rate_a:,.1f}" if rate_a else "—",
                f"{rate_b:,.1f}" if rate_b else "—",
                f"{rate_b / rate_a:,.2f}" if rate_a and rate_b else "—",
            )
        console.print(speed)
        deltas = result["per_graph_time_by"]
        by: dict[str, Sequence[Mapping[str, Any]]] = {
            "op": deltas["op"],
            "layer": deltas["layer"],
            "name": deltas["name"],
        }
        for key, rows in by.items():
            table = Table(
                "phase",
                key,
                f"A per graph{_clock_label(clock['a'])}",
                f"B per graph{_clock_label(clock['b'])}",
                "B − A",
                "B/A",
                title=f"time per graph by {key} (largest changes)",
                title_justify="left",
            )
            for row in rows:
                table.add_row(
                    row["phase"],
                    str(row[key]),
                    format_ms(row["a_ns"]),
                    format_ms(row["b_ns"]),
                    format_ms(row["delta_ns"]),
                    f"{row['ratio']:.2f}" if row["ratio"] else "—",
                )
            console.print(table)
        return 0


def _clock_label(clock: str | None) -> str:
    """' (GPU)' beside a side's times where they are not the host's alone."""
    return f" ({clock})" if clock and clock != "host" else ""
