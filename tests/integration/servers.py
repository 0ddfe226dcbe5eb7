"""llama-server under `ggml-viz run` for the tests: a free port, the server started with its
slots, and the wait until it answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .native import llama_tool


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_server(port: int, process: subprocess.Popen, timeout: float = 180, path: str = "/health") -> None:
    """Until the server answers `path` (llama-server's /health; another server's page)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server ended early ({process.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError("the server did not become ready")


def start_server(
    output: Path,
    model_path: Path,
    slots: int = 2,
    context: int = 2048,
    extra: Sequence[str] = (),
    recording: Sequence[str] = (),
) -> tuple[subprocess.Popen, int]:
    """llama-server with `slots` slots (and the options `extra`) recorded into `output` (with
    `ggml-viz run`'s options `recording`), once it answers: the process (the wrapper's) and the
    server's port."""
    port = free_port()
    command = [
        str(llama_tool("llama-server")),
        "-m",
        str(model_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(slots),
        "-c",
        str(context),
        "-t",
        "2",
        *extra,
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", "run", *recording, "-o", str(output), "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_server(port, process)
    return process, port
