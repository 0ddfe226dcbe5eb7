"""Inline timing (the default) against sync timing, on the real SmolLM2 model: the same
nodes, intervals that tile each graph, and the program's own abort callback kept."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ggml_viz
from ggml_viz.capture.core.context_tracer import batch_arrays
from ggml_viz.capture.llama_cpp_python import llama_info

from .smollm2 import greedy, load_model

pytestmark = pytest.mark.model


def record_both(folder, model_path):
    """The same greedy generation recorded with inline timing, then with sync timing."""
    runs, texts = {}, {}
    for timing in ("inline", "sync"):
        with ggml_viz.record(folder / f"{timing}.ggmlviz", timing=timing):
            texts[timing] = greedy(load_model(model_path), n_predict=8)
        runs[timing] = ggml_viz.open(folder / f"{timing}.ggmlviz")
    return runs, texts


@pytest.fixture(scope="module")
def inline_and_sync(tmp_path_factory, model_path):
    return record_both(tmp_path_factory.mktemp("timing"), model_path)


def test_inline_and_sync_time_the_same_nodes(inline_and_sync):
    runs, texts = inline_and_sync
    assert texts["inline"] == texts["sync"]
    inline, sync = runs["inline"], runs["sync"]
    assert inline.manifest["capture"]["timing"] == "inline"
    assert inline.manifest["counts"]["untimed_graphs"] == 0
    columns = ["graph_id", "node_index", "op", "name", "timed"]
    assert inline.nodes[columns].equals(sync.nodes[columns])
    assert inline.nodes["timed"].all() and set(inline.graphs["detail"]) == {"op"}


def test_inline_intervals_tile_each_graph(inline_and_sync):
    run = inline_and_sync[0]["inline"]
    nodes, graphs = run.nodes, run.graphs.set_index("graph_id")
    for graph_id, group in nodes.groupby("graph_id"):
        start, end = group["start_ns"].to_numpy(np.int64), group["end_ns"].to_numpy(np.int64)
        graph = graphs.loc[graph_id]
        # One after the other, no gap, no overlap, to the graph's end (its start: the
        # scheduler asking about its first node, before computing)...
        assert (end >= start).all()
        assert (start[1:] == end[:-1]).all()
        assert graph["start_ns"] < start[0] and end[-1] == graph["end_ns"]
        # ... inside the llama_decode call that ran it
        assert graph["decode_start_ns"] <= start[0] and end[-1] <= graph["decode_end_ns"]
        # Each node ends at the barrier after it: its wait for the other thread is seen,
        # and part of its interval (none for nodes without work of their own)
        wait = group["wait_ns"].to_numpy(np.int64)
        assert (wait >= 0).all() and (wait <= end - start).all()
    works = nodes["duration_ns"] > 0
    assert (nodes.loc[works, "wait_ns"] > 0).mean() > 0.5  # 2 threads rarely finish a node together
    assert (nodes.loc[~works, "wait_ns"] == 0).all()


def test_sync_timing_sees_no_wait_apart(inline_and_sync):
    # Sync timing computes each node alone: its interval holds its stragglers, not told apart
    assert inline_and_sync[0]["sync"].nodes["wait_ns"].isna().all()


def test_inline_views_and_fused_nodes_take_no_time(inline_and_sync):
    nodes = inline_and_sync[0]["inline"].nodes
    views = nodes[nodes["op"].isin(["VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"])]
    assert len(views) and (views["duration_ns"] == 0).all()
    # ggml's CPU backend runs each RMS_NORM with the MUL by its weight as one node: the
    # norm carries the pair's time, the MUL none.
    by_position = nodes.set_index(["graph_id", "node_index"])
    norms = nodes[nodes["op"] == "RMS_NORM"]
    following = by_position.loc[list(zip(norms["graph_id"], norms["node_index"] + 1, strict=True))]
    assert (following["op"] == "MUL").all()
    assert (following["duration_ns"] == 0).all() and (norms["duration_ns"] > 0).all()
    matmuls = nodes[nodes["op"] == "MUL_MAT"]
    assert (matmuls["duration_ns"] > 0).all()


def test_inline_and_sync_agree_where_the_time_goes(inline_and_sync, tmp_path, model_path):
    ratios = [big_matmul_ratio(inline_and_sync[0])]
    # A shared machine that takes a thread away for a while skews one pair of recordings (seen
    # once in a CI run: 0.61, then 1.0 twice right after; in another, 1.61, 0.68 and 1.66 in a row,
    # the next run 1.0): such a pair is recorded again, four times at most.
    for attempt in range(4):
        if 0.8 < ratios[-1] < 1.5:
            break
        ratios.append(big_matmul_ratio(record_both(tmp_path / str(attempt), model_path)[0]))
    assert 0.8 < ratios[-1] < 1.5, ratios


def big_matmul_ratio(runs):
    """Sync over inline time of the biggest matrix multiplications, typical over the decode steps."""
    typical = {}
    for timing, run in runs.items():
        nodes = run.nodes[run.nodes["graph_id"].isin(run.graphs.loc[run.graphs["phase"] == "decode", "graph_id"])]
        by_op = nodes.groupby("op_base")["duration_ns"].sum()
        assert by_op.idxmax() == "MUL_MAT", timing
        # each matrix multiplication's typical time over the decode steps (medians: a step
        # where the machine took a thread away does not count)
        matmuls = nodes[nodes["op_base"] == "MUL_MAT"]
        typical[timing] = matmuls.groupby("node_index")["duration_ns"].median()
    # Sync timing computes each node alone, each a compute call of its own: that call's cost
    # (some µs, more on a busy machine) swells every node, the small ops many times over. The
    # biggest matrix multiplications take about the same time both ways: never much less in
    # sync (inline would then be charging them other nodes' time), at most that call's cost more.
    big = typical["inline"] >= typical["inline"].quantile(0.75)
    return float((typical["sync"][big] / typical["inline"][big]).median())


def test_the_programs_abort_callback_still_runs(tmp_path, model_path, recorded_run):
    import llama_cpp

    calls = []

    @llama_cpp.ggml_abort_callback
    def count_calls(_data):
        calls.append(1)
        return False

    with ggml_viz.record(tmp_path / "abort.ggmlviz"):
        llm = load_model(model_path)
        llama_cpp.llama_set_abort_callback(llm._ctx.ctx, count_calls, None)
        text = greedy(llm)
    assert text == recorded_run.text
    run = ggml_viz.open(tmp_path / "abort.ggmlviz")
    # ggml calls it once per computed node: as often as the recorder ticked
    ticking = run.nodes[run.nodes["duration_ns"] > 0]
    assert len(calls) >= len(ticking) > 0
    assert run.nodes["timed"].all()


def test_the_c_batch_copy_equals_the_python_one():
    import llama_cpp

    batch = llama_cpp.llama_batch_init(4, 0, 2)
    try:
        batch.n_tokens = 3
        for i, (token, pos) in enumerate(((11, 5), (12, 6), (13, 7))):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, i == 2
            batch.seq_id[i][0] = 1
        in_c = llama_info.read_batch(batch)
        python = llama_info.read_batch_in_python(batch)
        assert in_c == python
        assert in_c[:2] == (3, 5)
        columns = batch_arrays(in_c)
        assert columns["token_id"].tolist() == [11, 12, 13] and columns["output"].tolist() == [False, False, True]
        logits, batch.logits = batch.logits, ctypes.cast(None, type(batch.logits))  # none: the last token only
        assert llama_info.read_batch(batch) == llama_info.read_batch_in_python(batch)
        assert batch_arrays(llama_info.read_batch(batch))["output"].tolist() == [False, False, True]
        batch.logits = logits
    finally:
        llama_cpp.llama_batch_free(batch)
