"""Pieces several commands share: argument types and the rendering of a run's summary.

Building the parser imports this module for every command, so it imports nothing heavy
(rich, pandas, the reader) at the top: each function imports what it needs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CommandError
from ..capture.settings import CAPTURE_SETTINGS, Setting

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..config import Configuration
    from ..runformat.reader import Run
    from ..ui.server import Viewer


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


MODEL_HELP = "a GGUF file, or a Hugging Face model by name: org/repo[:QUANT|:FILE]"


def add_model_arguments(parser: argparse.ArgumentParser, *, positional: bool = False, default: str = "") -> None:
    """The model option (-m, or a positional argument) and --download, for a model given by path or name."""
    help_text = f"{MODEL_HELP} (default: {default})" if default else MODEL_HELP
    if positional:
        parser.add_argument("model", help=help_text)
    else:
        parser.add_argument("-m", "--model", help=help_text)
    parser.add_argument(
        "--download",
        action="store_true",
        help="a model named org/repo that is not in the Hugging Face cache is downloaded (HF_HOME, HF_ENDPOINT)",
    )


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    """What to record: the options `record` and `run` share, one per row of CAPTURE_SETTINGS."""
    group = parser.add_argument_group("what to record")
    for setting in CAPTURE_SETTINGS:
        group.add_argument(setting.flag, **_argument_keywords(setting))


def _argument_keywords(setting: Setting) -> dict[str, Any]:
    keywords: dict[str, Any] = {"help": setting.help}
    if setting.kind == "choice":
        keywords["choices"] = setting.choices  # no default here: None is "not given", so a file's value holds
    else:
        keywords["metavar"] = setting.metavar
    if setting.kind == "count":
        keywords["type"] = positive_int
    elif setting.kind == "number":
        keywords["type"] = int
    if setting.repeatable:
        keywords["action"] = "append"
    return keywords


def add_view_arguments(parser: argparse.ArgumentParser, browser: bool = True) -> None:
    """Where the web viewer listens: the options `view` and `record --view` share."""
    group = parser.add_argument_group("the web viewer")
    group.add_argument("--port", type=int, default=None, help="port (default: 8765, or a free one if taken)")
    group.add_argument(
        "--host", default=None, help="address to listen on (default 127.0.0.1; another one is reachable by others)"
    )
    if browser:
        group.add_argument("--no-browser", action="store_true", help="print the URL, do not open a browser")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", default=None,
        help="settings file (default: ggml-viz.toml, or pyproject.toml's [tool.ggml-viz], in this folder or above)",
    )  # fmt: skip


def command_line_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line sets, by the keys of a settings file (None: not given)."""
    cli = {setting.key: getattr(args, setting.key, None) for setting in CAPTURE_SETTINGS}
    cli.update({"viewer.port": getattr(args, "port", None), "viewer.host": getattr(args, "host", None) or None})
    return cli


def configuration(args: argparse.Namespace) -> Configuration:
    """The command's effective settings: its options, else GGML_VIZ_* variables, else the settings file."""
    from ..config import load_configuration

    return load_configuration(command_line_settings(args), getattr(args, "config", None))


def default_output_path(config: Configuration) -> Path:
    """Where a run goes when no -o is given: run-DATE.ggmlviz in the settings' output_dir."""
    return config.output_dir / dt.datetime.now().strftime("run-%Y%m%d-%H%M%S.ggmlviz")


def start_viewer(path: Path, args: argparse.Namespace, config: Configuration, *, live: bool) -> Viewer:
    """Bind the viewer for `path`, say where it is, open the browser (unless --no-browser)."""
    from ..ui.server import make_viewer, open_browser, remote_warning

    host, port, host_chosen = config.view_address
    if not 0 <= port <= 65535:
        raise CommandError(f"--port {port} is not a port number (0-65535)")
    viewer = make_viewer(path, host=host, port=port, live=live, allow_remote=host_chosen)
    warning = remote_warning(host)
    if warning:
        print(warning, file=sys.stderr)
    print(f"ggml-viz viewer: {viewer.url}", flush=True)
    if not args.no_browser:
        open_browser(viewer.url)
    return viewer


