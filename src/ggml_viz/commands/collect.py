from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CommandError
from .base import Command
from .render import print_short_summary

if TYPE_CHECKING:
    from ..capture.preload.collector import SpoolCollector

FOLLOW_INTERVAL_S = 0.25


class CollectCommand(Command):
    """Turn the spool a native program left (LD_PRELOAD without `ggml-viz run`) into the run.

    Any ggml-viz command that opens such a run does this first; `collect --follow` does
    it while the program still runs, so that `ggml-viz view --live` can follow it.

    example:
      ggml-viz collect server.ggmlviz
      ggml-viz collect --follow server.ggmlviz & ggml-viz view --live server.ggmlviz
    """

    name = "collect"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", type=Path, help="the run directory holding a spool/ folder")
        parser.add_argument("--follow", action="store_true", help="keep collecting until the programs end")

    def run(self, args: argparse.Namespace) -> int:
        from ..capture.core.recording import Recording
        from ..capture.preload.collector import SpoolCollector, describe_untraced, settings_of_spool, untraced_notes
        from ..capture.preload.spool import spool_files
        from ..runformat.reader import open_run
        from ..runformat.schema import MANIFEST_FILE, SPOOL_DIR
        from .progress import spinner

        run_dir: Path = args.run
        if not spool_files(run_dir):
            raise CommandError(f"{run_dir} holds no spool ({run_dir / SPOOL_DIR}/*.spool) to collect")
        if (run_dir / MANIFEST_FILE).exists():
            raise CommandError(f"{run_dir} was collected already")
        untraced = untraced_notes(run_dir)
        if untraced:
            raise CommandError(f"{run_dir} holds no run: {describe_untraced(untraced)}")
        collector = SpoolCollector(Recording(run_dir, settings=settings_of_spool(run_dir)))
        try:
            while args.follow:
                collector.poll()
                if collector.started and not _any_alive(collector):
                    break
                time.sleep(FOLLOW_INTERVAL_S)
        except KeyboardInterrupt:
            pass
        with spinner(f"collecting the spool of {run_dir}"):
            collector.finish(exit_status=None)
        print(f"run written to {run_dir}")
        print_short_summary(open_run(run_dir))
        return 0


def _any_alive(collector: SpoolCollector) -> bool:
    for program in collector.programs:
        try:
            os.kill(int(program["pid"]), 0)
            return True
        except (ProcessLookupError, TypeError, ValueError):
            continue
        except PermissionError:
            return True
    return False
