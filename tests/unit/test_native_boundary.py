"""The C extension and Python agree where both read the same thing."""

from __future__ import annotations

import pytest

from ggml_viz.layers import layer_of

native = pytest.importorskip("ggml_viz.capture._native", reason="the native recorder was not built")

NAMES = [
    "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "blk.x.weight", "blk.12", "Qcur-12", "Kcur-3 (view)",
    "kqv_out-7 (permuted) (cont)", "cache_k_l4", "cache_v_l17 (view)", "token_embd.weight", "result_output",
    "inp_embd", "norm", "", "a-b-3", "x-12y", "x_l", "x_l5-6", "ffn_out-29", "leaf_3", "node_-1", "-7",
    "a" * 63, "blk.3.x-5",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_the_native_recorder_reads_layers_as_python_does(name):
    assert native.layer_of(name) == layer_of(name)
