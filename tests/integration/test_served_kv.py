"""Slots and the KV cache of a served run: llama-server with two slots, a small context and
--context-shift, recorded by ggml-viz run, against the server's own numbers (/slots, each
response's timings, tokens_cached and truncated) and the cache's size recomputed from the
model's hyperparameters. The model is a gemma3 written by gguf's writer (no llama, no one
model's tensor names; sliding-window layers beside full ones, and a small vocabulary, so that a
few hundred tokens generate in seconds)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import ggml_viz
from ggml_viz.analysis.kv import CACHE_REUSE, CONTEXT_SHIFT, cells_over_time, kv_capacity, kv_events, kv_reads
from ggml_viz.analysis.requests import request_times
from ggml_viz.ui.server import make_viewer

from ..browser import checked_page, chromium, open_offline
from .arch_models import write_model
from .servers import ask, kv_cell_bytes, running_server, stop_server
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

N_CTX = 1024  # two slots of 512 cells
SLOTS = 2
WINDOW = 256  # llama.cpp's attention reads the cache in windows of 256 cells (llama_kv_cache::get_n_kv)
# slot 0: a prompt under one window, then generation past the slot's 512 cells: one shift
LONG_PROMPT = "one two three four five six seven eight nine ten " * 18
LONG_PREDICT = 360
# slot 1: a prompt, then the same prompt and more: its prefix comes from the cache
SHORT_PROMPT = "The quick brown fox jumps over the lazy dog. " * 5


def _complete(port: int, slot: int, prompt: str, n_predict: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "n_keep": 0}
    return ask(port, "/completion", {**body, "id_slot": slot, "cache_prompt": True})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The recorded run, the model's spec, the answers of the three requests (one after another:
    one slot's long generation, then a prompt twice on the other) and /slots after them."""
    folder = tmp_path_factory.mktemp("served_kv")
    model = write_model(folder / "gemma3.gguf", "gemma3")
    output = folder / "server.ggmlviz"
    with running_server(output, model.path, slots=SLOTS, context=N_CTX, extra=["--context-shift"]) as (server, port):
        answers = [
            _complete(port, 0, LONG_PROMPT, LONG_PREDICT),
            _complete(port, 1, SHORT_PROMPT, 8),
            _complete(port, 1, SHORT_PROMPT + "And then the dog woke up and ran after the fox", 8),
        ]
        slots = ask(port, "/slots")
        stderr = stop_server(server)
    run = ggml_viz.open(output)
    assert run.status == "complete", (run.manifest["incomplete_reason"], stderr[-3000:])
    return run, model, answers, slots


