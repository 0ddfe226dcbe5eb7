"""Fixtures that run the real SmolLM2-135M model through llama-cpp-python."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.modelfile.locate import default_model_path

from .smollm2 import PROMPT, greedy, load_model


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


@dataclass
class RecordedRun:
    path: Path
    text: str
    perf_eval_ms: float  # llama.cpp's own prompt + eval time for the same generation
    run: ggml_viz.runformat.reader.Run


RECORDERS = ["c", "python"]


@pytest.fixture(params=RECORDERS)
def recorder(request) -> str:
    """Tests taking this run once with the C recorder (`--recorder c`) and once with its Python twin."""
    return request.param


def record_five_tokens(path: Path, model_path: Path, recorder: str) -> RecordedRun:
    import llama_cpp

    with ggml_viz.record(path, recorder=recorder, metadata={"prompt": PROMPT}):
        llm = load_model(model_path)
        text = greedy(llm)
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        del llm
    return RecordedRun(path, text, perf.t_p_eval_ms + perf.t_eval_ms, ggml_viz.open(path))


@pytest.fixture(scope="session", params=RECORDERS)
def recorded_run(request, tmp_path_factory, model_path) -> RecordedRun:
    """One greedy 5-token generation recorded with the Python API, by each recorder."""
    return record_five_tokens(tmp_path_factory.mktemp("runs") / "five.ggmlviz", model_path, request.param)


@pytest.fixture(scope="session")
def runs_by_recorder(tmp_path_factory, model_path) -> dict[str, RecordedRun]:
    """The same generation recorded by both recorders."""
    folder = tmp_path_factory.mktemp("pair")
    return {name: record_five_tokens(folder / f"{name}.ggmlviz", model_path, name) for name in RECORDERS}
