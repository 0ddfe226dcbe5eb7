from __future__ import annotations

import argparse

from .._errors import CaptureError, CommandError
from .base import Command


class PreloadPathCommand(Command):
    """Print the path of the preload library that records native programs.

    For services and containers, where `ggml-viz run` cannot wrap the program: the
    program leaves a spool in the run directory, and the first ggml-viz command that
    opens the run (or `ggml-viz collect`) turns it into the run.

    example:
      LD_PRELOAD=$(ggml-viz preload-path) GGML_VIZ_OUTPUT=server.ggmlviz llama-server -m model.gguf
      ggml-viz summary server.ggmlviz
    """

    name = "preload-path"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        from ..capture.preload.library import preload_path

        try:
            print(preload_path())
        except CaptureError as error:
            raise CommandError(str(error)) from None
        return 0
