"""Mixture-of-experts routing, recorded: tiny MoE models of three architectures (moe_models.py)
run by the real llama.cpp through llama-cpp-python, llama-completion and llama-server. The
experts ggml-viz records for every token of every MoE layer must be exactly those a numpy
recomputation of the router picks from the router's weight in the file and the layer's input
(captured with --capture), with the same weights; the bytes a step reads of the experts must be
the chosen experts' slices as gguf's reader finds them in the file; the text must not change."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from gguf import GGUFReader

import ggml_viz
from ggml_viz.analysis.breakdowns import weight_reads
from ggml_viz.analysis.flops import events_work, node_costs, throughput_by_op
from ggml_viz.analysis.moe import expert_bytes_by_device, layer_balance

from .arch_models import generate, load
from .moe_models import MOE_ARCHITECTURES, MoeSpec, router_topk, write_moe_model
from .native import llama_tool
from .smollm2 import ggml_viz_cli

PROMPT = "The quick brown fox jumps over the lazy dog, and the capital of France is"
N_PREDICT = 4  # the prompt's graph, then three decode steps


@dataclass
class Recorded:
    run: ggml_viz.runformat.reader.Run
    text: str


@pytest.fixture(scope="module", params=MOE_ARCHITECTURES)
def model(request, tmp_path_factory) -> MoeSpec:
    return write_moe_model(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", request.param)


@pytest.fixture(scope="module")
def greedy(model) -> str:
    """The model's greedy text, unrecorded."""
    return generate(load(model), prompt=PROMPT, n_predict=N_PREDICT)[0]


@pytest.fixture(scope="module")
def recorded(model) -> Recorded:
    """A greedy generation recorded with the Python API, each layer's router input captured."""
    path = model.path.with_suffix(".ggmlviz")
    with ggml_viz.record(path, capture=f"{model.router_input}-*"):
        text, _ = generate(load(model), prompt=PROMPT, n_predict=N_PREDICT)
    return Recorded(ggml_viz.open(path), text)


