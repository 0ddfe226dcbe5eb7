"""The `ggml-viz` command line: one class per subcommand, one module each.

A command has `name`, a docstring (its help), `prepare_parser(parser)` and `run(args)`.
`main(argv)` turns a GgmlVizError into one clear line and an exit status; nothing deeper
calls sys.exit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._errors import CommandError, GgmlVizError
from .._version import __version__
from .advise import AdviseCommand
from .base import Command
from .bench import BenchCommand
from .capture import CaptureCommand
from .collect import CollectCommand
from .config import ConfigCommand
from .diff import DiffCommand
from .doctor import DoctorCommand
from .export import ExportCommand
from .join import JoinCommand
from .limits import LimitsCommand
from .memmap import MemmapCommand
from .numerics import NumericsCommand
from .plugins import PluginsCommand
from .preload_path import PreloadPathCommand
from .query import QueryCommand
from .record import RecordCommand
from .run import RunCommand
from .summary import SummaryCommand
from .validate import ValidateCommand
from .view import ViewCommand
from .whatif import WhatifCommand

COMMANDS: list[type[Command]] = [
    RecordCommand, RunCommand, CaptureCommand, SummaryCommand, ViewCommand, ExportCommand, QueryCommand, DiffCommand,
    BenchCommand, NumericsCommand, MemmapCommand, ValidateCommand, CollectCommand, PreloadPathCommand, ConfigCommand,
    PluginsCommand, JoinCommand, WhatifCommand, AdviseCommand, LimitsCommand, DoctorCommand,
]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ggml-viz",
        description="Profile and visualize GGML inference (llama.cpp): where the time goes, where the bytes live.",
    )
    parser.add_argument("--version", action="version", version=f"ggml-viz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command_class in COMMANDS:
        command = command_class()
        doc = (command_class.__doc__ or "").strip()
        subparser = subparsers.add_parser(
            command.name,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.prepare_parser(subparser)
        subparser.set_defaults(handler=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler.run(args) or 0)
    except CommandError as error:
        print(f"ggml-viz: error: {error}", file=sys.stderr)
        return error.exit_code
    except GgmlVizError as error:
        print(f"ggml-viz: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ggml-viz: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())
