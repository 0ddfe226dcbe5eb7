"""Pieces several commands share: argument types and the rendering of a run's summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from .._errors import CommandError
from ..analysis.summary import summarize
from ..runformat.reader import Run

if TYPE_CHECKING:
    from ..ui.server import Viewer


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    """What to record: the options `record` and `run` share (and GGML_VIZ_* variables mirror)."""
    group = parser.add_argument_group("what to record")
    group.add_argument(
        "--detail",
        choices=("op", "graph"),
        default="op",
        help="op: time every node (default); graph: structure and graph times only",
    )
    group.add_argument(
        "--timing",
        choices=("inline", "sync"),
        default="inline",
        help="inline: graphs run whole, node times from the CPU backend (default, near-free); "
        "sync: each node computed alone and synchronized (exact, any backend, slower)",
    )
    group.add_argument(
        "--sample",
        type=positive_int,
        metavar="N",
        help="time nodes on every N-th decode graph and the first prompt graph only",
    )
    group.add_argument("--ops", metavar="OPS", help="time only these ops on their own, e.g. MUL_MAT,ROPE")
    group.add_argument("--layers", metavar="LAYERS", help="... only nodes of these layers, e.g. 0-3,29,none")
    group.add_argument(
        "--names", action="append", metavar="GLOB", help="... only nodes whose name matches (repeatable)"
    )
    group.add_argument("--max-events", type=positive_int, metavar="N", help="keep at most N node events (whole graphs)")
    group.add_argument(
        "--policy",
        choices=("keep-first", "keep-last"),
        default="keep-first",
        help="which graphs --max-events keeps (default: keep-first)",
    )
    group.add_argument(
        "--values",
        choices=("off", "stats"),
        default="off",
        help="stats: min, max, mean, std, NaN/Inf counts of every node's output (nodes computed alone)",
    )
    group.add_argument(
        "--capture",
        action="append",
        metavar="GLOB",
        help="store the whole output of nodes whose name matches (repeatable), e.g. 'kq_soft_max-*'",
    )
    group.add_argument("--capture-bytes", type=int, metavar="N", help="at most N bytes of captures (default 64 MiB)")
    group.add_argument("--recorder", choices=("native", "python"), default="native",
                       help="native (C extension, default) or python (slower, for comparison)")  # fmt: skip


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the web viewer listens: the options `view` and `record --view` share."""
    group = parser.add_argument_group("the web viewer")
    group.add_argument("--port", type=int, default=None, help="port (default: 8765, or a free one if taken)")
    group.add_argument(
        "--host", default=None, help="address to listen on (default 127.0.0.1; another one is reachable by others)"
    )
    group.add_argument("--no-browser", action="store_true", help="print the URL, do not open a browser")


def start_viewer(path: Path, args: argparse.Namespace, *, live: bool) -> Viewer:
    """Bind the viewer for `path`, say where it is, open the browser (unless --no-browser)."""
    from ..ui.server import DEFAULT_PORT, make_viewer, open_browser, remote_warning

    host = args.host or "127.0.0.1"
    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise CommandError(f"--port {port} is not a port number (0-65535)")
    viewer = make_viewer(path, host=host, port=port, live=live, allow_remote=args.host is not None)
    warning = remote_warning(host)
    if warning:
        print(warning, file=sys.stderr)
    print(f"ggml-viz viewer: {viewer.url}", flush=True)
    if not args.no_browser:
        open_browser(viewer.url)
    return viewer


