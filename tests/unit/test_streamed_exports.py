"""Exports of long runs: written a chunk of graphs at a time (the same bytes as at once),
windows of graphs or time, and a word when a trace would be too big for Perfetto's UI."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.commands import main
from ggml_viz.export import ExportOptions, base, exporter_for, traces
from ggml_viz.runformat.synthetic import write_synthetic_run

from ..profile_files import exported_whole_and_in_chunks


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return ggml_viz.open(write_synthetic_run(tmp_path_factory.mktemp("s") / "s.ggmlviz", graphs=7, layers=2))


@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_a_trace_written_a_graph_at_a_time_is_the_trace_written_at_once(run, tmp_path, monkeypatch, name):
    whole, chunked = exported_whole_and_in_chunks(run, tmp_path, name, monkeypatch)
    assert whole.read_bytes() == chunked.read_bytes()


def test_the_tables_written_a_graph_at_a_time_are_the_readers_tables(run, tmp_path, monkeypatch):
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    for name in ("csv", "parquet"):
        exporter_for(name, tmp_path / name).export(run, tmp_path / name, ExportOptions())
    for table in ("nodes", "edges", "graphs"):
        from_csv = pd.read_csv(tmp_path / "csv" / f"{table}.csv")
        from_parquet = pd.read_parquet(tmp_path / "parquet" / f"{table}.parquet")
        expected = getattr(run, table)
        assert len(from_csv) == len(from_parquet) == len(expected), table
        assert from_parquet["graph_id"].tolist() == expected["graph_id"].tolist(), table
        assert (
            from_csv["node_index" if table != "graphs" else "graph_id"].tolist()
            == expected["node_index" if table != "graphs" else "graph_id"].tolist()
        )


def test_a_window_exports_only_its_graphs(run, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    # by graph ids
    said = exporter_for(None, tmp_path / "w.pftrace").export(run, tmp_path / "w.pftrace", ExportOptions(graphs=(2, 3)))
    trace = pb.Trace.FromString((tmp_path / "w.pftrace").read_bytes())
    names = [p.track_event.name for p in trace.packet if p.track_event.name.startswith("graph ")]
    assert names == ["graph 2 (decode)", "graph 3 (decode)"] and "(graphs 2-3)" in said
    nodes = run.nodes[run.nodes["graph_id"].isin([2, 3]) & run.nodes["timed"]]
    begins = [p for p in trace.packet if p.track_event.type == pb.TrackEvent.Type.TYPE_SLICE_BEGIN]
    assert len(begins) == 2 + len(nodes)
    # by time: the graphs meeting [from, to) ms after the run's start
    graphs = run.graphs
    origin = graphs["start_ns"].min()
    third = graphs.iloc[3]
    window = ((third["start_ns"] - origin) / 1e6 + 1e-3, (third["end_ns"] - origin) / 1e6 - 1e-3)
    exporter_for(None, tmp_path / "t.json").export(run, tmp_path / "t.json", ExportOptions(time_ms=window))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("cat") == "graph"} == {f"graph {third['graph_id']} (decode)"}


def test_a_trace_too_big_for_perfettos_ui_says_so_and_suggests_a_window(run, tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "PERFETTO_UI_LIMIT", 20_000)
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 1)
    notices: list[str] = []
    said = exporter_for(None, tmp_path / "big.pftrace").export(
        run, tmp_path / "big.pftrace", ExportOptions(notice=notices.append)
    )
    assert len(notices) == 1 and "export a window, such as --graphs 0-" in notices[0]
    assert "Perfetto's UI opens traces up to about 2 GiB" in said


@pytest.mark.parametrize("window", ["5", "3-1", "a-b", "-1-4"])
def test_a_bad_window_gets_one_clear_error(run, tmp_path, window, capsys):
    assert main(["export", str(run.path), "-o", str(tmp_path / "x.pftrace"), f"--graphs={window}"]) != 0
    said = capsys.readouterr().err
    assert "--graphs takes FIRST-LAST" in said and "Traceback" not in said
    assert not (tmp_path / "x.pftrace").exists()
