"""The overview's bar per graph, bounded: a run of more graphs than a canvas draws sends, per
slice of its graphs, the slice's longest graph (a day of a server would send 100 MB of JSON)."""

from __future__ import annotations

import json

import numpy as np

from ggml_viz.analysis.summary import summarize
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.views import overview


def test_a_short_run_has_a_bar_per_graph(tmp_path):
    view = RunView("r", write_synthetic_run(tmp_path / "short.ggmlviz", graphs=30, layers=1))
    bars = view.overview["graph_bars"]
    graphs = view.graphs
    assert bars["graph_id"] == graphs["graph_id"].tolist() and bars["graphs"] == 30
    assert bars["duration_ns"] == (graphs["end_ns"] - graphs["start_ns"]).tolist()
    assert bars["text"] == view.graph_labels


def test_a_long_run_sends_the_longest_graph_of_each_slice(tmp_path, monkeypatch):
    # GIVEN a run of 103 graphs and an overview of at most 10 bars
    monkeypatch.setattr(overview, "GRAPH_BARS", 10)
    view = RunView("r", write_synthetic_run(tmp_path / "long.ggmlviz", graphs=103, layers=1))
    bars = view.overview["graph_bars"]
    graphs = view.graphs
    durations = (graphs["end_ns"] - graphs["start_ns"]).to_numpy()
    # THEN 10 bars, each a real graph: the longest of its tenth of the run, with its own figures
    assert len(bars["graph_id"]) == 10 and bars["graphs"] == 103
    bounds = np.linspace(0, 103, 11).astype(int)
    for bar, (first, last) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        row = first + int(np.argmax(durations[first:last]))
        assert bars["graph_id"][bar] == int(graphs["graph_id"].iloc[row])
        assert bars["duration_ns"][bar] == int(durations[first:last].max())
        assert bars["phase"][bar] == graphs["phase"].iloc[row]
        assert bars["text"][bar] == view.graph_labels[row]
    json.dumps(bars)  # (plain values, as the server sends them)


def test_the_overview_shows_the_start_and_end_of_a_long_generated_text(tmp_path, monkeypatch):
    monkeypatch.setattr(overview, "TEXT_SHOWN", 40)
    view = RunView("r", write_synthetic_run(tmp_path / "text.ggmlviz", graphs=200, layers=1))
    whole = summarize(view.run)["generated_text"]  # (the summary's own: whole)
    text = view.overview["summary"]["generated_text"]
    assert len(whole) > 40 and text.startswith(whole[:20]) and text.endswith(whole[-20:])
    assert f"[{len(whole) - 40:,} characters left out]" in text
    assert overview.shown("x" * 41, 40) == "x" * 20 + " … [1 characters left out] … " + "x" * 20
    assert overview.shown("short", 40) == "short" and overview.shown(None) is None
