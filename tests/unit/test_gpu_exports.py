"""GPU time wherever a run leaves ggml-viz: the traces' GPU tracks (a slice per kernel, copy
and memset at its GPU times), the profiles' node time from the GPU, the GPU tables in SQL and
in the table exports, and a comparison that names each side's clock. On synthetic runs of a
CUDA device (graphs read at their compute call, every few graphs traced by the GPU timer)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.analysis.compare import clocks, compare
from ggml_viz.commands import main
from ggml_viz.export import ExportOptions, base, exporter_for, profiles
from ggml_viz.runformat.reader import Run
from ggml_viz.runformat.sql import run_query
from ggml_viz.runformat.synthetic import write_synthetic_run

from ..profile_files import exported_profile, exported_whole_and_in_chunks, tensorboard_events, tensorboard_steps

TRACED = [0, 4, 8]  # the graphs the GPU timer traced: every fourth of 12


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gpu")
    write_synthetic_run(folder / "cuda.ggmlviz", graphs=12, layers=2, gpu_every=4)
    write_synthetic_run(folder / "cuda-b.ggmlviz", graphs=8, layers=2, gpu_every=4, seed=4)
    write_synthetic_run(folder / "cpu.ggmlviz", graphs=6, layers=2)
    return folder


@pytest.fixture(scope="module")
def run(folder) -> Run:
    return ggml_viz.open(folder / "cuda.ggmlviz")


def rewrite(run_dir: Path, table: str, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite a stored table (as pandas, through `change`), keeping its file's stamp."""
    path = run_dir / f"{table}.parquet"
    stored = pq.read_table(path)
    changed = pa.Table.from_pandas(change(stored.to_pandas()), schema=stored.schema, preserve_index=False)
    pq.write_table(changed.replace_schema_metadata(stored.schema.metadata), path)


def copy_run(run: Run, to: Path) -> Path:
    import shutil

    shutil.copytree(run.path, to)
    return to


