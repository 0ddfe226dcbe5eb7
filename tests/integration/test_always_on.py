"""Profiling that stays on: llama-server under `ggml-viz run --dormant` records no graph until a
window is asked for (`ggml-viz capture`, SIGUSR1), each window a complete run of its own; under
`--keep-minutes` windows follow each other and the oldest go."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import ggml_viz
from ggml_viz._errors import RunFormatError

from .servers import ask, free_port, running_server, stop_server

pytestmark = pytest.mark.model

PROMPT = "The three primary colors are"


def _complete(port: int, prompt: str = PROMPT, n_predict: int = 8) -> str:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
    return str(ask(port, "/completion", body)["content"])


@contextmanager
def _requests_flowing(port: int) -> Iterator[list[str]]:
    """Requests one after another on a thread, until the block ends: their answers."""
    answers: list[str] = []
    stop = threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            answers.append(_complete(port, n_predict=6))

    thread = threading.Thread(target=keep_asking)
    thread.start()
    try:
        yield answers
    finally:
        stop.set()
        thread.join(timeout=120)


def _capture(target: str | Path, seconds: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ggml_viz", "capture", str(target), "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _described(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "dormant.json").read_text()))


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_dormant_server_records_no_graph_and_answers_as_a_recorded_one(tmp_path: Path, model_path: Path) -> None:
    # GIVEN a recorded server's answer at temperature 0
    with running_server(tmp_path / "recorded.ggmlviz", model_path, slots=1) as (process, port):
        expected = _complete(port)
        stop_server(process)
    # WHEN a dormant server answers a few requests
    output = tmp_path / "dormant.ggmlviz"
    with running_server(output, model_path, slots=1, recording=["--dormant"]) as (process, port):
        answers = [_complete(port) for _ in range(3)]
        stderr = stop_server(process)
    # THEN the answers are the recorded server's, its llama calls reached the collector, and no window
    # (no graph) was recorded: opening it says so
    assert answers == [expected] * 3, stderr
    described = _described(output)
    assert described["ended"] and described["windows"] == []
    assert described["llama_calls_while_dormant"] >= 3 * 8, described
    assert not list((output / "windows").iterdir())
    with pytest.raises(RunFormatError, match="dormant recording.*no window"):
        ggml_viz.open(output)


def test_windows_on_demand_are_complete_runs_of_their_time_span(tmp_path: Path, model_path: Path) -> None:
    # GIVEN a dormant server under a steady flow of requests
    output = tmp_path / "served.ggmlviz"
    with running_server(output, model_path, slots=1, recording=["--dormant"]) as (process, port):
        with _requests_flowing(port):
            # WHEN a window is asked for by the recording's directory, then by the program's pid, then by
            # SIGUSR1 to ggml-viz run
            by_directory = _capture(output, 3)
            by_program = _capture(str(_children(process.pid)[0]), 2)
            process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(
                w["status"] == "complete" for w in _described(output)["windows"] if w["window"] == 3
            ):
                time.sleep(0.2)
        stop_server(process)
    # THEN each capture printed its window's run, and each of the three is a complete run holding graphs,
    # all within its window's span, joined to the dormant recording
    assert by_directory.returncode == 0, by_directory.stderr
    assert by_program.returncode == 0, by_program.stderr
    paths = [Path(by_directory.stdout.strip()), Path(by_program.stdout.strip()), output / "windows" / "0003.ggmlviz"]
    assert paths[:2] == [output / "windows" / "0001.ggmlviz", output / "windows" / "0002.ggmlviz"]
    for number, path in enumerate(paths, 1):
        run = ggml_viz.open(path)
        window = run.manifest["window_of"]
        assert run.status == "complete" and window["window"] == number and window["run"] == str(output)
        graphs = run.raw("graphs")
        assert len(graphs) > 0
        assert graphs["start_ns"].min() >= window["start_ns"] and graphs["end_ns"].max() <= window["end_ns"]
    spans = [ggml_viz.open(p).manifest["window_of"] for p in paths]
    assert 2.5e9 < spans[0]["end_ns"] - spans[0]["start_ns"] < 6e9
    assert [w["window"] for w in _described(output)["windows"]] == [1, 2, 3]
    with pytest.raises(RunFormatError, match="0001.ggmlviz"):
        ggml_viz.open(output)


def test_capture_refuses_a_target_that_is_not_a_dormant_recording(tmp_path: Path) -> None:
    # GIVEN a folder that is no dormant recording, and a pid that is not recorded
    # WHEN each is the target of a capture
    folder = _capture(tmp_path, 1)
    process = _capture("1", 1)
    # THEN each fails with one line saying why
    assert folder.returncode != 0 and "is not a dormant recording" in folder.stderr
    assert process.returncode != 0 and "not recorded by ggml-viz run --dormant" in process.stderr


def test_a_ring_keeps_the_last_minutes(tmp_path: Path, model_path: Path) -> None:
    # GIVEN a server keeping the last 0.1 minutes (6 s: windows of 3 s) under continuous requests
    output = tmp_path / "ring.ggmlviz"
    with running_server(output, model_path, slots=1, recording=["--keep-minutes", "0.1"]) as (process, port):
        # WHEN it serves for about 20 s
        with _requests_flowing(port):
            time.sleep(20)
        stop_server(process)
    # THEN the windows on disk cover the last 6 s and at most one window more, the older ones are gone,
    # and each kept one opens as a complete run
    windows = _described(output)["windows"]
    kept = [w for w in windows if w["status"] != "removed"]
    assert len(windows) >= 5 and len(kept) < len(windows)
    assert {p.name for p in (output / "windows").iterdir()} == {Path(w["run"]).name for w in kept}
    spans = sorted((w["start_ns"], w["end_ns"]) for w in kept)
    covered = spans[-1][1] - spans[0][0]
    assert 5e9 <= covered <= 6e9 + 2 * 3.5e9, spans
    for window in kept:
        run = ggml_viz.open(output / window["run"])
        assert run.manifest["window_of"]["window"] == window["window"]
        assert len(run.raw("graphs")) > 0


def _scrape(port: int) -> dict[str, float]:
    """Our metrics endpoint's samples, by name (labels dropped: one series each here)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_dormant_server_serves_its_metrics(tmp_path: Path, model_path: Path) -> None:
    # GIVEN a dormant server with its metrics served
    metrics_port = free_port()
    output = tmp_path / "dormant-metrics.ggmlviz"
    recording = ["--dormant", "--metrics", f"127.0.0.1:{metrics_port}"]
    with running_server(output, model_path, slots=2, recording=recording) as (process, port):
        # WHEN four requests are answered, two at a time
        body = {"prompt": PROMPT, "n_predict": 7, "temperature": 0, "ignore_eos": True}
        timings = []
        for _ in range(2):
            with ThreadPoolExecutor(2) as pool:
                timings += list(pool.map(lambda _: ask(port, "/completion", body)["timings"], range(2)))
        # THEN, once the collector has read the calls (written every half second), its counters are
        # the responses': prompt and generated tokens, one time to first token a request
        expected = {
            "ggml_viz_prompt_tokens_total": sum(t["prompt_n"] for t in timings),
            "ggml_viz_generated_tokens_total": sum(t["predicted_n"] for t in timings),
            "ggml_viz_time_to_first_token_seconds_count": len(timings),
        }
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            samples = _scrape(metrics_port)
            if all(samples.get(name) == value for name, value in expected.items()):
                break
            time.sleep(0.5)
        stop_server(process)
    assert {name: samples.get(name) for name in expected} == expected
    # AND no op time: no graph was recorded
    assert not any(name.startswith("ggml_viz_op_seconds") for name in samples)
