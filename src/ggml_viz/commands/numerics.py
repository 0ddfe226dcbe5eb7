from __future__ import annotations

import argparse
import json

from .base import Command


class NumericsCommand(Command):
    """Name the first node whose output holds a NaN or an Inf, and what it read.

    Needs a run recorded with --values stats. Exit status 0 when every value was finite,
    1 when a non-finite value was found.

    example:
      ggml-viz record --values stats -o check.ggmlviz -m my-port.gguf
      ggml-viz numerics check.ggmlviz
    """

    name = "numerics"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory recorded with --values stats")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from ..analysis.numerics import STAT_COLUMNS, first_non_finite
        from ..capture.preload.opening import collect_and_open

        found = first_non_finite(collect_and_open(args.run))
        if args.json:
            print(json.dumps(found, indent=2, default=str))
            return 1 if found else 0
        console = Console()
        if found is None:
            console.print("every value read was finite")
            return 0
        console.print(
            f"first non-finite output: graph {found['graph_id']}, node {found['node_index']}: "
            f"{found['name']} ({found['op']}, layer {found['layer']}) — {found['nan']:,} NaN, {found['inf']:,} Inf; "
            f"{found['non_finite_events']:,} node events in all hold some",
            markup=False,
            highlight=False,
        )
        table = Table("slot", "source", "op", "type", "from", *STAT_COLUMNS, title="what it read")
        for source in found["sources"]:
            table.add_row(
                str(source["slot"]),
                source["name"],
                source["op"],
                source["type"],
                source.get("from") or (f"node {source['node_index']}" if "node_index" in source else source["memory"]),
                *[_cell(source.get(column)) for column in STAT_COLUMNS],
            )
        console.print(table)
        return 1


def _cell(value: object) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
