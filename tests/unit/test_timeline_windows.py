"""The timeline's windows over a long run, drawn from per-graph totals rather than events."""

from __future__ import annotations

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.views import timeline


def test_the_whole_run_padded_on_both_sides_is_drawn_across_its_width(tmp_path, monkeypatch):
    # GIVEN a run too long to draw event by event (here: past a lowered event limit)
    monkeypatch.setattr(timeline, "WINDOW_EVENT_LIMIT", 100)
    view = RunView("r0", write_synthetic_run(tmp_path / "long.ggmlviz", graphs=60, layers=2))
    duration = view.duration_ns
    # WHEN the viewer asks for the whole run with a margin on each side (as its "whole run" does)
    margin = duration // 100
    width = 1000
    lane = view.timeline(-margin, duration + margin, width)["lanes"][0]
    # THEN its busy columns run from the run's start to its end, not squeezed into its first pixels
    columns = lane["columns"]["px"]
    assert lane["nodes"]["start"] == []
    first, last = min(columns), max(columns)
    assert first <= width * 0.02 and last >= width * 0.97
    assert len(columns) > width * 0.5