def perfetto_slices(path: Path) -> tuple[dict[int, object], dict[int, list[tuple[int, str, dict]]]]:
    """A Perfetto trace's track descriptors, and per track its slices: (start, end, name, args)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(path.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    open_slices: dict[int, list] = defaultdict(list)
    slices: dict[int, list] = defaultdict(list)
    for packet in trace.packet:
        event = packet.track_event
        if not packet.HasField("track_event"):
            continue
        if event.type == pb.TrackEvent.Type.TYPE_SLICE_BEGIN:
            args = {a.name: a.int_value if a.HasField("int_value") else a.string_value for a in event.debug_annotations}
            open_slices[event.track_uuid].append((packet.timestamp, event.name, args))
        elif event.type == pb.TrackEvent.Type.TYPE_SLICE_END:
            start, name, args = open_slices[event.track_uuid].pop()
            slices[event.track_uuid].append((start, packet.timestamp, name, args))
    assert not any(open_slices.values())
    return tracks, slices


def gpu_lanes(tracks, slices):  # type: ignore[no-untyped-def]
    """The slices of the GPU tracks (those with a parent), by track."""
    return {uuid: slices.get(uuid, []) for uuid, track in tracks.items() if track.parent_uuid}


# -- traces -------------------------------------------------------------------------------


def test_perfetto_has_a_gpu_track_under_the_context_with_a_slice_per_kernel(run, tmp_path):
    # WHEN the GPU run is exported to Perfetto
    said = exporter_for(None, tmp_path / "t.pftrace").export(run, tmp_path / "t.pftrace", ExportOptions())
    tracks, slices = perfetto_slices(tmp_path / "t.pftrace")
    # THEN one GPU track (one lane: no kernel overlaps another here) hangs under the context's track
    (context_track,) = [uuid for uuid, track in tracks.items() if track.name.startswith("context 0")]
    lanes = gpu_lanes(tracks, slices)
    assert len(lanes) == 1
    (gpu_track,) = lanes
    assert tracks[gpu_track].parent_uuid == context_track and tracks[gpu_track].name == "GPU 0"
    # ... with one slice per kernel at its GPU times, named by its function, its node in the args
    kernels = run.gpu_kernels.sort_values(["graph_id", "start_ns"], kind="stable")
    got = lanes[gpu_track]
    assert [(s, e, n) for s, e, n, _ in got] == list(
        zip(kernels["start_ns"], kernels["end_ns"], kernels["kernel"], strict=True)
    )
    nodes = run.nodes_of(TRACED, times=False).set_index(["graph_id", "node_index"])
    for (_, _, _, args), kernel in zip(got, kernels.itertuples(), strict=True):
        node = nodes.loc[(kernel.graph_id, kernel.node_index)]
        assert args["kernel"] == kernel.name and args["busy_ns"] == kernel.busy_ns
        assert (args["node name"], args["op"], args["node"], args["graph"]) == (
            node["name"],
            node["op"],
            kernel.node_index,
            kernel.graph_id,
        )
    assert f"{len(kernels):,} GPU kernels and copies" in said


def test_chrome_json_has_a_gpu_thread_per_device_in_the_contexts_process(run, tmp_path):
    exporter_for(None, tmp_path / "t.json").export(run, tmp_path / "t.json", ExportOptions())
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {(0, 1): "graphs", (0, 1000): "GPU 0"}
    on_gpu = [e for e in events if e.get("cat") == "gpu"]
    kernels = run.gpu_kernels.sort_values(["graph_id", "start_ns"], kind="stable")
    origin = run.graphs["start_ns"].min()
    assert [e["name"] for e in on_gpu] == kernels["kernel"].tolist()
    assert [e["ts"] for e in on_gpu] == pytest.approx(((kernels["start_ns"] - origin) / 1e3).tolist())
    assert [e["dur"] for e in on_gpu] == pytest.approx(((kernels["end_ns"] - kernels["start_ns"]) / 1e3).tolist())
    assert {(e["pid"], e["tid"]) for e in on_gpu} == {(0, 1000)}
    assert {"kernel", "node name", "op", "node", "busy_ns"} <= set(on_gpu[0]["args"])


@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_a_gpu_trace_written_a_graph_at_a_time_is_the_trace_written_at_once(run, tmp_path, monkeypatch, name):
    whole, chunked = exported_whole_and_in_chunks(run, tmp_path, name, monkeypatch)
    assert whole.read_bytes() == chunked.read_bytes()


def test_a_trace_window_holds_the_kernels_of_its_graphs_only(run, tmp_path):
    # a window holding one traced graph: its kernels only
    exporter_for(None, tmp_path / "w.json").export(run, tmp_path / "w.json", ExportOptions(graphs=(3, 5)))
    events = json.loads((tmp_path / "w.json").read_text())["traceEvents"]
    assert {e["args"]["graph"] for e in events if e.get("cat") == "gpu"} == {4}
    assert len([e for e in events if e.get("cat") == "gpu"]) == int((run.gpu_kernels["graph_id"] == 4).sum())
    # by time, in Perfetto
    graphs = run.graphs.set_index("graph_id")
    origin = run.graphs["start_ns"].min()
    window = ((graphs.loc[8, "start_ns"] - origin) / 1e6 + 1e-3, (graphs.loc[8, "end_ns"] - origin) / 1e6 - 1e-3)
    exporter_for(None, tmp_path / "t.pftrace").export(run, tmp_path / "t.pftrace", ExportOptions(time_ms=window))
    tracks, slices = perfetto_slices(tmp_path / "t.pftrace")
    (lane,) = gpu_lanes(tracks, slices).values()
    assert {args["graph"] for *_, args in lane} == {8}
    # a window without a traced graph: no GPU track at all
    said = exporter_for(None, tmp_path / "n.pftrace").export(run, tmp_path / "n.pftrace", ExportOptions(graphs=(1, 3)))
    tracks, slices = perfetto_slices(tmp_path / "n.pftrace")
    assert not gpu_lanes(tracks, slices) and "GPU" not in said


def test_overlapping_kernels_take_lanes_of_their_devices_track(run, tmp_path):
    # GIVEN kernels that start before the one before them ends (programmatic dependent launch),
    # and a second device running the MUL_MATs' quantize kernels
    path = copy_run(run, tmp_path / "overlap.ggmlviz")

    def overlap(kernels: pd.DataFrame) -> pd.DataFrame:
        kernels["end_ns"] += 1_500
        kernels.loc[kernels["kernel"] == "quantize_q8_1", "device"] = 1
        return kernels

    rewrite(path, "gpu_kernels", overlap)
    overlapping = ggml_viz.open(path)
    # WHEN it is exported
    exporter_for(None, tmp_path / "o.pftrace").export(overlapping, tmp_path / "o.pftrace", ExportOptions())
    exporter_for(None, tmp_path / "o.json").export(overlapping, tmp_path / "o.json", ExportOptions())
    # THEN each device's slices lie on lanes of one name that merge into one track, none overlapping
    tracks, slices = perfetto_slices(tmp_path / "o.pftrace")
    lanes = gpu_lanes(tracks, slices)
    by_device = defaultdict(list)
    for uuid, lane in lanes.items():
        by_device[tracks[uuid].name].append(lane)
        assert tracks[uuid].sibling_merge_key == f"gpu {tracks[uuid].name.split()[-1]}"
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(lane))  # nested (here: one after the other)
    assert sorted(by_device) == ["GPU 0", "GPU 1"] and len(by_device["GPU 0"]) == 2
    assert sum(len(lane) for lane in lanes.values()) == len(overlapping.gpu_kernels)
    # ... and Chrome's threads likewise: a thread per lane, in the context's process
    events = json.loads((tmp_path / "o.json").read_text())["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["tid"] >= 1000}
    assert threads == {1000: "GPU 0", 1001: "GPU 0 (overlapping, 2)", 1100: "GPU 1"}
    per_thread = defaultdict(list)
    for event in (e for e in events if e.get("cat") == "gpu"):
        per_thread[event["tid"]].append((event["ts"], event["ts"] + event["dur"]))
    for spans in per_thread.values():
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(spans))


def test_a_trace_reads_the_gpu_kernels_a_chunk_of_graphs_at_a_time(run, tmp_path, monkeypatch):
    # GIVEN a freshly opened run whose kernels cannot be read whole, and chunks of two graphs
    fresh = ggml_viz.open(run.path)
    monkeypatch.setattr(Run, "gpu_kernels", property(lambda self: pytest.fail("read all of the run's kernels")))
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    read_at_once: list[int] = []
    rows_of = base.gpu_rows_of

    def rows_of_chunk(run: Run, table: str, graph_ids) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        read_at_once.append(len(list(graph_ids)))
        return rows_of(run, table, graph_ids)

    monkeypatch.setattr(base, "gpu_rows_of", rows_of_chunk)
    for name in ("out.pftrace", "out.json"):
        exporter_for(None, tmp_path / name).export(fresh, tmp_path / name, ExportOptions())
    assert read_at_once and all(graphs <= 2 for graphs in read_at_once)


def test_a_run_without_gpu_times_has_no_gpu_track(folder, tmp_path):
    cpu = ggml_viz.open(folder / "cpu.ggmlviz")
    said = exporter_for(None, tmp_path / "c.pftrace").export(cpu, tmp_path / "c.pftrace", ExportOptions())
    tracks, slices = perfetto_slices(tmp_path / "c.pftrace")
    assert not gpu_lanes(tracks, slices) and "GPU" not in said


# -- profiles -----------------------------------------------------------------------------


def gpu_profile(run: Run, graph_ids: list[int] | None = None) -> list[tuple[tuple[str, ...], int]]:
    """The flame graph of the GPU's node times, from gpu_node_times directly."""
    times = run.raw("gpu_node_times")
    if graph_ids is not None:
        times = times[times["graph_id"].isin(graph_ids)]
    times = times.merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    node_times = (
        times.groupby(["structure_id", "node_index"])
        .agg(time_ns=("gpu_ns", "sum"), first_graph=("graph_id", "min"))
        .reset_index()
        .astype("int64")
    )
    stacks = profiles.stacks(node_times, profiles.node_descriptions(run))
    return [((r.layer, r.component, r.op, r.tensor), int(r.time)) for r in stacks.itertuples()]