def format_ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def print_short_summary(run: Run, console: Console | None = None) -> None:
    from ..analysis.summary import summarize

    render_summary(summarize(run, top=5), console, short=True)


def _render_requests(console: Console, summary: dict[str, Any], width: int = 60) -> None:
    """A server's (or a benchmark's) requests: per sequence, its prompt and generated text."""

    def cut(text: str) -> str:
        return repr(text if len(text) <= width else "…" + text[-width:])

    console.print(f"requests: {summary['n_requests']:,}")
    for request in summary["requests"]:
        console.print(f"  seq {request['seq_id']} at {format_ms(request['start_ns'])}: {cut(request['prompt'])} "
                      f"→ {cut(request['generated'])}", markup=False, highlight=False)  # fmt: skip
    if summary["n_requests"] > len(summary["requests"]):
        console.print(f"  and {summary['n_requests'] - len(summary['requests']):,} more")


def render_summary(summary: dict[str, Any], console: Console | None = None, short: bool = False) -> None:
    """The summary's tables and lines on `console` (default: a Console on standard output)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
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
        if summary.get("generated_text"):
            console.print(f"generated: {summary['generated_text']!r}", markup=False, highlight=False)
    if summary.get("n_requests", 0) > 1 and not short:
        _render_requests(console, summary)
    console.print(
        f"backends: {', '.join(summary['backends']) or '?'}   graphs: {summary['graphs']:,}   "
        f"node events: {summary['node_events']:,} ({summary['timed_node_events']:,} timed)"
        + (
            f"   dropped: {summary['dropped_graphs']:,} graphs / {summary['dropped_events']:,} events"
            if summary["dropped_graphs"]
            else ""
        )
        + (f"\ntiming: {summary['timing_label']}" if (summary.get("clocks") or {}).get("host") else "")
    )
    waits = summary.get("node_waits") or {}
    if (summary.get("clocks") or {}).get("host") and summary["timing"] == "inline":
        if waits.get("seen"):
            share = waits["wait_ns"] / waits["time_ns"] if waits["time_ns"] else 0.0
            console.print(
                f"node time: each node's work and its wait for the other threads at the barrier after it "
                f"({share:.1%} of node time waiting)"
            )
        if waits.get("not_seen"):
            console.print(
                f"[yellow]{waits['not_seen']:,} nodes' ends were not seen (ggml's barrier could not be reached): "
                "each of their times holds the wait for the stragglers of the node before it[/]"
            )
    _render_gpu(console, summary, short)
    if summary["untimed_graphs"]:
        console.print(
            f"[yellow]{summary['untimed_graphs']:,} graphs to be timed inline kept graph times only "
            "(their nodes did not report as ggml's CPU backend does; try --timing sync)[/]"
        )
    phases = Table("phase", "graphs", "tokens", "time", "tokens/s", title="phases", title_justify="left")
    for row in summary["phases"]:
        rate = "—" if row["tokens_per_s"] is None else f"{row['tokens_per_s']:,.1f}"
        phases.add_row(row["phase"], f"{row['graphs']:,}", f"{row['tokens']:,}", format_ms(row["time_ns"]), rate)
    console.print(phases)
    computations = summary.get("computations") or []
    if len({row["label"] for row in computations}) > 1:  # graphs that compute different parts of a model
        table = Table("computes", "phase", "graphs", "time", title="graphs by what they compute", title_justify="left")
        for row in computations:
            table.add_row(row["label"] or "(no weights)", row["phase"], f"{row['graphs']:,}", format_ms(row["time_ns"]))
        console.print(table)
    if summary["timed_node_events"]:
        console.print(_time_table("time by op", "op", summary["time_by_op"], bool(waits.get("seen"))))
        if not short:
            console.print(_time_table("top layers", "layer", summary["top_layers"]))
            console.print(_time_table("top tensors", "name", summary["top_tensors"]))
            console.print(_time_table("time by component", "component", summary["time_by_component"]))
            console.print(_throughput_table(summary["throughput_by_op"]))
    elif not summary.get("gpu"):
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
    for section in summary.get("sections") or []:  # a titled finding's (a plugin's) sentences, apart
        console.print(f"[bold]{escape(section['title'])}[/]")
        for line in section["lines"]:
            console.print(f"  {line}", markup=False, highlight=False)


def _render_gpu(console: Console, summary: dict[str, Any], short: bool) -> None:
    """Where node times come from on a GPU, what the GPU timer cost, the GPU's decode step."""
    from rich.table import Table

    gpu = summary.get("gpu")
    if not gpu:
        return
    clocks = summary.get("clocks") or {}
    if gpu["graphs_traced"]:
        console.print(
            f"node time on the GPU: its own clock (CUPTI kernel records): {gpu['graphs_traced']:,} of "
            f"{gpu['graphs']:,} graphs traced ({gpu['mode']}), {gpu['attributed_kernels']:,} of {gpu['kernels']:,} "
            "kernels attributed to their nodes"
            + (f"; {clocks['host']:,} node events on the host's clock" if clocks.get("host") else "")
        )
    else:
        reason = gpu.get("problem") or ("--gpu off" if gpu.get("mode") == "off" else "no graph traced")
        console.print(f"[yellow]GPU nodes: graph times only ({reason})[/]", highlight=False)
    if gpu["unattributed_graphs"]:
        console.print(
            f"[yellow]{gpu['unattributed_graphs']:,} traced graphs kept their graph time: their kernels did not "
            "match a known pass of their graph's structure[/]"
        )
    cost = gpu.get("cost")
    if cost:
        traced = (
            f"traced graphs {cost['traced_extra_ns'] / 1e6:,.1f} ms longer than untraced ones of their structure"
            if cost["compared"]
            else "no untraced graph to set the traced ones against"
        )
        console.print(
            f"GPU timer cost: {'about' if cost['compared'] else 'at least'} {cost['share']:.1%} of this run's graph "
            f"time (CUPTI attached and detached: {cost['attach_ns'] / 1e6:,.1f} ms; {traced})"
        )
    step = gpu.get("decode_step")
    if step:
        console.print(
            f"decode step (median of {step['steps']:,} traced): the GPU busy {step['busy_ns'] / 1e6:,.3f} ms, first "
            f"to last kernel {step['span_ns'] / 1e6:,.3f} ms, of {step['host_ns'] / 1e6:,.3f} ms per step on the "
            f"host ({step['host_of']}): busy {step['busy_share']:.0%}"
        )
    if gpu["top_kernels"] and not short:
        table = Table("kernel", "count", "busy", "share", "mean", title="GPU time by kernel", title_justify="left")
        for row in gpu["top_kernels"]:
            table.add_row(row["function"], f"{row['count']:,}", format_ms(row["busy_ns"]), f"{row['share']:.1%}",
                          f"{row['mean_ns'] / 1e3:,.1f} µs")  # fmt: skip
        console.print(table)


def _throughput_table(rows: list[dict[str, Any]]) -> Table:
    from rich.table import Table

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


def _time_table(title: str, key: str, rows: list[dict[str, Any]], waits: bool = False) -> Table:
    """Time per key; with waits, the part of it spent waiting for the other threads."""
    from rich.table import Table

    table = Table(key, "count", "time", "share", "mean", *(["of it, waiting"] if waits else []), title=title,
                  title_justify="left")  # fmt: skip
    for row in rows:
        table.add_row(str(row[key]), f"{row['count']:,}", format_ms(row["time_ns"]), f"{row['share']:.1%}",
                      f"{row['mean_ns'] / 1e3:,.1f} µs", *([format_ms(row["wait_ns"])] if waits else []))  # fmt: skip
    return table
