"""The decode rate and bandwidth ggml-viz reports for llama.cpp's llama-bench, checked against the
figures llama-bench itself reports for the same runs (its JSON: samples_ns, avg_ts, model_size).

llama-bench's avg_ts is the mean of its repetitions' rates (samples_ts), not their tokens over
their time: on a machine shared with other jobs one repetition can take ten times another's
(measured here: 0.85, 7.3 and 14.4 t/s in one run), and then no summary of the whole run agrees
with it. So each repetition is checked against its own sample, which holds on any machine, and
the run's summary against llama-bench's figures only where llama-bench's own repetitions agree
with each other (within 15%: a machine steady enough to time on); otherwise that test skips,
saying so.
"""

from __future__ import annotations

import json
import os
import statistics

import pytest

import ggml_viz

from .native import llama_tool
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

N_GEN = 32
REPETITIONS = 3
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def bench(tmp_path_factory, model_path):
    """llama-bench's text-generation test (no prompt test) recorded by ggml-viz: its JSON figure,
    the run, and the run's summary, judged against this machine's limits (measured first, small:
    the summary's decode step needs a bandwidth to judge by)."""
    folder = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "GGML_VIZ_LIMITS_DIR": str(folder / "limits")}
    measured = ggml_viz_cli(
        "limits",
        "--threads",
        "2",
        "--types",
        "Q4_1",
        "--size-mib",
        "64",
        "--repeats",
        "1",
        "--no-gpu",
        "--json",
        env=env,
    )
    assert measured.returncode == 0, measured.stderr
    output = folder / "bench.ggmlviz"
    command = [
        str(llama_tool("llama-bench")),
        "-m",
        str(model_path),
        "-p",
        "0",
        "-n",
        str(N_GEN),
        "-r",
        str(REPETITIONS),
        "-t",
        "2",
        "-o",
        "json",
    ]
    recorded = ggml_viz_cli("run", "-o", str(output), "--", *command, env=env)
    assert recorded.returncode == 0, recorded.stderr
    (figure,) = json.loads(recorded.stdout)  # one test: tg32
    summary = ggml_viz_cli("summary", "--json", str(output), env=env)
    assert summary.returncode == 0, summary.stderr
    print(f"llama-bench: avg_ts {figure['avg_ts']:.2f}, samples_ts {figure['samples_ts']}")
    return figure, ggml_viz.open(output), json.loads(summary.stdout)


def steady(figure) -> None:
    """Skip unless llama-bench's repetitions agree with each other within TOLERANCE."""
    rates = figure["samples_ts"]
    if max(rates) > (1 + TOLERANCE) * min(rates):
        pytest.skip(f"the machine was too busy to compare rates: llama-bench's own repetitions ran at {rates} t/s")


def test_each_repetition_s_rate_agrees_with_llama_bench_s_sample(bench):
    # GIVEN llama-bench generating 32 tokens three times (after one warm-up token), recorded by ggml-viz
    figure, run, _ = bench
    assert figure["n_gen"] == N_GEN and figure["n_prompt"] == 0 and len(figure["samples_ns"]) == REPETITIONS
    graphs = run.graphs.sort_values("start_ns").reset_index(drop=True)
    # WHEN the run's graphs are cut into the repetitions: each starts a sequence (a prompt graph at
    # position 0), then decodes 31 tokens one by one
    starts = graphs.index[graphs.phase == "prompt"][-REPETITIONS:]
    assert len(graphs) == 1 + REPETITIONS * N_GEN
    for start, sample_ns, sample_ts in zip(starts, figure["samples_ns"], figure["samples_ts"], strict=True):
        repetition = graphs.iloc[start : start + N_GEN]
        assert list(repetition.phase) == ["prompt"] + ["decode"] * (N_GEN - 1)
        span_ns = repetition.decode_end_ns.iloc[-1] - repetition.decode_start_ns.iloc[0]
        # THEN each repetition's llama_decode calls take the time llama-bench measured for it, and
        # run at its rate, within 15%
        print(f"repetition: ggml-viz {N_GEN / span_ns * 1e9:.2f} t/s, llama-bench {sample_ts:.2f} t/s")
        assert span_ns == pytest.approx(sample_ns, rel=TOLERANCE)
        assert N_GEN / span_ns * 1e9 == pytest.approx(sample_ts, rel=TOLERANCE)


def test_summary_s_decode_rate_agrees_with_llama_bench_s_own(bench):
    # GIVEN llama-bench's text generation recorded by ggml-viz, on a machine steady enough to time on
    figure, _, summary = bench
    steady(figure)
    # WHEN the summary counts the decode steps per second of graph time
    decode = next(phase for phase in summary["phases"] if phase["phase"] == "decode")
    # (each repetition's first token starts its sequence: a prompt graph, the other 31 decode steps)
    assert decode["graphs"] == decode["tokens"] == REPETITIONS * (N_GEN - 1)
    # THEN the rate is llama-bench's own tokens per second within 15%
    print(f"decode: ggml-viz {decode['tokens_per_s']:.2f} t/s, llama-bench {figure['avg_ts']:.2f} t/s")
    assert decode["tokens_per_s"] == pytest.approx(figure["avg_ts"], rel=TOLERANCE), (decode, figure["avg_ts"])


def test_decode_bandwidth_is_the_weights_read_per_step_at_llama_bench_s_rate(bench):
    # GIVEN the weight bytes the summary finds each decode step reads: the whole model once
    # (llama-bench's own model_size: every tensor's bytes in the GGUF file)
    figure, _, summary = bench
    step_bytes = summary["weight_reads"]["weight_bytes_per_decode_step"]
    assert step_bytes == pytest.approx(figure["model_size"], rel=0.01), (step_bytes, figure["model_size"])
    # WHEN the summary reports the decode step's bandwidth (against the limits measured here)
    step = summary["roofline"]["decode_step"]
    assert step is not None, summary["roofline"]
    # THEN, where the machine was steady (the summary takes the median step; llama-bench, means),
    # it is those bytes at llama-bench's own rate, within 15%
    steady(figure)
    expected = step_bytes * statistics.median(figure["samples_ts"]) / 1e9
    print(f"decode step: ggml-viz {step['gb_per_s']:.3f} GB/s, bytes x llama-bench t/s {expected:.3f} GB/s")
    assert step["gb_per_s"] == pytest.approx(expected, rel=TOLERANCE), (step, figure["samples_ts"])
