from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path

from .._errors import CommandError
from .base import Command

# How long past the window's own length the answer may take: the process switches spools at its next
# call or within a quarter second when idle, and the window's run is then written
ANSWER_GRACE_S = 60.0


class CaptureCommand(Command):
    """Record the next seconds of a dormant recording (`ggml-viz run --dormant`) as a run of its own.

    TARGET is the dormant recording's directory, the pid of the program it records, or the pid
    of its `ggml-viz run`. The program keeps serving; the window's run (OUTPUT/windows/NNNN.ggmlviz)
    is complete when this command prints its path. `kill -USR1 <ggml-viz run's pid>` opens a
    window of the default length too.

    example:
      ggml-viz capture server.ggmlviz --seconds 10
      ggml-viz capture $(pgrep llama-server) --seconds 5
    """

    name = "capture"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", help="a dormant recording's directory, or its program's (or ggml-viz run's) pid")
        parser.add_argument("--seconds", type=float, default=10.0, help="how long to record (default 10)")

    def run(self, args: argparse.Namespace) -> int:
        from ..capture.preload.windows import ANSWER_SUFFIX, REQUESTS_DIR, read_dormant

        if not args.seconds > 0:
            raise CommandError("--seconds must be more than 0")
        run_dir = dormant_directory(args.target)
        described = read_dormant(run_dir)
        if described is None:
            raise CommandError(f"{run_dir} is not a dormant recording (recorded with ggml-viz run --dormant)")
        if described.get("ended") or not _alive(int(described.get("collector_pid") or 0)):
            raise CommandError(f"the dormant recording {run_dir} has ended: its program is no longer running")
        if described.get("keep_minutes"):
            raise CommandError(
                f"{run_dir} is a ring (--keep-minutes): its windows are recorded already, in {run_dir / 'windows'}"
            )
        requests = run_dir / REQUESTS_DIR
        name = uuid.uuid4().hex
        partial = requests / f"{name}.json.partial"
        partial.write_text(json.dumps({"seconds": args.seconds}), encoding="utf-8")
        os.replace(partial, requests / f"{name}.json")
        answer_path = requests / f"{name}{ANSWER_SUFFIX}"
        deadline = time.monotonic() + args.seconds + ANSWER_GRACE_S
        while not answer_path.exists():
            if time.monotonic() > deadline or not _alive(int(described.get("collector_pid") or 0)):
                raise CommandError(f"no window came from {run_dir}: its ggml-viz run did not answer")
            time.sleep(0.1)
        answer = json.loads(answer_path.read_text(encoding="utf-8"))
        answer_path.unlink(missing_ok=True)
        if "error" in answer:
            raise CommandError(f"no window was recorded: {answer['error']}")
        print(answer["run"])
        return 0


def dormant_directory(target: str) -> Path:
    """The dormant recording a target names: a directory, or a pid whose environment (or whose child's:
    `ggml-viz run`'s program) has GGML_VIZ_OUTPUT."""
    if not target.isdigit():
        if not Path(target).is_dir():
            raise CommandError(f"no such dormant recording: {target}")
        return Path(target).absolute()
    pid = int(target)
    if not _alive(pid):
        raise CommandError(f"no process {pid}")
    for candidate in [pid, *_children(pid)]:
        output = _environment(candidate).get("GGML_VIZ_OUTPUT")
        if output:
            return Path(output)
    raise CommandError(
        f"process {pid} is not recorded by ggml-viz run --dormant (no GGML_VIZ_OUTPUT in its environment)"
    )


def _alive(pid: int) -> bool:
    return pid > 0 and Path(f"/proc/{pid}").exists()


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _environment(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key: value for key, value in pairs}
