"""Recording a real SmolLM2-135M generation: what the run must hold."""

from __future__ import annotations

import time

import pytest

import ggml_viz

from .smollm2 import PROMPT, greedy, load_model

pytestmark = pytest.mark.model

REQUIRED_OPS = {"MUL_MAT", "ADD", "MUL", "RMS_NORM", "ROPE", "GET_ROWS", "SET_ROWS"}


def test_every_layer_and_the_expected_ops_are_recorded(recorded_run):
    nodes = recorded_run.run.nodes
    ops = set(nodes["op"])
    assert REQUIRED_OPS <= ops
    assert {"SOFT_MAX", "FLASH_ATTN_EXT"} & ops
    assert {"SWIGLU", "GLU"} & ops
    for graph_id, graph_nodes in nodes.groupby("graph_id"):
        assert set(graph_nodes["layer"].dropna().astype(int)) == set(range(30)), f"graph {graph_id}"


def test_node_indexes_run_from_zero_without_gaps(recorded_run):
    run = recorded_run.run
    counts = run.nodes.groupby("graph_id")["node_index"].agg(["min", "max", "count", "nunique"])
    graphs = run.graphs.set_index("graph_id")
    assert (counts["min"] == 0).all()
    assert (counts["max"] == counts["count"] - 1).all()
    assert (counts["count"] == counts["nunique"]).all()
    assert (counts["count"] == graphs["n_nodes"]).all()
    assert graphs["n_nodes"].min() > 1000  # about 1,086 nodes per SmolLM2 graph


def test_times_are_ordered_and_nested(recorded_run):
    run = recorded_run.run
    nodes = run.nodes.merge(run.graphs[["graph_id", "start_ns", "end_ns"]], on="graph_id", suffixes=("", "_graph"))
    assert nodes["timed"].all()
    assert (nodes["start_ns"] <= nodes["end_ns"]).all()
    assert (nodes["start_ns"] >= nodes["start_ns_graph"]).all()
    assert (nodes["end_ns"] <= nodes["end_ns_graph"]).all()
    # within a graph, each node starts after the previous one ended
    previous_end = nodes.groupby("graph_id")["end_ns"].shift()
    assert (nodes["start_ns"] >= previous_end.fillna(0)).all()
    graphs = run.graphs.sort_values("start_ns")
    assert (graphs["start_ns"].iloc[1:].to_numpy() >= graphs["end_ns"].iloc[:-1].to_numpy()).all()


def test_graph_times_agree_with_llama_perf(recorded_run):
    graphs = recorded_run.run.graphs
    recorded_ms = (graphs["end_ns"] - graphs["start_ns"]).sum() / 1e6
    assert recorded_ms == pytest.approx(recorded_run.perf_eval_ms, rel=0.15)


def test_one_graph_per_token_with_tokens_and_phases(recorded_run):
    run = recorded_run.run
    graphs, tokens = run.graphs, run.tokens
    assert list(graphs["phase"]) == ["prompt"] + ["decode"] * (len(graphs) - 1)
    assert len(graphs) == 5  # the prompt, then one graph per generated token but the last
    prompt_tokens = tokens[tokens["graph_id"] == graphs["graph_id"].iloc[0]]
    assert "".join(prompt_tokens["text"]) == PROMPT
    assert list(prompt_tokens["pos"]) == list(range(len(prompt_tokens)))
    decoded = tokens[tokens["graph_id"].isin(graphs["graph_id"].iloc[1:])]
    assert recorded_run.text.startswith("".join(decoded["text"]))
    assert (graphs["n_tokens"] == tokens.groupby("graph_id").size().to_numpy()).all()


def test_weights_are_edges_from_the_weight_buffer(recorded_run):
    edges = recorded_run.run.edges
    first_q = edges[(edges["src_name"] == "blk.0.attn_q.weight")]
    assert len(first_q) == len(recorded_run.run.graphs)
    nodes = recorded_run.run.nodes.set_index(["graph_id", "node_index"])
    for row in first_q.itertuples():
        node = nodes.loc[(row.graph_id, row.node_index)]
        assert node["op"] == "MUL_MAT" and node["name"] == "Qcur-0"
    assert set(first_q["src_usage"]) == {"weights"}
    assert set(first_q["src_type"]) == {"q4_1"}
    weights = edges[edges["src_usage"] == "weights"]
    assert weights["src_name"].str.match(r"^(blk\.\d+\.|token_embd|output)").all()
    kv = edges[edges["src_name"].str.startswith("cache_k_l")]
    assert set(kv["src_usage"]) == {"any"}


def test_manifest_describes_the_run(recorded_run):
    manifest = recorded_run.run.manifest
    assert manifest["status"] == "complete"
    assert manifest["model"]["architecture"] == "llama"
    assert manifest["model"]["layers"] == 30
    assert manifest["model"]["file_size"] > 90_000_000
    assert manifest["contexts"][0]["n_ctx"] == 512
    assert manifest["contexts"][0]["n_threads"] == 2
    assert manifest["versions"]["llama_cpp_python"]
    assert manifest["environment"]["cpu_cores"] >= 1
    assert manifest["counts"]["node_events"] == len(recorded_run.run.nodes)
    assert manifest["generation"]["prompt"] == PROMPT


def test_greedy_text_is_the_same_with_and_without_recording(tmp_path, model_path, recorded_run):
    untraced = greedy(load_model(model_path))
    assert untraced == recorded_run.text


