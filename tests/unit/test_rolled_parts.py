"""A long recording's tables rolled into Parquet parts while it records: what a reader sees at
every moment (recording, killed, closed), what the close does with failures, and that the
totals summed part by part are the totals of the events."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.runformat import writer as writer_module
from ggml_viz.runformat.synthetic import SyntheticRecording
from ggml_viz.runformat.totals import TOTALS_SCHEMAS, totals_of_parquet_run

LAYERS = 2  # 40 nodes a graph
ROLL = 200  # rows: a node-times segment holds 5 graphs


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(writer_module, "ROLL_ROWS", ROLL)


def recording(path: Path, graphs: int) -> SyntheticRecording:
    rec = SyntheticRecording(path, layers=LAYERS)
    rec.writer.graphs_per_batch = 1
    rec.append_graphs(graphs)
    rec.writer.wait_for_parts()
    return rec


def written(path: Path, graphs: int) -> Path:
    recording(path, graphs).close()
    return path


def totals(run) -> dict[str, list]:
    """Both totals tables of a run, in one order, as lists (comparable whatever was stored)."""
    node = run.totals_table("node_totals").sort_by(
        [("phase", "ascending"), ("structure_id", "ascending"), ("node_index", "ascending")]
    )
    graph_op = run.totals_table("graph_op_totals").cast(TOTALS_SCHEMAS["graph_op_totals"])  # (ops read as a dictionary)
    graph_op = graph_op.sort_by([("graph_id", "ascending"), ("op", "ascending")])
    return {"node": node.to_pylist(), "graph_op": graph_op.to_pylist()}


def test_a_closed_rolled_run_equals_the_same_run_written_whole(tmp_path, monkeypatch):
    # GIVEN the same recording written in parts and, with segments that never fill, whole
    written(tmp_path / "parts.ggmlviz", 23)
    monkeypatch.setattr(writer_module, "ROLL_ROWS", 1 << 30)
    written(tmp_path / "whole.ggmlviz", 23)
    parts, whole = ggml_viz.open(tmp_path / "parts.ggmlviz"), ggml_viz.open(tmp_path / "whole.ggmlviz")
    # THEN one is stored in parts, the other in one file per table ...
    assert len(list((tmp_path / "parts.ggmlviz").glob("node_times.*.parquet"))) >= 4
    assert (tmp_path / "whole.ggmlviz" / "node_times.parquet").exists()
    # ... and they read the same: events, graphs, windows, and totals (summed part by part
    # as the parts were written, and equal to DuckDB's over every event)
    assert parts.raw("node_times").equals(whole.raw("node_times"))
    assert parts.raw("graphs").equals(whole.raw("graphs"))
    assert parts.nodes_of([3, 17]).equals(whole.nodes_of([3, 17]))
    assert totals(parts) == totals(whole)
    recomputed = totals_of_parquet_run(tmp_path / "parts.ggmlviz")
    assert totals(parts)["graph_op"] == recomputed["graph_op_totals"].to_pylist()
    connection = parts.duckdb()  # (its views over the parts' files)
    assert connection.sql("select count(*), sum(duration_ns) from nodes where timed").fetchall() == [
        (23 * 40, int(parts.raw("node_times").eval("end_ns - start_ns").sum()))
    ]
    connection.close()


def test_a_run_killed_while_recording_keeps_its_parts_and_streams(tmp_path):
    # GIVEN a recording with parts and streams, never closed
    rec = recording(tmp_path / "killed.ggmlviz", graphs=12)
    names = {p.name for p in (tmp_path / "killed.ggmlviz").iterdir()}
    assert "node_times.0.parquet" in names and any(
        name.startswith("node_times.") and name.endswith(".arrows") for name in names
    )
    # THEN a reader finds every graph and event, its totals those of the events
    run = ggml_viz.open(tmp_path / "killed.ggmlviz")
    assert run.status != "complete"
    assert list(run.graphs["graph_id"]) == list(range(12)) and len(run.raw("node_times")) == 12 * 40
    closed_copy = written(tmp_path / "same.ggmlviz", 12)
    assert totals(run) == totals(ggml_viz.open(closed_copy))
    rec.writer.close(complete=False)


def test_a_segment_whose_part_is_written_but_stream_not_yet_removed_counts_once(tmp_path, monkeypatch):
    # GIVEN parts written whose streams stayed (killed between the two)
    original_unlink = Path.unlink
    monkeypatch.setattr(
        Path, "unlink", lambda self, *a, **k: None if self.suffix == ".arrows" else original_unlink(self, *a, **k)
    )
    rec = recording(tmp_path / "both.ggmlviz", graphs=12)
    assert (tmp_path / "both.ggmlviz" / "node_times.arrows").exists()
    assert (tmp_path / "both.ggmlviz" / "node_times.0.parquet").exists()
    # THEN each event is read once
    run = ggml_viz.open(tmp_path / "both.ggmlviz")
    assert len(run.raw("node_times")) == 12 * 40 and len(run.graphs) == 12
    rec.writer.close(complete=False)


def test_a_segment_that_fails_to_convert_stays_a_stream_and_the_close_converts_it(tmp_path, monkeypatch):
    # GIVEN the first conversion failing (a full disk, say)
    original = writer_module.to_parquet
    calls = []

    def failing_once(sources, target, keep):
        calls.append(target.name)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return original(sources, target, keep)

    monkeypatch.setattr(writer_module, "to_parquet", failing_once)
    rec = recording(tmp_path / "full.ggmlviz", graphs=12)
    # THEN its stream stays, read as before, the recording going on
    assert (tmp_path / "full.ggmlviz" / f"{calls[0].split('.')[0]}.arrows").exists()
    assert len(ggml_viz.open(tmp_path / "full.ggmlviz").raw("node_times")) == 12 * 40
    # AND the close converts it, the totals sound
    rec.close()
    run = ggml_viz.open(tmp_path / "full.ggmlviz")
    assert not list((tmp_path / "full.ggmlviz").glob("*.arrows"))
    assert len(run.raw("node_times")) == 12 * 40
    assert totals(run) == totals(ggml_viz.open(written(tmp_path / "same.ggmlviz", 12)))


def test_totals_that_cannot_be_summed_part_by_part_are_summed_from_all_parts(tmp_path, monkeypatch):
    # GIVEN parts whose totals do not add up (as when a structure is described after its events)
    monkeypatch.setattr(writer_module, "_same_time", lambda totals: False)
    written(tmp_path / "unsound.ggmlviz", 12)
    # THEN the close sums them from all the parts, no partial file left
    monkeypatch.undo()
    sound = written(tmp_path / "sound.ggmlviz", 12)
    assert totals(ggml_viz.open(tmp_path / "unsound.ggmlviz")) == totals(ggml_viz.open(sound))
    assert not list((tmp_path / "unsound.ggmlviz").glob("*.partial"))


def test_the_keep_last_bound_makes_one_file_of_the_kept_graphs(tmp_path):
    rec = recording(tmp_path / "kept.ggmlviz", graphs=12)
    rec.writer.close(keep_graphs={9, 10, 11})
    folder = tmp_path / "kept.ggmlviz"
    assert not list(folder.glob("node_times.*.parquet")) and not list(folder.glob("*.arrows"))
    run = ggml_viz.open(folder)
    assert sorted(set(run.raw("node_times")["graph_id"])) == [9, 10, 11]
    assert sum(row["timed"] for row in totals(run)["node"]) == 3 * 40


def test_node_times_are_stored_as_differences(tmp_path):
    written(tmp_path / "d.ggmlviz", 12)
    part = pq.ParquetFile(tmp_path / "d.ggmlviz" / "node_times.0.parquet")
    start = part.schema_arrow.get_field_index("start_ns")
    assert "DELTA_BINARY_PACKED" in part.metadata.row_group(0).column(start).encodings
