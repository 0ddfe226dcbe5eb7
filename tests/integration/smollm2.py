"""Running the real SmolLM2-135M model in tests: settings and small helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROMPT = "The capital of France is"
N_PREDICT = 5
THREADS = 2


def load_model(model_path: Path, **overrides):
    from llama_cpp import Llama

    settings = dict(model_path=str(model_path), n_ctx=512, n_threads=THREADS, seed=0, verbose=False)
    settings.update(overrides)
    return Llama(**settings)


def greedy(llm, prompt: str = PROMPT, n_predict: int = N_PREDICT) -> str:
    return llm(prompt, max_tokens=n_predict, temperature=0.0)["choices"][0]["text"]


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a Python snippet in a fresh interpreter of this environment."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ggml_viz_cli(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ggml_viz", *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )
