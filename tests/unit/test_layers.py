import numpy as np
import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.layers import (
    LEAF_LAYER_STATE,
    LEAF_LAYER_WEIGHT,
    LEAF_OTHER,
    LEAF_SHARED_WEIGHT,
    NO_LAYER,
    Wiring,
    layer_of,
    leaf_class,
    leaf_classes,
    node_layers,
)
from ggml_viz.runformat.synthetic import write_synthetic_run


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("blk.0.attn_q.weight", 0),
        ("blk.29.ffn_down.weight", 29),
        ("Qcur-12", 12),
        ("Kcur-3 (view)", 3),
        ("kqv_out-7 (permuted) (cont)", 7),
        ("cache_k_l4", 4),
        ("cache_v_l17 (view)", 17),
        ("token_embd.weight", NO_LAYER),
        ("result_output", NO_LAYER),
        ("inp_embd", NO_LAYER),
        ("norm", NO_LAYER),
        ("", NO_LAYER),
        # checkpoint names, as formats older than GGUF keep them
        ("encoder.blocks.3.attn.query.weight", 3),
        ("decoder.blocks.11.cross_attn_ln.bias", 11),
        ("model.layers.7.self_attn.q_proj.weight", 7),
        ("transformer.h.2.mlp.c_fc.weight", 2),
        ("h.0.ln_1.weight", 0),
        ("myblocks.3.weight", NO_LAYER),
        ("encoder.layers.3", NO_LAYER),
        ("decoder.token_embedding.weight", NO_LAYER),
    ],
)
def test_layer_is_read_from_the_name(name, layer):
    assert layer_of(name) == layer


# -- a node's layer, from its graph ----------------------------------------------------


class Graph:
    """A graph built node by node, each noting the layer it should get: sources are node
    indexes or leaf names (weights are named as GGUF names them; other leaves are inputs)."""

    def __init__(self) -> None:
        self.hints: list[int] = []
        self.expected: list[int] = []
        self.edges: list[tuple[int, int | str]] = []
        self.layer = NO_LAYER  # what the next nodes should get

    def node(self, *sources: int | str, hint: int = NO_LAYER) -> int:
        index = len(self.hints)
        self.hints.append(hint)
        self.expected.append(self.layer)
        self.edges += [(index, source) for source in sources]
        return index

    def wiring(self) -> Wiring:
        leaves = [source for _, source in self.edges if isinstance(source, str)]
        classes, layers = leaf_classes(leaves, [name.endswith(".weight") for name in leaves])
        by_leaf = {name: (c, layer) for name, c, layer in zip(leaves, classes.tolist(), layers.tolist(), strict=True)}
        return Wiring(
            hints=np.array(self.hints),
            edge_node=np.array([node for node, _ in self.edges]),
            edge_source=np.array([source if isinstance(source, int) else -1 for _, source in self.edges]),
            edge_leaf_class=np.array([by_leaf[s][0] if isinstance(s, str) else LEAF_OTHER for _, s in self.edges]),
            edge_leaf_layer=np.array([by_leaf[s][1] if isinstance(s, str) else NO_LAYER for _, s in self.edges]),
        )


def transformer(n_layers: int, *, post_norms: bool = False, scaled_input: bool = False, decode: bool = False) -> Graph:
    """A decoder in ggml's execution order, no node named after its layer: pre-norm
    attention and FFN blocks with residuals, optionally Gemma's norms after each block and
    its scaled embedding; a prompt graph keeps only the last token's rows in its last layer."""
    g = Graph()
    x = g.node("token_embd.weight", "inp_tokens")  # GET_ROWS
    if scaled_input:
        x = g.node(x)  # SCALE
    for layer in range(n_layers):
        g.layer = layer

        def weight(kind: str, layer: int = layer) -> str:
            return f"blk.{layer}.{kind}.weight"

        normed = g.node(g.node(x), weight("attn_norm"))  # RMS_NORM (unnamed), MUL
        q = g.node(g.node(weight("attn_q"), normed), "inp_pos", "rope_freqs.weight")  # MUL_MAT, ROPE
        k = g.node(g.node(weight("attn_k"), normed), "inp_pos")
        v = g.node(weight("attn_v"), normed)
        g.node(g.node(k), "k_idxs", f"cache_k_l{layer}")  # VIEW, SET_ROWS into the cache
        g.node(v, "v_idxs", f"cache_v_l{layer}")
        keys = g.node(g.node(f"cache_k_l{layer}"))  # VIEW, PERMUTE of the cache
        scores = g.node(g.node(keys, g.node(g.node(q))), "kq_mask")  # MUL_MAT, SOFT_MAX
        attention = g.node(g.node(g.node(f"cache_v_l{layer}"), scores))  # VIEW, MUL_MAT, CONT
        out = g.node(weight("attn_output"), attention)
        if post_norms:
            out = g.node(g.node(out), weight("post_attention_norm"))
        if layer == n_layers - 1 and not decode:  # the last layer: only the outputs' rows
            out, x = g.node(out, "out_ids"), g.node(x, "out_ids")
        x = g.node(out, x)  # residual ADD
        normed = g.node(g.node(x), weight("ffn_norm"))
        hidden = g.node(g.node(weight("ffn_gate"), normed), g.node(weight("ffn_up"), normed))  # SWIGLU
        out = g.node(weight("ffn_down"), hidden)
        if post_norms:
            out = g.node(g.node(out), weight("post_ffw_norm"))
        x = g.node(out, x)  # the layer's output
    g.layer = NO_LAYER
    g.node(g.node("output.weight", g.node(g.node(x), "output_norm.weight")))  # norm, MUL, MUL_MAT, a view
    return g