def capture_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of add_capture_arguments as keyword arguments of ggml_viz.record."""
    return {
        "detail": args.detail,
        "timing": args.timing,
        "sample": args.sample,
        "ops": args.ops,
        "layers": args.layers,
        "names": args.names,
        "max_events": args.max_events,
        "policy": args.policy,
        "recorder": args.recorder,
        "values": args.values,
        "capture": args.capture,
        "capture_bytes": args.capture_bytes,
    }


def capture_environment(args: argparse.Namespace) -> dict[str, str]:
    """The same options as GGML_VIZ_* environment variables (for a program run under `run`)."""
    names = {"detail": "DETAIL", "timing": "TIMING", "sample": "SAMPLE", "ops": "OPS", "layers": "LAYERS",
             "names": "NAMES", "max_events": "MAX_EVENTS", "policy": "POLICY", "recorder": "RECORDER",
             "values": "VALUES", "capture": "CAPTURE", "capture_bytes": "CAPTURE_BYTES"}  # fmt: skip
    env = {}
    for option, value in capture_options(args).items():
        if value is not None:
            env[f"GGML_VIZ_{names[option]}"] = ",".join(value) if isinstance(value, list) else str(value)
    return env


def format_ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def print_short_summary(run: Run, console: Console | None = None) -> None:
    render_summary(summarize(run, top=5), console or Console(), short=True)


def render_summary(summary: dict[str, Any], console: Console, short: bool = False) -> None:
    model = summary.get("model") or {}
    status = summary["status"]
    console.print(f"[bold]{summary['run']}[/]  experiment {summary['experiment_id'][:12]}  status [bold]{status}[/]")
    if summary.get("incomplete_reason"):
        console.print(f"[yellow]incomplete: {summary['incomplete_reason']}[/]")
    if model:
        console.print(
            f"model: {model.get('name') or '?'} ({model.get('description')}, {model.get('architecture')}, "
            f"{model.get('layers')} layers, {model.get('parameters', 0) / 1e6:,.1f} M parameters)"
        )
        console.print(f"file:  {model.get('path')}", markup=False, highlight=False)
    if summary.get("prompt") and not short:
        console.print(f"prompt: {summary['prompt']!r}", markup=False, highlight=False)
    console.print(
        f"backends: {', '.join(summary['backends']) or '?'}   graphs: {summary['graphs']:,}   "
        f"node events: {summary['node_events']:,} ({summary['timed_node_events']:,} timed)"
        + (
            f"   dropped: {summary['dropped_graphs']:,} graphs / {summary['dropped_events']:,} events"
            if summary["dropped_graphs"]
            else ""
        )
        + (f"   timing: {summary['timing']}" if summary["timed_node_events"] else "")
    )
    if summary["untimed_graphs"]:
        console.print(
            f"[yellow]{summary['untimed_graphs']:,} graphs to be timed inline kept graph times only "
            "(their nodes did not report as ggml's CPU backend does; try --timing sync)[/]"
        )
    phases = Table("phase", "graphs", "tokens", "time", "tokens/s", title="prompt vs decode", title_justify="left")
    for row in summary["phases"]:
        phases.add_row(row["phase"], f"{row['graphs']:,}", f"{row['tokens']:,}", format_ms(row["time_ns"]),
                       f"{row['tokens_per_s']:,.1f}")  # fmt: skip
    console.print(phases)
    if summary["timed_node_events"]:
        console.print(_time_table("time by op", "op", summary["time_by_op"]))
        if not short:
            console.print(_time_table("top layers", "layer", summary["top_layers"]))
            console.print(_time_table("top tensors", "name", summary["top_tensors"]))
            console.print(_time_table("time by component", "component", summary["time_by_component"]))
            console.print(_throughput_table(summary["throughput_by_op"]))
    else:
        console.print("no node was timed on its own (graph detail): graph times only")
    memory = Table(
        "kind", "buffers", "bytes", "peak in use", "names", title="memory by buffer kind", title_justify="left"
    )
    for row in summary["memory_by_buffer"]:
        memory.add_row(row["kind"], str(row["buffers"]), format_bytes(row["bytes"]), format_bytes(row["peak_bytes"]),
                       row["names"])  # fmt: skip
    console.print(memory)
    kv, reads = summary.get("kv_cache") or {}, summary.get("weight_reads") or {}
    if kv.get("layers"):
        console.print(
            f"KV cache: {kv['layers']} layers, {kv['used']:,} of {kv['capacity']:,} cells used ({kv['fill']:.1%})"
        )
    if reads.get("weights_read"):
        source = "the file mapping" if reads["weights_from_mmap"] else "loaded copies"
        per_graph = format_bytes(reads["weight_bytes_per_graph"])
        console.print(f"weight bytes the ops of a graph take as sources: {per_graph}, from {source}")
    if summary.get("findings"):
        console.print("[bold]findings[/]")
        for finding in summary["findings"]:
            console.print(f"  • {finding}", markup=False, highlight=False)


def _throughput_table(rows: list[dict[str, Any]]) -> Table:
    title = "work and throughput by op (estimates, see ggml_viz.analysis.flops)"
    table = Table("op", "time", "GFLOP", "GB moved", "GFLOP/s", "GB/s", "FLOP/byte", title=title, title_justify="left")

    def number(value: Any, digits: int = 2) -> str:
        return "—" if value is None or value != value else f"{value:,.{digits}f}"

    for row in rows:
        table.add_row(
            row["op"], format_ms(row["time_ns"]), number(row["flops"] / 1e9, 3), number(row["bytes"] / 1e9, 3),
            number(row["gflop_per_s"]), number(row["gb_per_s"]), number(row["flops_per_byte"]),
        )  # fmt: skip
    return table


def _time_table(title: str, key: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(key, "count", "time", "share", "mean", title=title, title_justify="left")
    for row in rows:
        table.add_row(str(row[key]), f"{row['count']:,}", format_ms(row["time_ns"]), f"{row['share']:.1%}",
                      f"{row['mean_ns'] / 1e3:,.1f} µs")  # fmt: skip
    return table
