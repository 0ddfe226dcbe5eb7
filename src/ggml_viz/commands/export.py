from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CommandError, GgmlVizError
from .base import Command

if TYPE_CHECKING:
    from ..export import Exporter, ExportOptions
    from ..runformat.reader import Run


class ExportCommand(Command):
    """Export a run for other tools (Perfetto, Chrome, Parquet, Graphviz, HTML, ...).

    Formats: Perfetto, Chrome trace JSON, CSV, Parquet, Graphviz DOT/SVG/PNG, timeline and
    memory pictures, speedscope, TensorBoard, a self-contained HTML report, captured tensors
    as npz or safetensors.

    The format comes from --format or the output's ending (`ggml-viz export --list` lists them,
    with those installed plugins add: `ggml-viz plugins`).

    example:
      ggml-viz export france.ggmlviz -o france.pftrace             # open in ui.perfetto.dev
      ggml-viz export server.ggmlviz -o hour.pftrace --graphs 5000-5199   # a window of a long run
      ggml-viz export france.ggmlviz -o france.json                # chrome://tracing
      ggml-viz export france.ggmlviz -o tables/ --format parquet
      ggml-viz export france.ggmlviz -o layer3.svg --graph 1 --layer 3
      ggml-viz export france.ggmlviz -o france.speedscope.json     # speedscope.app
      ggml-viz export probe.ggmlviz -o attention.npz --tensors 'kq_soft_max-*'   # captured tensors
    """

    name = "export"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", nargs="?", help="run directory (NAME.ggmlviz)")
        parser.add_argument("-o", "--output", help="file (or folder, for csv, parquet, tensorboard) to write")
        parser.add_argument("-f", "--format", help="format name (default: from the output's ending)")
        parser.add_argument("--graph", type=int, help="graph pictures: the graph to draw (default: the first decode)")
        parser.add_argument("--layer", type=int, help="graph pictures: draw this layer's nodes (default: layers)")
        parser.add_argument(
            "--tensors",
            action="append",
            metavar="GLOB",
            help="npz, safetensors: which captured tensors (repeatable; default: all)",
        )
        parser.add_argument(
            "--graphs",
            metavar="FIRST-LAST",
            help="event exports, speedscope and tensorboard: only these graphs (ids, inclusive; a long run's window)",
        )
        parser.add_argument(
            "--time",
            metavar="FROM-TO",
            help="the same: only graphs meeting this window (ms after the run's start)",
        )
        parser.add_argument("--list", action="store_true", help="list the formats and exit")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from ..capture.preload.opening import collect_and_open
        from ..export import ExportOptions, all_exporters, exporter_for
        from ..export.registry import exporter_plugins
        from ..plugins import BUILT_IN
        from .progress import progress_bar

        if args.list:
            table = Table("format", "file endings", "from", "what", title="export formats", title_justify="left")
            for exporter in all_exporters().values():
                origin = exporter_plugins().origin_of(exporter)
                source = origin.distribution if origin else BUILT_IN
                table.add_row(exporter.name, " ".join(exporter.extensions), source, exporter.summary)
            Console().print(table)
            return 0
        if not args.run or not args.output:
            raise CommandError("give a run and -o OUTPUT (or --list)")
        output = Path(args.output)
        exporter = exporter_for(args.format, output)
        run = collect_and_open(args.run)
        if output.parent and not output.parent.exists():
            raise CommandError(f"{output.parent} does not exist")
        console = Console(stderr=True)
        with progress_bar(f"exporting {exporter.name}") as report:
            options = ExportOptions(
                graph_id=args.graph,
                layer=args.layer,
                tensors=tuple(args.tensors or ()),
                graphs=_window(args.graphs, "--graphs", int),
                time_ms=_window(args.time, "--time", float),
                progress=report,
                notice=lambda text: console.print(f"[yellow]{text}[/]", highlight=False),
            )
            said = _export(exporter, run, output, options)
        print(f"wrote {exporter.name}: {said}")
        return 0


def _export(exporter: Exporter, run: Run, output: Path, options: ExportOptions) -> str:
    """exporter.export(...); a plugin's exception becomes one line naming the plugin (a built-in's is a bug
    of ours, its traceback wanted)."""
    from ..export.registry import exporter_plugins
    from ..plugins import describe_error

    origin = exporter_plugins().origin_of(exporter)
    missing = exporter.missing()
    if missing:
        raise CommandError(
            f"the {exporter.name} export needs {', '.join(missing)}, which is not installed: "
            "pip install 'ggml-viz[export]'"
        )
    if origin is None:
        return exporter.export(run, output, options)
    try:
        return str(exporter.export(run, output, options))
    except GgmlVizError:
        raise
    except Exception as error:
        raise CommandError(f"{origin} failed: {describe_error(error)}", exit_code=1) from error


def _window(text: str | None, option: str, number: type) -> tuple[Any, Any] | None:
    """FIRST-LAST (or FROM-TO) as two numbers, the first not after the second."""
    if text is None:
        return None
    first, dash, last = text.partition("-")
    try:
        window = (number(first), number(last)) if dash else None
    except ValueError:
        window = None
    if window is None or window[0] > window[1] or window[0] < 0:
        raise CommandError(f"{option} takes FIRST-LAST, two numbers with FIRST <= LAST (got {text!r})")
    return window
