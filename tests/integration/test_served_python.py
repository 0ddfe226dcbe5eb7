"""llama-cpp-python's own server (python -m llama_cpp.server) under `ggml-viz run`: its requests
read from the graphs, against what the server answers (each response's usage) and llama.cpp's own
counters for each completion (the timings it prints, verbose)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.analysis.requests import request_batches, request_times, requests

from .servers import ask, free_port, wait_for_server

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")

# The second extends the first (the Llama object keeps the first's tokens: its prefix is not
# computed again); the last two arrive together (the server takes one at a time).
PROMPTS = ["Once upon a time", "Once upon a time there was a", "The capital of France is", "Water boils at"]
N_PREDICT = 8
PERF = re.compile(r"llama_perf_context_print:\s+(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+) (?:tokens|runs)")


def _complete(port: int, prompt: str) -> dict:
    return ask(port, "/v1/completions", {"prompt": prompt, "max_tokens": N_PREDICT, "temperature": 0})


def test_llama_cpp_python_s_server_s_requests_are_its_completions(tmp_path, model_path):
    # GIVEN llama-cpp-python's server under ggml-viz run
    output = tmp_path / "python-server.ggmlviz"
    port = free_port()
    server_command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--port", str(port)]
    server_command += ["--n_ctx", "2048", "--n_threads", "2", "--n_threads_batch", "2", "--verbose", "True"]
    log = tmp_path / "server.log"  # (verbose: more than a pipe holds while nobody reads it)
    server = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", "run", "-o", str(output), "--", *server_command],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        text=True,
    )
    try:
        wait_for_server(port, server, path="/v1/models")
        # WHEN it completes two prompts one after the other, then two arriving together
        answers = [_complete(port, prompt) for prompt in PROMPTS[:2]]
        with ThreadPoolExecutor(2) as pool:
            answers += list(pool.map(lambda prompt: _complete(port, prompt), PROMPTS[2:]))
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    stderr = log.read_text()
    run = ggml_viz.open(output)
    assert run.status == "complete", stderr[-3000:]
    # llama.cpp's own figures, printed once per completion in the order they ran
    printed = [(kind, float(ms), int(count)) for kind, ms, count in PERF.findall(stderr)]
    perf = [dict(zip(("prompt", "eval"), printed[i : i + 2], strict=True)) for i in range(0, len(printed), 2)]
    assert len(perf) == len(PROMPTS)
    # THEN the run holds one request per completion, in the order they ran
    times = request_times(run)
    texts = requests(run)
    assert len(times) == len(texts) == len(PROMPTS)
    order = [next(i for i, prompt in enumerate(PROMPTS) if prompt.endswith(text["prompt"].strip())) for text in texts]
    assert order[:2] == [0, 1] and sorted(order) == list(range(len(PROMPTS)))
    # AND each one's tokens are the server's: its whole prompt (computed or kept from the
    # completion before) and the completion's tokens
    for ours, index, counters in zip(times.to_dict(orient="records"), order, perf, strict=True):
        usage = answers[index]["usage"]
        assert ours["prompt_n"] + ours["cache_n"] == usage["prompt_tokens"], (PROMPTS[index], ours)
        assert ours["predicted_n"] == usage["completion_tokens"]
        # ... and llama.cpp's counts: the prompt tokens it computed, the tokens fed back
        assert ours["prompt_n"] == counters["prompt"][2] and ours["predicted_n"] - 1 == counters["eval"][2]
    assert times.cache_n.iloc[1] > 0  # the second prompt's start was kept
    # AND the time of its decode steps (the calls after its prompt's) is llama.cpp's eval time, within 5 %
    batches = request_batches(run).merge(times[["request", "prompt_end_ns"]], on="request")
    steps = batches[batches.start_ns >= batches.prompt_end_ns]
    decode_ms = (steps.end_ns - steps.start_ns).groupby(steps.request).sum() / 1e6
    compared = pd.DataFrame({"ours": decode_ms.to_numpy(), "llama.cpp": [counters["eval"][1] for counters in perf]})
    assert ((compared.ours - compared["llama.cpp"]).abs() <= 0.05 * compared["llama.cpp"]).all(), compared
    # AND its prompt's time is llama.cpp's prompt eval time, within 5 %, where that counter holds the
    # prompt's compute: llama.cpp counts from a call's start to its next synchronization, and a call
    # that first updates the memory (after llama-cpp-python cleared it for a prompt of no common
    # prefix, or the context's first call) synchronizes before computing: its counter then reads a
    # few microseconds for the whole prompt
    counted = [
        (ours, counters["prompt"][1])
        for ours, counters in zip(times.prompt_ms, perf, strict=True)
        if counters["prompt"][1] >= 1.0
    ]
    assert counted and all(abs(ours - theirs) <= 0.05 * theirs for ours, theirs in counted), counted