def test_cells_per_slot_and_the_capacity_are_the_server_s(served):
    run, _, answers, slots = served
    # THEN the cache's cells per sequence are the slot's context the server reports
    capacity = kv_capacity(run)
    assert capacity == {"cells": N_CTX, "per_sequence": N_CTX // SLOTS, "streams": SLOTS}
    assert {slot["n_ctx"] for slot in slots} == {capacity["per_sequence"]}
    # AND each slot holds at the end the cells the server counts in its cache: /slots and the
    # last response of the slot (tokens_cached)
    cells = cells_over_time(run)
    last = cells[cells["decode_index"] == cells["decode_index"].max()].set_index("seq_id")["cells"]
    for slot in slots:
        assert last[slot["id"]] == slot["n_prompt_tokens"], (slot["id"], last.to_dict())
    assert last[0] == answers[0]["tokens_cached"] and last[1] == answers[2]["tokens_cached"]
    # AND no slot ever held more than its cells
    assert cells["cells"].max() == capacity["per_sequence"] - 1


def test_the_context_shift_and_the_cache_reuse_are_seen_where_the_server_made_them(served):
    run, _, answers, slots = served
    events = kv_events(run)
    # THEN one shift, on slot 0, whose answer says it was truncated: when the slot's cells were
    # full but one, half of them discarded past the kept ones (n_keep 0, with BOS 1: the server's
    # n_discard = (n_past - n_keep) / 2, 255 either way)
    shifts = [event for event in events if event["kind"] == CONTEXT_SHIFT]
    assert answers[0]["truncated"] and len(shifts) == 1 and shifts[0]["seq_id"] == 0
    before = N_CTX // SLOTS - 1
    assert (shifts[0]["cells_before"], shifts[0]["cells_after"]) == (before, before - before // 2)
    # AND one reuse, on slot 1: the second prompt went on from the cells its timings say were cached,
    # after the first request's tokens_cached
    reuses = [event for event in events if event["kind"] == CACHE_REUSE]
    assert len(reuses) == 1 and reuses[0]["seq_id"] == 1
    assert reuses[0]["cells_after"] == answers[2]["timings"]["cache_n"] > 0
    assert reuses[0]["cells_before"] == answers[1]["tokens_cached"]
    assert not answers[1]["truncated"] and not answers[2]["truncated"]
    # AND the shift is no request of its own: the run's requests are the three answered, the
    # first's generation whole past its shift
    times = request_times(run)
    assert len(times) == len(answers)
    assert times.predicted_n.tolist() == [answer["timings"]["predicted_n"] for answer in answers]


def test_kv_bytes_read_per_step_follow_the_context(served):
    run, model, _, _ = served
    reads = kv_reads(run)
    row_bytes = kv_cell_bytes(model.path)
    capacity = N_CTX // SLOTS
    # GIVEN slot 0's decode steps before its shift (the cells are the positions 0..n, in order)
    first_shift = next(e for e in kv_events(run) if e["kind"] == CONTEXT_SHIFT)["decode_index"]
    steps = reads[(reads["phase"] == "decode") & (reads["decode_index"] < first_shift)]
    # THEN each read the KV bytes of its window of cells, recomputed from the hyperparameters
    window = ((steps["context_cells"] + WINDOW - 1) // WINDOW * WINDOW).clip(upper=capacity)
    assert (steps["kv_bytes"] == window * row_bytes).all()
    # AND they grew with the context: one window, then two
    assert sorted(set(steps["kv_bytes"])) == [WINDOW * row_bytes, 2 * WINDOW * row_bytes]
    # AND the summary's figure is a decode step's at the largest context: the slot's whole cache
    summary = json.loads(ggml_viz_cli("summary", str(run.path), "--json").stdout)["kv"]
    assert summary["decode_kv_bytes_per_token"] == capacity * row_bytes
    assert (summary["context_shifts"], summary["cache_reuses"]) == (1, 1)
    assert summary["peak_cells_by_sequence"]["0"] == capacity - 1
    text = ggml_viz_cli("summary", str(run.path)).stdout
    assert "1 context shifts, 1 prompt-cache reuses" in " ".join(text.split())


def _shows_the_slots(page) -> None:
    """The Slots view shows the cells per slot, the capacity and the events, and the reads."""
    page.wait_for_selector("[data-testid='slots-cells'] canvas")
    legend = page.inner_text("[data-testid='slots-view']")
    assert "context shift" in legend and "cache reuse" in legend and "512" in legend
    assert page.locator("[data-testid='slots-event']").count() == 2
    for chart in ("slots-cells", "slots-reads", "slots-cells"):
        drawn = page.eval_on_selector(
            f"[data-testid='{chart}'] canvas",
            "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;"
            " for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }",
        )
        assert drawn > 500, chart
        page.select_option("[data-testid='slots-axis']", "call")  # the cells again, over calls


@pytest.mark.browser
def test_the_slots_view_draws_cells_markers_and_reads(served, tmp_path):
    run = served[0]
    viewer = make_viewer(run.path, port=0)
    viewer.serve_in_background()
    try:
        with chromium() as browser:
            # WHEN the viewer serves the run
            with checked_page(browser) as page:
                page.goto(f"{viewer.url}#slots")
                page.wait_for_selector("body[data-ready='1']")
                _shows_the_slots(page)
            # AND the HTML report holds it, offline
            report = tmp_path / "report.html"
            assert ggml_viz_cli("export", str(run.path), "--format", "html", "-o", str(report)).returncode == 0
            page, _, errors = open_offline(browser, report)
            page.click("#tabs button[data-tab='slots']")
            _shows_the_slots(page)
            assert not errors, errors
    finally:
        viewer.stop()