def expert_slices(model: MoeSpec) -> dict[str, int]:
    """Each expert tensor's bytes for one expert, as gguf's reader finds them in the file."""
    return {t.name: int(t.n_bytes) // model.n_expert for t in GGUFReader(model.path).tensors if "_exps." in t.name}


def assert_routing_is_the_routers(run: ggml_viz.runformat.reader.Run, model: MoeSpec, phases: set[str]) -> dict:
    """Every recorded layer's experts and weights, token by token, against the router recomputed
    in numpy from the captured router input; returns how many tokens were compared per (graph, layer)."""
    routing = run.moe_routing
    captures = run.captures
    compared = {}
    graphs = run.graphs[run.graphs["phase"].isin(phases)]
    assert len(graphs), phases
    for graph in graphs.itertuples():
        mine = routing[routing["graph_id"] == graph.graph_id]
        # every MoE layer of the graph has its routing recorded
        assert sorted(mine["layer"].unique()) == list(range(model.n_layers)), graph.graph_id
        for layer, rows in mine.groupby("layer"):
            captured = captures[
                (captures["graph_id"] == graph.graph_id) & (captures["name"] == f"{model.router_input}-{layer}")
            ]
            assert len(captured) == 1, (graph.graph_id, layer)
            router_input = run.captured(graph.graph_id, int(captured["node_index"].iloc[0])).reshape(-1, model.n_embd)
            ids, weights = router_topk(model, int(layer), router_input)
            rows = rows.sort_values(["row", "slot"])
            recorded_ids = rows["expert"].to_numpy().reshape(-1, model.n_expert_used)
            recorded_weights = rows["weight"].to_numpy(dtype=np.float64).reshape(-1, model.n_expert_used)
            assert recorded_ids.shape == ids.shape, (graph.graph_id, layer)
            np.testing.assert_array_equal(recorded_ids, ids, err_msg=f"graph {graph.graph_id} layer {layer}")
            np.testing.assert_allclose(recorded_weights, weights, rtol=2e-3, atol=1e-5)
            assert set(rows["n_expert"]) == {model.n_expert}
            compared[(graph.graph_id, int(layer))] = len(ids)
    return compared


def test_the_text_is_the_same_traced_and_untraced(recorded, greedy):
    assert recorded.text == greedy


def test_every_token_s_experts_are_the_router_s_choice(model, recorded):
    run = recorded.run
    # GIVEN a recorded generation: WHEN the router is recomputed from the file and each layer's
    # captured input, THEN each token of the prompt and of every decode step chose exactly the
    # recorded experts, in the router's order, with its weights
    compared = assert_routing_is_the_routers(run, model, {"prompt", "decode"})
    # (each graph's tokens in every layer, but in the last, where llama.cpp may keep only the
    # output token: qwen's graphs do, gpt-oss's do not)
    tokens = run.graphs.set_index("graph_id")["n_tokens"]
    for (graph_id, layer), n in compared.items():
        assert n == tokens[graph_id] or (layer == model.n_layers - 1 and n == 1), (graph_id, layer, n)
    # AND the decode steps after the first read it at the tick ending the layer's first MUL_MAT_ID
    # (their graph repeats the one before, whose answered reads placed them): no read was dropped
    counts = run.manifest["counts"]
    assert counts["routing_at_ticks"] == (N_PREDICT - 2) * model.n_layers
    assert counts["routing_answered"] == 2 * model.n_layers and counts["routing_dropped"] == 0
    # AND the routing is not degenerate: the prompt's tokens went to most experts (in the layers
    # that computed all of them)
    prompt = run.moe_routing[(run.moe_routing["phase"] == "prompt") & (run.moe_routing["layer"] < model.n_layers - 1)]
    assert prompt.groupby("layer")["expert"].nunique().min() >= model.n_expert // 2
    # AND each row knows its token's position and sequence
    assert (run.moe_routing["position"] >= 0).all() and (run.moe_routing["sequence"] == 0).all()
    assert ggml_viz_cli("validate", str(run.path)).returncode == 0


def test_a_step_reads_only_the_chosen_experts_slices(model, recorded):
    run = recorded.run
    slices = expert_slices(model)
    by_ids = run.expert_nodes.merge(
        run.tensors[["tensor_id", "name"]].rename(columns={"tensor_id": "experts_tensor_id"}), on="experts_tensor_id"
    )
    # GIVEN each graph's MUL_MAT_IDs: THEN each read, of its experts' weight, the slices of the
    # experts its tokens chose (the union over them), as sized in the file
    reads = run.expert_reads.merge(
        by_ids[["structure_id", "node_index", "routed_at", "name"]], on=["structure_id", "node_index"]
    )
    chosen = run.raw("moe_routing").groupby(["graph_id", "node_index"])["expert"].nunique()
    # (gate, up and down in every layer of every graph; gpt-oss's biases added by ADD_ID too)
    per_structure = run.expert_nodes.groupby("structure_id").size()
    assert (per_structure == model.n_layers * (6 if model.architecture == "gpt-oss" else 3)).all()
    assert len(reads) == int(run.graphs["structure_id"].map(per_structure).sum())
    for row in reads.itertuples():
        assert row.bytes_read == chosen[(row.graph_id, row.routed_at)] * slices[row.name], row
    # AND a decode step's weight traffic counts those slices, not every expert
    decode = run.graphs[run.graphs["phase"] == "decode"]["graph_id"]
    every = sum(slices.values()) * model.n_expert
    read_in_steps = reads[reads["graph_id"].isin(decode)].groupby("graph_id")["bytes_read"].sum()
    assert (read_in_steps < every).all()
    summary = weight_reads(run)
    assert summary["all_experts_counted"] is False
    disk = run.structure_edges[run.structure_edges["memory"] == "disk"]
    experts = disk["src_name"].isin(slices)
    dense = int(
        disk[~experts & disk["structure_id"].isin(run.graphs.loc[run.graphs["graph_id"].isin(decode), "structure_id"])][
            "src_bytes_read"
        ].sum()
    )
    assert summary["weight_bytes_per_decode_step"] == dense + int(read_in_steps.median())
    # AND the per-device view of a CPU run puts every expert byte on the CPU
    devices = expert_bytes_by_device(run)
    assert set(devices["device"]) == {"CPU"}
    assert int(devices["bytes_read"].sum()) == int(run.expert_reads["bytes_read"].sum())


def test_the_work_of_an_expert_node_counts_the_experts_chosen(model, recorded):
    # GIVEN the recorded graphs' MUL_MAT_IDs and the slices their tokens chose
    run = recorded.run
    costs = node_costs(run)
    nodes = run.expert_nodes[run.expert_nodes["op"] == "MUL_MAT_ID"]
    every_expert = costs.merge(nodes[["structure_id", "node_index"]])["bytes"]
    costs = costs[["structure_id", "node_index", "bytes"]]
    # WHEN their work is counted per node event, as the throughput and the roofline count it
    totals = run.node_totals[["phase", "structure_id", "node_index", "op"]]
    work = events_work(run, totals).merge(nodes[["structure_id", "node_index", "slice_bytes", "n_expert"]])
    # THEN each reads the mean of its graphs' chosen slices, not the whole weight
    chosen = (
        run.expert_reads.merge(run.graphs[["graph_id", "phase"]])
        .groupby(["phase", "structure_id", "node_index"], as_index=False)["bytes_read"]
        .mean()
    )
    work = work.merge(chosen, on=["phase", "structure_id", "node_index"])
    assert len(work) == len(nodes[nodes["structure_id"].isin(run.graphs["structure_id"])]) and not work.empty
    full = work["slice_bytes"] * work["n_expert"]
    assert not work["all_experts"].any()
    counted = work.merge(costs.rename(columns={"bytes": "every_expert"}), on=["structure_id", "node_index"])
    assert np.allclose(counted["bytes"] + full - counted["bytes_read"], counted["every_expert"])
    assert (work["bytes_read"] <= full).all()
    decode = work["phase"] == "decode"  # (one token: its top k of the experts)
    assert decode.any() and (work.loc[decode, "bytes_read"] < full[decode]).all()
    by_op = throughput_by_op(run).set_index("op")
    assert by_op.loc["MUL_MAT_ID", "bytes"] < every_expert.sum() * len(run.graphs)


def test_the_views_of_routing_agree_with_the_table(model, recorded):
    run = recorded.run
    raw = run.raw("moe_routing")
    experts = run.moe_experts
    # GIVEN moe_experts: THEN it counts every (token, slot) row, every expert of every layer,
    # the never chosen with zero tokens and zero bytes
    assert len(experts) == model.n_layers * model.n_expert
    assert int(experts["tokens"].sum()) == len(raw)
    unused = experts[experts["tokens"] == 0]
    assert (unused["bytes_read"] == 0).all() and (unused["graphs"] == 0).all()
    # AND the weight mass is the weights' sum, each layer's time shares sum to one
    assert experts["weight_mass"].sum() == pytest.approx(float(raw["weight"].sum()), rel=1e-5)
    shares = experts.groupby("layer")["time_share"].sum()
    assert np.allclose(shares, 1.0)
    # AND SQL sees the same rows
    counted = ggml_viz_cli("query", str(run.path), "select count(*) as n from moe_routing", "-o", "json")
    assert json.loads(counted.stdout)[0]["n"] == len(raw), counted.stderr
    # AND the balance per layer is the load's: max over mean, never used
    balance = layer_balance(run)
    for row in balance.itertuples():
        load = experts.loc[experts["layer"] == row.layer, "tokens"].to_numpy(dtype=float)
        assert row.max_over_mean == pytest.approx(load.max() / load.mean())
        assert row.never_used == int((load == 0).sum())
    # AND the viewer's answers have their declared keys: the experts view, a MUL_MAT_ID's routing, the summary
    from ggml_viz.ui import payloads
    from ggml_viz.ui.run_view import RunView

    from ..payload_shapes import shape_problems

    view = RunView("r0", run.path)
    assert shape_problems(view.experts, payloads.ExpertsPayload) == []
    assert view.experts["tokens"] == [
        [int(n) for n in experts.loc[experts["layer"] == layer, "tokens"]] for layer in range(model.n_layers)
    ]
    first = run.expert_nodes.iloc[0]
    graph = int(run.graphs.loc[run.graphs["structure_id"] == first["structure_id"], "graph_id"].iloc[0])
    node = view.node(view.event_index(graph, int(first["node_index"])))
    assert shape_problems(node, payloads.NodePayload) == [] and node["routing"]["layer"] == 0
    assert shape_problems(view.overview, payloads.OverviewPayload) == []
    # AND the summary says it in words
    summary = json.loads(ggml_viz_cli("summary", str(run.path), "--json").stdout)
    assert summary["moe"]["layers"] == model.n_layers and summary["moe"]["n_expert"] == model.n_expert
    text = ggml_viz_cli("summary", str(run.path)).stdout
    assert "mixture of experts" in text and "expert load per MoE layer" in text


def test_the_routing_exports_as_csv_and_parquet(model, recorded, tmp_path):
    run = recorded.run
    for suffix in (".csv", ".parquet"):
        output = tmp_path / f"routing{suffix}"
        result = ggml_viz_cli("export", str(run.path), "--format", "moe-routing", "-o", str(output))
        assert result.returncode == 0, result.stderr
        table = pd.read_csv(output) if suffix == ".csv" else pd.read_parquet(output)
        assert len(table) == len(run.raw("moe_routing"))
        assert {"graph_id", "layer", "position", "sequence", "slot", "expert", "weight"} <= set(table.columns)
        merged = table.merge(run.moe_routing, on=["graph_id", "node_index", "row", "slot"])
        assert len(merged) == len(table)
        assert (merged["expert_x"] == merged["expert_y"]).all()


def test_routing_is_the_same_with_sync_timing_graph_detail_and_the_python_recorder(model, tmp_path, recorded):
    expected = recorded.run.raw("moe_routing")
    for settings in ({"timing": "sync"}, {"detail": "graph"}, {"recorder": "python"}):
        path = tmp_path / f"{'-'.join(settings.values())}.ggmlviz"
        with ggml_viz.record(path, **settings):
            generate(load(model), prompt=PROMPT, n_predict=N_PREDICT)
        routing = ggml_viz.open(path).raw("moe_routing")
        pd.testing.assert_frame_equal(routing.drop(columns="weight"), expected.drop(columns="weight"))
        np.testing.assert_allclose(routing["weight"], expected["weight"], rtol=1e-6)


def test_routing_off_records_none(model, tmp_path, greedy):
    path = tmp_path / "off.ggmlviz"
    with ggml_viz.record(path, routing="off"):
        text, _ = generate(load(model), prompt=PROMPT, n_predict=N_PREDICT)
    run = ggml_viz.open(path)
    assert text == greedy
    assert run.raw("moe_routing").empty and not (path / "moe_routing.parquet").exists()
    assert run.manifest["capture"]["routing"] == "off"
    # AND without routing every expert is charged, and the summary says "at most"
    assert weight_reads(run)["all_experts_counted"] is True


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory) -> MoeSpec:
    return write_moe_model(tmp_path_factory.mktemp("native") / "qwen3moe.gguf", "qwen3moe")


