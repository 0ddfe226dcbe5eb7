"""The run directory on small synthetic runs: round trips, crashes, foreign and mixed files."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ggml_viz
from ggml_viz._errors import CaptureError, RunFormatError
from ggml_viz.runformat.manifest import new_manifest
from ggml_viz.runformat.schema import FORMAT_VERSION, SPARSE_TABLES, TABLES
from ggml_viz.runformat.totals import TOTALS_SCHEMAS
from ggml_viz.runformat.writer import RunWriter, prepare_run_dir, unique_run_dir


def write_synthetic_run(path, *, graphs=2, nodes_per_graph=3, close=True, experiment_id="e" * 32):
    """A tiny run: each graph (all of one structure) a chain of ADD nodes reading one weight."""
    writer = RunWriter(prepare_run_dir(path), experiment_id, new_manifest(experiment_id))
    writer.append(
        "buffers",
        {
            "buffer_id": [0, 1],
            "context_id": [0, 0],
            "name": ["CPU_Mapped", "CPU"],
            "buffer_type": ["CPU_Mapped", "CPU"],
            "usage": ["weights", "compute"],
            "size": [4096, 1024],
            "base": [1 << 20, 1 << 30],
            "first_graph_id": [0, 0],
        },
    )
    names = ["blk.0.w.weight"] + [f"x-{i}" for i in range(nodes_per_graph)]
    writer.append(
        "tensors",
        {
            "tensor_id": list(range(len(names))),
            "name": names,
            "op": ["NONE"] + ["ADD"] * nodes_per_graph,
            "op_base": ["NONE"] + ["ADD"] * nodes_per_graph,
            "type": ["f32"] * len(names),
            "ne0": [8] * len(names),
            "ne1": [1] * len(names),
            "ne2": [1] * len(names),
            "ne3": [1] * len(names),
            "nbytes": [32] * len(names),
            "flags": [0] * len(names),
            "buffer_id": [0] + [1] * nodes_per_graph,
            "buffer_offset": [0] + [32 * i for i in range(nodes_per_graph)],
            "layer": [0] * len(names),
            "view_src_id": [-1] * len(names),
            "view_offs": [0] * len(names),
        },
    )
    index = np.arange(nodes_per_graph, dtype=np.int32)
    writer.append(
        "structure_nodes",
        {
            "structure_id": np.zeros(nodes_per_graph, np.int32),
            "node_index": index,
            "tensor_id": index + 1,
            "layer": np.zeros(nodes_per_graph, np.int32),
        },
    )
    writer.append(
        "edges",
        {
            "structure_id": np.zeros(nodes_per_graph, np.int32),
            "node_index": index,
            "src_slot": np.zeros(nodes_per_graph, np.int8),
            "src_tensor_id": np.zeros(nodes_per_graph, np.int32),
        },
    )
    for graph in range(graphs):
        start = 1_000_000 * (graph + 1)
        writer.append(
            "node_times",
            {
                "graph_id": np.full(nodes_per_graph, graph),
                "node_index": index,
                "start_ns": start + index * 100,
                "end_ns": start + index * 100 + 50,
                "wait_ns": np.full(nodes_per_graph, 10),
            },
        )
        row = {
            "graph_id": graph,
            "context_id": 0,
            "decode_index": graph,
            "ubatch_index": 0,
            "structure_id": 0,
            "start_ns": start,
            "end_ns": start + nodes_per_graph * 100,
            "decode_start_ns": start - 10,
            "decode_end_ns": start + nodes_per_graph * 100 + 10,
            "return_code": 0,
            "n_nodes": nodes_per_graph,
            "n_tokens": 1,
            "token_ids": [42 + graph],
            "token_positions": [graph],
            "token_seq_ids": [0],
            "token_outputs": [True],
            "token_texts": [f"tok{graph}"],
            "first_batch_index": 0,
            "phase": "prompt" if graph == 0 else "decode",
            "detail": "op",
        }
        writer.append("graphs", {column: [value] for column, value in row.items()})
    if close:
        writer.close()
    return writer


def test_a_closed_run_reads_back_joined(tmp_path):
    # GIVEN a run written and closed
    write_synthetic_run(tmp_path / "a.ggmlviz")
    # WHEN it is opened
    run = ggml_viz.open(tmp_path / "a.ggmlviz")
    # THEN every table is Parquet (a run without GPU or RPC records has no GPU or RPC tables), with
    # the node totals beside them, and the joins give readable columns
    assert run.status == "complete"
    tables = [table for table in TABLES if table not in SPARSE_TABLES]
    assert sorted(p.name for p in (tmp_path / "a.ggmlviz").iterdir()) == sorted(
        ["manifest.json", *(f"{t}.parquet" for t in [*tables, *TOTALS_SCHEMAS])]
    )
    assert list(run.nodes.columns[:6]) == ["graph_id", "node_index", "start_ns", "end_ns", "tensor_id", "timed"]
    for column in ("op", "name", "type", "ne0", "ne1", "ne2", "ne3", "nbytes", "layer", "buffer", "duration_ns"):
        assert column in run.nodes.columns
    assert list(run.nodes["name"][:3]) == ["x-0", "x-1", "x-2"]
    assert (run.nodes["duration_ns"] == 50).all()
    assert set(run.edges["src_name"]) == {"blk.0.w.weight"}
    assert set(run.edges["src_usage"]) == {"weights"}
    for column in ("graph_id", "node_index", "src_slot", "src_name", "src_op", "src_type", "src_buffer", "src_usage"):
        assert column in run.edges.columns
    assert list(run.buffers.columns[:1]) == ["buffer"]
    assert list(run.tokens["text"]) == ["tok0", "tok1"]
    assert run.manifest["counts"]["node_times_rows"] == 6
    assert list(run.graphs["graph_id"]) == [0, 1] and "token_ids" not in run.graphs


def test_an_unclosed_run_reads_from_its_streams_and_is_incomplete(tmp_path):
    writer = write_synthetic_run(tmp_path / "b.ggmlviz", close=False)
    writer.update_manifest(recorder={"pid": 2**22 + 12345, "host": "nowhere"})
    run = ggml_viz.open(tmp_path / "b.ggmlviz")
    assert run.status == "incomplete"
    assert len(run.graphs) == 2 and len(run.nodes) == 6


def test_a_run_being_recorded_by_a_live_process_says_recording(tmp_path):
    write_synthetic_run(tmp_path / "live.ggmlviz", close=False)
    assert ggml_viz.open(tmp_path / "live.ggmlviz").status == "recording"


def test_a_torn_stream_tail_loses_only_the_graph_in_flight(tmp_path):
    # GIVEN a crash in the middle of writing the third graph's nodes
    path = tmp_path / "torn.ggmlviz"
    write_synthetic_run(path, graphs=3, close=False)
    nodes = path / "node_times.arrows"
    nodes.write_bytes(nodes.read_bytes()[:-37])
    graphs = path / "graphs.arrows"
    data = graphs.read_bytes()
    graphs.write_bytes(data[: len(data) - 300])  # the last graph row never made it
    # THEN the first graphs are whole and nothing of the torn one is left
    run = ggml_viz.open(path)
    assert list(run.graphs["graph_id"]) == [0, 1]
    assert set(run.nodes["graph_id"]) == {0, 1}
    assert len(run.nodes) == 6


def test_files_of_another_recording_are_refused(tmp_path):
    write_synthetic_run(tmp_path / "one.ggmlviz", experiment_id="1" * 32)
    write_synthetic_run(tmp_path / "two.ggmlviz", experiment_id="2" * 32)
    os.replace(tmp_path / "two.ggmlviz" / "edges.parquet", tmp_path / "one.ggmlviz" / "edges.parquet")
    with pytest.raises(RunFormatError, match="edges.*different recordings"):
        ggml_viz.open(tmp_path / "one.ggmlviz")


def test_another_format_version_is_refused_clearly(tmp_path):
    write_synthetic_run(tmp_path / "v.ggmlviz")
    manifest_path = tmp_path / "v.ggmlviz" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(RunFormatError, match=f"version {FORMAT_VERSION + 1}"):
        ggml_viz.open(tmp_path / "v.ggmlviz")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "is not a run directory"),
        (lambda p: p.mkdir(), "has no manifest.json"),
        (lambda p: (p.mkdir(), (p / "manifest.json").write_text("{not json")), "cannot be read"),
        (lambda p: (p.mkdir(), (p / "manifest.json").write_text('{"format": "x"}')), "not a ggml-viz run"),
    ],
)
def test_what_is_not_a_run_is_refused(tmp_path, make, message):
    make(tmp_path / "r.ggmlviz")
    with pytest.raises(RunFormatError, match=message):
        ggml_viz.open(tmp_path / "r.ggmlviz")


def test_a_missing_table_is_refused(tmp_path):
    write_synthetic_run(tmp_path / "m.ggmlviz")
    (tmp_path / "m.ggmlviz" / "edges.parquet").unlink()
    with pytest.raises(RunFormatError, match="no 'edges' table"):
        ggml_viz.open(tmp_path / "m.ggmlviz")


def test_output_directories_are_checked_before_recording(tmp_path):
    write_synthetic_run(tmp_path / "taken.ggmlviz")
    with pytest.raises(CaptureError, match="already exists"):
        prepare_run_dir(tmp_path / "taken.ggmlviz")
    assert unique_run_dir(tmp_path / "taken.ggmlviz").name == "taken-1.ggmlviz"
    (tmp_path / "file").write_text("x")
    with pytest.raises(CaptureError, match="not a directory"):
        prepare_run_dir(tmp_path / "file")
    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "keep.txt").write_text("mine")
    with pytest.raises(CaptureError, match="not a ggml-viz run"):
        prepare_run_dir(tmp_path / "stranger", overwrite=True)
    assert (tmp_path / "stranger" / "keep.txt").exists()


def test_tables_are_readable_without_ggml_viz(tmp_path):
    """pyarrow, pandas, polars and DuckDB read a closed run's files directly."""
    import duckdb
    import pandas as pd
    import polars as pl
    import pyarrow.parquet as pq

    write_synthetic_run(tmp_path / "plain.ggmlviz")
    nodes_file = tmp_path / "plain.ggmlviz" / "node_times.parquet"
    assert pq.read_table(nodes_file).num_rows == 6
    assert len(pd.read_parquet(nodes_file)) == 6
    assert pl.read_parquet(nodes_file).height == 6
    rows = duckdb.sql(f"select count(*) from read_parquet('{nodes_file}') where graph_id = 1").fetchall()
    assert rows == [(3,)]


