"""A run being recorded keeps its node times in Arrow streams until they become Parquet parts:
compressed batch by
batch as they are written, so that a day of a server takes about what its closed run will on disk
(not three times as much), and a run cut short keeps every graph written, readable as it is."""

from __future__ import annotations

import pyarrow as pa

import ggml_viz
from ggml_viz.runformat.schema import stream_segment_name
from ggml_viz.runformat.synthetic import SyntheticRecording

LAYERS = 30  # a SmolLM2-sized graph: 30 layers, 572 node events
EVENTS_PER_GRAPH = LAYERS * 19 + 2


def test_node_times_take_at_most_12_bytes_an_event_while_a_run_is_recorded(tmp_path):
    # GIVEN a run of 2,000 decode graphs being recorded, not yet closed
    recording = SyntheticRecording(tmp_path / "open.ggmlviz", layers=LAYERS)
    recording.append_graphs(2_000)
    run_dir = recording.run_dir
    # WHEN its node-time streams are measured
    streams = sorted(run_dir.glob("node_times*.arrows"))
    events = 2_000 * EVENTS_PER_GRAPH
    size = sum(path.stat().st_size for path in streams)
    # THEN they are compressed (each batch's buffers, by zstd) and take at most 12 bytes an event
    with pa.OSFile(str(run_dir / stream_segment_name("node_times", 0)), "rb") as source:
        reader = pa.ipc.open_stream(source)
        assert sum(batch.num_rows for batch in reader) > 0
    assert size / events <= 12, f"{size / events:.1f} bytes an event"
    # AND the run reads as it is, every graph written so far with its node times
    run = ggml_viz.open(run_dir)
    assert run.status == "recording"
    written = len(run.graphs)
    assert written >= 2_000 - recording.writer.graphs_per_batch
    assert len(run.nodes) == written * EVENTS_PER_GRAPH and run.nodes.timed.all()
    # AND closed, the same graphs are there
    recording.close()
    closed = ggml_viz.open(run_dir)
    assert closed.status == "complete" and len(closed.graphs) == 2_000
    assert not list(run_dir.glob("*.arrows"))
