"""Each op's FLOPs formula (analysis/flops.FORMULAS) against a hand computation on a small
node, and the formulas reaching node_costs through a run's tables."""

from __future__ import annotations

import pytest

from ggml_viz.analysis.flops import FORMULAS, op_flops

# (op, node shape, sources' shapes by slot, FLOPs worked out by hand)
CASES = [
    # a [4 x 3] weight times 2 tokens: 6 outputs, each 4 products and 4 sums
    ("MUL_MAT", (3, 2, 1, 1), {0: (4, 3, 1, 1), 1: (4, 2, 1, 1)}, 6 * 2 * 4),
    # 8 experts of [4 x 3], 2 chosen per token, 5 tokens: 3 x 2 x 5 outputs of 4-term dots
    ("MUL_MAT_ID", (3, 2, 5, 1), {0: (4, 3, 8, 1), 1: (4, 2, 5, 1), 2: (2, 5, 1, 1)}, 30 * 2 * 4),
    # [3 x 7] and [2 x 7] outer products summed over 7: 6 outputs of 7 products and sums
    ("OUT_PROD", (3, 2, 1, 1), {0: (3, 7, 1, 1), 1: (2, 7, 1, 1)}, 6 * 2 * 7),
    # 2 heads of size 8, 3 queries, 16 KV cells: per (cell, query, head) 2·8 (QK) + 5 + 2·8 (V)
    (
        "FLASH_ATTN_EXT",
        (8, 2, 3, 1),
        {0: (8, 3, 2, 1), 1: (8, 16, 2, 1), 2: (8, 16, 2, 1), 3: (16, 3, 1, 1)},
        16 * 3 * 2 * (16 + 5 + 16),
    ),
    # a 3x3 kernel over 4 input channels, 5 output channels, a 6x6 output: 180 outputs of 36 terms
    ("CONV_2D", (6, 6, 5, 1), {0: (3, 3, 4, 5), 1: (8, 8, 4, 1)}, 180 * 2 * 36),
    ("CONV_2D_DW", (6, 6, 4, 1), {0: (3, 3, 1, 4), 1: (8, 8, 4, 1)}, 144 * 2 * 9),
    # kernel [3, 2 out, 4 in] over 10 positions of 4 channels: each input times 3·2 weights
    ("CONV_TRANSPOSE_1D", (12, 2, 1, 1), {0: (3, 2, 4, 1), 1: (10, 4, 1, 1)}, 2 * 3 * 2 * 4 * 10),
    ("CONV_TRANSPOSE_2D", (7, 7, 2, 1), {0: (3, 3, 2, 4), 1: (5, 5, 4, 1)}, 2 * 9 * 2 * 4 * 25),
    # Mamba's conv: d_conv 4, 16 channels, 3 tokens: 48 outputs of 4-term dots
    ("SSM_CONV", (16, 3, 1, 1), {0: (6, 16, 1, 1), 1: (4, 16, 1, 1)}, 48 * 2 * 4),
    # Mamba's scan: d_state 16, x of 8 channels x 3 tokens: per state element and token 9
    ("SSM_SCAN", (8 * 3 + 16 * 8, 1, 1, 1), {0: (16, 8, 1, 1), 1: (8, 3, 1, 1)}, 9 * 16 * 24),
    ("RWKV_WKV6", (64, 3, 1, 1), {0: (8, 2, 3, 1)}, 4 * 8 * 48),
    ("SOFT_MAX", (16, 3, 2, 1), {0: (16, 3, 2, 1)}, 96 * 5),
    ("RMS_NORM", (8, 3, 1, 1), {0: (8, 3, 1, 1)}, 24 * 3),
    ("NORM", (8, 3, 1, 1), {0: (8, 3, 1, 1)}, 24 * 5),
    ("ROPE", (8, 2, 3, 1), {0: (8, 2, 3, 1), 1: (3, 1, 1, 1)}, 48 * 3),
    ("GLU", (8, 3, 1, 1), {0: (16, 3, 1, 1)}, 24 * 5),
    ("ADD", (8, 3, 1, 1), {0: (8, 3, 1, 1), 1: (8, 1, 1, 1)}, 24),
    ("SUM_ROWS", (1, 3, 1, 1), {0: (8, 3, 1, 1)}, 24),
    ("POOL_2D", (4, 4, 2, 1), {0: (8, 8, 2, 1)}, 128),
    ("GET_ROWS", (8, 3, 1, 1), {0: (8, 100, 1, 1), 1: (3, 1, 1, 1)}, 0),
    ("IM2COL", (27, 36, 1, 1), {0: (3, 3, 3, 4), 1: (8, 8, 3, 1)}, 0),
    ("CPY", (8, 3, 1, 1), {0: (8, 3, 1, 1), 1: (8, 3, 1, 1)}, 0),
]


