"""A node's details (GET .../node), shared by the timeline, the graph and the event log: its description
and times, each source and where its bytes live, its --values stats and its GPU time."""

from __future__ import annotations

from functools import cached_property
from typing import TypedDict, cast

import numpy as np
import pandas as pd

from ...runformat.schema import NO_ID
from ..context import RunContext, json_safe, shape_text
from ..gpu import GpuRun
from ..payloads import NodePayload, NodeSource, NodeTensor, NodeValues
from .experts import node_routing


class NodeDetails:
    """The details of one run's nodes (read from a node's graph alone)."""

    def __init__(self, context: RunContext, gpu: GpuRun | None) -> None:
        self.context = context
        self.gpu = gpu

    def of_event(self, event: int) -> NodePayload:
        """Everything about one node event, with each source and where its bytes live."""
        context = self.context
        row = int(np.searchsorted(context.graph_first_event, event, side="right")) - 1
        graph_id, node_index = int(context.graphs["graph_id"].iloc[row]), event - int(context.graph_first_event[row])
        node = context.run.nodes_of(graph_id)
        node = node[node["node_index"] == node_index].iloc[0]
        timed = bool(node["timed"])
        sources: list[NodeSource] = []
        for edge in context.run.edges_of(graph_id, node_index).itertuples():
            sources.append(
                {
                    "slot": int(edge.src_slot),
                    "name": edge.src_name,
                    "op": edge.src_op,
                    "type": edge.src_type,
                    "shape": shape_text(edge.src_ne0, edge.src_ne1, edge.src_ne2, edge.src_ne3),
                    "nbytes": int(edge.src_nbytes),
                    "usage": edge.src_usage,
                    "memory": edge.memory,
                    "buffer": None if pd.isna(edge.src_buffer_name) else edge.src_buffer_name,
                    "file_offset": None if pd.isna(edge.file_offset) else int(edge.file_offset),
                    "buffer_offset": None if pd.isna(edge.buffer_offset) else int(edge.buffer_offset),
                }
            )
        where: _NodeWhere = {
            "event": int(event),
            "graph_id": graph_id,
            "node_index": node_index,
            "start_ns": int(node["start_ns"]) - context.origin_ns if timed else None,
            "end_ns": int(node["end_ns"]) - context.origin_ns if timed else None,
            "tokens": context.graph_text(row),
        }
        layer = None if pd.isna(node["layer"]) else int(node["layer"])  # from the graph
        values = self._values_of(graph_id, node_index)
        gpu = self.gpu.node_time(graph_id, node_index) if self.gpu is not None else None
        routing = node_routing(context, graph_id, node_index)
        if not len(context.tensors):
            # Not provable: a run whose tensors table holds no row yet (a live run read before
            # its first) cannot describe the node's tensor, and its answer lacks those fields.
            return cast(
                NodePayload,
                {**where, "layer": layer, "sources": sources, "values": values, "gpu": gpu, "routing": routing},
            )
        tensor = _describe_tensor(context.tensors.iloc[int(node["tensor_id"])], self._buffer_names)
        return {**where, **tensor, "layer": layer, "sources": sources, "values": values, "gpu": gpu, "routing": routing}

    @cached_property
    def _values(self) -> pd.DataFrame:
        return self.context.run.raw("node_values").set_index(["graph_id", "node_index"]).sort_index()

    def _values_of(self, graph_id: int, node_index: int) -> NodeValues | None:
        """--values stats of one node event, if the run has them."""
        if (graph_id, node_index) not in self._values.index:
            return None
        row = self._values.loc[(graph_id, node_index)]
        return json_safe({column: row[column].item() for column in self._values.columns})

    @cached_property
    def _buffer_names(self) -> dict[int, str]:
        buffers = self.context.run.raw("buffers")
        return dict(zip(buffers["buffer_id"].tolist(), buffers["name"].tolist(), strict=True))


class _NodeWhere(TypedDict):
    """The first of a node's details: which event it is, when and for which tokens."""

    event: int
    graph_id: int
    node_index: int
    start_ns: int | None
    end_ns: int | None
    tokens: str


def _describe_tensor(tensor: pd.Series, buffer_names: dict[int, str]) -> NodeTensor:
    buffer = int(tensor["buffer_id"])
    return {
        "name": tensor["name"],
        "op": tensor["op"],
        "op_base": tensor["op_base"],
        "type": tensor["type"],
        "shape": shape_text(tensor["ne0"], tensor["ne1"], tensor["ne2"], tensor["ne3"]),
        "nbytes": int(tensor["nbytes"]),
        "buffer": buffer_names.get(buffer) if buffer != NO_ID else None,
        "buffer_offset": None if tensor["buffer_offset"] == NO_ID else int(tensor["buffer_offset"]),
    }
