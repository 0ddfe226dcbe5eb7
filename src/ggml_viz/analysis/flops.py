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
FLASH_ATTN_EXT's formula counts every KV cell of the graph (n_kv: llama.cpp's KV window,
padded); ggml's kernels skip the cells its mask hides (a token's future, other sequences).
With a mask and the graph's tokens known, a run's figures count the cells a causal mask lets
each query attend instead: a token at position p, its sequence's p + 1 (attended_flops); a
sliding-window layer attends fewer, so there they are still an upper bound. Without the
tokens (another ggml program) they count the whole window and are marked upper bounds.

Bytes moved: the bytes each source is really read for (edges' src_bytes_read: GET_ROWS the
rows it gathers) plus the output's bytes written (SET_ROWS: the rows of src0 it writes, not its
whole destination); a lower bound: caches may read some twice, or not at all. A run's figures
charge a node reading experts by ids (MUL_MAT_ID) the experts its tokens chose, where the
routing was recorded (routed_bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..runformat.memory_sources import VIEW_OPS, bytes_read
from ..runformat.reader import Run
from .breakdowns import timed_totals

Shape = tuple[float, float, float, float]  # ne0..ne3
Formula = Callable[[Shape, Mapping[int, Shape]], float]
_NONE: Shape = (0.0, 0.0, 0.0, 0.0)


class ThroughputRow(TypedDict):
    """Work done over a time, and the rates achieved (throughput_by_op's columns but its op; the
    roofline's rows, roofline.roofline_by)."""

    time_ns: int
    flops: float
    bytes: float
    upper_bound: bool  # the FLOPs count every cell of an attention window its mask may have skipped
    gflop_per_s: float | None
    gb_per_s: float | None
    flops_per_byte: float | None


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
    written = nodes["nbytes"].to_numpy(np.float64)
    # SET_ROWS writes src0's rows into its output, a view of the whole destination (a KV cache)
    set_rows = np.flatnonzero(op == "SET_ROWS")
    if len(set_rows):
        per_element = written[set_rows] / np.maximum(dst[set_rows].prod(axis=1), 1)
        rows_in = [
            np.prod(
                sources.get((int(nodes["structure_id"].iat[i]), int(nodes["node_index"].iat[i])), {}).get(
                    0, (0, 0, 0, 0)
                )
            )
            for i in set_rows
        ]
        written[set_rows] = per_element * np.asarray(rows_in, np.float64)
    moved = read.reindex(keys).fillna(0).to_numpy(np.float64) + written
    moved[np.isin(op, VIEW_OPS)] = 0.0  # views move nothing
    # FLASH_ATTN_EXT with a mask (slot 3): its queries and KV window, for attended_flops
    masked = np.zeros(len(nodes), bool)
    cells = np.full(len(nodes), np.nan)
    for flash in np.flatnonzero(op == "FLASH_ATTN_EXT"):
        shapes = sources.get((int(nodes["structure_id"].iat[flash]), int(nodes["node_index"].iat[flash])), {})
        masked[flash] = 3 in shapes
        cells[flash] = shapes.get(1, _NONE)[1] * shapes.get(0, _NONE)[1]  # window x queries (per head and batch)
    return pd.DataFrame(
        {
            "structure_id": nodes["structure_id"],
            "node_index": nodes["node_index"],
            "op": op,
            "flops": flops,
            "bytes": moved,
            "masked": masked,
            "window_cells": cells,
        }
    )


def causal_cells(run: Run) -> pd.DataFrame:
    """Per (phase, structure_id): `cells`, the KV cells a causal mask lets the graphs' queries
    attend, per graph on average: a token at position p attends its sequence's p + 1 cells; NaN
    where some graph of the group has no tokens recorded (another ggml program's)."""
    graphs = run.arrow("graphs").select(["phase", "structure_id", "token_positions"])
    positions = graphs.column("token_positions").combine_chunks()
    lengths = pc.list_value_length(positions).fill_null(0).to_numpy().astype(np.float64)
    flat = pc.list_flatten(positions).to_numpy(zero_copy_only=False).astype(np.float64)
    parents = pc.list_parent_indices(positions).to_numpy()
    attended = np.bincount(parents, weights=flat + 1, minlength=len(lengths)) if len(flat) else np.zeros(len(lengths))
    frame = pd.DataFrame(
        {
            "phase": graphs.column("phase").to_pandas(),
            "structure_id": graphs.column("structure_id").to_numpy(),
            "cells": np.where(lengths > 0, attended, np.nan),
        }
    )
    return frame.groupby(["phase", "structure_id"], as_index=False)["cells"].agg(lambda c: c.mean(skipna=False))


def attended_flops(run: Run, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (node_costs joined to node totals: phase, structure_id, flops, masked, window_cells)
    with a masked FLASH_ATTN_EXT's FLOPs counted over the cells its causal mask lets it attend
    (ggml's kernels skip the masked ones), and `upper_bound` True where that is not known: it
    counts every cell of the window (no tokens recorded; sliding-window layers attend fewer)."""
    flash = (rows["op"] == "FLASH_ATTN_EXT").to_numpy() if "op" in rows else np.zeros(len(rows), bool)
    rows = rows.assign(upper_bound=flash)
    if not flash.any():
        return rows
    cells = rows[["phase", "structure_id"]].merge(causal_cells(run), on=["phase", "structure_id"], how="left")["cells"]
    known = flash & rows["masked"].fillna(False).to_numpy(bool) & cells.notna().to_numpy()
    window = rows["window_cells"].to_numpy(np.float64)
    share = np.ones(len(rows))
    share[known] = np.minimum(cells.to_numpy()[known], window[known]) / np.maximum(window[known], 1)
    return rows.assign(flops=rows["flops"] * share, upper_bound=flash & ~known & rows["masked"].fillna(False))


def routed_bytes(run: Run, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (node_costs joined to node totals: phase, structure_id, node_index, bytes) with a
    node that reads experts by ids (MUL_MAT_ID, ADD_ID) charged the experts its graphs' tokens
    chose, on average over the graphs whose routing was recorded (run.expert_reads), instead of
    every expert of its weight; `all_experts` True where no routing says which."""
    rows = rows.assign(all_experts=False)
    by_ids = run.expert_nodes
    if by_ids.empty:
        return rows
    keys = ["structure_id", "node_index"]
    full = by_ids.assign(full_bytes=by_ids["slice_bytes"] * by_ids["n_expert"])[[*keys, "full_bytes"]]
    reads = run.expert_reads.merge(run.graphs[["graph_id", "phase"]], on="graph_id")
    chosen = reads.groupby(["phase", *keys], as_index=False)["bytes_read"].mean()
    joined = rows[["phase", *keys]].merge(full, on=keys, how="left").merge(chosen, on=["phase", *keys], how="left")
    experts = joined["full_bytes"].notna().to_numpy()
    known = experts & joined["bytes_read"].notna().to_numpy()
    adjusted = rows["bytes"].to_numpy(np.float64).copy()
    adjusted[known] += (joined["bytes_read"] - joined["full_bytes"]).to_numpy(np.float64)[known]
    return rows.assign(bytes=adjusted, all_experts=experts & ~known)


def events_work(run: Run, totals: pd.DataFrame) -> pd.DataFrame:
    """Node totals (phase, structure_id, node_index, ...) with each node's work per event: its
    node_costs, FLASH_ATTN_EXT's over the cells it attends, an expert node's bytes those of the
    experts chosen."""
    costs = node_costs(run).drop(columns="op")
    rows = totals.merge(costs, on=["structure_id", "node_index"], how="left")
    return routed_bytes(run, attended_flops(run, rows))


def throughput_by_op(run: Run) -> pd.DataFrame:
    """Per op over the timed node events: time, GFLOP, GB moved, achieved GFLOP/s and GB/s,
    and arithmetic intensity (FLOPs per byte)."""
    events = events_work(run, timed_totals(run)[["phase", "structure_id", "node_index", "op", "timed", "time_ns"]])
    events = events.assign(flops=events["flops"] * events["timed"], bytes=events["bytes"] * events["timed"])
    table = events.groupby("op").agg(
        time_ns=("time_ns", "sum"), flops=("flops", "sum"), bytes=("bytes", "sum"), upper_bound=("upper_bound", "any")
    )
    seconds = table["time_ns"].astype(np.float64) / 1e9
    table["gflop_per_s"] = (table["flops"] / 1e9 / seconds).where(seconds > 0)
    table["gb_per_s"] = (table["bytes"] / 1e9 / seconds).where(seconds > 0)
    table["flops_per_byte"] = (table["flops"] / table["bytes"]).where(table["bytes"] > 0)
    return table.sort_values("time_ns", ascending=False).reset_index()