@pytest.mark.parametrize(("op", "dst", "srcs", "expected"), CASES, ids=[case[0] for case in CASES])
def test_each_op_s_flops_are_its_hand_computation(op, dst, srcs, expected):
    assert op_flops(op, dst, srcs) == expected


def test_every_formula_is_tested():
    tested = {case[0] for case in CASES}
    same_as_tested = {
        "RWKV_WKV7",
        "GATED_LINEAR_ATTN",
        "L2_NORM",
        "GROUP_NORM",
        "UNARY",
        "SUB",
        "MUL",
        "DIV",
        "SCALE",
        "ADD_ID",
        "ACC",
        "SQR",
        "SQRT",
        "LOG",
        "SIN",
        "COS",
        "CLAMP",
        "ADD1",
        "SUM",
        "MEAN",
        "ARGMAX",
        "COUNT_EQUAL",
        "POOL_1D",
    }
    assert set(FORMULAS) <= tested | same_as_tested
    for op in same_as_tested:  # (each shares its formula with a tested op: the same numbers)
        twin = {
            "RWKV_WKV7": "RWKV_WKV6",
            "GATED_LINEAR_ATTN": "RWKV_WKV6",
            "L2_NORM": "RMS_NORM",
            "GROUP_NORM": "NORM",
            "UNARY": "GLU",
            "POOL_1D": "POOL_2D",
        }.get(op)
        twin = twin or ("SUM_ROWS" if op in ("SUM", "MEAN", "ARGMAX", "COUNT_EQUAL") else "ADD")
        case = next(case for case in CASES if case[0] == twin)
        assert op_flops(op, case[1], case[2]) == case[3]


def test_a_missing_source_counts_no_work_rather_than_failing():
    assert op_flops("FLASH_ATTN_EXT", (8, 2, 3, 1), {}) == 0
    assert op_flops("NOT_AN_OP", (8, 2, 3, 1), {0: (8, 2, 3, 1)}) == 0


def test_the_summary_marks_figures_counted_over_a_whole_window_as_upper_bounds():
    import io

    from rich.console import Console

    from ggml_viz.commands.render import _throughput_table

    row = {
        "time_ns": 1_000_000,
        "flops": 2e9,
        "bytes": 1e9,
        "gflop_per_s": 2000.0,
        "gb_per_s": 1000.0,
        "flops_per_byte": 2.0,
    }
    out = io.StringIO()
    rows = [{"op": "MUL_MAT", **row, "upper_bound": False}, {"op": "FLASH_ATTN_EXT", **row, "upper_bound": True}]
    Console(file=out, width=200).print(_throughput_table(rows))
    lines = out.getvalue().splitlines()
    mul_mat, flash = (next(line for line in lines if op in line) for op in ("MUL_MAT ", "FLASH_ATTN_EXT "))
    assert "2,000.00*" in flash and "*" not in mul_mat
    assert any(line.startswith("* over every KV cell of its graph's window") for line in lines)
    out = io.StringIO()
    Console(file=out, width=200).print(_throughput_table([{"op": "FLASH_ATTN_EXT", **row, "upper_bound": False}]))
    assert "upper bound" not in out.getvalue() and "*" not in out.getvalue()