def test_streams_of_an_unfinished_run_are_readable_with_pyarrow(tmp_path):
    write_synthetic_run(tmp_path / "s.ggmlviz", close=False)
    with pa.OSFile(str(tmp_path / "s.ggmlviz" / "node_times.arrows")) as source:
        assert pa.ipc.open_stream(source).read_all().num_rows == 6


def graph_row(graph_id: int) -> dict:
    return {
        "graph_id": graph_id,
        "context_id": 0,
        "decode_index": graph_id,
        "ubatch_index": 0,
        "structure_id": 0,
        "start_ns": 1000 * graph_id,
        "end_ns": 1000 * graph_id + 300,
        "decode_start_ns": 1000 * graph_id - 5,
        "decode_end_ns": 1000 * graph_id + 305,
        "return_code": 0,
        "n_nodes": 3,
        "n_tokens": 1,
        "token_ids": [7],
        "token_positions": [graph_id],
        "token_seq_ids": [0],
        "token_outputs": [True],
        "token_texts": ["é"],
        "first_batch_index": 0,
        "phase": "decode",
        "detail": "op",
    }


def journal_times(graph_id: int) -> dict:
    index = np.arange(3, dtype=np.int32)
    return {
        "node_index": index,
        "start_ns": 1000 * graph_id + index * 100,
        "end_ns": 1000 * graph_id + index * 100 + 50,
        "wait_ns": np.array([5, -1, 0], dtype=np.int64),
    }