@pytest.mark.parametrize("decode", [False, True], ids=["prompt", "decode"])
@pytest.mark.parametrize(
    ("post_norms", "scaled_input"), [(False, False), (True, True)], ids=["llama-like", "gemma-like"]
)
def test_layers_come_from_the_graph_when_no_name_carries_one(post_norms, scaled_input, decode):
    # GIVEN a graph whose nodes are all named `node_K`: only the weights say `blk.N.`
    graph = transformer(4, post_norms=post_norms, scaled_input=scaled_input, decode=decode)

    # WHEN its nodes' layers are inferred
    layers = node_layers(graph.wiring())

    # THEN each node is in its layer: the norm that starts a layer and the residual that
    # ends it included; the embedding and the output head are outside layers
    assert layers.tolist() == graph.expected


def test_a_layer_holds_every_node_between_its_first_and_last():
    graph = transformer(3)
    layers = node_layers(graph.wiring())
    for layer in range(3):
        where = np.flatnonzero(layers == layer)
        assert (layers[where.min() : where.max() + 1] == layer).all()


def test_a_name_hint_decides_only_where_the_graph_leaves_a_choice():
    # GIVEN names that contradict the graph inside a layer, and one that places a node
    # between two layers (a layer's output named as the next layer's)
    graph = transformer(3)
    inside = graph.expected.index(1) + 2  # layer 1's attn_q matrix product
    graph.hints[inside] = 2
    output_of_0 = graph.expected.index(1) - 1  # layer 0's residual output
    graph.hints[output_of_0] = 1

    layers = node_layers(graph.wiring())

    # THEN the graph wins inside the layer, and the name decides between the two layers
    assert layers[inside] == 1
    assert layers[output_of_0] == 1


def test_a_graph_without_layer_weights_keeps_the_names_layers():
    graph = Graph()
    a = graph.node("inp", hint=0)
    b = graph.node(a, hint=0)
    graph.node(b, hint=1)
    graph.node(hint=NO_LAYER)
    assert node_layers(graph.wiring()).tolist() == [0, 0, 1, NO_LAYER]
    assert node_layers(Graph().wiring()).tolist() == []


@pytest.mark.parametrize(
    ("name", "in_weights", "expected"),
    [
        ("blk.3.attn_q.weight", True, (LEAF_LAYER_WEIGHT, 3)),
        ("enc.blk.2.ffn_up.weight", True, (LEAF_LAYER_WEIGHT, 2)),
        ("token_embd.weight", True, (LEAF_SHARED_WEIGHT, NO_LAYER)),
        ("rope_freqs.weight", False, (LEAF_SHARED_WEIGHT, NO_LAYER)),
        ("cache_k_l7", False, (LEAF_LAYER_STATE, 7)),
        ("cache_s_l12 (view)", False, (LEAF_LAYER_STATE, 12)),
        ("inp_pos", False, (LEAF_OTHER, NO_LAYER)),
        ("attn_inp_kq_mask", False, (LEAF_OTHER, NO_LAYER)),
        ("encoder.blocks.3.attn.query.weight", False, (LEAF_LAYER_WEIGHT, 3)),
        ("model.layers.5.mlp.up_proj.weight", True, (LEAF_LAYER_WEIGHT, 5)),
        ("transformer.h.1.attn.c_proj.bias", False, (LEAF_LAYER_WEIGHT, 1)),
        ("decoder.token_embedding.weight", False, (LEAF_SHARED_WEIGHT, NO_LAYER)),
    ],
)
def test_leaves_are_classed_by_what_they_hold(name, in_weights, expected):
    assert leaf_class(name, in_weights) == expected


def test_a_run_written_before_nodes_had_layers_reads_them_inferred(tmp_path):
    # GIVEN a run whose structure_nodes table has no layer column (an earlier ggml-viz)
    path = write_synthetic_run(tmp_path / "old.ggmlviz", graphs=2, layers=3)
    stored = ggml_viz.open(path).raw("structure_nodes")
    table = pq.read_table(path / "structure_nodes.parquet")
    pq.write_table(table.drop_columns(["layer"]), path / "structure_nodes.parquet")

    # WHEN it is opened
    run = ggml_viz.open(path)

    # THEN the reader infers each node's layer, as the recorder would have stored it
    assert run.raw("structure_nodes")["layer"].tolist() == stored["layer"].tolist()
    assert run.nodes["layer"].dropna().astype(int).unique().tolist() == [0, 1, 2]
