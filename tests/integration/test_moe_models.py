"""Mixture-of-Experts models (qwen3moe, qwen2moe, gpt-oss): tiny ones the tests write
(moe_models.py), run by the real llama.cpp, whose routing, read through its eval callback,
must be what the numpy reference computes from the router in the file."""

from __future__ import annotations

import numpy as np
import pytest

from .arch_models import generate, load
from .moe_models import (
    BIASED_TOPK_SOFTMAX,
    MOE_ARCHITECTURES,
    SOFTMAX_TOPK_NORM,
    GraphCapture,
    MoeSpec,
    capture_moe,
    router_topk,
    write_moe_model,
)

# long enough that the prompt's tokens go to most experts
PROMPT = "The quick brown fox jumps over the lazy dog, and the capital of France is"
N_PREDICT = 4  # the prompt's graph, then three decode steps

# the weights tensor build_moe_ffn multiplies the experts' outputs by, per gating
WEIGHTS_NODE = {SOFTMAX_TOPK_NORM: "ffn_moe_weights_norm", BIASED_TOPK_SOFTMAX: "ffn_moe_weights_softmax"}


@pytest.fixture(scope="module", params=MOE_ARCHITECTURES)
def model(request, tmp_path_factory) -> MoeSpec:
    return write_moe_model(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", request.param)


@pytest.fixture(scope="module")
def routed(model) -> tuple[tuple[str, int], list[GraphCapture]]:
    """One greedy generation, every graph's nodes and routing read by the eval callback."""
    with capture_moe() as graphs:
        greedy = generate(load(model), prompt=PROMPT, n_predict=N_PREDICT)
    return greedy, graphs


def test_the_file_holds_3d_quantized_experts_and_an_f32_router(model):
    for layer in range(model.n_layers):
        for matrix in ("gate", "up", "down"):
            assert model.tensor_types[f"blk.{layer}.ffn_{matrix}_exps.weight"] == "q8_0"
        assert model.tensor_types[f"blk.{layer}.ffn_gate_inp.weight"] == "f32"
        assert (f"blk.{layer}.ffn_gate_inp_shexp.weight" in model.tensor_types) == model.shared_experts


def test_llama_cpp_generates_every_token_with_one_graph_each(model, routed):
    (text, n_tokens), graphs = routed
    assert n_tokens == N_PREDICT and text
    assert len(graphs) == N_PREDICT


def test_router_topk_picks_llama_cpp_s_experts_for_every_token(model, routed):
    _, graphs = routed
    weights_node = WEIGHTS_NODE.get(model.gating, "ffn_moe_weights")
    # GIVEN each graph's MoE layers: the router's input and the ids and weights llama.cpp used
    for index, graph in enumerate(graphs):
        for layer in range(model.n_layers):
            where = f"graph {index} layer {layer}"
            ids = graph.values[f"ffn_moe_topk-{layer}"]
            weights = graph.values[f"{weights_node}-{layer}"].reshape(ids.shape)
            # WHEN numpy routes the same input with the router read back from the file
            expected_ids, expected_weights = router_topk(model, layer, graph.values[f"{model.router_input}-{layer}"])
            # THEN it picks the same experts for every token, in the same order, with the same weights
            assert ids.shape == (len(expected_ids), model.n_expert_used), where
            np.testing.assert_array_equal(ids, expected_ids, err_msg=where)
            np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6, err_msg=where)
            if model.gating != "softmax_topk":  # qwen2moe's weights are the picked probabilities, unnormalized
                np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5, err_msg=where)
    # AND the routing is not degenerate: the prompt's tokens go to most experts
    assert len(np.unique(graphs[0].values["ffn_moe_topk-0"])) >= model.n_expert // 2


def test_the_routing_weights_are_computed_before_the_experts(model, routed):
    _, graphs = routed
    names = [name for name, _ in graphs[-1].nodes]
    ops = dict(graphs[-1].nodes)
    weights_node = WEIGHTS_NODE.get(model.gating, "ffn_moe_weights")
    for layer in range(model.n_layers):
        order = [
            f"ffn_moe_logits-{layer}",
            f"ffn_moe_topk-{layer}",
            f"ffn_moe_weights-{layer}",
            f"{weights_node}-{layer}",
            f"ffn_moe_gate-{layer}",
            f"ffn_moe_up-{layer}",
            f"ffn_moe_down-{layer}",
            f"ffn_moe_weighted-{layer}",
            f"ffn_moe_out-{layer}",
        ]
        # THEN build_moe_ffn's nodes come in this order: the weights (GET_ROWS, and their
        # normalization) before the experts' MUL_MAT_IDs, whose output the MUL weights
        assert [names.index(name) for name in order] == sorted(names.index(name) for name in order)
        assert [ops[name] for name in order] == [
            "MUL_MAT",
            "VIEW",
            "GET_ROWS",
            ops[f"{weights_node}-{layer}"],
            "MUL_MAT_ID",
            "MUL_MAT_ID",
            "MUL_MAT_ID",
            "MUL",
            "ADD",
        ]
        # AND a shared expert's nodes follow, gated by a sigmoid (SILU(x) / x)
        shared = [f"ffn_shexp-{layer}", f"ffn_shexp_gate-{layer}", f"ffn_shexp_out-{layer}"]
        assert all(name in ops for name in shared) == model.shared_experts