def test_graphs_in_the_journal_are_read_before_they_reach_the_streams(tmp_path):
    # GIVEN a recording whose last graphs are only in the journal
    writer = write_synthetic_run(tmp_path / "j.ggmlviz", graphs=1, close=False)
    writer.graphs_per_batch = 4
    for graph_id in range(1, 7):  # graphs 1-4 reach the streams in one batch, 5-6 stay journaled
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    run = ggml_viz.open(tmp_path / "j.ggmlviz")
    assert list(run.graphs["graph_id"]) == list(range(7))
    assert (run.nodes.groupby("graph_id")["timed"].sum() == 3).all()
    assert list(run.tokens["text"].iloc[1:]) == ["é"] * 6
    # each node's wait, from streams and journal alike: -1 (not seen) reads as <NA>
    waits = run.nodes[run.nodes.graph_id > 0].groupby("graph_id")["wait_ns"].apply(lambda w: w.tolist())
    assert all(str(w) == "[5, <NA>, 0]" for w in waits), waits
    # WHEN the last record is torn by a crash
    journal = tmp_path / "j.ggmlviz" / "graphs.journal"
    journal.write_bytes(journal.read_bytes()[:-9])
    # THEN only the torn graph is lost
    assert list(ggml_viz.open(tmp_path / "j.ggmlviz").graphs["graph_id"]) == list(range(6))


