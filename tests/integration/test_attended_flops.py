"""FLASH_ATTN_EXT's FLOPs over the KV cells its causal mask lets it attend, on a real SmolLM2
run with flash attention: against a count made from the model's shape and the graphs' tokens."""

from __future__ import annotations

import ggml_viz
from ggml_viz.analysis.flops import throughput_by_op

from .smollm2 import greedy, load_model


def test_flash_attention_counts_the_cells_each_token_attends(tmp_path, model_path):
    # GIVEN SmolLM2 (9 query heads of 64, 30 layers) generating with flash attention
    path = tmp_path / "fa.ggmlviz"
    with ggml_viz.record(path):
        llm = load_model(model_path, flash_attn=True)
        greedy(llm, n_predict=8)
        del llm
    run = ggml_viz.open(path)

    # WHEN its work per op is counted
    flash = throughput_by_op(run).set_index("op").loc["FLASH_ATTN_EXT"]

    # THEN each token at position p attends p + 1 cells, in each layer and head:
    # (2·D + 2·Dv + 5) FLOPs per cell (Q·Kᵀ, the softmax, ·V), not the whole 256-cell window
    heads, head_size, layers = 9, 64, 30
    timed = run.node_totals
    timed = timed[(timed["op"] == "FLASH_ATTN_EXT") & (timed["timed"] > 0)]
    assert len(timed) > 0 and (timed["timed"] == timed["graphs"]).all()  # every graph timed on the CPU
    cells = sum(p + 1 for positions in run.raw("graphs")["token_positions"] for p in positions)
    expected = (2 * head_size + 2 * head_size + 5) * heads * layers * cells
    assert flash["flops"] == expected
    assert not flash["upper_bound"]
    tokens = sum(map(len, run.raw("graphs")["token_positions"]))
    window = (2 * head_size + 2 * head_size + 5) * heads * layers * 256 * tokens
    assert flash["flops"] < window / 4  # (a few tokens in a window of 256 cells)