def test_speedscope_of_a_gpu_run_is_its_gpu_node_time_and_says_so(run, tmp_path):
    profile = exported_profile(run, tmp_path / "g.speedscope.json")
    assert profile == gpu_profile(run)
    assert sum(weight for _, weight in profile) == int(run.raw("gpu_node_times")["gpu_ns"].sum())
    document = json.loads((tmp_path / "g.speedscope.json").read_text())
    assert document["profiles"][0]["name"] == "cuda.ggmlviz: GPU node time"
    # a window: its traced graphs' GPU time, summed a chunk at a time
    said = exporter_for("speedscope", tmp_path / "w.speedscope.json").export(
        run, tmp_path / "w.speedscope.json", ExportOptions(graphs=(3, 9))
    )
    assert exported_profile(run, tmp_path / "w.speedscope.json", ExportOptions(graphs=(3, 9))) == gpu_profile(
        run, [4, 8]
    )
    assert "ms of GPU node time (graphs 3-9)" in said


def test_gpu_node_times_summed_a_graph_at_a_time_are_the_runs_totals(run, monkeypatch):
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    streamed = profiles.node_times_of_graphs(run, run.graphs["graph_id"], ExportOptions())
    from_totals = profiles.node_times_of_run(run)
    assert from_totals is not None and from_totals["gpu"].all()
    pd.testing.assert_frame_equal(streamed, from_totals, check_dtype=False)


