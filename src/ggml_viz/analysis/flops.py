"""Work per node: floating-point operations and bytes moved, and what the run achieved.

FLOPs per op, from the node's shape (`dst`, ne0..ne3, `e` its elements) and its sources'
(`src0`, `src1`, ...: slot order, as ggml.h builds them); a multiply and an add count two.
Each formula is stated here and in `FORMULAS` (docs/measuring.md has the table):

- MUL_MAT, MUL_MAT_ID: 2·K·e, K = src0.ne0 (each output a K-term dot product; MUL_MAT_ID's
  output holds only the experts its tokens chose). OUT_PROD: 2·K·e, K = src0.ne1.
- FLASH_ATTN_EXT: (2·D + 2·Dv + 5)·n_kv·n_q·H·B, q = src0 [D, n_q, H, B], k = src1 [D, n_kv],
  v = src2 [Dv, n_kv]: Q·Kᵀ, the softmax (5 per cell) and ·V over the KV cells of the graph.
- CONV_2D: 2·KW·KH·IC·e (src0 the kernel [KW, KH, IC, OC]); CONV_2D_DW: 2·KW·KH·e.
  CONV_TRANSPOSE_1D: 2·K·OC·IC·L (src0 [K, OC, IC], src1 [L, IC]); CONV_TRANSPOSE_2D:
  2·KW·KH·OC·IC·W·H·N (src0 [KW, KH, OC, IC], src1 [W, H, IC, N]).
- SSM_CONV: 2·d_conv·e (d_conv = src1.ne0). SSM_SCAN: 9·d_state·x (d_state = src0.ne0, x =
  src1's elements: per state element and token the decay, exp of dt·A, 3; the update 4; the
  output 2). RWKV_WKV6/7, GATED_LINEAR_ATTN: 4·S·x (S = src0.ne0, the head size; x = src0's
  elements: per token and head an S×S state updated and read).
- Per output element: SOFT_MAX 5 (max, subtract, exp, sum, divide); RMS_NORM, L2_NORM 3
  (square, sum, scale); NORM, GROUP_NORM 5 (mean, subtract, square, sum, scale); ROPE 3;
  GLU, UNARY 5 (SiLU, GELU and kin: an exp or tanh and a few operations); ADD, SUB, MUL, DIV,
  SCALE, ADD_ID, ACC, SQR, SQRT, LOG, SIN, COS, CLAMP, ADD1 1.
- Per element of src0 (a reduction reads each once): SUM, SUM_ROWS, MEAN, ARGMAX,
  COUNT_EQUAL, POOL_1D, POOL_2D 1.

Every other op (GET_ROWS, SET_ROWS, CPY, CONT, DUP, VIEW, RESHAPE, PERMUTE, TRANSPOSE,
CONCAT, REPEAT, PAD, IM2COL, ARGSORT, TOP_K, ...) moves or views data: no FLOPs.
FLASH_ATTN_EXT counts every KV cell of the graph (n_kv: llama.cpp's KV window, padded);
ggml's CPU kernel skips the cells its mask hides (a token's future, other sequences), so
where much of the window is masked its achieved GFLOP/s is an upper bound.

Bytes moved: the bytes each source is really read for (edges' src_bytes_read: GET_ROWS the
rows it gathers) plus the output's bytes written (a lower bound: caches may read some twice,
or not at all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from ..runformat.memory_sources import VIEW_OPS, bytes_read
from ..runformat.reader import Run
from .breakdowns import timed_totals

Shape = tuple[float, float, float, float]  # ne0..ne3
Formula = Callable[[Shape, Mapping[int, Shape]], float]
_NONE: Shape = (0.0, 0.0, 0.0, 0.0)


def _elements(shape: Shape) -> float:
    return shape[0] * shape[1] * shape[2] * shape[3]


def _per_element(flops: float) -> Formula:
    return lambda dst, srcs: flops * _elements(dst)


def _per_source_element(flops: float) -> Formula:
    return lambda dst, srcs: flops * _elements(srcs.get(0, _NONE))


def _flash_attention(dst: Shape, srcs: Mapping[int, Shape]) -> float:
    q, k, v = srcs.get(0, _NONE), srcs.get(1, _NONE), srcs.get(2, _NONE)
    cells = k[1] * q[1] * q[2] * q[3]  # (KV cells) x (queries) x (heads) x (batches)
    return (2 * q[0] + 2 * v[0] + 5) * cells


def _conv_transpose_1d(dst: Shape, srcs: Mapping[int, Shape]) -> float:
    kernel, data = srcs.get(0, _NONE), srcs.get(1, _NONE)
    return 2 * kernel[0] * kernel[1] * kernel[2] * data[0]


def _conv_transpose_2d(dst: Shape, srcs: Mapping[int, Shape]) -> float:
    kernel, data = srcs.get(0, _NONE), srcs.get(1, _NONE)
    return 2 * kernel[0] * kernel[1] * kernel[2] * kernel[3] * data[0] * data[1] * data[3]


FORMULAS: dict[str, Formula] = {
    "MUL_MAT": lambda dst, srcs: 2 * srcs.get(0, _NONE)[0] * _elements(dst),
    "MUL_MAT_ID": lambda dst, srcs: 2 * srcs.get(0, _NONE)[0] * _elements(dst),
    "OUT_PROD": lambda dst, srcs: 2 * srcs.get(0, _NONE)[1] * _elements(dst),
    "FLASH_ATTN_EXT": _flash_attention,
    "CONV_2D": lambda dst, srcs: 2 * srcs.get(0, _NONE)[0] * srcs.get(0, _NONE)[1] * srcs.get(0, _NONE)[2]
    * _elements(dst),
    "CONV_2D_DW": lambda dst, srcs: 2 * srcs.get(0, _NONE)[0] * srcs.get(0, _NONE)[1] * _elements(dst),
    "CONV_TRANSPOSE_1D": _conv_transpose_1d,
    "CONV_TRANSPOSE_2D": _conv_transpose_2d,
    "SSM_CONV": lambda dst, srcs: 2 * srcs.get(1, _NONE)[0] * _elements(dst),
    "SSM_SCAN": lambda dst, srcs: 9 * srcs.get(0, _NONE)[0] * _elements(srcs.get(1, _NONE)),
    **{op: (lambda dst, srcs: 4 * srcs.get(0, _NONE)[0] * _elements(srcs.get(0, _NONE)))
       for op in ("RWKV_WKV6", "RWKV_WKV7", "GATED_LINEAR_ATTN")},
    "SOFT_MAX": _per_element(5),
    **{op: _per_element(3) for op in ("RMS_NORM", "L2_NORM", "ROPE")},
    **{op: _per_element(5) for op in ("NORM", "GROUP_NORM", "GLU", "UNARY")},
    **{op: _per_element(1) for op in ("ADD", "SUB", "MUL", "DIV", "SCALE", "ADD_ID", "ACC", "SQR", "SQRT", "LOG",
                                      "SIN", "COS", "CLAMP", "ADD1")},
    **{op: _per_source_element(1) for op in ("SUM", "SUM_ROWS", "MEAN", "ARGMAX", "COUNT_EQUAL", "POOL_1D",
                                             "POOL_2D")},
}  # fmt: skip


def op_flops(op: str, dst: Shape, srcs: Mapping[int, Shape]) -> float:
    """The FLOPs of one node of `op` (FORMULAS; 0 for an op that moves or views data)."""
    formula = FORMULAS.get(op)
    return float(formula(dst, srcs)) if formula is not None else 0.0


def _source_shapes(edges: pd.DataFrame) -> dict[tuple[int, int], dict[int, Shape]]:
    """Per node (structure, index): its sources' shapes by slot."""
    shapes: dict[tuple[int, int], dict[int, Shape]] = {}
    columns = ("structure_id", "node_index", "src_slot", "ne0", "ne1", "ne2", "ne3")
    for structure, index, slot, *shape in zip(*(edges[c].to_numpy() for c in columns), strict=True):
        shapes.setdefault((int(structure), int(index)), {})[int(slot)] = tuple(float(n) for n in shape)  # type: ignore[assignment]
    return shapes


