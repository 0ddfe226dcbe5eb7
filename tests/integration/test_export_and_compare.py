"""Exports, SQL, run comparison and the benchmark on real SmolLM2 runs: every file reads back
with its format's own reader and holds what the run holds."""

from __future__ import annotations

import json
import shutil
import struct
import xml.etree.ElementTree as ET

import pytest

import ggml_viz
from ggml_viz.commands import main
from ggml_viz.runformat.sql import run_query

from ..profile_files import exported_profile, profile_of_all_events, tensorboard_steps
from .smollm2 import greedy, load_model

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_path):
    path = tmp_path_factory.mktemp("export") / "six.ggmlviz"
    with ggml_viz.record(path):
        greedy(load_model(model_path), n_predict=6)
    return ggml_viz.open(path)


def export(run, output, *extra):
    assert main(["export", str(run.path), "-o", str(output), *extra]) == 0
    return output


def test_perfetto_trace_parses_back_with_one_nested_slice_per_node(run, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(export(run, tmp_path / "run.pftrace").read_bytes())
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    assert any("CPU" in name for name in names.values()) and any("KV cache" in name for name in names.values())
    stack: list[str] = []
    node_slices, deepest, args = 0, 0, set()
    for packet in trace.packet:
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == pb.TrackEvent.Type.TYPE_SLICE_BEGIN:
            stack.append(event.name)
            deepest = max(deepest, len(stack))
            if len(stack) == 2:
                node_slices += 1
                args |= {a.name for a in event.debug_annotations}
            else:
                assert event.name.startswith("graph ")  # a node never outside its graph
        elif event.type == pb.TrackEvent.Type.TYPE_SLICE_END:
            stack.pop()
    assert not stack and deepest == 2
    assert node_slices == int(run.nodes["timed"].sum())
    assert {"name", "op", "type", "shape", "layer", "graph", "node"} <= set(args)


def test_chrome_json_has_one_complete_event_per_node(run, tmp_path):
    document = json.loads(export(run, tmp_path / "run.json").read_text())
    nodes = [e for e in document["traceEvents"] if e["ph"] == "X" and e["cat"] == "node"]
    assert len(nodes) == int(run.nodes["timed"].sum())
    assert all(e["dur"] >= 0 for e in nodes) and {"op", "shape", "layer"} <= set(nodes[0]["args"])
    assert any(e["ph"] == "C" for e in document["traceEvents"])


def test_tables_export_as_csv_and_parquet(run, tmp_path):
    import pandas as pd

    export(run, tmp_path / "csv", "--format", "csv")
    export(run, tmp_path / "pq", "--format", "parquet")
    assert len(pd.read_csv(tmp_path / "csv" / "nodes.csv")) == len(run.nodes)
    assert pd.read_parquet(tmp_path / "pq" / "edges.parquet")["src_name"].tolist() == run.edges["src_name"].tolist()


def test_one_layer_as_dot_parses_with_its_nodes_and_edges(run, tmp_path):
    import pydot

    (graph,) = pydot.graph_from_dot_file(str(export(run, tmp_path / "layer.dot", "--graph", "1", "--layer", "3")))
    labels = " ".join(
        str(node.get_label()) for node in graph.get_nodes() + [n for s in graph.get_subgraphs() for n in s.get_nodes()]
    )
    for name in ("norm-3", "Qcur-3", "kq_soft_max-3", "ffn_out-3", "blk.3.ffn_up.weight", "cache_k_l3"):
        assert name in labels
    assert len(graph.get_edges()) > 30


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt-get install graphviz)")
def test_graph_pictures_are_valid_images(run, tmp_path):
    svg = ET.parse(export(run, tmp_path / "layer.svg", "--layer", "2")).getroot()
    assert svg.tag.endswith("svg")
    png = export(run, tmp_path / "layers.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width > 200 and height > 200


def test_timeline_and_memory_pictures_are_valid_images(run, tmp_path):
    for name in ("run.timeline.png", "run.memory.png"):
        png = export(run, tmp_path / name).read_bytes()
        width, height = struct.unpack(">II", png[16:24])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and width > 800 and height > 150
    assert ET.parse(export(run, tmp_path / "run.timeline.svg")).getroot().tag.endswith("svg")


def test_speedscope_profile_holds_all_node_time(run, tmp_path):
    document = json.loads(export(run, tmp_path / "run.speedscope.json").read_text())
    profile = document["profiles"][0]
    assert sum(profile["weights"]) == int(run.nodes["duration_ns"].sum())
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    assert "layer 0" in frames and "attention" in frames and "ffn" in frames and "MUL_MAT" in frames


def test_tensorboard_event_files_read_back(run, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = export(run, tmp_path / "tb", "--format", "tensorboard")
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    tags = events.Tags()
    assert {"latency_ms/decode", "latency_ms/prompt", "layer_time_us/layer_0"} <= set(tags["scalars"])
    assert "op_time_us/MUL_MAT" in tags["histograms"]
    assert len(events.Scalars("latency_ms/decode")) == int((run.graphs["phase"] == "decode").sum())


def test_speedscope_from_the_runs_totals_is_the_flame_graph_of_all_its_events(run, tmp_path):
    assert exported_profile(run, tmp_path / "run.speedscope.json") == profile_of_all_events(run)


def test_a_sampled_runs_profiles_put_each_graph_at_its_own_step(tmp_path, model_path):
    # GIVEN a run that timed the prompt's graph and every fourth decode graph
    path = tmp_path / "sampled.ggmlviz"
    with ggml_viz.record(path, sample=4):
        greedy(load_model(model_path), n_predict=9)
    sampled = ggml_viz.open(path)
    timed = sampled.graphs.index[sampled.graphs["graph_id"].isin(sampled.nodes.loc[sampled.nodes["timed"], "graph_id"])]
    assert 1 < len(timed) < len(sampled.graphs)
    # WHEN its profiles are exported
    profile = exported_profile(sampled, tmp_path / "sampled.speedscope.json")
    steps = tensorboard_steps(export(sampled, tmp_path / "tb", "--format", "tensorboard"))
    # THEN the flame graph is the one of all its events, and a graph's op times sit at its latency's step
    assert profile == profile_of_all_events(sampled)
    assert [step for step, _ in steps["op_time_us/MUL_MAT"]] == timed.tolist()
    assert {step for step, _ in steps["latency_ms/decode"] + steps["latency_ms/prompt"]} == set(
        range(len(sampled.graphs))
    )


def test_an_unknown_format_is_one_clear_error(run, tmp_path, capsys):
    assert main(["export", str(run.path), "-o", str(tmp_path / "run.xyz")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err


def test_query_group_by_matches_pandas(run):
    result = run_query(run, "select op, count(*) as n, sum(duration_ns) as t from nodes group by op order by op")
    expected = run.nodes.groupby("op").agg(n=("op", "size"), t=("duration_ns", "sum")).reset_index()
    assert result["op"].tolist() == expected["op"].tolist()
    assert result["n"].tolist() == expected["n"].tolist()
    assert [int(t) for t in result["t"]] == [int(t) for t in expected["t"]]


def test_diff_of_one_and_two_threads_names_the_threads_and_the_op_deltas(tmp_path, model_path, capsys):
    paths = {}
    for threads in (1, 2):
        paths[threads] = tmp_path / f"t{threads}.ggmlviz"
        with ggml_viz.record(paths[threads]):
            greedy(load_model(model_path, n_threads=threads, n_threads_batch=threads), n_predict=6)
    assert main(["diff", str(paths[1]), str(paths[2]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["settings_that_differ"]["threads"] == {"a": 1, "b": 2}
    ops = {(row["phase"], row["op"]) for row in result["per_graph_time_by"]["op"]}
    assert ("decode", "MUL_MAT") in ops
    matmul = next(r for r in result["per_graph_time_by"]["op"] if (r["phase"], r["op"]) == ("decode", "MUL_MAT"))
    assert matmul["a_ns"] > 0 and matmul["b_ns"] > 0


def test_bench_agrees_with_llama_cpps_own_timings(capsys):
    assert main(["bench", "-p", "32", "-n", "8", "-r", "3", "-t", "2", "-o", "json"]) == 0
    results = {r["test"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert set(results) == {"pp32", "tg8"}
    for result in results.values():
        spread = max(3 * result["tokens_per_s_std"], 0.1 * result["tokens_per_s_mean"])
        assert abs(result["tokens_per_s_mean"] - result["llama_tokens_per_s_mean"]) <= spread
        assert result["ops"][0]["op"] == "MUL_MAT" and result["ops"][0]["share"] > 0.5
