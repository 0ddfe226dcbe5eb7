"""Graphs read at the scheduler's compute call, as on a GPU (no eval callback), checked on the
CPU against the eval callback's reading: GGML_VIZ_READ_GRAPHS=compute makes a CPU program take
the GPU's way. The same graphs, structures, sources and buffers, in a native program (the
preload library) and a Python one (the C extension); llama.cpp reuses its decode graphs, which
are then recorded without being read again. And a run on a CPU gains nothing GPU."""

from __future__ import annotations

import os

import pytest

import ggml_viz
from ggml_viz.runformat.schema import GPU_TABLES

from .native import llama_tool, untraced
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
STRUCTURE = ("structure_nodes", "edges", "tensors")


def completion(model_path, n_predict: int = 24) -> list[str]:
    return [
        str(llama_tool("llama-completion")),
        "-m",
        str(model_path),
        "-p",
        PROMPT,
        "-n",
        str(n_predict),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "-t",
        "2",
        "-c",
        "512",
    ]


def same_recording(a, b) -> None:
    """Two runs of one program recorded the same graphs (their times aside)."""
    graphs_a, graphs_b = (
        r.raw("graphs").drop(columns=["start_ns", "end_ns", "decode_start_ns", "decode_end_ns"]) for r in (a, b)
    )
    assert graphs_a.equals(graphs_b)
    for table in STRUCTURE:
        assert a.raw(table).equals(b.raw(table)), table
    assert a.raw("buffers").drop(columns=["base"]).equals(b.raw("buffers").drop(columns=["base"]))


def test_a_native_program_read_at_the_compute_call(tmp_path, model_path):
    # GIVEN llama-completion recorded through the eval callback, and read at the compute call
    expected = untraced(completion(model_path))
    callback, compute = tmp_path / "callback.ggmlviz", tmp_path / "compute.ggmlviz"
    result = ggml_viz_cli("run", "--detail", "graph", "-o", str(callback), "--", *completion(model_path))
    assert result.returncode == 0, result.stderr
    env = {**os.environ, "GGML_VIZ_READ_GRAPHS": "compute"}
    result = ggml_viz_cli("run", "-o", str(compute), "--", *completion(model_path), env=env)
    assert result.returncode == 0, result.stderr
    # THEN the program said the same, and the two runs hold the same graphs
    assert expected.stdout.strip() and expected.stdout.strip() in result.stdout
    a, b = ggml_viz.open(callback), ggml_viz.open(compute)
    same_recording(a, b)
    # ... llama.cpp reused its decode graphs, which the reading took as repeats of the one before
    assert b.graphs["structure_id"].value_counts().max() > 10
    # ... and read at the compute call, no node carries a host time (the GPU's would)
    assert len(b.raw("node_times")) == 0 and (b.graphs["detail"] == "graph").all()


def test_a_python_program_read_at_the_compute_call(tmp_path, model_path, monkeypatch):
    from llama_cpp import Llama

    def record(path, **env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with ggml_viz.record(path, detail="graph"):
            llm = Llama(str(model_path), n_ctx=512, n_threads=2, verbose=False)
            text = llm(PROMPT, max_tokens=12, temperature=0.0)["choices"][0]["text"]
            del llm
        return text, ggml_viz.open(path)

    text_a, callback = record(tmp_path / "callback.ggmlviz")
    text_b, compute = record(tmp_path / "compute.ggmlviz", GGML_VIZ_READ_GRAPHS="compute")
    assert text_a == text_b
    same_recording(callback, compute)


def test_a_cpu_run_has_nothing_of_a_gpu(tmp_path, model_path):
    # GIVEN a program on a CPU, recorded as by default
    output = tmp_path / "cpu.ggmlviz"
    result = ggml_viz_cli("run", "-o", str(output), "--", *completion(model_path, 4))
    assert result.returncode == 0, result.stderr
    run = ggml_viz.open(output)
    # THEN no GPU table, no GPU section, node times on the host's clock
    assert not any((output / f"{table}.parquet").exists() for table in GPU_TABLES)
    assert "gpu" not in run.manifest and not run.has_gpu_times
    assert set(run.node_totals.loc[run.node_totals["timed"] > 0, "clock"]) == {"host"}
