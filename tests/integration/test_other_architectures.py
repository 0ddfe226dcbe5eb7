"""Architectures other than llama (gemma3, qwen2): tiny models the tests write
(arch_models.py), run by the real llama.cpp and recorded. What SmolLM2's tests check for a
llama model must hold for them too: a valid run, every weight read traced to its bytes in
the file, a decode step's weight traffic the model's size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from gguf import GGUFReader

import ggml_viz
from ggml_viz.analysis.breakdowns import weight_reads
from ggml_viz.capture.core.models import described_size

from .arch_models import ARCHITECTURES, N_PREDICT, ModelSpec, generate, load, write_model
from .smollm2 import ggml_viz_cli


@dataclass(frozen=True)
class GGUFTensor:
    """A tensor as gguf's own reader finds it in the file."""

    type: str
    shape: tuple[int, ...]  # ne0, ne1, ...
    start: int  # absolute file offset
    nbytes: int


@dataclass(frozen=True)
class GGUFFile:
    data_offset: int  # where tensor data starts
    tensors: dict[str, GGUFTensor]


@dataclass
class Recording:
    run: ggml_viz.runformat.reader.Run
    text: str


@pytest.fixture(scope="module", params=ARCHITECTURES)
def model(request, tmp_path_factory) -> ModelSpec:
    return write_model(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", request.param)


@pytest.fixture(scope="module")
def gguf_file(model) -> GGUFFile:
    """The model as gguf's own reader reads it (seconds for qwen2's vocabulary: read once)."""
    reader = GGUFReader(model.path)
    tensors = {
        t.name: GGUFTensor(
            t.tensor_type.name.lower(), tuple(int(d) for d in t.shape), int(t.data_offset), int(t.n_bytes)
        )
        for t in reader.tensors
    }
    return GGUFFile(int(reader.data_offset), tensors)


@pytest.fixture(scope="module")
def greedy(model) -> tuple[str, int]:
    """llama.cpp's greedy generation with the model, unrecorded: its text and token count."""
    return generate(load(model))


@pytest.fixture(scope="module")
def recording(model) -> Recording:
    """One greedy generation (the prompt, then N_PREDICT - 1 decode steps) recorded with the
    Python API."""
    path = model.path.with_suffix(".ggmlviz")
    with ggml_viz.record(path):
        text, _ = generate(load(model))
    return Recording(ggml_viz.open(path), text)


def test_llama_cpp_runs_the_model_greedily_and_the_same_twice(model, greedy):
    # GIVEN the written model, which llama.cpp has run greedily once
    # WHEN it loads it again and generates again
    llm = load(model)
    again = generate(llm)
    # THEN it generates every token asked for, the same text both times
    assert again == greedy
    assert again[1] == N_PREDICT
    # AND reads the model as written
    assert llm.metadata["general.architecture"] == model.architecture
    assert llm.n_vocab() == model.n_vocab
    assert int(llm.metadata[f"{model.architecture}.block_count"]) == model.n_layers


def test_the_recording_is_valid_with_prompt_and_decode_graphs(model, recording, greedy):
    run = recording.run
    # GIVEN a recorded generation: THEN ggml-viz validate finds nothing wrong
    result = ggml_viz_cli("validate", str(run.path))
    assert result.returncode == 0, result.stdout + result.stderr
    # AND the manifest names the model written
    described = run.manifest["model"]
    assert described["architecture"] == model.architecture
    assert described["layers"] == model.n_layers
    assert Path(described["path"]) == model.path.resolve()
    # AND a model of no size class llama.cpp knows is described by its parameter count, not "?B"
    assert "?B" not in described["description"].split(), described["description"]
    assert described_size(f"{model.architecture} ?B", described["parameters"]) in described["description"]
    # AND the graphs are the prompt's, then one decode step per token but the last
    assert list(run.graphs["phase"]) == ["prompt"] + ["decode"] * (N_PREDICT - 1)
    # AND recording did not change what the model generates
    assert recording.text == greedy[0]


def test_every_weight_read_is_the_tensor_gguf_finds_in_the_file(model, recording, gguf_file):
    file_tensors = gguf_file.tensors
    run = recording.run
    weights = run.edges[run.edges["src_usage"] == "weights"]
    # GIVEN each graph: THEN it reads every tensor of the file, and nothing else from the weights
    for graph_id, reads in weights.groupby("graph_id"):
        assert set(reads["src_name"]) == set(file_tensors), f"graph {graph_id}"
    assert (weights["memory"] == "disk").all()
    # AND each read tensor is the one gguf's reader finds: its type, shape and bytes in the file
    for row in weights.drop_duplicates("src_name").itertuples():
        tensor = file_tensors[row.src_name]
        assert row.src_type == tensor.type == model.tensor_types[row.src_name], row.src_name
        shape = (row.src_ne0, row.src_ne1, row.src_ne2, row.src_ne3)
        assert shape == tensor.shape + (1,) * (4 - len(tensor.shape)), row.src_name
        assert (row.file_offset, row.file_end) == (tensor.start, tensor.start + tensor.nbytes), row.src_name
        assert row.src_nbytes == tensor.nbytes, row.src_name
    # AND a weight read through the file mapping sits at its file offset in the mapped buffer
    # (llama.cpp copies some quantized weights into a buffer of its own, repacked for the CPU)
    mapped = weights[weights["mmap"]]
    assert "token_embd.weight" in set(mapped["src_name"])
    assert (mapped["buffer_offset"] + gguf_file.data_offset == mapped["file_offset"]).all()
    # AND the run's map of the file covers it
    assert run.memory_map["end"].max() == model.path.stat().st_size


def test_a_decode_step_reads_each_weight_once_and_one_embedding_row(model, recording, gguf_file):
    file_tensors = gguf_file.tensors
    run = recording.run
    # GIVEN the bytes of weights each graph reads (GET_ROWS reads only the rows it gathers)
    disk = run.edges[run.edges["memory"] == "disk"]
    per_graph = disk.groupby("graph_id")["src_bytes_read"].sum()
    embedding = file_tensors["token_embd.weight"]
    row_bytes = embedding.nbytes // model.n_vocab
    file_bytes = sum(tensor.nbytes for tensor in file_tensors.values())
    # THEN a decode step reads every tensor whole but the embedding, of which it reads its
    # token's row, and, where the output is tied to it, the whole table once more
    decode = run.graphs.loc[run.graphs["phase"] == "decode", "graph_id"]
    assert (per_graph[decode] <= file_bytes + row_bytes).all()
    whole = file_bytes if model.tied_embeddings else file_bytes - embedding.nbytes
    assert (per_graph[decode] == whole + row_bytes).all()
    # AND the prompt's graph one row per prompt token
    prompt = run.graphs[run.graphs["phase"] == "prompt"].iloc[0]
    assert per_graph[prompt["graph_id"]] == whole + prompt["n_tokens"] * row_bytes
    # AND the summary reports a decode step's
    assert weight_reads(run)["weight_bytes_per_graph"] == whole + row_bytes


# Layers: where the checks of the nodes table's `layer` column go.


def test_every_graph_has_every_layer(model, recording):
    nodes = recording.run.nodes
    for graph_id, graph_nodes in nodes.groupby("graph_id"):
        assert set(graph_nodes["layer"].dropna().astype(int)) == set(range(model.n_layers)), f"graph {graph_id}"


def layer_checks(nodes: pd.DataFrame) -> list[str]:
    """What is wrong with the nodes' layers: here, every node that lies between a layer's
    first and last node (in one graph) but is not given that layer."""
    problems = []
    for graph_id, graph_nodes in nodes.groupby("graph_id"):
        for layer, members in graph_nodes[graph_nodes["layer"].notna()].groupby("layer"):
            inside = graph_nodes["node_index"].between(members["node_index"].min(), members["node_index"].max())
            strays = graph_nodes[inside & graph_nodes["layer"].ne(layer).fillna(True)]
            problems += [
                f"graph {graph_id}: node {row.node_index} {row.name!r} ({row.op}) inside layer {layer} "
                f"has layer {row.layer}"
                for row in strays.itertuples()
            ]
    return problems


def test_every_node_inside_a_layer_has_that_layer(recording):
    # GIVEN nodes llama.cpp leaves unnamed inside a layer (node_N: the attention output
    # projection, gemma3's scaling of Q, the last layer's GET_ROWS of the rows to output) or
    # names without a layer (gemma3's RMS_NORM `norm` before ffn_post_norm)
    # THEN each is given the layer it lies in
    assert layer_checks(recording.run.nodes) == []


@pytest.mark.parametrize("phase", ["prompt", "decode"])
def test_the_collapsed_graph_view_is_a_chain_of_layer_boxes(model, recording, phase):
    from ggml_viz.analysis.graph_view import graph_view_of

    run = recording.run
    graph_id = int(run.graphs.loc[run.graphs["phase"] == phase, "graph_id"].iloc[0])
    view = graph_view_of(run, graph_id, None)
    # THEN one box per layer, in order, each holding its layer's nodes in one piece ...
    boxes = [item for item in view["items"] if item["kind"] == "layer"]
    assert [box["layer"] for box in boxes] == list(range(model.n_layers))
    nodes = run.nodes[run.nodes["graph_id"] == graph_id]
    for box in boxes:
        members = nodes.loc[nodes["layer"] == box["layer"], "node_index"]
        assert box["n_nodes"] == len(members) == members.max() - members.min() + 1
    # ... each feeding the next one only
    box_links = {(link["from"], link["to"]) for link in view["links"] if {link["from"][0], link["to"][0]} == {"L"}}
    assert box_links == {(f"L{layer}", f"L{layer + 1}") for layer in range(model.n_layers - 1)}


def test_components_come_from_the_weights_a_node_reads(model, recording):
    from ggml_viz.analysis.components import node_components

    run = recording.run
    nodes = run.nodes[run.nodes["graph_id"] == run.graphs["graph_id"].iloc[-1]]
    parts = node_components(run, nodes)
    edges = run.edges[run.edges["graph_id"] == nodes["graph_id"].iloc[0]]
    # GIVEN each node that reads a layer's attention or FFN matrix (some of them unnamed:
    # node_N, the attention output projection)
    for kind, component in (("attn_output", "attention"), ("attn_q", "attention"), ("ffn_down", "ffn")):
        readers = edges.loc[edges["src_name"].str.contains(rf"\.{kind}\.weight$"), "node_index"]
        assert len(readers) == model.n_layers
        # THEN it is in that component, whatever its name
        assert (parts[nodes["node_index"].isin(readers)] == component).all(), kind
    # AND inside layers nothing is left to "other" (gemma3's unnamed scaling of Q is attention)
    inside = nodes["layer"].notna()
    assert (parts[inside] != "other").all(), nodes.loc[inside & (parts == "other"), ["name", "op"]]
    # AND the output head is output, tied to the embedding or not
    assert parts[nodes["name"] == "result_output"].tolist() == ["output"]
