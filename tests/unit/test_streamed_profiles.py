"""Speedscope and TensorBoard exports of long runs: the whole run's flame graph from its node
totals, windows summed a chunk of graphs at a time, TensorBoard written a chunk at a time;
the same profile as one computed from all events at once, and never all events read."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.export import ExportOptions, base, exporter_for, profiles
from ggml_viz.runformat.reader import Run
from ggml_viz.runformat.synthetic import write_synthetic_run

from ..profile_files import (
    exported_profile,
    exported_whole_and_in_chunks,
    profile_of_all_events,
    tensorboard_events,
    tensorboard_steps,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return ggml_viz.open(write_synthetic_run(tmp_path_factory.mktemp("p") / "p.ggmlviz", graphs=7, layers=2))


def test_the_whole_runs_flame_graph_from_its_totals_is_the_one_of_all_its_events(run, tmp_path):
    assert exported_profile(run, tmp_path / "run.speedscope.json") == profile_of_all_events(run)


def test_node_times_summed_a_graph_at_a_time_are_the_runs_totals(run, monkeypatch):
    # GIVEN chunks of two graphs
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    # WHEN every graph's events are summed a chunk at a time
    streamed = profiles.node_times_of_graphs(run, run.graphs["graph_id"], ExportOptions())
    # THEN the sums and first graphs are those the totals give, and so are the stacks
    from_totals = profiles.node_times_of_run(run)
    pd.testing.assert_frame_equal(streamed, from_totals, check_dtype=False)
    descriptions = profiles.node_descriptions(run)
    pd.testing.assert_frame_equal(profiles.stacks(streamed, descriptions), profiles.stacks(from_totals, descriptions))


def test_a_run_whose_totals_cannot_order_its_stacks_is_summed_from_its_events(run, tmp_path, monkeypatch):
    # GIVEN totals saying a node went untimed in a graph that timed its op (a graph timed in part)
    totals = run.node_totals.copy()
    totals.loc[totals["timed"].idxmax(), "timed"] -= 1
    monkeypatch.setattr(Run, "node_totals", property(lambda self: totals))
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    # WHEN its flame graph is exported
    profile = exported_profile(run, tmp_path / "run.speedscope.json")
    # THEN the totals did not order it; its events, a chunk at a time, did
    assert profiles.node_times_of_run(run) is None
    assert profile == profile_of_all_events(run)


def test_a_speedscope_window_sums_only_its_graphs(run, tmp_path, monkeypatch):
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 1)
    # by graph ids
    said = exporter_for("speedscope", tmp_path / "w.speedscope.json").export(
        run, tmp_path / "w.speedscope.json", ExportOptions(graphs=(2, 3))
    )
    assert "(graphs 2-3)" in said
    assert exported_profile(run, tmp_path / "w.speedscope.json", ExportOptions(graphs=(2, 3))) == profile_of_all_events(
        run, [2, 3]
    )
    assert "(graphs 2-3)" in json.loads((tmp_path / "w.speedscope.json").read_text())["profiles"][0]["name"]
    # by time: the graphs meeting [from, to) ms after the run's start
    graphs = run.graphs
    origin = graphs["start_ns"].min()
    third = graphs.iloc[3]
    window = ((third["start_ns"] - origin) / 1e6 + 1e-3, (third["end_ns"] - origin) / 1e6 - 1e-3)
    profile = exported_profile(run, tmp_path / "t.speedscope.json", ExportOptions(time_ms=window))
    assert profile == profile_of_all_events(run, [int(third["graph_id"])])
    # a window with no graph in it: an empty profile
    assert exported_profile(run, tmp_path / "e.speedscope.json", ExportOptions(graphs=(100, 200))) == []


def test_tensorboard_written_a_graph_at_a_time_is_written_at_once(run, tmp_path, monkeypatch):
    whole, chunked = exported_whole_and_in_chunks(run, tmp_path, "tb", monkeypatch, "tensorboard")
    assert tensorboard_events(whole) == tensorboard_events(chunked)
    # and it holds each graph's layer times and op times, at the graph's step
    steps = tensorboard_steps(chunked)
    nodes = run.nodes[run.nodes["timed"]]
    for tag, of in (("layer_time_us/layer_0", nodes["layer"] == 0), ("op_time_us/MUL_MAT", nodes["op"] == "MUL_MAT")):
        per_graph = nodes[of].groupby("graph_id")["duration_ns"].sum() / 1e3  # graph ids are the steps here
        assert [step for step, _ in steps[tag]] == per_graph.index.tolist()
        assert [value for _, value in steps[tag]] == pytest.approx(per_graph.tolist(), rel=1e-6)  # float32


def test_a_tensorboard_window_keeps_the_runs_steps(run, tmp_path):
    said = exporter_for("tensorboard", tmp_path / "tb").export(run, tmp_path / "tb", ExportOptions(graphs=(2, 3)))
    assert "2 steps" in said and "(graphs 2-3)" in said
    steps = tensorboard_steps(tmp_path / "tb")
    assert [step for step, _ in steps["latency_ms/decode"]] == [2, 3]
    assert [step for step, _ in steps["op_time_us/MUL_MAT"]] == [2, 3]


@pytest.mark.parametrize("window", [ExportOptions(), ExportOptions(graphs=(1, 5))])
@pytest.mark.parametrize("name", ["speedscope", "tensorboard"])
def test_profiles_never_read_all_of_a_runs_events(run, tmp_path, monkeypatch, name, window):
    # GIVEN a freshly opened run whose whole-run node events cannot be read, and chunks of two graphs
    fresh = ggml_viz.open(run.path)
    monkeypatch.setattr(Run, "nodes", property(lambda self: pytest.fail("read all of the run's node events")))
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    read_at_once: list[int] = []
    node_times_of = Run.node_times_of

    def node_times_of_chunk(self: Run, graph_ids: list[int]) -> pd.DataFrame:
        read_at_once.append(len(graph_ids))
        return node_times_of(self, graph_ids)

    monkeypatch.setattr(Run, "node_times_of", node_times_of_chunk)
    # WHEN it is exported
    output = tmp_path / "out"
    exporter_for(name, output).export(fresh, output, window)
    # THEN it was read two graphs at a time at most (or not at all: the whole run's flame graph)
    assert output.exists() and all(graphs <= 2 for graphs in read_at_once)
    assert read_at_once or (name == "speedscope" and window.graphs is None)
