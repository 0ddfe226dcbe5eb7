from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CaptureError, CommandError
from ..capture.settings import CaptureSettings
from ..log import say
from .base import Command
from .common import add_capture_arguments, add_config_argument, configuration, default_output_path
from .render import print_short_summary

if TYPE_CHECKING:
    from ..capture.metrics.exporter import RunMetrics

PASSED_THROUGH = ("GGML_VIZ_CUPTI", "GGML_VIZ_GPU_DETACH", "GGML_VIZ_READ_GRAPHS")


class RunCommand(Command):
    """Run a program that computes with ggml and record it, without changing it.

    Python programs using llama-cpp-python are recorded by ggml-viz's start-up hook (the
    program must run in the Python environment where ggml-viz is installed); native programs
    (llama-server, llama-cli, llama-bench, whisper.cpp, anything linked to ggml's shared
    libraries), and Python programs on other ggml bindings (pywhispercpp, ...), by a preload
    library, collected into the run while they run. The exit status
    is the program's, and so is its standard output: ggml-viz speaks on standard error.
    A process whose ggml is not one ggml-viz reads (another ggml_tensor layout, a function
    missing) runs untraced: one line names its ggml's version, and no run is written for it.

    example:
      ggml-viz run -o chat.ggmlviz -- python app.py --prompt "hello"
      ggml-viz run -o server.ggmlviz -- llama-server -m model.gguf -np 2
      ggml-viz run --detail graph -o bench.ggmlviz -- llama-bench -m model.gguf
      ggml-viz run --metrics 127.0.0.1:9464 -o server.ggmlviz -- llama-server -m model.gguf
      ggml-viz run --dormant -o server.ggmlviz -- llama-server -m model.gguf   (then: ggml-viz capture ...)
      ggml-viz run --keep-minutes 5 -o server.ggmlviz -- llama-server -m model.gguf
    """

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output",
            default=None,
            help="run directory to write (default: run-DATE.ggmlviz in the settings' output_dir, else here)",
        )
        parser.add_argument("-f", "--force", action="store_true", help="replace the output run if it exists")
        parser.add_argument("-v", "--verbose", action="store_true", help="say what is attached")
        parser.add_argument(
            "--metrics",
            metavar="HOST:PORT",
            default=None,
            help="serve live metrics for a Prometheus to scrape at http://HOST:PORT/metrics while the program runs "
            "(programs the preload library records: native ones, and other ggml bindings than llama-cpp-python)",
        )
        always_on = parser.add_mutually_exclusive_group()
        always_on.add_argument(
            "--dormant",
            action="store_true",
            help="native programs: record no graph, only each llama call, until `ggml-viz capture` (or SIGUSR1 to "
            "this process) records a window of a few seconds as a run of its own in OUTPUT/windows/",
        )
        always_on.add_argument(
            "--keep-minutes",
            type=_positive_minutes,
            default=None,
            metavar="M",
            help="native programs: record windows back to back, keeping those of the last M minutes (M/4-minute "
            "windows, at least 3 s; fractions allowed) in OUTPUT/windows/; older ones are deleted",
        )
        add_config_argument(parser)
        add_capture_arguments(parser)
        parser.add_argument("program", nargs=argparse.REMAINDER, help="the command to run, after --")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console

        from ..capture.preload.program import ProgramKind, describe_exit, program_kind, run_native
        from ..runformat.reader import open_run
        from ..runformat.writer import prepare_run_dir

        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not program:
            raise CommandError("no program given; example: ggml-viz run -o out.ggmlviz -- python app.py")
        if shutil.which(program[0]) is None and not Path(program[0]).exists():
            raise CommandError(f"program not found: {program[0]}")
        config = configuration(args)
        output = (Path(args.output) if args.output else default_output_path(config)).absolute()
        prepare_run_dir(output, overwrite=args.force)  # clear errors now, not inside the program
        # GGML_VIZ_* capture settings are the effective ones (options, variables, file), the other
        # variables pass only where no option stands for them (CUPTI's path, ...)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") or k in PASSED_THROUGH}
        env.update(config.capture_environment(), GGML_VIZ_OUTPUT=str(output))
        settings = config.capture_settings()
        if args.verbose:
            env["GGML_VIZ_VERBOSE"] = "1"
        kind = program_kind(program[0])
        always_on = args.dormant or args.keep_minutes is not None
        if always_on and kind is ProgramKind.PYTHON:
            raise CommandError(
                "--dormant and --keep-minutes record native programs (llama-server, ...), not Python programs: "
                "record a Python program with ggml_viz.record around the part to see"
            )
        metrics = self._serve_metrics(args.metrics, program) if args.metrics else None
        if always_on:
            return _run_always_on(program, output, settings, env, args, metrics)
        try:
            # A Python program's start-up hook records llama-cpp-python itself and makes the run when a
            # context appears; the preload library goes in too, for other ggml bindings. A shell or a
            # wrapper may start a ggml program: the preload library goes in anyway.
            python = kind is ProgramKind.PYTHON
            if python:
                output.rmdir()
            ended = run_native(program, output, settings, env, verbose=args.verbose, python=python, observer=metrics)
        except OSError as error:
            raise CommandError(f"cannot run {program[0]}: {error.strerror or error}", exit_code=1) from None
        except CaptureError as error:
            raise CommandError(str(error)) from None
        exit_code = ended.exit_status
        if output.exists():  # on stderr: the program's stdout is its own, byte for byte
            print(f"run written to {output} (the program's {describe_exit(exit_code)})", file=sys.stderr)
            print_short_summary(open_run(output), Console(stderr=True))
        elif ended.untraced:
            pass  # each untraced process said why, naming its ggml: one line is enough
        elif kind is ProgramKind.STATIC:
            print(
                f"ggml-viz: no run was written: {program[0]} loads no ggml shared library (ggml linked statically, "
                "or no ggml at all), so there was nothing to interpose",
                file=sys.stderr,
            )
        elif python:
            print(
                f"ggml-viz: no run was written: {program[0]} (a Python program) computed no ggml graph that ggml-viz "
                "saw: it loaded no ggml binding, or never computed with it (llama-cpp-python is recorded from its "
                "first llama context, any other binding from its first graph); try the script's own command line "
                "without ggml-viz to check that it computes",
                file=sys.stderr,
            )
        else:
            print(
                f"ggml-viz: no run was written: {program[0]} computed no ggml graph that ggml-viz saw (it records "
                "graphs computed through ggml's scheduler, a backend, ggml_graph_compute or "
                "ggml_graph_compute_with_ctx, and llama.cpp's calls); a program that loads ggml only to read a "
                "model file, or exits before computing, leaves none",
                file=sys.stderr,
            )
        return exit_code

    @staticmethod
    def _serve_metrics(address: str, program: list[str]) -> RunMetrics:
        """The live metrics, served before the program starts: an address that cannot be served
        stops the command here, the program not started."""
        from ..capture.metrics.exporter import RunMetrics, serve_metrics

        metrics = RunMetrics(program)
        try:
            host, port = serve_metrics(metrics, address)
        except ValueError as error:
            raise CommandError(f"--metrics: {error}") from None
        except OSError as error:
            raise CommandError(f"--metrics: cannot serve at {address}: {error.strerror or error}") from None
        say(f"metrics at http://{host}:{port}/metrics")
        return metrics


