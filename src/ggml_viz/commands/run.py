from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

from .._errors import CaptureError, CommandError
from ..capture.settings import CaptureSettings, selection_from
from ..runformat.reader import open_run
from ..runformat.writer import prepare_run_dir
from .base import Command
from .common import add_capture_arguments, capture_environment, capture_options, print_short_summary
from .record import default_output


class RunCommand(Command):
    """Run a program that uses llama-cpp-python and record it, without changing its code.

    Same as setting GGML_VIZ_OUTPUT yourself. The program must run in the Python
    environment where ggml-viz is installed (its start-up hook does the recording).

    example:
      ggml-viz run -o chat.ggmlviz -- python app.py --prompt "hello"
      ggml-viz run --detail graph -o cheap.ggmlviz -- python server.py
    """

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-o", "--output", default=None, help="run directory to write (default: run-DATE.ggmlviz)")
        parser.add_argument("-f", "--force", action="store_true", help="replace the output run if it exists")
        parser.add_argument("-v", "--verbose", action="store_true", help="say what is attached")
        add_capture_arguments(parser)
        parser.add_argument("program", nargs=argparse.REMAINDER, help="the command to run, after --")

    def run(self, args: argparse.Namespace) -> int:
        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not program:
            raise CommandError("no program given; example: ggml-viz run -o out.ggmlviz -- python app.py")
        if shutil.which(program[0]) is None and not Path(program[0]).exists():
            raise CommandError(f"program not found: {program[0]}")
        output = Path(args.output or default_output()).absolute()
        prepare_run_dir(output, overwrite=args.force)  # clear errors now, not inside the program
        output.rmdir()  # the program's recorder creates it when a context appears
        try:
            CaptureSettings(**{k: v for k, v in capture_options(args).items() if k in ("detail", "policy", "recorder")})
            selection_from(args.ops, args.layers, args.names)
        except CaptureError as error:
            raise CommandError(str(error)) from None
        env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")}
        env.update(capture_environment(args), GGML_VIZ_OUTPUT=str(output))
        if args.verbose:
            env["GGML_VIZ_VERBOSE"] = "1"
        try:
            exit_code = subprocess.call(program, env=env)
        except OSError as error:
            raise CommandError(f"cannot run {program[0]}: {error.strerror or error}", exit_code=1) from None
        if output.exists():
            print(f"run written to {output}")
            print_short_summary(open_run(output))
        else:
            print(
                "ggml-viz: no run was written: the program created no llama context, or it ran in a "
                "Python environment without ggml-viz"
            )
        return exit_code
