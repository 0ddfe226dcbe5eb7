"""SQL over runs: the views stream from the runs' files, and a folder of runs is one dataset
whose rows name their run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.commands import main
from ggml_viz.runformat.sql import run_query
from ggml_viz.runformat.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("servers")
    write_synthetic_run(folder / "host-a.ggmlviz", graphs=4, layers=2, seed=1)
    write_synthetic_run(folder / "host-b.ggmlviz", graphs=6, layers=2, seed=2)
    return folder


def test_the_nodes_view_is_the_readers_nodes_table(runs):
    run = ggml_viz.open(runs / "host-a.ggmlviz")
    result = run_query(run, "select * from nodes order by graph_id, node_index")
    expected = run.nodes
    assert set(result.columns) == {"run", "host", "pid", *expected.columns}  # each row knows its host and process
    assert set(result["host"]) == {run.manifest["recorder"].get("host", "")}
    for column in ("graph_id", "node_index", "start_ns", "end_ns", "wait_ns", "name", "op", "layer"):
        assert result[column].astype(str).tolist() == expected[column].astype(str).tolist(), column
    edges = run_query(run, "select * from edges order by graph_id, node_index, src_slot")
    assert len(edges) == len(run.edges) and set(edges.columns) == {"run", *run.edges.columns}


def test_a_folder_of_runs_is_one_dataset_each_row_knowing_its_run(runs, capsys):
    sql = "select run, count(*) as events, sum(duration_ns) as ns from nodes group by run order by run"
    assert main(["query", str(runs), sql, "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for row in rows:
        nodes = ggml_viz.open(runs / row["run"]).nodes
        assert row["events"] == len(nodes) and row["ns"] == int(nodes["duration_ns"].sum())
    assert [row["run"] for row in rows] == ["host-a.ggmlviz", "host-b.ggmlviz"]


def test_a_run_still_recording_and_an_older_run_are_queried_alike(runs, tmp_path):
    # GIVEN a run whose recorder has not closed it (streams, no Parquet) ...
    from ggml_viz.runformat.manifest import new_manifest
    from ggml_viz.runformat.writer import RunWriter, prepare_run_dir

    closed = ggml_viz.open(runs / "host-a.ggmlviz")
    # ... and a run written before node_times had wait_ns
    older = tmp_path / "older.ggmlviz"
    write_synthetic_run(older, graphs=4, layers=2, seed=1)
    table = pq.read_table(older / "node_times.parquet")
    pq.write_table(
        table.drop_columns(["wait_ns"]).replace_schema_metadata(table.schema.metadata), older / "node_times.parquet"
    )
    result = run_query(ggml_viz.open(older), "select count(*) as n, count(wait_ns) as waits from nodes")
    assert result["n"].tolist() == [len(closed.nodes)] and result["waits"].tolist() == [0]
    writer = RunWriter(prepare_run_dir(tmp_path / "live.ggmlviz"), "f" * 32, new_manifest("f" * 32))
    assert run_query(ggml_viz.open(tmp_path / "live.ggmlviz"), "select count(*) as n from nodes")["n"].tolist() == [0]
    writer.close()


def test_a_folder_without_runs_is_one_clear_error(tmp_path, capsys):
    assert main(["query", str(tmp_path), "select 1"]) != 0
    assert "neither a run nor a folder of runs" in capsys.readouterr().err


def test_a_run_offers_its_tables_as_duckdb_relations_and_arrow_datasets(runs, tmp_path):
    import pyarrow.dataset as ds

    from ggml_viz.runformat.synthetic import SyntheticRecording

    run = ggml_viz.open(runs / "host-b.ggmlviz")
    # a relation over the node events, computed in DuckDB
    connection = run.duckdb()
    try:
        by_op = connection.sql("select op, sum(duration_ns) as ns from nodes group by op order by op").df()
    finally:
        connection.close()
    expected = run.nodes.groupby("op")["duration_ns"].sum()
    assert by_op.set_index("op")["ns"].astype(int).to_dict() == expected.astype(int).to_dict()
    # a dataset scanned with a filter pushed down to the file
    times = run.dataset("node_times").to_table(filter=ds.field("graph_id") == 3)
    assert times.num_rows == int((run.nodes["graph_id"] == 3).sum())
    assert times.column("graph_id").unique().to_pylist() == [3]
    # a run still recording: the tables as read now
    recording = SyntheticRecording(tmp_path / "live.ggmlviz", layers=2, seed=5)
    recording.append_graphs(2)
    live = ggml_viz.open(recording.run_dir)
    assert live.dataset("graphs").count_rows() == 2
    with pytest.raises(ggml_viz.RunFormatError, match="no table 'nodez'"):
        live.dataset("nodez")
    recording.close()