def _positive_minutes(text: str) -> float:
    try:
        minutes = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not minutes > 0:
        raise argparse.ArgumentTypeError("--keep-minutes must be more than 0")
    return minutes


def _run_always_on(
    program: list[str],
    output: Path,
    settings: CaptureSettings,
    env: dict[str, str],
    args: argparse.Namespace,
    metrics: RunMetrics | None,
) -> int:
    """A dormant recording, or a ring: its windows are the runs, listed once the program ends."""
    from ..capture.preload.program import describe_exit, run_dormant
    from ..capture.preload.windows import describe_windows, read_dormant

    if args.dormant:
        said = (
            f"dormant, recording into {output}; a window: ggml-viz capture {output} --seconds 10 "
            f"(or kill -USR1 {os.getpid()})"
        )
    else:
        said = f"recording the last {args.keep_minutes:g} minutes of the program into {output / 'windows'}"
    print(f"ggml-viz: {said}", file=sys.stderr)
    try:
        ended = run_dormant(
            program, output, settings, env, keep_minutes=args.keep_minutes, verbose=args.verbose, observer=metrics
        )
    except OSError as error:
        raise CommandError(f"cannot run {program[0]}: {error.strerror or error}", exit_code=1) from None
    except CaptureError as error:
        raise CommandError(str(error)) from None
    described = read_dormant(output) or {}
    print(
        f"ggml-viz: the program's {describe_exit(ended.exit_status)}; {describe_windows(output, described)}",
        file=sys.stderr,
    )
    return ended.exit_status