def test_a_profile_of_host_and_gpu_times_says_which_is_which():
    assert profiles.node_time_name(pd.Series([False, False])) == "node time"
    assert profiles.node_time_name(pd.Series([True, True])) == "GPU node time"
    assert "GPU time for the nodes the GPU timer timed, host time for the others" in profiles.node_time_name(
        pd.Series([True, False])
    )


def test_tensorboard_puts_the_gpus_times_under_their_own_tags(run, tmp_path, monkeypatch):
    whole, chunked = exported_whole_and_in_chunks(run, tmp_path, "tb", monkeypatch, "tensorboard")
    assert tensorboard_events(whole) == tensorboard_events(chunked)
    steps = tensorboard_steps(whole)
    assert not any(tag.startswith(("op_time_us/", "layer_time_us/")) for tag in steps)
    times = run.raw("gpu_node_times").merge(run.nodes_of(TRACED, times=False), on=["graph_id", "node_index"])
    per_graph = times[times["op"] == "MUL_MAT"].groupby("graph_id")["gpu_ns"].sum() / 1e3
    assert [step for step, _ in steps["op_gpu_time_us/MUL_MAT"]] == TRACED  # graph ids are the steps here
    assert [value for _, value in steps["op_gpu_time_us/MUL_MAT"]] == pytest.approx(per_graph.tolist(), rel=1e-6)
    assert [step for step, _ in steps["layer_gpu_time_us/layer_0"]] == TRACED
    busy = run.gpu_graphs.set_index("graph_id")["busy_ns"] / 1e6
    decode = [step for step, _ in steps["gpu_busy_ms/decode"]]
    assert decode == [4, 8] and [v for _, v in steps["gpu_busy_ms/decode"]] == pytest.approx(busy[[4, 8]].tolist())


# -- SQL ----------------------------------------------------------------------------------


def test_the_gpu_views_are_the_runs_gpu_tables(run):
    kernels = run_query(run, "select * from gpu_kernels order by graph_id, start_ns")
    assert len(kernels) == len(run.gpu_kernels)
    assert {"run", *run.gpu_kernels.columns, "node_name", "op", "layer"} == set(kernels.columns)
    expected = run.gpu_kernels.sort_values(["graph_id", "start_ns"], kind="stable")
    for column in ("graph_id", "node_index", "kernel", "name", "start_ns", "busy_ns", "phase"):
        assert kernels[column].astype(str).tolist() == expected[column].astype(str).tolist(), column
    graphs = run_query(run, "select * from gpu_graphs order by graph_id")
    assert set(graphs.columns) == {"run", *run.gpu_graphs.columns}
    for column in ("graph_id", "busy_ns", "host_ns", "idle_ns", "mapping", "phase"):
        assert graphs[column].astype(str).tolist() == run.gpu_graphs[column].astype(str).tolist(), column
    # the GPU's time per op, from gpu_node_times, is the one node_totals holds
    by_op = run_query(run, "select op, sum(gpu_ns) as ns from gpu_node_times group by op")
    totals = run.node_totals[run.node_totals["clock"] == "gpu"].groupby("op")["time_ns"].sum()
    assert by_op.set_index("op")["ns"].astype(int).to_dict() == totals.astype(int).to_dict()
    layers = run_query(run, "select distinct layer from gpu_node_times where op = 'MUL_MAT' order by layer")
    assert layers["layer"].tolist()[:2] == [0, 1]


