from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CommandError
from .base import Command

if TYPE_CHECKING:
    import pandas as pd

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

    Against this machine's limits (runs given them by `ggml-viz limits --for RUN`): node_limits,
    per phase and node of each graph structure, its timed events' time, FLOPs and bytes, the
    limit that binds it (bound: memory or compute; peak_gflop_per_s, bandwidth_gb_per_s at the
    threads judged at), floor_ns (that work at the limit) and of_limit (floor_ns / time_ns);
    graph_limits, per graph (a step): its duration against the floor of its nodes' work.

    A server's requests (computed from the graphs' tokens and decode calls, as llama-server's
    timings count them: docs/serving.md): requests, per request its sequence, graphs, arrival,
    prompt_n, cache_n, predicted_n, prompt_ms, ttft_ms, predicted_ms, tpot_ms and its decode
    calls; request_batches, per request and decode call, its tokens and share of the call.

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
      ggml-viz query france.ggmlviz "select op, sum(floor_ns) / sum(time_ns) of_limit from node_limits group by op"
      ggml-viz query france.ggmlviz "select phase, median(of_limit) from graph_limits group by phase"
      ggml-viz query server.ggmlviz "select seq_id, prompt_n, cache_n, ttft_ms, tpot_ms from requests"
      ggml-viz query france.joined "select host, op, sum(duration_ns)/1e6 ms from remote_nodes group by all"
    """

    name = "query"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz), or a folder of them (read as one dataset)")
        parser.add_argument("sql", nargs="?", help="the query")
        parser.add_argument(
            "-o",
            "--output",
            choices=("table", "csv", "json"),
            default="table",
            help="output: a table (default), CSV or JSON records",
        )
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
            for name, doc in {**TABLE_DOCS, **LIMIT_VIEWS, **REQUEST_VIEWS}.items():
                print(f"{name}: {doc}")
            return 0
        if not args.sql:
            raise CommandError("give a query (or --tables)")
        wanted = [name for name in LIMIT_VIEWS if name in args.sql.lower()]
        frames = dict(zip(wanted, limit_views(runs, wanted), strict=True)) if wanted else {}
        asked = [name for name in REQUEST_VIEWS if name in args.sql.lower()]
        frames.update(zip(asked, request_views(runs, asked), strict=True))
        result = run_query(runs, args.sql, tables, frames or None)
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


# the views of runs against their machine's limits (analysis/roofline.py): made only when asked for
LIMIT_VIEWS = {
    "node_limits": "per phase and node of each structure: time against this machine's limits (roofline: bound, "
    "floor_ns, of_limit); empty for a run without limits (ggml-viz limits --for RUN)",
    "graph_limits": "per graph: duration_ns against floor_ns, its nodes' work at this machine's limits, and of_limit",
}
NODE_LIMIT_COLUMNS = ["phase", "structure_id", "node_index", "name", "op", "layer", "timed", "time_ns", "flops",
                      "bytes", "weight_type", "device", "threads", "peak_gflop_per_s", "bandwidth_gb_per_s",
                      "floor_ns", "bound", "of_limit"]  # fmt: skip
GRAPH_LIMIT_COLUMNS = ["graph_id", "phase", "n_tokens", "duration_ns", "floor_ns", "of_limit"]


def limit_views(runs: list[Run], names: list[str]) -> list[pd.DataFrame]:
    """The views `names` (of LIMIT_VIEWS) over every run that holds limits, each row naming its run."""
    from ..analysis.roofline import graph_floors, node_floors, run_limits
    from ..runformat.sql import run_names

    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in names}
    for run, run_name in zip(runs, run_names(runs), strict=True):
        limits = run_limits(run)
        if limits is None:
            continue
        floors = node_floors(run, limits)
        if "node_limits" in parts:
            parts["node_limits"].append(floors[NODE_LIMIT_COLUMNS].assign(run=run_name))
        if "graph_limits" in parts:
            parts["graph_limits"].append(graph_floors(run, floors)[GRAPH_LIMIT_COLUMNS].assign(run=run_name))
    columns = {"node_limits": NODE_LIMIT_COLUMNS, "graph_limits": GRAPH_LIMIT_COLUMNS}
    return [_stacked(parts[name], ["run", *columns[name]]) for name in names]


# a server's requests (analysis/requests.py): computed from the run when asked for, never stored
REQUEST_VIEWS = {
    "requests": "a server's requests: run, request, seq_id, first_graph_id, last_graph_id, arrival_ns, "
    "prompt_end_ns, end_ns, prompt_n, cache_n, predicted_n, prompt_ms, ttft_ms, predicted_ms, tpot_ms, batches, "
    "shared_batches, batches_ms, share_ms (as llama-server's timings count them; computed, not stored)",
    "request_batches": "per request and decode call holding its tokens: run, request, seq_id, context_id, "
    "decode_index, first_graph_id, start_ns, end_ns, tokens, batch_tokens, share, share_ms",
}


def request_views(runs: list[Run], names: list[str]) -> list[pd.DataFrame]:
    """The views `names` (of REQUEST_VIEWS) over every run, each row naming its run."""
    import pandas as pd

    from ..analysis.requests import BATCH_COLUMNS, REQUEST_COLUMNS, request_batches, request_times
    from ..runformat.sql import run_names

    made = {"requests": (request_times, REQUEST_COLUMNS), "request_batches": (request_batches, BATCH_COLUMNS)}
    views = []
    for name in names:
        make, columns = made[name]
        parts = [make(run).assign(run=run_name) for run, run_name in zip(runs, run_names(runs), strict=True)]
        view = _stacked([part for part in parts if len(part)], ["run", *columns])
        if "tpot_ms" in view:  # not defined for one generated token: NULL, not NaN
            view["tpot_ms"] = pd.to_numeric(view["tpot_ms"]).astype("Float64")
        views.append(view)
    return views


def _stacked(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """The parts as one table of `columns` (nullable integers as floats: DuckDB reads them so)."""
    import pandas as pd

    if not parts:
        return pd.DataFrame({column: [] for column in columns})
    frame = pd.concat(parts, ignore_index=True)[columns]
    nullable = [
        name
        for name, kind in frame.dtypes.items()
        if isinstance(kind, pd.api.extensions.ExtensionDtype) and kind.kind in "iu"
    ]
    return frame.astype({name: "float64" for name in nullable})


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
