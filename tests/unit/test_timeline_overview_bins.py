"""The whole-run timeline's bins, summed a slice of the per-graph op totals at a time, and the graphs'
labels, looked up for the graphs a window shows: the same answers as one pass over the whole run."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.runformat.totals import GRAPH_OP_TOTALS
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.views import timeline


def one_pass_bins(view: RunView) -> dict[int, np.ndarray]:
    """The overview bins as one pass over every (graph, op) time computes them: each spread evenly
    over the bins its graph spans, summed per lane in graph order."""
    totals = view.run.totals_table(GRAPH_OP_TOTALS)
    op = pc.index_in(totals.column("op"), value_set=pa.array(view.ops, pa.string())).fill_null(0)
    row = view.graph_rows(totals.column("graph_id").to_numpy())
    order = np.argsort(row, kind="stable")
    row, op_code = row[order], op.to_numpy().astype(np.int64)[order]
    time_ns = totals.column("time_ns").to_numpy().astype(np.float64)[order]
    bins, n_ops, duration = timeline.OVERVIEW_BINS, len(view.ops), view.duration_ns
    bin_ns = max(1.0, duration / bins)
    by_lane = {}
    for lane in view.lanes:
        in_lane = np.zeros(len(view.graphs) + 1, dtype=bool)
        in_lane[lane["graph_row"]] = True
        pick = in_lane[row]
        r, o, t = row[pick], op_code[pick], time_ns[pick]
        start = np.maximum(view.graphs["start_ns"].to_numpy(np.int64)[r] - view.origin_ns, 0)
        end = np.minimum(view.graphs["end_ns"].to_numpy(np.int64)[r] - view.origin_ns, duration)
        first = np.clip((start / bin_ns).astype(np.int64), 0, bins - 1)
        last = np.clip(((np.maximum(end, start + 1) - 1) / bin_ns).astype(np.int64), 0, bins - 1)
        span = last - first + 1
        repeat = np.repeat(np.arange(len(r)), span)
        column = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
        busy = np.bincount(column * n_ops + o[repeat], weights=(t / span)[repeat], minlength=bins * n_ops)
        by_lane[lane["context_id"]] = busy.reshape(bins, n_ops)
    return by_lane


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bins")
    return [
        write_synthetic_run(folder / "one.ggmlviz", graphs=300, layers=2, seed=1),
        write_synthetic_run(folder / "server.ggmlviz", graphs=240, layers=2, seed=2, sequences=3),
    ]


@pytest.mark.parametrize("slice_rows", [7, 1000, 1 << 18])
def test_the_overview_bins_summed_a_slice_at_a_time_are_those_of_one_pass(runs, monkeypatch, slice_rows):
    # GIVEN runs whose per-graph op totals are read a few rows at a time (a slice ends mid-graph)
    monkeypatch.setattr(timeline, "TOTALS_SLICE", slice_rows)
    for path in runs:
        view = RunView("r", path)
        # WHEN the whole-run timeline's bins are summed
        bins = view.timeline_view._overview_bins["by_lane"]
        # THEN every bin holds exactly the sum of one pass over the whole run (same additions, same order)
        expected = one_pass_bins(view)
        assert bins.keys() == expected.keys()
        for context, busy in expected.items():
            assert np.array_equal(bins[context], busy)


def test_totals_not_stored_in_graph_order_give_the_same_bins(runs, monkeypatch):
    # GIVEN a run whose per-graph op totals are not in graph order (rows shuffled)
    monkeypatch.setattr(timeline, "TOTALS_SLICE", 50)
    view = RunView("r", runs[1])
    totals = view.run.totals_table(GRAPH_OP_TOTALS)
    shuffled = totals.take(pa.array(np.random.default_rng(0).permutation(totals.num_rows)))
    monkeypatch.setattr(view.run, "totals_table", lambda name: shuffled if name == GRAPH_OP_TOTALS else totals)
    # WHEN the whole-run timeline's bins are summed
    bins = view.timeline_view._overview_bins["by_lane"]
    # THEN they are those of one pass over the totals in graph order
    for context, busy in one_pass_bins(view).items():
        assert np.array_equal(bins[context], busy)


def test_a_long_runs_windows_do_not_depend_on_the_slices_its_totals_are_read_in(runs, monkeypatch):
    # GIVEN a run drawn from its per-graph totals (past a lowered event limit), read in small or whole slices
    monkeypatch.setattr(timeline, "WINDOW_EVENT_LIMIT", 100)
    payloads = []
    for slice_rows in (13, 1 << 18):
        monkeypatch.setattr(timeline, "TOTALS_SLICE", slice_rows)
        view = RunView("r", runs[1])
        d = view.duration_ns
        # WHEN the viewer asks for the whole run, with a margin, and zoomed windows
        windows = [(0, d), (-d // 10, d + d // 10), (d // 3, d // 3 + d // 5), (d // 2, d // 2 + d // 3000)]
        payloads.append([view.timeline(t0, t1, width) for t0, t1 in windows for width in (1600, 700)])
    # THEN the answers are the same
    assert payloads[0] == payloads[1]


def test_a_windows_graph_labels_are_the_runs_labels_of_its_graphs(runs):
    # GIVEN a run opened for the viewer
    view = RunView("r", runs[1])
    # WHEN a window's graphs are labelled before and after every label is made
    rows = np.array([5, 0, 17, len(view.graphs) - 1])
    before = view.graph_labels_of(rows)
    labels = view.graph_labels
    # THEN each graph is called by its tokens' text, or without tokens by what it computes
    computes = view.run.structure_labels
    texts = [view.graph_text(row) for row in range(len(view.graphs))]
    expected = [
        text or computes.get(int(structure), "")
        for text, structure in zip(texts, view.graphs["structure_id"], strict=True)
    ]
    assert labels == expected
    assert before == view.graph_labels_of(rows) == [expected[row] for row in rows]
    # AND a graph's text is its tokens' text, joined
    joined = view.run.tokens.groupby("graph_id")["text"].apply("".join)
    assert texts == [joined.get(int(graph), "") for graph in view.graphs["graph_id"]]


def test_graphs_without_tokens_are_called_by_what_they_compute(runs):
    # GIVEN a run whose every other graph has no tokens' text (as an encoder's graphs)
    view = RunView("r", runs[0])
    texts = ["" if row % 2 else view.graph_text(row) for row in range(len(view.graphs))]
    view.__dict__["_graph_text_array"] = pa.array(texts, pa.string())
    computes = view.run.structure_labels
    assert computes
    # WHEN the graphs are labelled, some in a window
    labels, window = view.graph_labels_of(np.array([1, 2, 3])), view.graph_labels
    # THEN those without text are called by what their structure computes
    structures = view.graphs["structure_id"].tolist()
    expected = [text or computes.get(int(structure), "") for text, structure in zip(texts, structures, strict=True)]
    assert window == expected and labels == expected[1:4]
    assert expected[1] != "" and expected[1] == computes[int(structures[1])]
