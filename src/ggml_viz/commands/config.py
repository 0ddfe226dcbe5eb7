from __future__ import annotations

import argparse
from typing import Any

from .base import Command
from .common import add_capture_arguments, add_config_argument, add_view_arguments, configuration


class ConfigCommand(Command):
    """Show the effective settings, and where each comes from.

    Each setting is taken from the command line, else its GGML_VIZ_* variable, else the
    settings file (ggml-viz.toml, or the [tool.ggml-viz] table of pyproject.toml, in the working
    directory or the nearest folder above it that has one; or --config FILE), else its default.
    Give the options `record` and `run` take to see what they would do with them.

    example:
      ggml-viz config
      ggml-viz config --detail graph --config ci.toml
      ggml-viz config --json
    """

    name = "config"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the settings as JSON")
        add_config_argument(parser)
        add_capture_arguments(parser)
        add_view_arguments(parser, browser=False)

    def run(self, args: argparse.Namespace) -> int:
        config = configuration(args)
        if args.json:
            print(config.as_json())
            return 0
        print(f"settings file: {config.file.path if config.file else 'none'}")
        rows = [(key, _shown(value.value), value.source) for key, value in config.values.items()]
        widths = [max(len(row[column]) for row in rows) for column in (0, 1)]
        for key, value, source in rows:
            print(f"  {key:<{widths[0]}}  {value:<{widths[1]}}  {source}".rstrip())
        return 0


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)