def test_a_deferred_journal_takes_a_batch_of_graphs_in_one_write(tmp_path):
    writer = write_synthetic_run(tmp_path / "b.ggmlviz", graphs=1, close=False)
    journal = tmp_path / "b.ggmlviz" / "graphs.journal"
    writer.journal_deferred = True
    for graph_id in (1, 2, 3):
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    assert journal.stat().st_size == 0  # not yet: a reader sees the graphs before the batch
    assert list(ggml_viz.open(tmp_path / "b.ggmlviz").graphs["graph_id"]) == [0]
    writer.sync_journal()
    assert list(ggml_viz.open(tmp_path / "b.ggmlviz").graphs["graph_id"]) == [0, 1, 2, 3]


def test_a_graph_both_in_the_streams_and_the_journal_counts_once(tmp_path):
    writer = write_synthetic_run(tmp_path / "d.ggmlviz", graphs=0, close=False)
    writer.append_graph(graph_row(0), journal_times(0))
    journal_copy = (tmp_path / "d.ggmlviz" / "graphs.journal").read_bytes()
    writer.flush_graphs()  # a crash right after this, before the journal was emptied:
    (tmp_path / "d.ggmlviz" / "graphs.journal").write_bytes(journal_copy)
    run = ggml_viz.open(tmp_path / "d.ggmlviz")
    assert list(run.graphs["graph_id"]) == [0] and len(run.nodes) == 3


def test_a_closed_run_has_no_journal(tmp_path):
    writer = write_synthetic_run(tmp_path / "c.ggmlviz", graphs=0, close=False)
    writer.append_graph(graph_row(0), journal_times(0))
    writer.close()
    assert not (tmp_path / "c.ggmlviz" / "graphs.journal").exists()
    assert list(ggml_viz.open(tmp_path / "c.ggmlviz").graphs["graph_id"]) == [0]


def test_a_run_written_before_node_waits_existed_reads_them_as_unknown(tmp_path):
    import pyarrow.parquet as pq

    write_synthetic_run(tmp_path / "old.ggmlviz")
    times_file = tmp_path / "old.ggmlviz" / "node_times.parquet"
    table = pq.read_table(times_file)
    pq.write_table(table.drop_columns(["wait_ns"]).replace_schema_metadata(table.schema.metadata), times_file)
    nodes = ggml_viz.open(tmp_path / "old.ggmlviz").nodes
    assert nodes["timed"].all() and nodes["wait_ns"].isna().all()


