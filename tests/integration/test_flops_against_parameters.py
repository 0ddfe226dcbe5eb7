"""The FLOPs ggml-viz counts per node (analysis/flops.py), checked against a count made without
the run: the model's parameters read from its GGUF file (the gguf package's reader), the prompt's
tokens, and the attention's shape from the GGUF metadata.

A transformer's forward pass costs 2 FLOPs per parameter of each weight matrix per token it
multiplies, plus the attention's Q·Kᵀ and ·V, 2·2·head_dim·n_kv·n_q per head and layer.
llama.cpp computes the output head only for the tokens whose logits are asked for, and (its
inp_out_ids) narrows the last layer to those tokens once its attention's output projection is
done: that layer's feed-forward runs for them alone.
"""

from __future__ import annotations

import pytest
from gguf import GGUFReader

from ggml_viz.analysis.flops import node_costs

from .smollm2 import PROMPT, load_model

pytestmark = pytest.mark.model

FFN = ("ffn_gate", "ffn_up", "ffn_down")


def metadata(reader: GGUFReader, key: str) -> int:
    return int(reader.fields[key].contents())


def expected_flops(reader: GGUFReader, n_tokens: int, n_outputs: int, n_kv: int) -> dict[str, float]:
    """The prompt graph's matrix-multiplication FLOPs from the GGUF file alone: the weights', and the
    attention's over a KV window of n_kv cells."""
    arch = reader.fields["general.architecture"].contents()
    layers = metadata(reader, f"{arch}.block_count")
    heads = metadata(reader, f"{arch}.attention.head_count")
    key_length = f"{arch}.attention.key_length"
    head_dim = (
        metadata(reader, key_length)
        if key_length in reader.fields
        else metadata(reader, f"{arch}.embedding_length") // heads
    )
    weights = 0.0
    for tensor in reader.tensors:
        parts = tensor.name.split(".")
        if parts[0] != "blk" or len(tensor.shape) != 2:
            continue  # the norms' vectors: no matrix multiplication
        last_layer_ffn = int(parts[1]) == layers - 1 and parts[2] in FFN
        weights += 2 * int(tensor.n_elements) * (n_outputs if last_layer_ffn else n_tokens)
    # the output head: output.weight, or token_embd.weight where the model ties them (SmolLM2)
    parameters = {tensor.name: int(tensor.n_elements) for tensor in reader.tensors}
    head = parameters.get("output.weight", parameters["token_embd.weight"])
    weights += 2 * head * n_outputs
    attention = 2 * 2 * head_dim * n_kv * n_tokens * heads * layers  # Q·Kᵀ, then ·V
    return {"weights": weights, "attention": attention, "layers": layers, "heads": heads, "head_dim": head_dim}


def test_prompt_graph_flops_match_the_model_s_parameters(recorded_run, model_path):
    # GIVEN a recorded generation's prompt graph, and the model's GGUF file read on its own
    run = recorded_run.run
    prompt = run.graphs[run.graphs.phase == "prompt"].iloc[0]
    reader = GGUFReader(model_path)
    weight_names = {tensor.name for tensor in reader.tensors}
    # AND the prompt's tokens, counted by llama.cpp's tokenizer (not from the run), of which the
    # run's prompt graph holds every one, and computes the logits of the last alone
    n_tokens = len(load_model(model_path, vocab_only=True).tokenize(PROMPT.encode()))
    tokens = run.tokens[run.tokens.graph_id == prompt.graph_id]
    assert len(tokens) == n_tokens == prompt.n_tokens
    n_outputs = int(tokens.output.sum())
    assert n_outputs == 1
    # AND the graph's KV window: the cells of the cache its attention reads (llama.cpp pads it)
    tensors = run.raw("tensors").set_index("tensor_id")
    edges = run.raw("edges")
    edges = edges[edges.structure_id == prompt.structure_id].join(tensors[["name", "ne1"]], on="src_tensor_id")
    nodes = run.raw("structure_nodes")
    nodes = nodes[nodes.structure_id == prompt.structure_id].set_index("node_index").tensor_id
    edges = edges.assign(op=edges.node_index.map(nodes).map(tensors.op_base))
    kv_windows = set(edges[(edges.op == "MUL_MAT") & (edges.src_slot == 0) & edges.name.str.startswith("cache_k")].ne1)
    assert len(kv_windows) == 1, kv_windows
    n_kv = int(kv_windows.pop())
    assert n_tokens <= n_kv <= 512  # the tokens in the cache, at most the context (n_ctx 512)

    # WHEN ggml-viz counts each node's FLOPs
    costs = node_costs(run)
    costs = costs[costs.structure_id == prompt.structure_id]
    sources = edges[edges.src_slot == 0].set_index("node_index").name
    matmuls = costs[costs.op == "MUL_MAT"]
    on_weights = matmuls.node_index.map(sources).isin(weight_names)
    counted_weights = matmuls[on_weights].flops.sum()
    counted_attention = matmuls[~on_weights].flops.sum()

    # THEN the products with the weights cost 2 FLOPs per parameter per token
    expected = expected_flops(reader, n_tokens, n_outputs, n_kv)
    assert on_weights.sum() == 7 * expected["layers"] + 1  # q, k, v, output, gate, up, down; the head
    assert counted_weights == pytest.approx(expected["weights"], rel=0.005), (counted_weights, expected)
    # AND the attention's two products 2·2·head_dim·n_kv·n_q per head and layer
    assert "FLASH_ATTN_EXT" not in set(costs.op)
    assert (~on_weights).sum() == 2 * expected["layers"]
    assert counted_attention == pytest.approx(expected["attention"], rel=0.005), (counted_attention, expected)
    # AND the whole graph (norms, RoPE, softmax and the other element-wise ops besides) within 3%
    total = costs.flops.sum()
    assert total == pytest.approx(expected["weights"] + expected["attention"], rel=0.03), (total, expected)