def test_a_graph_shape_seen_before_keeps_its_structure(tmp_path, model_path, recorder):
    # GIVEN one context generating from the same prompt twice: prompt graph, decode graphs, again
    with ggml_viz.record(tmp_path / "twice.ggmlviz", recorder=recorder):
        llm = load_model(model_path)
        texts = []
        for _ in range(2):
            llm.reset()
            texts.append(greedy(llm))
    run = ggml_viz.open(tmp_path / "twice.ggmlviz")
    graphs = run.graphs
    # THEN the second prompt graph is known by the structure of the first, decode graphs too
    prompts = graphs[graphs["phase"] == "prompt"]
    assert texts[0] == texts[1] and len(prompts) == 2
    assert prompts["structure_id"].nunique() == 1
    assert graphs["structure_id"].nunique() == 2
    # AND the second prompt's nodes are those of a prompt graph, its tokens its own
    nodes = run.nodes
    first, second = (nodes[nodes["graph_id"] == g].reset_index(drop=True) for g in prompts["graph_id"])
    columns = ["op", "name", "ne0", "ne1", "ne2", "ne3"]
    assert first[columns].equals(second[columns])
    assert (second.loc[second["name"] == "inp_embd", "ne1"] == prompts["n_tokens"].iloc[1]).all()
    tokens = run.tokens
    assert tokens[tokens["graph_id"] == prompts["graph_id"].iloc[1]]["pos"].tolist() == list(
        range(prompts["n_tokens"].iloc[1])
    )


@pytest.mark.parametrize("detail", ["op", "graph"])  # graph: the C recorder's decode graphs come as repeats
def test_bounded_recording_keeps_whole_graphs_and_counts_the_rest(tmp_path, model_path, recorder, detail):
    # GIVEN a bound that holds two graphs of about 1,086 nodes
    with ggml_viz.record(tmp_path / "bounded.ggmlviz", max_events=2500, recorder=recorder, detail=detail):
        text = greedy(load_model(model_path))
    # THEN the first two graphs are kept whole and the other three counted as dropped
    run = ggml_viz.open(tmp_path / "bounded.ggmlviz")
    assert list(run.graphs["graph_id"]) == [0, 1]
    assert len(run.nodes) == run.graphs["n_nodes"].sum() <= 2500
    assert run.manifest["counts"]["dropped_graphs"] == 3
    assert run.manifest["counts"]["dropped_events"] >= 3 * 1000
    assert text == greedy(load_model(model_path))


def test_a_bound_reached_among_repeated_graphs_keeps_the_graphs_before_it(tmp_path, model_path, recorder):
    # GIVEN graph detail, where the C recorder hands most decode graphs over as repeats,
    # written several at once, and a bound that three graphs fill
    with ggml_viz.record(tmp_path / "bounded.ggmlviz", max_events=3500, recorder=recorder, detail="graph"):
        greedy(load_model(model_path))
    # THEN the first three graphs are kept, the two after them dropped, as graph by graph
    run = ggml_viz.open(tmp_path / "bounded.ggmlviz")
    assert list(run.graphs["graph_id"]) == [0, 1, 2]
    assert run.manifest["counts"]["dropped_graphs"] == 2
    assert len(run.nodes) == run.graphs["n_nodes"].sum() <= 3500


def test_the_last_graphs_reach_the_run_while_the_program_idles(tmp_path, model_path, recorder):
    # GIVEN a recording still running after a short generation (5 graphs: fewer than a write
    # batch), and a program that then calls llama_decode no more, as a chat waiting for its user
    path = tmp_path / "idle.ggmlviz"
    recording = ggml_viz.record(path, recorder=recorder).start()
    try:
        llm = load_model(model_path)  # kept: freeing the context would write its graphs
        greedy(llm, n_predict=5)
        time.sleep(1.5)  # the idle writer looks every half second; graphs wait a half second at most
        # THEN a reader of the unfinished run (as the live viewer) already sees every graph
        live = ggml_viz.open(path)
        assert live.manifest["status"] == "recording"
    finally:
        recording.stop()
    del llm
    assert list(live.graphs["graph_id"]) == list(ggml_viz.open(path).graphs["graph_id"]) == [0, 1, 2, 3, 4]
    assert len(live.nodes) == len(ggml_viz.open(path).nodes)


def test_a_failing_callback_stops_recording_but_not_inference(
    tmp_path, model_path, recorded_run, recorder, monkeypatch
):
    # GIVEN a recorder that fails in the middle of the second graph
    if recorder == "python":
        from ggml_viz.capture.llama_cpp_python.python_recorder import _StructBuffer

        calls = {"n": 0}
        original = _StructBuffer.copy_in

        def copy_in(self, tensor):
            calls["n"] += 1
            if calls["n"] == 1700:
                raise RuntimeError("injected failure")
            return original(self, tensor)

        monkeypatch.setattr(_StructBuffer, "copy_in", copy_in)
    else:
        from ggml_viz.capture.llama_cpp_python.c_recorder import CGraphRecorder

        original_init = CGraphRecorder.__init__

        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            self._recorder.fail_after_nodes = 500  # acts out of memory at the 500th node of a decode call

        monkeypatch.setattr(CGraphRecorder, "__init__", init)
    # WHEN it records a generation
    with ggml_viz.record(tmp_path / "failing.ggmlviz", recorder=recorder):
        text = greedy(load_model(model_path))
    # THEN the text is what it always is, and the run says why it stopped
    assert text == recorded_run.text
    run = ggml_viz.open(tmp_path / "failing.ggmlviz")
    assert run.status == "incomplete"
    expected = "injected failure" if recorder == "python" else "ran out of memory"
    assert expected in run.manifest["incomplete_reason"]
    assert len(run.graphs) <= 1  # what was whole before the failure


def test_recording_started_after_the_model_says_so(tmp_path, model_path, capfd, recorder):
    llm = load_model(model_path)
    with ggml_viz.record(tmp_path / "late.ggmlviz", recorder=recorder):
        greedy(llm)
    err = capfd.readouterr().err
    assert "start recording before Llama(...)" in err