def _totals_from_events(run) -> dict:
    nodes = run.nodes[run.nodes["timed"]].merge(run.graphs[["graph_id", "phase", "structure_id"]], on="graph_id")
    grouped = nodes.groupby(["phase", "structure_id", "node_index"]).agg(
        timed=("duration_ns", "size"), time_ns=("duration_ns", "sum"), wait_ns=("wait_ns", "sum")
    )
    return {key: (int(row.timed), int(row.time_ns), int(row.wait_ns)) for key, row in grouped.iterrows()}


def _totals_stored(run) -> dict:
    totals = run.node_totals[run.node_totals["timed"] > 0].set_index(["phase", "structure_id", "node_index"])
    # a node whose wait was never seen has no wait total (null), where pandas sums nothing to 0
    return {
        key: (int(row.timed), int(row.time_ns), 0 if pd.isna(row.wait_ns) else int(row.wait_ns))
        for key, row in totals.iterrows()
    }


def test_node_totals_sum_the_node_events_of_closed_and_running_runs(tmp_path):
    # GIVEN a closed run (its totals written with it) and one still recording, some of its
    # graphs only in the journal
    write_synthetic_run(tmp_path / "closed.ggmlviz", graphs=3)
    assert (tmp_path / "closed.ggmlviz" / "node_totals.parquet").exists()
    writer = write_synthetic_run(tmp_path / "open.ggmlviz", graphs=2, close=False)
    writer.graphs_per_batch = 100
    for graph_id in (2, 3):
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    for name in ("closed", "open"):
        run = ggml_viz.open(tmp_path / f"{name}.ggmlviz")
        # THEN the totals are the sums over the node events, graph for graph
        assert _totals_stored(run) == _totals_from_events(run), name
        assert run.node_totals["graphs"].sum() == len(run.nodes)
        per_graph = run.nodes[run.nodes["timed"]].groupby(["graph_id", "op"])["duration_ns"].sum()
        stored = run.graph_op_totals.set_index(["graph_id", "op"])["time_ns"]
        assert stored.sort_index().tolist() == per_graph.sort_index().tolist(), name
    assert not (tmp_path / "open.ggmlviz" / "node_totals.parquet").exists()  # a running run's change: not stored


def test_a_closed_run_without_totals_gets_them_on_first_open(tmp_path, monkeypatch, capsys):
    from ggml_viz.runformat import stored

    monkeypatch.setattr(stored, "UPGRADE_NOTICE_EVENTS", 6)  # as if these 3 graphs were millions of events
    # GIVEN a run closed by a ggml-viz that wrote no totals
    write_synthetic_run(tmp_path / "old.ggmlviz", graphs=3)
    for name in TOTALS_SCHEMAS:
        (tmp_path / "old.ggmlviz" / f"{name}.parquet").unlink()
    # WHEN it is read: THEN its totals are computed from the events, saying so, and stored for next time
    run = ggml_viz.open(tmp_path / "old.ggmlviz")
    assert _totals_stored(run) == _totals_from_events(run)
    assert "old.ggmlviz: summing its 9 node events once" in capsys.readouterr().err
    assert all((tmp_path / "old.ggmlviz" / f"{name}.parquet").exists() for name in TOTALS_SCHEMAS)
    assert _totals_stored(ggml_viz.open(tmp_path / "old.ggmlviz")) == _totals_from_events(run)
    assert capsys.readouterr().err == ""


def test_a_run_caught_while_being_closed_is_summed_without_calling_it_older(tmp_path, monkeypatch, capsys):
    from ggml_viz.runformat import stored

    monkeypatch.setattr(stored, "UPGRADE_NOTICE_EVENTS", 6)
    # GIVEN a run whose recorder (this process) has written its Parquet files but not yet its totals
    path = tmp_path / "closing.ggmlviz"
    write_synthetic_run(path, graphs=3)
    for name in TOTALS_SCHEMAS:
        (path / f"{name}.parquet").unlink()
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "status": "recording"}))
    # WHEN it is read: THEN its totals are summed, silently, and left for its recorder to store
    run = ggml_viz.open(path)
    assert run.status == "recording"
    assert _totals_stored(run) == _totals_from_events(run)
    assert capsys.readouterr().err == ""
    assert not any((path / f"{name}.parquet").exists() for name in TOTALS_SCHEMAS)


