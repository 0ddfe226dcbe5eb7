"""llama-bench's two figures, measured in this process through llama-cpp-python, and where their time goes.

`pp`: one batch of `n_prompt` tokens evaluated from an empty context (prompt processing);
`tg`: `n_gen` tokens evaluated one at a time (text generation). Each is repeated after a
warm-up; tokens/s is reported as mean ± standard deviation over the repetitions, beside
llama.cpp's own figure from its perf counters for the same calls. A last repetition runs
traced (inline timing) in a context of its own, for the per-op breakdown.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..._errors import LlamaCppPythonMissing, ModelNotFoundError
from ...runformat.reader import open_run
from ..settings import settings_from_options
from .session import InProcessRecording


@dataclass
class BenchResult:
    test: str  # pp64, tg32
    n_tokens: int
    tokens_per_s: list[float]  # one per repetition, our wall-clock timing
    llama_tokens_per_s: list[float]  # llama.cpp's own perf counters (first decode to synchronize), same calls
    ops: list[dict[str, Any]] = field(default_factory=list)  # per op of the traced repetition

    @property
    def mean(self) -> float:
        return statistics.fmean(self.tokens_per_s)

    @property
    def std(self) -> float:
        return statistics.stdev(self.tokens_per_s) if len(self.tokens_per_s) > 1 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "n_tokens": self.n_tokens,
            "tokens_per_s_mean": self.mean,
            "tokens_per_s_std": self.std,
            "tokens_per_s": self.tokens_per_s,
            "llama_tokens_per_s_mean": statistics.fmean(self.llama_tokens_per_s) if self.llama_tokens_per_s else None,
            "ops": self.ops,
        }


def _load(model_path: Path, n_ctx: int, n_batch: int, threads: int | None) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError as error:
        raise LlamaCppPythonMissing(
            error, "ggml-viz bench", "llama-bench, llama.cpp's own, is the native one"
        ) from None

    try:
        return Llama(
            model_path=str(model_path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=threads,
            n_threads_batch=threads,
            seed=0,
            verbose=False,
        )
    except (ValueError, RuntimeError) as error:
        raise ModelNotFoundError(f"llama.cpp could not load {model_path}: {error}") from None


def _pp(llm: Any, tokens: list[int]) -> tuple[float, float]:
    """Seconds for one batch of the prompt, and llama.cpp's own prompt-eval milliseconds."""
    import llama_cpp

    llm.reset()
    llm._ctx.kv_cache_clear()
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    start = time.perf_counter()
    llm.eval(tokens)
    llama_cpp.llama_synchronize(llm._ctx.ctx)  # llama.cpp's perf counters settle here
    seconds = time.perf_counter() - start
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    return seconds, perf.t_p_eval_ms + perf.t_eval_ms


def _tg(llm: Any, tokens: list[int]) -> tuple[float, float]:
    """Seconds to evaluate the tokens one at a time, and llama.cpp's own eval milliseconds."""
    import llama_cpp

    llm.reset()
    llm._ctx.kv_cache_clear()
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    start = time.perf_counter()
    for token in tokens:
        llm.eval([token])
    llama_cpp.llama_synchronize(llm._ctx.ctx)
    seconds = time.perf_counter() - start
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    return seconds, perf.t_p_eval_ms + perf.t_eval_ms


def run_bench(
    model_path: Path,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    threads: int | None,
    progress: Callable[[str], None] = lambda step: None,
) -> list[BenchResult]:
    rng = np.random.default_rng(0)
    n_ctx = n_prompt + n_gen + 16
    llm = _load(model_path, n_ctx, max(n_prompt, 1), threads)
    vocab = int(llm.n_vocab())
    prompt = [int(t) for t in rng.integers(100, vocab - 1, n_prompt)]
    gen = [int(t) for t in rng.integers(100, vocab - 1, n_gen)]
    tests = [(f"pp{n_prompt}", n_prompt, _pp, prompt), (f"tg{n_gen}", n_gen, _tg, gen)]
    tests = [test for test in tests if test[1] > 0]
    results = []
    for name, n_tokens, measure, tokens in tests:
        measure(llm, tokens)  # warm-up
        ours, theirs = [], []
        for repetition in range(repetitions):
            progress(f"{name}: repetition {repetition + 1} of {repetitions}")
            seconds, llama_ms = measure(llm, tokens)
            ours.append(n_tokens / seconds)
            theirs.append(n_tokens / (llama_ms / 1e3) if llama_ms > 0 else float("nan"))
        results.append(BenchResult(name, n_tokens, ours, theirs))
    del llm
    # The traced repetition: recording starts before its context exists. A warm-up call,
    # then the measured one, which ran the second half of the recorded graphs.
    with tempfile.TemporaryDirectory() as folder:
        for (name, _, measure, tokens), result in zip(tests, results, strict=True):
            progress(f"{name}: traced repetition")
            path = Path(folder) / f"{name}.ggmlviz"
            with InProcessRecording(path, settings=settings_from_options({})):
                traced = _load(model_path, n_ctx, max(n_prompt, 1), threads)
                measure(traced, tokens)
                measure(traced, tokens)
                del traced
            result.ops = _ops_of_second_half(path)
    return results


def _ops_of_second_half(path: Path) -> list[dict[str, Any]]:
    """Time by op over the second half of a run's graphs (the measured call)."""
    run = open_run(path)
    graphs = run.graphs["graph_id"].sort_values().to_numpy()
    measured = graphs[len(graphs) // 2 :]
    nodes = run.nodes
    nodes = nodes[nodes["graph_id"].isin(measured) & nodes["timed"]]
    total = nodes["duration_ns"].sum()
    table = nodes.groupby("op")["duration_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return [
        {
            "op": op,
            "time_ns": int(row["sum"]),
            "share": float(row["sum"] / total) if total else 0.0,
            "events": int(row["size"]),
        }
        for op, row in table.iterrows()
    ]
