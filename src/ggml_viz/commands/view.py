from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._errors import CommandError
from .base import Command
from .common import add_config_argument, add_view_arguments, configuration, start_viewer


class ViewCommand(Command):
    """Open a run, or a directory of runs, in the web viewer.

    Views: overview, timeline, graph, memory, statistics, event log, attention.

    The viewer listens on 127.0.0.1 and prints a URL with a random token that its API
    requires; it opens the browser unless --no-browser. --live follows a run that is still
    being recorded (new graphs appear within a second). Stop it with Ctrl-C.

    example:
      ggml-viz view france.ggmlviz
      ggml-viz view runs/ --port 9000 --no-browser
      ggml-viz view --live app.ggmlviz
    """

    name = "view"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz), or a directory holding runs")
        parser.add_argument("--live", action="store_true", help="follow a run that is still being recorded")
        add_view_arguments(parser)
        add_config_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..ui.app import RunRegistry
        from .progress import showing_steps

        config = configuration(args)
        path = Path(args.run)
        if not path.exists() and not args.live:
            raise CommandError(f"{path} does not exist")
        if path.exists() and not path.is_dir():
            raise CommandError(f"{path} is not a run directory")
        if not args.live and not RunRegistry(path).scan():
            raise CommandError(f"{path} holds no ggml-viz run (no manifest.json in it or its subdirectories)")
        viewer = start_viewer(path, args, config, live=args.live)
        print("press Ctrl-C to stop", file=sys.stderr)
        with showing_steps():  # an older run's first open sums its node events: seconds on a long run
            viewer.serve()
        return 0