def test_the_node_events_of_some_graphs_are_read_alone(tmp_path):
    write_synthetic_run(tmp_path / "w.ggmlviz", graphs=5)
    run = ggml_viz.open(tmp_path / "w.ggmlviz")
    window = run.nodes_of([1, 3])
    assert "node_times" not in run._raw  # read from the file's row groups, not the whole table
    everything = run.nodes[run.nodes["graph_id"].isin([1, 3])].reset_index(drop=True)
    assert window.equals(everything)


def test_a_long_recording_rolls_its_streams_into_parts_and_reads_them_as_one(tmp_path, monkeypatch):
    from ggml_viz.runformat import writer as writer_module

    # GIVEN streams that roll to a new segment every 5 rows
    monkeypatch.setattr(writer_module, "ROLL_ROWS", 5)
    writer = write_synthetic_run(tmp_path / "r.ggmlviz", graphs=0, close=False)
    writer.graphs_per_batch = 1
    for graph_id in range(6):  # 3 timed nodes per graph: a new node_times segment every other graph
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    writer.wait_for_parts()
    # THEN each full segment became a Parquet part, its stream gone, while it records ...
    names = {p.name for p in (tmp_path / "r.ggmlviz").iterdir()}
    assert {"node_times.0.parquet", "node_times.1.parquet", "node_times.2.parquet", "graphs.0.parquet"} <= names
    assert "node_times.arrows" not in names and "node_times.3.arrows" in names
    # ... a reader sees every row and the totals of them all ...
    live = ggml_viz.open(tmp_path / "r.ggmlviz")
    assert len(live.raw("node_times")) == 18 and list(live.graphs["graph_id"]) == list(range(6))
    assert _totals_stored(live) == _totals_from_events(live)
    assert live.nodes_of([2])["graph_id"].tolist() == [2, 2, 2]
    # ... and closing adds the last parts, no stream left, the totals summed part by part
    writer.close()
    closed = ggml_viz.open(tmp_path / "r.ggmlviz")
    assert len(closed.raw("node_times")) == 18
    assert not list((tmp_path / "r.ggmlviz").glob("*.arrows")) and not list((tmp_path / "r.ggmlviz").glob("*partial"))
    assert not (tmp_path / "r.ggmlviz" / "node_times.parquet").exists()
    assert _totals_stored(closed) == _totals_from_events(closed)
    assert closed.nodes_of([2, 5])["graph_id"].tolist() == [2, 2, 2, 5, 5, 5]
    assert closed.manifest["counts"]["node_times_rows"] == 18
    # AND the parts read as one table without ggml-viz
    duckdb = pytest.importorskip("duckdb")
    glob = str(tmp_path / "r.ggmlviz" / "node_times*.parquet")
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(18,)]


