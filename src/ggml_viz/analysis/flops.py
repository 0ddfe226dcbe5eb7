"""Work per node: floating-point operations and bytes moved, and what the run achieved.

Counts follow the usual conventions and are estimates for element-wise ops:
MUL_MAT 2·K·N·M (a multiply and an add per term), ADD/MUL/SCALE one per output element,
RMS_NORM and NORM three, SOFT_MAX five (max, subtract, exp, sum, divide), ROPE three,
GLU/UNARY (SWIGLU, SILU, GELU) five. Bytes moved: the bytes each source is really read for
(edges' src_bytes_read: GET_ROWS the rows it gathers) plus the output's bytes written (a
lower bound: caches may read some twice, or not at all).
Ops that only move or view data (GET_ROWS, CPY, CONT, SET_ROWS, VIEW, ...) do no FLOPs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..runformat.memory_sources import VIEW_OPS, bytes_read
from ..runformat.reader import Run
from .breakdowns import timed_totals

FLOPS_PER_ELEMENT = {"ADD": 1, "MUL": 1, "SUB": 1, "DIV": 1, "SCALE": 1, "RMS_NORM": 3, "NORM": 3, "SOFT_MAX": 5,
                     "ROPE": 3, "GLU": 5, "UNARY": 5}  # fmt: skip


def node_costs(run: Run) -> pd.DataFrame:
    """Per node of each graph structure: op, flops and bytes moved."""
    tensors = run.raw("tensors").set_index("tensor_id")
    nodes = run.raw("structure_nodes").join(tensors[["op_base", "ne0", "ne1", "ne2", "ne3", "nbytes"]], on="tensor_id")
    raw_edges = run.raw("edges")
    edges = raw_edges.assign(read=bytes_read(raw_edges, run.raw("structure_nodes"), run.raw("tensors")))
    edges = edges.join(tensors[["ne0"]], on="src_tensor_id")
    read = edges.groupby(["structure_id", "node_index"])["read"].sum()
    k = edges[edges["src_slot"] == 0].set_index(["structure_id", "node_index"])["ne0"]
    keys = pd.MultiIndex.from_frame(nodes[["structure_id", "node_index"]])
    elements = (nodes["ne0"] * nodes["ne1"] * nodes["ne2"] * nodes["ne3"]).to_numpy(np.float64)
    op = nodes["op_base"].to_numpy(object)
    flops = np.array([FLOPS_PER_ELEMENT.get(o, 0) for o in op], dtype=np.float64) * elements
    is_matmul = op == "MUL_MAT"
    flops[is_matmul] = 2.0 * k.reindex(keys).fillna(0).to_numpy(np.float64)[is_matmul] * elements[is_matmul]
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
