import pytest

from ggml_viz.layers import NO_LAYER, layer_of


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
    ],
)
def test_layer_is_read_from_the_name(name, layer):
    assert layer_of(name) == layer
