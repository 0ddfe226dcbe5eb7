"""Recording a native program (llama-server, llama-cli, whisper.cpp, anyone's ggml code):
the preload library goes in with LD_PRELOAD, the collector turns its spool into the run
while the program runs, and the program's exit status comes back unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

from ...runformat.schema import SPOOL_DIR
from ..core.observer import RecordingObserver
from ..core.recording import Recording
from ..gpu.vulkan_layer import layer_environment
from ..settings import CaptureSettings
from .collector import SpoolCollector, SpoolRecording
from .library import preload_path
from .windows import DormantRecording

COLLECT_INTERVAL_S = 0.1


class ProgramKind(Enum):
    PYTHON = "python"  # llama-cpp-python recorded by the start-up hook, other ggml bindings by the preload library
    NATIVE = "native"  # loads ggml's shared libraries: recorded by the preload library
    STATIC = "static"  # an executable that loads no ggml library: nothing to interpose
    UNKNOWN = "unknown"  # a script or wrapper: try the preload library; its children may load ggml


def program_kind(executable: str) -> ProgramKind:
    """What kind of program `executable` (a path or a name on PATH) is."""
    path = os.path.realpath(shutil.which(executable) or executable)
    if re.match(r"python[0-9.]*$", Path(path).name):
        return ProgramKind.PYTHON
    try:
        with open(path, "rb") as file:
            head = file.read(256)
    except OSError:
        return ProgramKind.UNKNOWN
    if head.startswith(b"#!"):
        interpreter = head[2:].split(b"\n", 1)[0].decode(errors="replace")
        return ProgramKind.PYTHON if re.search(r"python[0-9.]*\b", interpreter) else ProgramKind.UNKNOWN
    if not head.startswith(b"\x7fELF"):
        return ProgramKind.UNKNOWN
    return ProgramKind.NATIVE if _loads_ggml(path) else ProgramKind.STATIC


def _loads_ggml(path: str) -> bool:
    """Whether the dynamic loader would bring a ggml or llama shared library into `path`."""
    try:
        listed = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: let the preload library find out
    return bool(re.search(r"\blib(ggml|llama|whisper)[\w.-]*\.so", listed))


class ProgramRun(NamedTuple):
    """How a program run under the preload library ended."""

    exit_status: int  # 128 + N when a signal N ended it, as a shell says
    # processes that ran untraced (their ggml is not one ggml-viz reads), as their spool notes
    # say: each said why on its standard error, and is in no run
    untraced: list[dict[str, Any]]


def run_native(
    program: list[str],
    run_dir: Path,
    settings: CaptureSettings,
    env: dict[str, str],
    verbose: bool = False,
    python: bool = False,
    observer: RecordingObserver | None = None,
) -> ProgramRun:
    """Run `program` with the preload library, collecting its spool into `run_dir` as it runs.
    python: a Python program, whose start-up hook records llama-cpp-python's contexts itself
    (then no spool comes, and the run is the hook's): the run is made only once a spool comes
    (the graphs of another ggml binding). Where no process recorded, no run is left in `run_dir`
    (a Python program's hook may have made its own there). observer: told what the collector
    reads as it reads it (`--metrics`)."""
    recording: SpoolRecording = Recording(run_dir, settings=settings, verbose=verbose, lazy=python)
    recording.observer = observer
    collector = SpoolCollector(recording)
    preloaded = " ".join(filter(None, [str(preload_path()), env.get("LD_PRELOAD")]))
    # the Vulkan layer too, which times GPU nodes on Vulkan when the program computes there (and
    # else passes every call on): only where GPU times are wanted
    vulkan = layer_environment(env) if settings.gpu != "off" and settings.detail != "graph" else {}
    process = subprocess.Popen(program, env={**env, **vulkan, "LD_PRELOAD": preloaded, "GGML_VIZ_OUTPUT": str(run_dir)})
    _yield_to_the_program()
    forward = _forwarder(process)
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while process.poll() is None:
            _collect(collector)
            time.sleep(COLLECT_INTERVAL_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    exit_status = process.wait()
    _collect(collector)
    if collector.started:
        collector.finish(exit_status)
    else:  # no process recorded: nothing to finish
        shutil.rmtree(run_dir / SPOOL_DIR, ignore_errors=True)  # untraced processes' notes, if any
        if not python:
            shutil.rmtree(run_dir, ignore_errors=True)
        elif run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
    return ProgramRun(exit_status if exit_status >= 0 else 128 - exit_status, collector.untraced)


def run_dormant(
    program: list[str],
    run_dir: Path,
    settings: CaptureSettings,
    env: dict[str, str],
    keep_minutes: float | None = None,
    verbose: bool = False,
    observer: RecordingObserver | None = None,
) -> ProgramRun:
    """Run `program` with the preload library in, dormant: no graph recorded, each llama call's batch
    still collected; windows recorded on demand (`ggml-viz capture`, SIGUSR1 to this process) or, with
    `keep_minutes`, back to back in a ring of that many minutes (windows.py)."""
    dormant = DormantRecording(run_dir, settings, keep_minutes=keep_minutes, verbose=verbose, observer=observer)
    preloaded = " ".join(filter(None, [str(preload_path()), env.get("LD_PRELOAD")]))
    process = subprocess.Popen(
        program, env={**env, **dormant.environment, "LD_PRELOAD": preloaded, "GGML_VIZ_OUTPUT": str(run_dir)}
    )
    dormant.program_started(program, process.pid)
    dormant.start_steering()
    _share_with_the_program()
    forward = _forwarder(process)  # (the window in progress ends with the program, as a run ends)

    def open_window(signum: int, frame: FrameType | None) -> None:
        dormant.request()

    handlers = {signal.SIGINT: forward, signal.SIGTERM: forward, signal.SIGHUP: forward, signal.SIGUSR1: open_window}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        while process.poll() is None:
            dormant.poll()
            time.sleep(COLLECT_INTERVAL_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    exit_status = process.wait()
    dormant.finish(exit_status)
    return ProgramRun(exit_status if exit_status >= 0 else 128 - exit_status, [])


def _forwarder(process: subprocess.Popen[bytes]) -> Callable[[int, FrameType | None], None]:
    """A signal handler passing Ctrl-C and kill on to the program, which ends the way it chooses;
    we collect to the end."""

    def forward(signum: int, frame: FrameType | None) -> None:
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    return forward


def _yield_to_the_program() -> None:
    """The collector runs only on CPU time the program leaves (the program, started first,
    keeps its own priority). ggml's threads wait for each other spinning at every node: a
    collector taking a core from one of them while they compute would stall each node, not
    just take its share. The spool waits on disk meanwhile; nothing is lost."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


# A recording that stays on cannot wait for the program to pause: under a server's constant load
# an idle-priority collector never runs, so its windows never close, a ring never drops its old
# windows, and its spool grows without bound. It takes a small share instead (a tenth of a core
# the program wants, at this niceness), and while dormant it has almost nothing to do.
ALWAYS_ON_NICENESS = 10


def _share_with_the_program() -> None:
    os.nice(ALWAYS_ON_NICENESS)


def _collect(collector: SpoolCollector) -> None:
    """One pass of the collector; a failure stops recording, never the program."""
    if collector.recording.failed is not None:
        return
    try:
        collector.poll()
    except Exception as error:  # noqa: BLE001 - the program goes on whatever the collector meets
        collector.recording.fail(f"collecting the spool failed: {error}")


def describe_exit(status: int) -> str:
    if status > 128 and status - 128 in signal.Signals._value2member_map_:
        return f"ended by {signal.Signals(status - 128).name}"
    return f"exit status {status}"