def node_costs(run: Run) -> pd.DataFrame:
    """Per node of each graph structure: op, flops and bytes moved."""
    tensors = run.raw("tensors").set_index("tensor_id")
    shape_columns = ["ne0", "ne1", "ne2", "ne3"]
    nodes = run.raw("structure_nodes").join(tensors[["op_base", *shape_columns, "nbytes"]], on="tensor_id")
    raw_edges = run.raw("edges")
    edges = raw_edges.assign(read=bytes_read(raw_edges, run.raw("structure_nodes"), run.raw("tensors")))
    edges = edges.join(tensors[shape_columns], on="src_tensor_id")
    read = edges.groupby(["structure_id", "node_index"])["read"].sum()
    keys = pd.MultiIndex.from_frame(nodes[["structure_id", "node_index"]])
    op = nodes["op_base"].to_numpy(object)
    sources = _source_shapes(edges)
    dst = nodes[shape_columns].to_numpy(np.float64)
    flops = np.zeros(len(nodes))
    for row, (name, structure, index) in enumerate(zip(op, nodes["structure_id"], nodes["node_index"], strict=True)):
        if name in FORMULAS:
            flops[row] = op_flops(name, tuple(dst[row]), sources.get((int(structure), int(index)), {}))
    moved = read.reindex(keys).fillna(0).to_numpy(np.float64) + nodes["nbytes"].to_numpy(np.float64)
    moved[np.isin(op, VIEW_OPS)] = 0.0  # views move nothing
    return pd.DataFrame({"structure_id": nodes["structure_id"], "node_index": nodes["node_index"], "op": op,
                         "flops": flops, "bytes": moved})  # fmt: skip


def throughput_by_op(run: Run) -> pd.DataFrame:
    """Per op over the timed node events: time, GFLOP, GB moved, achieved GFLOP/s and GB/s,
    and arithmetic intensity (FLOPs per byte)."""
    costs = node_costs(run)
    totals = timed_totals(run)[["structure_id", "node_index", "op", "timed", "time_ns"]]
    events = totals.merge(costs.drop(columns="op"), on=["structure_id", "node_index"])
    events = events.assign(flops=events["flops"] * events["timed"], bytes=events["bytes"] * events["timed"])
    table = events.groupby("op")[["time_ns", "flops", "bytes"]].sum()
    seconds = table["time_ns"].astype(np.float64) / 1e9
    table["gflop_per_s"] = (table["flops"] / 1e9 / seconds).where(seconds > 0)
    table["gb_per_s"] = (table["bytes"] / 1e9 / seconds).where(seconds > 0)
    table["flops_per_byte"] = (table["flops"] / table["bytes"]).where(table["bytes"] > 0)
    return table.sort_values("time_ns", ascending=False).reset_index()