def test_a_live_view_reads_only_what_the_recording_appended(tmp_path, monkeypatch):
    from ggml_viz.runformat import streams
    from ggml_viz.runformat import writer as writer_module

    monkeypatch.setattr(writer_module, "ROLL_ROWS", 5)
    for memo in ("_tables", "_segments", "_parts_read", "_part_totals"):
        monkeypatch.setattr(streams, memo, {})
    writer = write_synthetic_run(tmp_path / "live.ggmlviz", graphs=0, close=False)
    writer.graphs_per_batch = 1
    for graph_id in range(4):
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    writer.wait_for_parts()
    # GIVEN a reader of the run while it records: its totals are its parts' and segments' summed
    first = ggml_viz.open(tmp_path / "live.ggmlviz")
    assert _totals_stored(first) == _totals_from_events(first)
    # WHEN more graphs arrive and the run is opened again
    for graph_id in range(4, 7):
        writer.append_graph(graph_row(graph_id), journal_times(graph_id))
    writer.wait_for_parts()
    read_rows = []
    original, original_part, original_totals = streams._new_messages, streams._read_parquet, streams.part_totals

    def counting(path, known):
        tail, messages, continues = original(path, known)
        read_rows.extend(message.batch.num_rows for message in messages)
        return tail, messages, continues

    def counting_part(path):
        table = original_part(path)
        read_rows.append(table.num_rows)
        return table

    def counting_totals(path, totals_of):
        def counted(part):
            totals, whole = totals_of(part)
            read_rows.append(sum(totals["node_totals"].column("timed").to_pylist()))
            return totals, whole

        return original_totals(path, counted)

    monkeypatch.setattr(streams, "_new_messages", counting)
    monkeypatch.setattr(streams, "_read_parquet", counting_part)
    monkeypatch.setattr("ggml_viz.runformat.stored.part_totals", counting_totals)
    again = ggml_viz.open(tmp_path / "live.ggmlviz")
    totals = _totals_stored(again)
    # THEN only the rows appended since were read (3 graphs: 3 graph rows, 9 node times), and
    # the graph rows that moved from their full stream into its part (graphs 0-4: 5 rows) again
    assert sum(read_rows) == 3 + 9 + 4
    monkeypatch.setattr(streams, "_new_messages", original)
    # ... and the totals are whole, and equal to a fresh reader's
    assert totals == _totals_from_events(ggml_viz.open(tmp_path / "live.ggmlviz"))
    for memo in ("_tables", "_segments", "_parts_read", "_part_totals"):
        monkeypatch.setattr(streams, memo, {})
    fresh = ggml_viz.open(tmp_path / "live.ggmlviz")
    assert _totals_stored(fresh) == totals
    assert again.raw("graphs").equals(fresh.raw("graphs"))
    # AND a window of graphs reads the batches holding them
    window = again.nodes_of([5])
    assert window["graph_id"].unique().tolist() == [5] and window["timed"].sum() == 3
    writer.close()


def test_a_stream_replaced_by_another_recording_is_read_afresh(tmp_path, monkeypatch):
    from ggml_viz.runformat import streams

    monkeypatch.setattr(streams, "_tables", {})
    monkeypatch.setattr(streams, "_segments", {})
    # GIVEN a live run read once
    path = tmp_path / "again.ggmlviz"
    writer = write_synthetic_run(path, graphs=3, close=False, experiment_id="a" * 32)
    assert len(ggml_viz.open(path).graphs) == 3
    # WHEN it is replaced by another recording with as many graphs or more
    writer.close(complete=False)
    shutil.rmtree(path)
    write_synthetic_run(path, graphs=4, close=False, experiment_id="b" * 32)
    # THEN the new one is read from its start
    run = ggml_viz.open(path)
    assert run.experiment_id == "b" * 32 and len(run.graphs) == 4
    assert _totals_stored(run) == _totals_from_events(run)


def test_a_stream_cut_mid_message_is_read_to_its_last_whole_batch_and_then_onwards(tmp_path, monkeypatch):
    from ggml_viz.runformat import streams

    monkeypatch.setattr(streams, "_tables", {})
    path = tmp_path / "t.arrows"
    schema = pa.schema([("a", pa.int32())])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as stream:
        for value in range(3):
            stream.write_batch(pa.record_batch([pa.array([value], pa.int32())], schema=schema))
    whole = path.read_bytes()
    # GIVEN a stream whose last message is still being written
    path.write_bytes(whole[: len(whole) - 20])
    assert streams.read_stream(path).column("a").to_pylist() == [0, 1]
    # WHEN the rest arrives, THEN it is read, once
    path.write_bytes(whole)
    assert streams.read_stream(path).column("a").to_pylist() == [0, 1, 2]
    assert streams.read_stream(path).column("a").to_pylist() == [0, 1, 2]