def test_a_run_without_gpu_tables_has_empty_gpu_views_and_a_folder_mixes_both(folder, capsys):
    cpu = ggml_viz.open(folder / "cpu.ggmlviz")
    for view in ("gpu_kernels", "gpu_node_times", "gpu_graphs", "raw_gpu_kernels"):
        assert run_query(cpu, f"select count(*) as n from {view}")["n"].tolist() == [0], view
    sql = "select run, count(*) as kernels, sum(busy_ns) as busy from gpu_kernels group by run order by run"
    assert main(["query", str(folder), sql, "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["run"] for row in rows] == ["cuda-b.ggmlviz", "cuda.ggmlviz"]
    for row in rows:
        kernels = ggml_viz.open(folder / row["run"]).gpu_kernels
        assert row["kernels"] == len(kernels) and row["busy"] == int(kernels["busy_ns"].sum())
    assert main(["query", str(folder), "--tables"]) == 0
    listed = capsys.readouterr().out
    assert all(f"{view}:" in listed for view in ("gpu_kernels", "gpu_node_times", "gpu_graphs"))


def test_a_kernel_outside_any_graph_is_kept_by_sql_and_left_out_of_traces(run, tmp_path):
    # GIVEN a copy the GPU timer could not match to a graph (graph -1)
    path = copy_run(run, tmp_path / "stray.ggmlviz")

    def stray(kernels: pd.DataFrame) -> pd.DataFrame:
        copy = kernels.iloc[:1].assign(graph_id=-1, node_index=-1, group_end=-1, kind="memcpy", kernel="HtoD", name="")
        return pd.concat([kernels, copy], ignore_index=True)

    rewrite(path, "gpu_kernels", stray)
    stray_run = ggml_viz.open(path)
    assert run_query(stray_run, "select count(*) as n from raw_gpu_kernels")["n"].tolist() == [len(run.gpu_kernels) + 1]
    # THEN SQL keeps it, as the reader does, without a phase or a node
    assert len(stray_run.gpu_kernels) == len(run.gpu_kernels) + 1
    kept = run_query(stray_run, "select phase, node_name from gpu_kernels where graph_id = -1")
    assert len(kept) == 1 and kept.isna().all(axis=None)
    # ... and the traces leave it out with the reader
    exporter_for(None, tmp_path / "s.json").export(stray_run, tmp_path / "s.json", ExportOptions())
    events = json.loads((tmp_path / "s.json").read_text())["traceEvents"]
    assert len([e for e in events if e.get("cat") == "gpu"]) == len(run.gpu_kernels)


# -- tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["csv", "parquet"])
def test_the_table_exports_hold_the_gpu_tables(run, folder, tmp_path, monkeypatch, name):
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 2)
    said = exporter_for(name, tmp_path / "t").export(run, tmp_path / "t", ExportOptions())
    read = pd.read_csv if name == "csv" else pd.read_parquet
    kernels = read(tmp_path / "t" / f"gpu_kernels.{name}")
    assert kernels["start_ns"].tolist() == run.gpu_kernels["start_ns"].tolist()
    assert {*run.gpu_kernels.columns, "node_name", "op", "layer"} == set(kernels.columns)
    node_times = read(tmp_path / "t" / f"gpu_node_times.{name}")
    assert node_times["gpu_ns"].tolist() == run.raw("gpu_node_times")["gpu_ns"].tolist()
    graphs = read(tmp_path / "t" / f"gpu_graphs.{name}")
    assert graphs["idle_ns"].tolist() == run.gpu_graphs["idle_ns"].tolist()
    assert f"gpu_kernels ({len(run.gpu_kernels):,} rows)" in said
    # a window: its graphs' rows
    exporter_for(name, tmp_path / "w").export(run, tmp_path / "w", ExportOptions(graphs=(2, 5)))
    assert set(read(tmp_path / "w" / f"gpu_kernels.{name}")["graph_id"]) == {4}
    assert read(tmp_path / "w" / f"gpu_graphs.{name}")["graph_id"].tolist() == [4]
    # a run without GPU times: no GPU table
    exporter_for(name, tmp_path / "c").export(ggml_viz.open(folder / "cpu.ggmlviz"), tmp_path / "c", ExportOptions())
    assert not list((tmp_path / "c").glob("gpu_*"))


# -- comparison ---------------------------------------------------------------------------


def test_two_gpu_runs_compare_gpu_time_per_traced_graph(folder):
    a, b = ggml_viz.open(folder / "cuda.ggmlviz"), ggml_viz.open(folder / "cuda-b.ggmlviz")
    result = compare(a, b, top=100)
    assert clocks(a, b) == {"a": "GPU", "b": "GPU", "same": True, "note": None}
    assert "node time clock" not in result["settings_that_differ"]
    row = next(r for r in result["per_graph_time_by"]["op"] if (r["phase"], r["op"]) == ("decode", "MUL_MAT"))
    for side, run in (("a", a), ("b", b)):
        totals = run.node_totals[(run.node_totals["phase"] == "decode") & (run.node_totals["op"] == "MUL_MAT")]
        traced = run.gpu_graphs[run.gpu_graphs["phase"] == "decode"]["graph_id"].nunique()
        assert row[f"{side}_ns"] == pytest.approx(totals["time_ns"].sum() / traced)


def test_a_gpu_run_against_a_cpu_run_says_the_clocks_differ(folder, capsys):
    gpu, cpu = folder / "cuda.ggmlviz", folder / "cpu.ggmlviz"
    assert main(["diff", str(cpu), str(gpu), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["clock"]["a"] == "host" and result["clock"]["b"] == "GPU" and not result["clock"]["same"]
    assert result["settings_that_differ"]["node time clock"] == {"a": "host", "b": "GPU"}
    assert main(["diff", str(cpu), str(gpu)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "A's node times come from the host clock, B's from the GPU clock" in said
    assert "B per graph (GPU)" in said
