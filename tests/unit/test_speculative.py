"""Speculative decoding told apart on runs of the tests' own making (tests/speculative_runs.py),
batch by batch as llama-server computes them: a target context verifying drafts, a draft context
re-reading each target batch and drafting tokens alone between, or drafts from the text itself."""

from __future__ import annotations

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import requests
from ggml_viz.analysis.findings import findings
from ggml_viz.analysis.speculative import speculative_summary
from ggml_viz.analysis.speculative_batches import find_speculation

from ..speculative_runs import DRAFT, STEP_NS, TARGET, write_server_run, write_two_slot_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, ggml_viz.Run]:
    folder = tmp_path_factory.mktemp("speculative")
    return {
        "draft model": ggml_viz.open(write_server_run(folder / "draft.ggmlviz")),
        "draftless": ggml_viz.open(write_server_run(folder / "draftless.ggmlviz", draft_model=False)),
    }


@pytest.mark.parametrize("method", ["draft model", "draftless"])
def test_drafts_and_their_acceptance_are_read_per_request(runs, method):
    # GIVEN a server's run whose target verified drafts
    run = runs[method]
    # WHEN its speculative decoding is summed up
    summary = speculative_summary(run)
    # THEN it is told apart, with the draft context where there is one
    assert summary is not None and summary["method"] == method
    assert summary["target_contexts"] == [TARGET]
    assert summary["draft_contexts"] == ([DRAFT] if method == "draft model" else [])
    # AND each request's drafts and accepted drafts are those the server made and kept
    per_request = [
        (r["verifications"], r["drafted"], r["accepted"], r["accepted_assumed"]) for r in summary["requests"]
    ]
    assert per_request == [(3, 12, 7, 4), (1, 2, 1, 0)]
    assert (summary["drafted"], summary["accepted"], summary["tokens_fed"]) == (14, 8, 12)


@pytest.mark.parametrize("method", ["draft model", "draftless"])
def test_requests_hold_the_accepted_tokens_once(runs, method):
    # GIVEN the same run
    served = requests(runs[method])
    # THEN it served two requests: the draft context's re-reads no request of their own, and the
    # rejected drafts no new request (positions going back)
    assert [(r["prompt_tokens"], r["generated_tokens"]) for r in served] == [(5, 10), (3, 4)]
    # the first: 3 verifications feeding the sampled token and 3, 0, 4 drafts
    assert served[0]["generated"] == " t600 t601 t602 t603" + " t600" + " t600 t601 t602 t603 t604"


def test_the_time_split_adds_up(runs):
    # GIVEN the draft model's run, its graphs in the order they ran
    run = runs["draft model"]
    summary = speculative_summary(run)
    graphs = run.graphs.sort_values("start_ns", ignore_index=True)
    graphs = graphs.assign(time_ns=graphs.end_ns - graphs.start_ns, after=graphs.context_id.shift(1))
    serving = graphs[graphs.phase != "warmup"]
    # THEN drafting is all the draft context's time, its re-reads those right after a target batch
    draft = serving[serving.context_id == DRAFT]
    assert summary["draft_ns"] == pytest.approx(draft.time_ns.sum(), abs=2)
    assert summary["draft_reread_ns"] == pytest.approx(draft[draft.after == TARGET].time_ns.sum(), abs=2)
    assert summary["draft_graphs"] == len(graphs[graphs.context_id == DRAFT]) == 8 + 14  # re-reads and drafts
    # AND verifying is the target's batches of several tokens all asking for logits, a share of
    # each rejected: 1 of 5 tokens, 4 of 5, none, 1 of 3
    outputs = run.tokens.groupby("graph_id").output.all()
    target = serving[(serving.context_id == TARGET) & (serving.n_tokens > 1)]
    verifying = target[target.graph_id.map(outputs)].time_ns.to_numpy()
    assert summary["verify_ns"] == pytest.approx(verifying.sum(), abs=2)
    assert summary["rejected_ns"] == pytest.approx((verifying * [1 / 5, 4 / 5, 0, 1 / 3]).sum(), abs=4)
    # AND the requests share the totals out
    for key in ("draft_ns", "draft_reread_ns", "verify_ns", "rejected_ns", "drafted", "accepted"):
        assert sum(r[key] for r in summary["requests"]) == pytest.approx(summary[key], abs=4)


def test_speculation_costlier_than_plain_steps_is_a_finding(runs):
    # GIVEN runs whose two plain steps take STEP_NS each, and 12 tokens fed by verifications
    for run in runs.values():
        summary = speculative_summary(run)
        assert summary["plain_steps"] == 2 and summary["plain_step_ns"] == pytest.approx(STEP_NS, rel=0.01)
        assert summary["plain_estimate_ns"] == pytest.approx(12 * STEP_NS, rel=0.01)
    # THEN drafting with a model (22 draft graphs) and verifying cost more than 12 steps: said
    said = [line for line in findings(runs["draft model"]) if line.startswith("Speculative decoding")]
    assert len(said) == 1 and "for 12 tokens" in said[0] and "8 of 14 drafted tokens" in said[0]
    # AND verifying drafts from the text alone cost less: nothing said
    assert not [line for line in findings(runs["draftless"]) if line.startswith("Speculative decoding")]


def test_slots_drafting_and_verifying_together_are_read_apart(tmp_path):
    # GIVEN two slots drafting in the same draft calls (a token of each), verified in one batch
    run = ggml_viz.open(write_two_slot_run(tmp_path / "two.ggmlviz"))
    summary = speculative_summary(run)
    # THEN the draft context is found, and each sequence's drafts are its own
    assert summary is not None and summary["draft_contexts"] == [DRAFT]
    per_request = {r["seq_id"]: (r["verifications"], r["drafted"], r["accepted"]) for r in summary["requests"]}
    assert per_request == {0: (2, 6, 5), 1: (2, 6, 3)}
    # AND each verification call's time is shared by the sequences' tokens: half each here
    shares = {r["seq_id"]: r["verify_ns"] for r in summary["requests"]}
    assert shares[0] == pytest.approx(shares[1], abs=2)
    assert [(r["prompt_tokens"], r["generated_tokens"]) for r in requests(run)] == [(5, 3 + 4), (3, 1 + 4)]


def test_a_run_without_speculation_has_none(tmp_path):
    # GIVEN a server's run without drafts: prompts, then single-token steps of three sequences
    from ggml_viz.runformat.synthetic import write_synthetic_run

    run = ggml_viz.open(write_synthetic_run(tmp_path / "plain.ggmlviz", graphs=24, layers=2, sequences=3))
    # THEN it has no speculative decoding, and its requests are read as before
    assert find_speculation(run) is None and speculative_summary(run) is None
    assert len(requests(run)) == 3
