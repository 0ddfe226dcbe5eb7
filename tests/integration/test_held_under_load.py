"""A short version of benchmarks/served_load.py: llama-server with four slots and eight clients
asking without pause, recorded, then killed outright in the middle of the load. What it had
written, up to its last write (a half second at most before the kill), is a run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import ggml_viz
from ggml_viz.analysis.requests import requests_summary

from .servers import ask, running_server

pytestmark = pytest.mark.model

PROMPTS = ["Once upon a time", "List three colors:", "Water boils at", "A haiku about the sea:"]
CLIENTS = 8
LOAD_S = 8.0
# The preload library writes a context's graphs every half second (or every 32 graphs): what a
# SIGKILL takes is at most that, and the calls in flight.
WRITE_INTERVAL_S = 0.5


def _load(port: int) -> tuple[list[dict[str, Any]], float]:
    """Clients asking without pause until LOAD_S have passed and each client had an answer (at most
    a minute, on a busy machine): the answers' timings so far, and the seconds the load ran."""
    started = time.monotonic()
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    body = {"n_predict": 16, "temperature": 0, "ignore_eos": True}

    def client(index: int) -> None:
        turn = index
        while True:
            try:
                timings = ask(port, "/completion", {**body, "prompt": PROMPTS[turn % len(PROMPTS)]})["timings"]
            except OSError:
                return  # the server was killed under it
            with lock:
                answers.append(timings)
            turn += 1

    for index in range(CLIENTS):
        threading.Thread(target=client, args=(index,), daemon=True).start()
    while time.monotonic() - started < 60 and (time.monotonic() - started < LOAD_S or len(answers) < CLIENTS):
        time.sleep(0.1)
    with lock:
        return list(answers), time.monotonic() - started


def test_a_server_killed_under_load_keeps_all_it_wrote(tmp_path: Path, model_path: Path) -> None:
    # GIVEN llama-server under ggml-viz run, eight clients asking without pause
    output = tmp_path / "loaded.ggmlviz"
    with running_server(output, model_path, slots=4, context=2048) as (server, port):
        answers, seconds = _load(port)
        answered = sum(timings["predicted_n"] for timings in answers)
        # WHEN the server is killed outright while the clients still ask
        server_pid = int(next((output / "spool").glob("*.spool")).stem)
        os.kill(server_pid, signal.SIGKILL)
        server.communicate(timeout=120)
    # THEN the run opens, incomplete, saying why
    run = ggml_viz.open(output)
    assert run.status == "incomplete" and "killed by signal 9" in run.manifest["incomplete_reason"]
    # AND it holds the tokens of every answer given, but for those of its last write at most
    # (requests still in flight add theirs: it may hold more)
    recorded = requests_summary(run)["predicted_tokens"]
    rate = answered / seconds  # generated tokens a second
    assert len(answers) >= CLIENTS and recorded >= answered - rate * WRITE_INTERVAL_S, (recorded, answered)
