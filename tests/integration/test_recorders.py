"""The C recorder (`--recorder c`) against its Python twin, and what detail levels, filters, sampling
and bounds do on the real SmolLM2 model."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggml_viz
from ggml_viz.capture.core import ggml_api
from ggml_viz.capture.core.recording import Recording

from .conftest import RECORDERS
from .smollm2 import greedy, load_model

pytestmark = pytest.mark.model

TIMELESS_NODE_COLUMNS = [
    "graph_id", "node_index", "op", "op_base", "name", "type", "ne0", "ne1", "ne2", "ne3",
    "nbytes", "flags", "layer", "view_src", "view_offs", "buffer_name", "buffer_usage",
]  # fmt: skip


def test_both_recorders_record_the_same_run(runs_by_recorder):
    native, python = runs_by_recorder["c"], runs_by_recorder["python"]
    assert native.text == python.text
    assert native.run.manifest["capture"]["recorder"] == "c"
    assert python.run.manifest["capture"]["recorder"] == "python"
    for table, columns in (
        ("nodes", TIMELESS_NODE_COLUMNS + ["timed"]),
        (
            "edges",
            [
                "graph_id",
                "node_index",
                "src_slot",
                "src_name",
                "src_op",
                "src_type",
                "src_ne0",
                "src_ne1",
                "src_buffer_name",
                "src_usage",
                "src_view_offs",
            ],
        ),
        ("buffers", ["buffer", "name", "buffer_type", "usage", "size", "first_graph_id"]),
        ("tokens", ["graph_id", "batch_index", "pos", "token_id", "seq_id", "output", "text"]),
        (
            "graphs",
            ["graph_id", "decode_index", "ubatch_index", "structure_id", "n_nodes", "n_tokens", "phase", "detail"],
        ),
    ):
        left = getattr(native.run, table)[columns]
        right = getattr(python.run, table)[columns]
        assert left.equals(right), f"{table} differ"


def test_both_recorders_agree_when_a_graph_repeats_its_predecessor_part_way(tmp_path, model_path, monkeypatch):
    # GIVEN a generation long enough for the KV cache to outgrow its first 256-cell view:
    # that decode graph repeats the previous one for its first nodes only (the native
    # recorder compares such nodes instead of copying them, and copies from the change on);
    # the graphs that repeat theirs whole are written in bulk, counted here
    written_in_bulk = {name: 0 for name in RECORDERS}
    write_repeats = Recording.write_repeats

    def counting_write_repeats(self, tracer, repeats):
        written_in_bulk[self.recorder_used] += len(repeats)
        write_repeats(self, tracer, repeats)

    monkeypatch.setattr(Recording, "write_repeats", counting_write_repeats)
    runs = {}
    for name in RECORDERS:
        with ggml_viz.record(tmp_path / f"{name}.ggmlviz", recorder=name, detail="graph"):
            greedy(load_model(model_path), n_predict=260)
        runs[name] = ggml_viz.open(tmp_path / f"{name}.ggmlviz")
    native, python = runs["c"], runs["python"]
    assert written_in_bulk == {"c": len(native.graphs) - 3, "python": 0}  # all but the new structures
    # THEN such a graph is there: its structure is new, and its first nodes are the previous graph's
    graphs = native.graphs
    decode_after_decode = (graphs["phase"] == "decode") & (graphs["phase"].shift() == "decode")
    changed = graphs[decode_after_decode & (graphs["structure_id"].diff() != 0)]["graph_id"].tolist()
    assert changed, "no decode graph changed its structure"
    nodes = native.nodes.set_index(["graph_id", "node_index"])[["op", "name", "ne0", "ne1", "nbytes"]]
    before, after = nodes.loc[changed[-1] - 1], nodes.loc[changed[-1]]
    same_rows = (before == after).all(axis=1)
    assert same_rows.iloc[:10].all() and not same_rows.all()
    # AND both recorders describe every graph alike
    for table, columns in (
        ("nodes", TIMELESS_NODE_COLUMNS),
        ("edges", ["graph_id", "node_index", "src_slot", "src_name", "src_ne0", "src_ne1", "src_view_offs"]),
        (
            "graphs",
            [
                "graph_id",
                "decode_index",
                "ubatch_index",
                "structure_id",
                "n_nodes",
                "n_tokens",
                "first_batch_index",
                "return_code",
                "phase",
                "detail",
            ],
        ),
        ("tokens", ["graph_id", "batch_index", "pos", "token_id", "seq_id", "output", "text"]),
        ("buffers", ["buffer", "name", "usage", "size", "first_graph_id"]),
    ):
        assert getattr(native, table)[columns].equals(getattr(python, table)[columns]), f"{table} differ"


def test_one_decode_call_of_several_ubatches_gives_a_graph_each(tmp_path, model_path, recorder):
    # GIVEN a 24-token prompt that llama.cpp computes as three 8-token ubatches inside one
    # llama_decode call: no pause between their graphs, and the third built in other memory
    # than the second (no node pointer repeats), so the recorder must see where each begins
    prompt = " ".join(["one two three four five six seven eight"] * 3)
    with ggml_viz.record(tmp_path / "ubatches.ggmlviz", recorder=recorder):
        greedy(load_model(model_path, n_batch=64, n_ubatch=8), prompt, n_predict=3)
    run = ggml_viz.open(tmp_path / "ubatches.ggmlviz")
    graphs = run.graphs
    prompt_graphs = graphs[graphs["decode_index"] == 0]
    # THEN one graph per ubatch, each with its own 8 tokens, nodes and times
    assert list(prompt_graphs["ubatch_index"]) == [0, 1, 2]
    assert list(prompt_graphs["n_tokens"]) == [8, 8, 8]
    assert (graphs["n_nodes"] == graphs["n_nodes"].iloc[-1]).all()
    tokens = run.tokens[run.tokens["graph_id"].isin(prompt_graphs["graph_id"])]
    assert sorted(tokens["pos"]) == list(range(24))
    assert (prompt_graphs["start_ns"].iloc[1:].to_numpy() >= prompt_graphs["end_ns"].iloc[:-1].to_numpy()).all()
    timed = run.nodes[run.nodes["graph_id"].isin(prompt_graphs["graph_id"])].groupby("graph_id")["timed"].sum()
    assert (timed > 1000).all()


def test_a_wrong_expected_layout_refuses_cleanly(tmp_path, model_path, recorded_run, monkeypatch, capfd):
    # GIVEN a build that believes the name lies 8 bytes further than it does
    fields = {name: ggml_api.TENSOR_DTYPE.fields[name] for name in ggml_api.TENSOR_DTYPE.names}
    wrong = np.dtype(
        {
            "names": list(fields),
            "formats": [dtype for dtype, _ in fields.values()],
            "offsets": [offset + (8 if name == "name" else 0) for name, (_, offset) in fields.items()],
            "itemsize": ggml_api.TENSOR_DTYPE.itemsize,
        }
    )
    monkeypatch.setattr(ggml_api, "check_tensor_layout", functools.partial(ggml_api.check_tensor_layout, wrong))
    # WHEN recording starts and a model generates
    with ggml_viz.record(tmp_path / "guarded.ggmlviz"):
        text = greedy(load_model(model_path))
    # THEN recording refused with one clear message, and the text is right
    assert text == recorded_run.text
    err = capfd.readouterr().err
    assert "field 'name' not where expected" in err and "inference runs untraced" in err
    run = ggml_viz.open(tmp_path / "guarded.ggmlviz")
    assert run.status == "incomplete" and len(run.graphs) == 0


@pytest.mark.parametrize("timing", ["inline", "sync"])
def test_op_filter_times_only_the_selected_ops(tmp_path, model_path, recorder, timing):
    with ggml_viz.record(tmp_path / "mulmat.ggmlviz", ops="MUL_MAT", recorder=recorder, timing=timing):
        greedy(load_model(model_path))
    nodes = ggml_viz.open(tmp_path / "mulmat.ggmlviz").nodes
    timed = nodes[nodes["timed"]]
    assert set(timed["op"]) == {"MUL_MAT"}
    # Inline, every MUL_MAT has its time; sync, from the second graph on (the node before
    # each MUL_MAT is then a fence, learned from the first graph)
    later = nodes[(nodes["graph_id"] >= (0 if timing == "inline" else 1)) & (nodes["op"] == "MUL_MAT")]
    assert later["timed"].all()
    assert (timed["duration_ns"] > 0).all()
    assert set(ggml_viz.open(tmp_path / "mulmat.ggmlviz").graphs["detail"]) == {"selected"}


def test_layer_and_name_filters_combine(tmp_path, model_path):
    with ggml_viz.record(tmp_path / "layers.ggmlviz", layers="0-1,29", names="ffn_*"):
        greedy(load_model(model_path))
    nodes = ggml_viz.open(tmp_path / "layers.ggmlviz").nodes
    timed = nodes[nodes["timed"]]
    assert set(timed["layer"].astype(int)) == {0, 1, 29}
    assert timed["name"].str.startswith("ffn_").all()
    assert len(timed[timed["graph_id"] > 0]) == len(
        nodes[(nodes["graph_id"] > 0) & nodes["name"].str.startswith("ffn_") & nodes["layer"].isin([0, 1, 29])]
    )


def test_graph_detail_records_structure_and_graph_times(tmp_path, model_path, recorded_run):
    with ggml_viz.record(tmp_path / "graph.ggmlviz", detail="graph"):
        text = greedy(load_model(model_path))
    assert text == recorded_run.text
    run = ggml_viz.open(tmp_path / "graph.ggmlviz")
    assert set(run.graphs["detail"]) == {"graph"}
    assert not run.nodes["timed"].any() and run.nodes["start_ns"].isna().all()
    assert (run.graphs["n_nodes"] > 1000).all() and len(run.nodes) == run.graphs["n_nodes"].sum()
    assert (run.graphs["end_ns"] > run.graphs["start_ns"]).all()
    assert len(run.edges) == len(recorded_run.run.edges)


def test_sampling_times_the_first_prompt_and_every_nth_decode_graph(tmp_path, model_path, recorder):
    with ggml_viz.record(tmp_path / "sampled.ggmlviz", sample=3, recorder=recorder):
        greedy(load_model(model_path), n_predict=9)
    graphs = ggml_viz.open(tmp_path / "sampled.ggmlviz").graphs
    detail = dict(zip(graphs["graph_id"], graphs["detail"], strict=True))
    # graph 0 is the prompt; decode graphs 1..8 are the 1st..8th decode calls: 1st, 4th and 7th timed
    assert [graph for graph, level in detail.items() if level == "op"] == [0, 1, 4, 7]
    assert all(detail[graph] == "graph" for graph in (2, 3, 5, 6, 8))


def test_keep_last_keeps_the_last_whole_graphs(tmp_path, model_path, recorder):
    with ggml_viz.record(tmp_path / "last.ggmlviz", max_events=2500, policy="keep-last", recorder=recorder):
        greedy(load_model(model_path))
    run = ggml_viz.open(tmp_path / "last.ggmlviz")
    assert list(run.graphs["graph_id"]) == [3, 4]
    assert set(run.nodes["graph_id"]) == {3, 4} and set(run.tokens["graph_id"]) == {3, 4}
    assert run.manifest["counts"]["dropped_graphs"] == 3
    assert run.manifest["counts"]["dropped_events"] == 3 * 1086


def test_the_python_recorder_stands_in_when_the_extension_is_missing(tmp_path, model_path, monkeypatch, capfd):
    from ggml_viz.capture.llama_cpp_python import session

    monkeypatch.setattr(session, "extension_available", lambda: False)
    with ggml_viz.record(tmp_path / "fallback.ggmlviz"):
        greedy(load_model(model_path), n_predict=2)
    assert "C recorder is not available" in capfd.readouterr().err
    assert ggml_viz.open(tmp_path / "fallback.ggmlviz").manifest["capture"]["recorder"] == "python"


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import ggml_viz
    from llama_cpp import Llama
    n_predict = int(sys.argv[1])
    with ggml_viz.record(sys.argv[2]):
        llm = Llama(model_path=sys.argv[3], n_ctx=1024, n_threads=2, seed=0, verbose=False)
        out = llm("Once upon a time", max_tokens=n_predict, temperature=0.0, logit_bias={llm.token_eos(): -100.0})
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_kib": peak_kib, "tokens": out["usage"]["completion_tokens"]}))
    """
)


def test_recording_memory_stays_flat_over_a_long_generation(tmp_path, model_path):
    def peak(n_predict: int) -> dict[str, int]:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                MEMORY_SCRIPT,
                str(n_predict),
                str(tmp_path / f"{n_predict}.ggmlviz"),
                str(model_path),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")},
        )
        return json.loads(result.stdout.strip().splitlines()[-1])

    short, long = peak(64), peak(512)
    assert long["tokens"] == 512
    events = ggml_viz.open(tmp_path / "512.ggmlviz").manifest["counts"]["node_events"]
    assert events > 500_000
    growth_kib = long["peak_kib"] - short["peak_kib"]
    # Keeping the events in memory would take at least 16 bytes (two times) per event more.
    kept_in_memory_kib = (events - ggml_viz.open(tmp_path / "64.ggmlviz").manifest["counts"]["node_events"]) * 16 / 1024
    assert growth_kib < kept_in_memory_kib / 4, (short, long)
