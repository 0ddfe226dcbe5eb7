from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CommandError
from .base import Command

if TYPE_CHECKING:
    from ..runformat.reader import Run


class QueryCommand(Command):
    """Ask a run, or a folder of runs, anything in SQL (DuckDB), over the reader's tables as views.

    Views: graphs, nodes, edges, tokens, buffers, tensors, memory_map (joined and described,
    as `ggml_viz.open` gives them), node_totals, and raw_graphs, raw_node_times,
    raw_structure_nodes, raw_edges, raw_tensors, raw_buffers (as stored). Every row names its
    `run`. Views over node events stream from the runs' Parquet files: runs of any length.
    `--tables` lists the views.

    Distributed runs (ggml's RPC backend): rpc_messages (each protocol message, whole, as it passed
    the process); a joined experiment (`ggml-viz join`) adds hosts, splits, transfers and
    remote_nodes; `runs` says each run's host and process, and graphs and nodes carry both.

    GPU time (CUDA runs whose GPU timer traced graphs): gpu_kernels (each kernel, memcpy and
    memset at its GPU times, with its node's name, op and layer), gpu_node_times (per node:
    its kernels' span and gpu_ns, its share of the GPU's busy time), gpu_graphs (per graph
    and device: busy_ns beside the host's time for the graph, idle_ns), and their raw_gpu_*
    tables; empty for other runs. nodes holds host times only: a GPU node's time is in
    gpu_node_times (and node_totals, clock 'gpu').

    Mixture-of-experts models: moe_routing (per graph, MoE layer, token and slot: the expert
    chosen and its weight, with the layer, the token's position and sequence) and moe_experts
    (per layer and expert: tokens routed, weight mass, bytes read, an estimate of its share of
    the layer's expert time); empty for a dense model.

    example:
      ggml-viz query france.ggmlviz "select op, sum(duration_ns)/1e6 ms from nodes group by op order by ms desc"
      ggml-viz query france.ggmlviz "select layer, sum(duration_ns) from nodes where op = 'MUL_MAT' group by 1" -o csv
      ggml-viz query servers/ "select run, phase, count(*) graphs from graphs group by all"   # every run in servers/
      ggml-viz query cuda.ggmlviz "select op, kernel, sum(busy_ns)/1e6 ms from gpu_kernels group by 1, 2"
      ggml-viz query moe.ggmlviz "select layer, expert, tokens from moe_experts order by tokens desc limit 10"
      ggml-viz query france.joined "select host, op, sum(duration_ns)/1e6 ms from remote_nodes group by all"
    """

    name = "query"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz), or a folder of them (read as one dataset)")
        parser.add_argument("sql", nargs="?", help="the query")
        parser.add_argument("-o", "--output", choices=("table", "csv", "json"), default="table",
                            help="output: a table (default), CSV or JSON records")  # fmt: skip
        parser.add_argument("--tables", action="store_true", help="list the views and their columns")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from ..analysis.join import is_joined, open_joined
        from ..runformat.sql import TABLE_DOCS, run_query

        path = Path(args.run)
        tables = None
        if is_joined(path):  # a joined distributed run: its member runs and its joined tables
            _, runs, tables = open_joined(path)
        else:
            runs = open_runs(path)
        if args.tables:
            for name, doc in TABLE_DOCS.items():
                print(f"{name}: {doc}")
            return 0
        if not args.sql:
            raise CommandError("give a query (or --tables)")
        result = run_query(runs, args.sql, tables)
        if args.output == "csv":
            result.to_csv(sys.stdout, index=False)
        elif args.output == "json":
            print(json.dumps(json.loads(result.to_json(orient="records")), indent=1))
        else:
            table = Table(*[str(column) for column in result.columns])
            for row in result.itertuples(index=False):
                table.add_row(*["" if value is None else str(value) for value in row])
            Console().print(table)
        return 0


def open_runs(path: Path) -> list[Run]:
    """The run at `path`, or every run in the folder `path` (a folder holding runs)."""
    from ..capture.preload.opening import collect_and_open
    from ..runformat.schema import MANIFEST_FILE

    if (path / MANIFEST_FILE).exists() or (path / "spool").is_dir() or not path.is_dir():
        return [collect_and_open(path)]
    found = sorted(child for child in path.iterdir() if (child / MANIFEST_FILE).exists())
    if not found:
        raise CommandError(f"{path} is neither a run nor a folder of runs (NAME.ggmlviz folders with a manifest)")
    return [collect_and_open(child) for child in found]
