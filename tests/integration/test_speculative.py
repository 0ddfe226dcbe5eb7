"""llama-server's speculative decoding, recorded unchanged and told apart: a draft model (`-md`)
whose drafts the target mostly accepts (the target's own weights, coarser), one whose drafts it
rejects (other random weights), and draftless n-gram drafts; what ggml-viz reads from the graphs
alone against what the server says in each response (`timings.draft_n`, `draft_n_accepted`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as GGMLType

import ggml_viz
from ggml_viz.analysis.breakdowns import requests
from ggml_viz.analysis.speculative import speculative_summary
from ggml_viz.analysis.speculative_batches import find_speculation

from .arch_models import write_model
from .servers import ask, running_server, stop_server
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

N_PREDICT = 20
PROMPTS = ["The capital of France is", "Once upon a time there was", " ".join(["one two three"] * 5)]
DRAFT_FLAGS = ["--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--spec-draft-n-min", "0"]
# n-grams of one token, drafting up to 4: the greedy text of random weights repeats itself soon
NGRAM_FLAGS = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny llama target, and drafts on its vocabulary: its own weights in 4-bit types (close to
    its choices: many drafts accepted) and other random weights (most drafts rejected)."""
    folder = tmp_path_factory.mktemp("speculative-models")
    coarse = {"matrix_type": GGMLType.Q4_0, "embedding_type": GGMLType.Q4_0, "output_type": GGMLType.Q4_0}
    return {
        "target": write_model(folder / "target.gguf", "llama").path,
        "close": write_model(folder / "close-draft.gguf", "llama", **coarse).path,
        "other": write_model(folder / "other-draft.gguf", "llama", seed=7).path,
    }


def _serve_and_ask(output: Path, target: Path, flags: list[str], n_predict: int = N_PREDICT) -> list[dict]:
    """llama-server with one slot under ggml-viz run, asked each prompt greedily for n_predict tokens
    (never stopping early, so a request ends at its length); the responses' timings."""
    with running_server(output, target, slots=1, context=1024, extra=flags) as (process, port):
        timings = [
            ask(port, "/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True})[
                "timings"
            ]
            for prompt in PROMPTS
        ]
        stderr = stop_server(process)
    assert "run written to" in stderr, stderr[-3000:]
    return timings


def _per_request(run) -> list[tuple[int, int]]:
    """Per request the run served, in order: its drafted and accepted tokens as ggml-viz reads them."""
    summary = speculative_summary(run)
    found = {r["start_ns"]: (r["drafted"], r["accepted"]) for r in (summary or {"requests": []})["requests"]}
    return [found.get(request["start_ns"], (0, 0)) for request in requests(run)]


def _server_counts(timings: list[dict]) -> list[tuple[int, int]]:
    return [(t.get("draft_n", 0), t.get("draft_n_accepted", 0)) for t in timings]


def test_a_draft_model_s_drafts_and_their_time_are_told_apart(tmp_path, models):
    # GIVEN llama-server with a draft model close to its target, under ggml-viz run
    output = tmp_path / "draft.ggmlviz"
    # WHEN it answers three prompts
    timings = _serve_and_ask(output, models["target"], ["-md", str(models["close"]), *DRAFT_FLAGS])
    # THEN each request's drafted and accepted tokens are the server's
    run = ggml_viz.open(output)
    assert run.status == "complete"
    assert _per_request(run) == _server_counts(timings)
    summary = speculative_summary(run)
    assert summary is not None and summary["method"] == "draft model"
    assert 0 < summary["accepted"] < summary["drafted"]  # some accepted, some rejected
    # AND the draft context is the one created second (the server loads the draft after its target);
    # its graphs are drafting only, none verifies and none serves a request
    assert summary["target_contexts"] == [0] and summary["draft_contexts"] == [1]
    graphs = run.graphs.assign(time_ns=run.graphs.end_ns - run.graphs.start_ns)
    assert summary["draft_graphs"] == int((graphs.context_id == 1).sum())
    found = find_speculation(run)
    drafting = found.draft_steps[~found.draft_steps.reread.astype(bool)]
    assert len(drafting) == summary["drafted"] and (drafting.n == 1).all()  # one call per draft (n_max 4)
    assert set(found.verifications.context_id) == {0}
    served = requests(run)
    assert len(served) == len(PROMPTS)
    fed = [t["prompt_n"] + t["predicted_n"] - 1 for t in timings]  # the last generated token is never fed
    assert [r["prompt_tokens"] + r["generated_tokens"] for r in served] == fed
    # AND the time adds up: drafting is the draft context's time, verifying a part of the target's,
    # rejected drafts a part of that; the requests share the totals out
    serving = graphs[graphs.phase != "warmup"]
    assert summary["draft_ns"] == pytest.approx(serving[serving.context_id == 1].time_ns.sum(), abs=len(serving))
    assert 0 < summary["draft_reread_ns"] < summary["draft_ns"]
    assert 0 < summary["rejected_ns"] < summary["verify_ns"] < serving[serving.context_id == 0].time_ns.sum()
    for key in ("draft_ns", "verify_ns", "rejected_ns", "drafted", "accepted"):
        assert sum(r[key] for r in summary["requests"]) == pytest.approx(summary[key], abs=len(PROMPTS))
    # AND the summary shows it (its JSON holds speculative_summary's object: tests/unit/test_result_types.py)
    text = ggml_viz_cli("summary", str(output)).stdout
    assert "speculative decoding: draft model (context 1" in text and "speculation per request" in text
    assert f"{sum(t['draft_n'] for t in timings):,} tokens drafted" in text


def test_a_draft_the_target_disagrees_with_is_rejected_work(tmp_path, models):
    # GIVEN a draft model of other random weights
    output = tmp_path / "other.ggmlviz"
    timings = _serve_and_ask(output, models["target"], ["-md", str(models["other"]), *DRAFT_FLAGS])
    # THEN its drafts, mostly rejected, are the server's count too
    run = ggml_viz.open(output)
    assert _per_request(run) == _server_counts(timings)
    summary = speculative_summary(run)
    assert summary["accepted"] <= summary["drafted"] // 4
    # AND most of verifying went on rejected drafts
    assert summary["rejected_ns"] > summary["verify_ns"] / 2


def test_draftless_n_gram_drafts_are_told_apart(tmp_path, models):
    # GIVEN llama-server drafting from n-grams of the text itself, no draft model
    output = tmp_path / "ngram.ggmlviz"
    timings = _serve_and_ask(output, models["target"], NGRAM_FLAGS, n_predict=2 * N_PREDICT)
    run = ggml_viz.open(output)
    # THEN the requests that drafted are found, with the server's counts
    assert any(t.get("draft_n") for t in timings), timings
    assert _per_request(run) == _server_counts(timings)
    summary = speculative_summary(run)
    assert summary["method"] == "draftless" and summary["draft_contexts"] == [] and summary["draft_ns"] == 0
    # AND the plain steps between give the single-token rate to weigh it against
    assert summary["plain_steps"] > 0 and summary["plain_estimate_ns"] > 0