def test_llama_completion_s_routing_is_the_router_s(qwen3moe, tmp_path):
    model = qwen3moe
    completion = [
        str(llama_tool("llama-completion")),
        "-m",
        str(model.path),
        "-p",
        PROMPT,
        "-n",
        "4",
        "-no-cnv",
        "--temp",
        "0",
        "-t",
        "2",
        "--seed",
        "1",
    ]
    untraced = subprocess.run(completion, capture_output=True, text=True, timeout=300)
    assert untraced.returncode == 0 and untraced.stdout, (untraced.returncode, untraced.stderr[-3000:])
    output = tmp_path / "completion.ggmlviz"
    traced = subprocess.run(
        [
            sys.executable,
            "-m",
            "ggml_viz",
            "run",
            "-o",
            str(output),
            "--capture",
            f"{model.router_input}-*",
            "--",
            *completion,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert traced.returncode == 0, traced.stderr[-3000:]
    # THEN the program printed the same text traced and untraced
    assert traced.stdout == untraced.stdout and untraced.stdout
    run = ggml_viz.open(output)
    assert assert_routing_is_the_routers(run, model, {"prompt", "decode"})
    counts = run.manifest["counts"]
    assert counts["routing_at_ticks"] > 0 and counts["routing_dropped"] == 0
    # AND the warm-up graph's routing is recorded too
    assert "warmup" in set(run.moe_routing["phase"])


def test_llama_server_s_routing_is_kept_per_request(qwen3moe, tmp_path):
    from ggml_viz.ui.run_view import RunView

    from .servers import free_port, wait_for_server

    model = qwen3moe
    port = free_port()
    output = tmp_path / "server.ggmlviz"
    command = [
        str(llama_tool("llama-server")),
        "-m",
        str(model.path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        "2",
        "-c",
        "1024",
        "-t",
        "2",
    ]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ggml_viz",
            "run",
            "-o",
            str(output),
            "--capture",
            f"{model.router_input}-*",
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_server(port, server)

        def complete(prompt: str) -> None:
            body = json.dumps({"prompt": prompt, "n_predict": 4, "temperature": 0}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=120) as answer:
                assert answer.status == 200

        asking = [threading.Thread(target=complete, args=(p,)) for p in (PROMPT, "Once upon a time there was")]
        for thread in asking:
            thread.start()
        for thread in asking:
            thread.join()
        time.sleep(0.5)
        server.send_signal(2)  # SIGINT: the wrapper writes the run
        server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    run = ggml_viz.open(output)
    assert run.status == "complete"
    # THEN the routing of both slots' tokens is the router's
    assert assert_routing_is_the_routers(run, model, {"prompt", "decode"})
    # (a batch of both slots' prompts that llama.cpp splits by sequence into ubatches has rows whose
    # tokens the graphs table cannot name one by one: those keep their row, token_index -1)
    routing = run.moe_routing
    routed = routing[routing["phase"].isin(["prompt", "decode"]) & (routing["token_index"] >= 0)]
    assert set(routed["sequence"]) == {0, 1}
    # AND the viewer gives each request its own layer × expert load, adding up to the tokens routed
    view = RunView("r0", output)
    per_request = view.experts["requests"]
    assert len(per_request) == 2
    assert sum(np.sum(r["tokens"]) for r in per_request) == len(routed)


def test_a_dense_model_has_no_routing(tmp_path, model_path):
    path = tmp_path / "dense.ggmlviz"
    with ggml_viz.record(path):
        from llama_cpp import Llama

        Llama(str(model_path), n_ctx=128, n_threads=2, verbose=False)("Hi", max_tokens=2)
    run = ggml_viz.open(path)
    assert run.raw("moe_routing").empty and run.moe_experts.empty and run.expert_nodes.empty
    assert not (path / "moe_routing.parquet").exists()
    assert json.loads(ggml_viz_cli("summary", str(path), "--json").stdout)["moe"] == {"layers": 0}


def test_a_graph_read_at_its_compute_call_reads_the_same_routing(qwen3moe, tmp_path):
    """GPU graphs are read at their compute call, without the eval callback; their routing is read
    through a routing-only callback (in GPU windows). GGML_VIZ_READ_GRAPHS=compute reads a CPU
    program the same way, at every compute: the routing must be the eval callback's."""
    import os

    completion = [
        str(llama_tool("llama-completion")),
        "-m",
        str(qwen3moe.path),
        "-p",
        PROMPT,
        "-n",
        "4",
        "-no-cnv",
        "--temp",
        "0",
        "-t",
        "2",
        "--seed",
        "1",
    ]
    runs = {}
    for how in ("callback", "compute"):
        output = tmp_path / f"{how}.ggmlviz"
        env = {**os.environ, "GGML_VIZ_READ_GRAPHS": how}
        done = subprocess.run(
            [sys.executable, "-m", "ggml_viz", "run", "-o", str(output), "--", *completion],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[how] = ggml_viz.open(output)
    read_at_compute = runs["compute"]
    assert set(read_at_compute.graphs["detail"]) == {"graph"}  # read at the compute call: graph times only
    counts = read_at_compute.manifest["counts"]
    assert counts["routing_answered"] == len(read_at_compute.graphs) * qwen3moe.n_layers
    pd.testing.assert_frame_equal(read_at_compute.raw("moe_routing"), runs["callback"].raw("moe_routing"))
