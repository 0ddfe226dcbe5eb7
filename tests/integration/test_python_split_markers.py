"""The splits of a Python program's traced computes, marked for the GPU timer: llama-cpp-python
on the CPU taken for a CUDA program (its graphs read at the compute call, its computes traced
with the stand-in libcupti, tests/native/fake_cupti.c), so the C extension's path is run
whole on a machine without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.capture.contract.constants import NODE_CALL_CPU, NODE_CALL_SPLIT, NODE_CALL_SPLIT_END
from ggml_viz.capture.gpu.records import GpuWindow
from ggml_viz.capture.llama_cpp_python import gpu, session

pytestmark = pytest.mark.model

FAKE_CUPTI = Path(__file__).parents[1] / "native" / "fake_cupti.c"


def test_each_split_of_a_traced_compute_is_marked_where_it_began_and_returned(tmp_path, model_path, monkeypatch):
    from llama_cpp import Llama

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    fake = tmp_path / "libfake_cupti.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(fake), str(FAKE_CUPTI)], check=True)
    # GIVEN a context on the CPU read at the compute call as a CUDA one is, traced with the stand-in
    monkeypatch.setenv("GGML_VIZ_READ_GRAPHS", "compute")
    monkeypatch.setenv("GGML_VIZ_CUPTI", str(fake))
    reading = gpu.gpu_reading
    cuda = gpu.GpuReading(timed_device=gpu.CUDA)
    monkeypatch.setattr(gpu, "gpu_reading", lambda settings: reading(settings) and cuda)
    windows: list[GpuWindow] = []
    parse = session.parse_window
    monkeypatch.setattr(session, "parse_window", lambda payload: windows.append(parse(payload)) or windows[-1])
    # WHEN it generates
    with ggml_viz.record(tmp_path / "splits.ggmlviz"):
        llm = Llama(str(model_path), n_ctx=512, n_threads=2, verbose=False)
        llm("The capital of France is", max_tokens=6, temperature=0.0)
        del llm
    # THEN each traced compute has its one split (the whole graph, on the CPU) marked at node 0,
    # where its compute call began and where it returned
    computes = [c for w in windows for c in w.computes["compute"].tolist()]
    assert computes
    markers = [
        (int(call["compute"]), int(call["node_index"]), int(call["flags"]))
        for w in windows
        for call in w.node_calls
        if call["flags"]
    ]
    split = NODE_CALL_SPLIT | NODE_CALL_CPU
    assert markers == [marker for c in computes for marker in ((c, 0, split), (c, 0, split | NODE_CALL_SPLIT_END))]
