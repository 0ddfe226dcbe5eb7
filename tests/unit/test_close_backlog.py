"""A recording that outran the conversion of its segments into Parquet parts: its close waits
for none of them (they are left pending, for a converter of their own), the run reads the
same before, during and after that conversion, and a converter killed midway loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import ggml_viz
from ggml_viz.runformat import writer as writer_module
from ggml_viz.runformat.conversion import convert_pending, convert_segment, start_converter
from ggml_viz.runformat.schema import part_of_stream
from ggml_viz.runformat.streams import node_times_segment
from ggml_viz.runformat.synthetic import SyntheticRecording

from .test_rolled_parts import LAYERS, ROLL, totals

CONVERTED_WHILE_RECORDING = 10  # graphs: node-times segments 0 and 1 (5 graphs each) become parts ...
LEFT_WAITING = 15  # ... then 15 more, whose segments 2, 3, 4 wait for the converter (and 5, open, empty)


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(writer_module, "ROLL_ROWS", ROLL)


def recorded_with_a_backlog(path: Path) -> SyntheticRecording:
    """A recording whose last segments wait for the conversion when it is closed."""
    rec = SyntheticRecording(path, layers=LAYERS)
    rec.writer.graphs_per_batch = 1
    rec.writer.detached_converter = False  # (each test converts as it says)
    rec.append_graphs(CONVERTED_WHILE_RECORDING)
    rec.writer.wait_for_parts()
    rec.writer.parts_while_recording = False  # the recording outruns the conversion from here
    rec.append_graphs(LEFT_WAITING)
    return rec


def reference(path: Path) -> Path:
    """The same recording closed with every segment converted before the close."""
    rec = SyntheticRecording(path, layers=LAYERS)
    rec.writer.graphs_per_batch = 1
    rec.append_graphs(CONVERTED_WHILE_RECORDING + LEFT_WAITING)
    rec.writer.wait_for_parts()
    rec.close()
    return path


def contents(path: Path) -> dict:
    """What a reader gives of a run: totals, graphs, node events, a window, an SQL sum."""
    run = ggml_viz.open(path)
    connection = run.duckdb()
    try:
        summed = connection.sql("select count(*), sum(duration_ns) from nodes where timed").fetchall()
    finally:
        connection.close()
    return {
        "status": run.status,
        "totals": totals(run),
        "graphs": run.raw("graphs").to_dict("list"),
        "node_times": run.raw("node_times").sort_values(["graph_id", "node_index"], ignore_index=True).to_dict("list"),
        "window": run.nodes_of([3, 17])[["graph_id", "node_index", "start_ns", "end_ns"]].to_dict("list"),
        "sql": summed,
    }


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def streams(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.arrows"))


def test_a_close_with_a_backlog_leaves_it_pending_and_the_run_reads_the_same_before_and_after(tmp_path):
    expected = contents(reference(tmp_path / "reference.ggmlviz"))
    # GIVEN a recording whose node-times segments 2..4 wait for the conversion
    rec = recorded_with_a_backlog(tmp_path / "backlog.ggmlviz")
    # WHEN it is closed
    rec.close()
    # THEN the run is complete with every segment not yet a part pending, in the manifest
    run_dir = rec.run_dir
    pending = manifest(run_dir)["pending_parts"]
    assert manifest(run_dir)["status"] == "complete" and manifest(run_dir)["conversion"] == "pending"
    assert [name for name in pending if name.startswith("node_times")] == [
        f"node_times.{segment}.arrows" for segment in (2, 3, 4, 5)
    ]
    assert "graphs.arrows" in pending and sorted(pending) == streams(run_dir)  # (graphs never rolled)
    parts = sorted(p.name for p in run_dir.glob("node_times*.parquet"))
    assert parts == ["node_times.0.parquet", "node_times.1.parquet"]
    assert not (run_dir / "node_totals.parquet").exists() and (run_dir / "node_totals.of-parts.parquet").exists()
    # AND it reads as the same recording closed with everything converted
    assert contents(run_dir) == expected
    # WHEN the pending segments are converted
    assert convert_pending(run_dir)
    # THEN only Parquet files are left, the conversion is done, and the run reads the same
    assert streams(run_dir) == [] and manifest(run_dir)["conversion"] == "done"
    assert manifest(run_dir)["pending_parts"] == [] and not list(run_dir.glob("*.of-parts.parquet"))
    assert manifest(run_dir)["counts"]["node_times_rows"] == (CONVERTED_WHILE_RECORDING + LEFT_WAITING) * 40
    assert (run_dir / "node_totals.parquet").exists() and (run_dir / "graphs.0.parquet").exists()
    assert contents(run_dir) == expected


def test_graphs_at_both_ends_of_a_pending_segment_read_only_the_batches_that_hold_them(tmp_path):
    # GIVEN a closed run whose node-times segment 3 (graphs 15..19, one batch each) is pending
    rec = recorded_with_a_backlog(tmp_path / "backlog.ggmlviz")
    rec.close()
    segment = node_times_segment(rec.run_dir / "node_times.3.arrows", pa.array(range(25), pa.int32()), lambda times: {})
    # WHEN the node times of its first and last graphs are read (a summary's sample: a few steps at each end)
    read = segment.read_graphs(np.array([15, 19]))
    # THEN only their two batches are read, not the three between
    assert sorted(set(read.column("graph_id").to_pylist())) == [15, 19] and read.num_rows == 2 * 40
    # AND the run gives them as the same run converted does
    assert ggml_viz.open(rec.run_dir).nodes_of([15, 19])["graph_id"].value_counts().to_dict() == {15: 40, 19: 40}


def test_a_converter_stopped_at_any_step_leaves_a_readable_run_that_a_second_one_finishes(tmp_path):
    expected = contents(reference(tmp_path / "reference.ggmlviz"))
    rec = recorded_with_a_backlog(tmp_path / "backlog.ggmlviz")
    rec.close()
    run_dir = rec.run_dir
    # GIVEN a converter stopped after its first segment, after renaming the second's part
    # but before removing its stream, and while writing the third's part
    first, second, third = manifest(run_dir)["pending_parts"][:3]
    convert_segment(run_dir, first)
    copy = run_dir.parent / second
    copy.write_bytes((run_dir / second).read_bytes())
    writer_module.to_parquet([copy], part_of_stream(run_dir / second), None)  # (the copy removed, not the stream)
    part_of_stream(run_dir / third).with_suffix(".parquet.partial").write_bytes(b"PAR1 cut short")
    assert (run_dir / second).exists() and part_of_stream(run_dir / second).exists()
    # THEN the run reads the same (a segment with both its stream and its part counted once)
    assert contents(run_dir) == expected
    # WHEN a second converter runs
    assert convert_pending(run_dir)
    # THEN it finishes the conversion, and the run reads the same
    assert streams(run_dir) == [] and not list(run_dir.glob("*.partial"))
    assert manifest(run_dir)["conversion"] == "done"
    assert contents(run_dir) == expected


def test_a_converter_process_killed_midway_loses_nothing(tmp_path):
    expected = contents(reference(tmp_path / "reference.ggmlviz"))
    rec = recorded_with_a_backlog(tmp_path / "backlog.ggmlviz")
    rec.close()
    run_dir = rec.run_dir
    pending = manifest(run_dir)["pending_parts"]
    # GIVEN the converter's process, killed once it has converted a segment
    converter = start_converter(run_dir)
    deadline = time.monotonic() + 60
    while len(streams(run_dir)) == len(pending) and converter.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    converter.kill()
    converter.wait()
    # THEN the run reads the same, with whatever it had converted
    assert len(streams(run_dir)) < len(pending)
    assert contents(run_dir) == expected
    # AND a second conversion finishes it
    assert convert_pending(run_dir)
    assert streams(run_dir) == [] and manifest(run_dir)["conversion"] == "done"
    assert contents(run_dir) == expected


PROGRAM = """
import atexit, sys
from ggml_viz.runformat import writer
from ggml_viz.runformat.synthetic import SyntheticRecording

