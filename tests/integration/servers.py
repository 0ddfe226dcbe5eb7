"""llama-server under `ggml-viz run` for the tests: a free port, the server started with its
slots, and the wait until it answers."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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
    # The server's log goes to a file: a pipe nobody reads until the end fills under a flow of
    # requests, and then llama-server's logging thread, and its main loop with it, wait forever.
    log = output.with_name(output.name + ".stderr")
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "ggml_viz", "run", *recording, "-o", str(output), "--", *command],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    _logs[process.pid] = log
    wait_for_server(port, process)
    return process, port


_logs: dict[int, Path] = {}  # each started server's log file, by the wrapper's pid


def server_log(process: subprocess.Popen) -> str:
    """What the wrapper and its server wrote on their standard error so far."""
    return _logs[process.pid].read_text(errors="replace")


@contextlib.contextmanager
def running_server(output: Path, model_path: Path, **options: Any) -> Iterator[tuple[subprocess.Popen, int]]:
    """start_server's server (its options), killed on the way out if it is still running (a test
    stops it with stop_server, to read the run it wrote)."""
    process, port = start_server(output, model_path, **options)
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()


def stop_server(process: subprocess.Popen) -> str:
    """Ctrl-C to the wrapper, which writes the run; its stderr once it ended."""
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    return server_log(process)


def ask(port: int, path: str, body: dict[str, Any] | None = None, timeout: float = 300) -> Any:
    """The server's JSON answer to `path`: a GET, or a POST of `body` as JSON."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.load(answer)


def kv_cell_bytes(model_path: Path) -> int:
    """The bytes one KV cache cell of all layers holds, K and V in f16: n_layer × (n_embd_k_gqa +
    n_embd_v_gqa) × 2, from the model file's hyperparameters (a head's key and value length, or,
    where the file gives none, the embedding length over the heads)."""
    from gguf import GGUFReader

    fields = GGUFReader(model_path).fields
    architecture = str(fields["general.architecture"].contents())

    def value(key: str, default: int | None = None) -> int:
        field = fields.get(f"{architecture}.{key}")
        return int(field.contents()) if field is not None else int(default)  # type: ignore[arg-type]

    head = value("embedding_length") // value("attention.head_count")
    k_and_v = value("attention.key_length", head) + value("attention.value_length", head)
    return value("block_count") * value("attention.head_count_kv") * k_and_v * 2