writer.ROLL_ROWS = {roll}
rec = SyntheticRecording(sys.argv[1], layers={layers})
rec.writer.graphs_per_batch = 1
rec.writer.parts_while_recording = False  # every full segment left to the close
rec.append_graphs({graphs})
atexit.register(rec.close)  # as the start-up hook closes a Python program's run
"""


def test_a_run_closed_as_the_interpreter_exits_is_converted_after_it(tmp_path):
    expected = contents(reference(tmp_path / "reference.ggmlviz"))
    run_dir = tmp_path / "exiting.ggmlviz"
    # GIVEN a Python program whose run is closed at its exit with segments left to convert
    program = textwrap.dedent(PROGRAM.format(roll=ROLL, layers=LAYERS, graphs=CONVERTED_WHILE_RECORDING + LEFT_WAITING))
    src = Path(ggml_viz.__file__).parents[1]
    # WHEN it exits
    subprocess.run([sys.executable, "-c", program, str(run_dir)], check=True, env={"PYTHONPATH": str(src)})
    assert manifest(run_dir)["status"] == "complete" and manifest(run_dir)["pending_parts"]
    # THEN the converter its close started goes on without it, and finishes
    deadline = time.monotonic() + 120
    while manifest(run_dir).get("conversion") != "done" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert manifest(run_dir)["conversion"] == "done" and streams(run_dir) == []
    assert contents(run_dir) == expected
