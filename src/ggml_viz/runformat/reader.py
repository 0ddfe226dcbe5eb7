"""Opens a run directory: `ggml_viz.open(path)` gives a `Run` with pandas tables.

A Run reads its tables as stored (stored.py) and gives them described and joined: each node
event with its tensor's description and its layer, each edge with the bytes it read and where
they live, the tokens of each graph, the node totals with the GPU's times where it timed them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .captures import decode_tensor
from .experts import expert_nodes, expert_reads, expert_table, routing_rows
from .labels import node_labels, structure_labels
from .memory_sources import buffer_kinds, buffer_seen_times, bytes_read, edge_memory
from .schema import CAPTURES_FILE, NO_ID
from .stored import StoredRun
from .totals import GRAPH_OP_TOTALS, NODE_TOTALS, TOTALS_SCHEMAS, connect, gpu_totals, traced_graph_weights


def open_run(path: str | os.PathLike[str]) -> Run:
    """Open the run at `path` (a `NAME.ggmlviz` directory); RunFormatError if it is not one.
    (A folder holding only a native program's spool is not a run yet: ggml_viz.open, and every
    command, collect it first: capture/preload/opening.py.)"""
    return Run(Path(path))


@dataclass(frozen=True)
class GpuTimer:
    """What timed a run's GPU nodes (the manifest's gpu.timer): how ggml names its devices, and
    where the times come from, in words."""

    backend: str  # ggml's backend name before a device's number: "CUDA" (CUDA0), "Vulkan" (Vulkan0)
    source: str  # "CUPTI kernel records", "Vulkan timestamp queries"
    agent: str  # what attaches and keeps the records: "CUPTI", "the Vulkan layer"

    def device_name(self, device: int) -> str:
        """A device as ggml names it: CUPTI numbers CUDA devices by their ordinal, the layer
        Vulkan devices in the order the program created them (with one device: Vulkan0)."""
        return f"{self.backend}{device}"


GPU_TIMERS = {
    "cupti": GpuTimer("CUDA", "CUPTI kernel records", "CUPTI"),
    "vulkan": GpuTimer("Vulkan", "Vulkan timestamp queries", "the Vulkan layer"),
}


def gpu_timer_of(manifest: dict[str, Any]) -> GpuTimer:
    """The run's GPU timer (a run recorded before Vulkan was timed: CUPTI)."""
    return GPU_TIMERS.get(str((manifest.get("gpu") or {}).get("timer") or "cupti"), GPU_TIMERS["cupti"])


class Run(StoredRun):
    """A recorded run: its manifest and its tables, joined into readable DataFrames."""

    def duckdb(self) -> Any:
        """A DuckDB connection whose views are this run's tables (`nodes`, `edges`, `graphs`,
        `node_totals`, ..., `raw_*`: see sql.py), over its files: a query over the
        node events of a run of any length streams them in DuckDB, in bounded memory.
        `run.duckdb().sql("select op, sum(duration_ns) from nodes group by op").df()` (or
        `.pl()`, `.arrow()`); close it when done."""
        from .sql import connect_runs  # (DuckDB, imported only when asked for)

        return connect_runs(self)

    @cached_property
    def node_totals(self) -> pd.DataFrame:
        """Per (phase, structure_id, node_index): the timed events, their time and wait
        summed, with the node's description (name, op, layer, ...) and how many graphs ran
        that structure in that phase. Every aggregate over node events is one over these
        rows (see runformat/totals.py): stored with a closed run, else computed streaming.
        `est_ns`: the time of all those graphs' events, estimated where only some were timed (a
        GPU node: its traced graphs' mean times `graphs`); `time_ns` where the host timed them."""
        totals = self._totals[NODE_TOTALS].to_pandas()
        graphs = self.graphs.groupby(["phase", "structure_id"]).size().rename("graphs").reset_index()
        structure = self.raw("structure_nodes")
        structure = structure.assign(label=node_labels(structure, self.raw("edges"), self.tensors))
        totals = graphs.merge(structure, on="structure_id").merge(
            totals, on=["phase", "structure_id", "node_index"], how="left"
        )
        totals = totals.fillna({"timed": 0, "time_ns": 0, "waits_seen": 0}).astype(
            {"timed": "int64", "time_ns": "int64", "waits_seen": "int64"}
        )
        totals["wait_ns"] = totals["wait_ns"].astype("Int64")
        totals["layer"] = totals["layer"].where(totals["layer"] != NO_ID).astype("Int32")
        totals = self._with_gpu_times(totals)
        described = self.tensors.rename(columns={"layer": "name_layer"})
        return totals.merge(described, on="tensor_id", how="left").sort_values(
            ["phase", "structure_id", "node_index"], ignore_index=True
        )

    def _with_gpu_times(self, totals: pd.DataFrame) -> pd.DataFrame:
        """Nodes a GPU computed carry the GPU's time where no host time was taken (the GPU
        timer's traced graphs: `clock` gpu); `group_end`: the last node of the fused group
        its kernels computed. `timed` and `time_ns` stay what was measured (`diff` divides
        them by the timed graphs of a phase); `est_ns` weights each structure's traced graphs
        by how many graphs of it ran (shares over the run: the prompt's two graphs of 129 are
        not half of a run's time because the timer traced them as often as the decode steps)."""
        gpu = self._gpu_totals[0].to_pandas()
        totals["clock"] = pd.Series("host", index=totals.index).where(totals["timed"] > 0)
        totals["group_end"] = totals["node_index"].astype("int64")
        totals["est_ns"] = totals["time_ns"]
        if gpu.empty:
            return totals
        merged = totals.merge(gpu, on=["phase", "structure_id", "node_index"], how="left")
        on_gpu = merged["gpu_timed"].fillna(0).gt(0).to_numpy() & (merged["timed"] == 0).to_numpy()
        merged["timed"] = np.where(on_gpu, merged["gpu_timed"].fillna(0), merged["timed"]).astype("int64")
        merged["time_ns"] = np.where(on_gpu, merged["gpu_ns"].fillna(0), merged["time_ns"]).astype("int64")
        per_graph = merged["gpu_ns"].astype("float64") / merged["traced_graphs"].astype("float64")
        estimate = (per_graph * merged["graphs"]).fillna(0).round()
        merged["est_ns"] = np.where(on_gpu, estimate, merged["est_ns"]).astype("int64")
        merged["clock"] = np.where(on_gpu, "gpu", merged["clock"])
        merged["group_end"] = np.where(on_gpu, merged["group_end_gpu"].fillna(-1), merged["group_end"]).astype("int64")
        return merged.drop(columns=["gpu_timed", "gpu_ns", "group_end_gpu", "kernels", "traced_graphs"])

    @cached_property
    def graph_op_totals(self) -> pd.DataFrame:
        """Per graph and op: the time of its timed nodes (per-step questions, such as an op
        whose time grows with the context); the GPU's time in graphs the GPU timer traced."""
        host, gpu = self._totals[GRAPH_OP_TOTALS].cast(TOTALS_SCHEMAS[GRAPH_OP_TOTALS]), self._gpu_totals[1]
        return (pa.concat_tables([host, gpu]) if gpu.num_rows else host).to_pandas()

    @cached_property
    def gpu_graph_weights(self) -> pd.Series:
        """Per graph the GPU timer traced (indexed by graph_id): how many graphs of its phase and
        structure ran per traced one (totals.traced_graph_weights), what turns sums over the
        traced graphs' kernels into estimates for the run."""
        return traced_graph_weights(self.graphs, self.raw("gpu_graphs")["graph_id"].unique().tolist())

    @cached_property
    def gpu_timer(self) -> GpuTimer:
        """What timed the run's GPU nodes: CUPTI on CUDA, or the Vulkan layer."""
        return gpu_timer_of(self.manifest)

    @cached_property
    def has_gpu_times(self) -> bool:
        """Whether the GPU timer traced graphs of this run (CUDA: CUPTI's records; Vulkan: the layer's)."""
        return len(self._table_files("gpu_node_times")) > 0 and self.arrow("gpu_node_times").num_rows > 0

    @cached_property
    def _gpu_totals(self) -> tuple[pa.Table, pa.Table]:
        """The GPU's node totals and graph-op totals (runformat/totals.gpu_totals)."""
        if not self.has_gpu_times:
            empty = pa.table({"phase": pa.array([], pa.string())})
            return empty, TOTALS_SCHEMAS[GRAPH_OP_TOTALS].empty_table()
        connection = connect()
        try:
            for table in ("gpu_node_times", "graphs", "structure_nodes", "tensors"):
                connection.register(table, self.arrow(table))
            nodes, per_graph_op = gpu_totals(connection)
        finally:
            connection.close()
        return nodes.rename_columns(
            [c if c != "group_end" else "group_end_gpu" for c in nodes.column_names]
        ), per_graph_op

    @cached_property
    def structure_labels(self) -> dict[int, str]:
        """Per structure_id: what its graphs compute, from the weights they read (labels.py)."""
        return structure_labels(self.raw("edges"), self.tensors)

    @cached_property
    def gpu_kernels(self) -> pd.DataFrame:
        """What the GPU ran while the timer traced: one row per kernel, memcpy or memset, with
        its node (-1: a copy, or a kernel that could not be attributed) and its graph's phase
        (graph_id -1, no phase: work the program started outside any traced call)."""
        kernels = self.raw("gpu_kernels")
        return kernels.merge(self.graphs[["graph_id", "phase"]], on="graph_id", how="left")

    @cached_property
    def gpu_graphs(self) -> pd.DataFrame:
        """Per traced graph and device: when the GPU worked on it, how long it was busy,
        beside the host's time for the graph (host_ns: from its start to its end)."""
        graphs = self.raw("gpu_graphs")
        host = self.graphs[["graph_id", "phase", "start_ns", "end_ns"]].rename(
            columns={"start_ns": "host_start_ns", "end_ns": "host_end_ns"}
        )
        graphs = graphs.merge(host, on="graph_id", how="left")
        graphs["host_ns"] = graphs["host_end_ns"] - graphs["host_start_ns"]
        graphs["idle_ns"] = (graphs["host_ns"] - graphs["busy_ns"]).clip(lower=0)
        return graphs

    @cached_property
    def graphs(self) -> pd.DataFrame:
        graphs = self.arrow("graphs")  # without the token lists: those are `tokens`, made from Arrow
        graphs = graphs.select([c for c in graphs.schema.names if not c.startswith("token_")]).to_pandas()
        return graphs.sort_values("graph_id", ignore_index=True)

    @cached_property
    def tensors(self) -> pd.DataFrame:
        """Each distinct tensor description once, with its buffer's name and usage."""
        tensors = self.raw("tensors")
        for column in ("layer", "buffer_id", "view_src_id"):  # NO_ID becomes <NA>
            tensors[column] = tensors[column].where(tensors[column] != NO_ID).astype("Int32")
        tensors["buffer_offset"] = tensors["buffer_offset"].where(tensors["buffer_offset"] != NO_ID).astype("Int64")
        buffers = self.buffers[["buffer", "name", "usage", "kind"]].rename(
            columns={"buffer": "buffer_id", "name": "buffer_name", "usage": "buffer_usage", "kind": "buffer_kind"}
        )
        tensors = tensors.merge(buffers, on="buffer_id", how="left")
        views = tensors[["tensor_id", "name"]].rename(columns={"tensor_id": "view_src_id", "name": "view_src"})
        return tensors.merge(views, on="view_src_id", how="left").rename(columns={"buffer_id": "buffer"})

    @cached_property
    def nodes(self) -> pd.DataFrame:
        """One row per executed node: its times (<NA> unless timed on its own), its layer
        (inferred from the graph; <NA> outside layers) and its tensor's description (with
        the layer its name suggests as `name_layer`)."""
        return self._describe_nodes(self.graphs, self.raw("node_times"))

    def nodes_of(self, graph_ids: Any, *, times: bool = True) -> pd.DataFrame:
        """The rows of `nodes` for some graphs, reading only their node times (a window of
        a long run reads the row groups it overlaps); without `times`, none (the nodes'
        descriptions alone, their times <NA>)."""
        wanted = sorted({int(g) for g in np.atleast_1d(graph_ids)})
        graphs = self.graphs[self.graphs["graph_id"].isin(wanted)]
        node_times = self.node_times_of(wanted if times else [])
        return self._describe_nodes(graphs, node_times)

    def _describe_nodes(self, graphs: pd.DataFrame, node_times: pd.DataFrame) -> pd.DataFrame:
        nodes = graphs[["graph_id", "structure_id"]].merge(self.raw("structure_nodes"), on="structure_id")
        nodes = nodes.drop(columns="structure_id")
        times = node_times.astype({"start_ns": "Int64", "end_ns": "Int64", "wait_ns": "Int64"})
        nodes = nodes.merge(times, on=["graph_id", "node_index"], how="left")
        nodes["timed"] = nodes["start_ns"].notna()
        nodes["layer"] = nodes["layer"].where(nodes["layer"] != NO_ID).astype("Int32")
        nodes = nodes.merge(self.tensors.rename(columns={"layer": "name_layer"}), on="tensor_id", how="left")
        nodes["duration_ns"] = nodes["end_ns"] - nodes["start_ns"]
        columns = ["graph_id", "node_index", "start_ns", "end_ns", "tensor_id", "timed"]
        nodes = nodes[columns + [c for c in nodes.columns if c not in columns]]
        return nodes.sort_values(["graph_id", "node_index"], ignore_index=True)

    @cached_property
    def edges(self) -> pd.DataFrame:
        """One row per (node, source): the graph's edges, sources described."""
        return self._describe_edges(self.graphs, self.raw("edges"))

    @cached_property
    def structure_edges(self) -> pd.DataFrame:
        """`edges` once per graph structure rather than per graph (every graph of a structure
        reads the same sources): structure_id in place of graph_id."""
        graphs = self.graphs.drop_duplicates("structure_id")
        return self._describe_edges(graphs, self.raw("edges")).drop(columns="graph_id")

    def edges_of_graphs(self, graph_ids: Any, node_index: int | None = None) -> pd.DataFrame:
        """The rows of `edges` for some graphs (or one node of each), without building them all."""
        graphs = self.graphs[self.graphs["graph_id"].isin([int(g) for g in np.atleast_1d(graph_ids)])]
        edges = self.raw("edges")
        edges = edges[edges["structure_id"].isin(graphs["structure_id"])]
        if node_index is not None:
            edges = edges[edges["node_index"] == node_index]
        return self._describe_edges(graphs, edges)

    def edges_of(self, graph_id: int, node_index: int | None = None) -> pd.DataFrame:
        """The rows of `edges` for one graph (or one node of it)."""
        return self.edges_of_graphs([graph_id], node_index)

    def _describe_edges(self, graphs: pd.DataFrame, raw_edges: pd.DataFrame) -> pd.DataFrame:
        sources = self.tensors.rename(columns=lambda c: f"src_{c}" if c != "tensor_id" else "src_tensor_id")
        sources = sources.rename(columns={"src_buffer_usage": "src_usage"})
        graphs = graphs[["graph_id", "context_id", "structure_id"]]
        raw_edges = raw_edges.assign(
            src_bytes_read=bytes_read(raw_edges, self.raw("structure_nodes"), self.raw("tensors"))
        )
        edges = graphs.merge(raw_edges, on="structure_id").merge(sources, on="src_tensor_id", how="left")
        model_paths = {c["context_id"]: (c.get("model") or {}).get("path") for c in self.manifest.get("contexts", [])}
        edges = edge_memory(edges, self.memory_map, model_paths)
        return edges.sort_values(["graph_id", "node_index", "src_slot"], ignore_index=True)

    @cached_property
    def values(self) -> pd.DataFrame:
        """--values stats: per node event, statistics of its output (min, max, mean, std,
        mean_abs over the finite values; counts of NaN and Inf), with the node's name and op."""
        values = self.raw("node_values")
        nodes = self.nodes_of(values["graph_id"].unique())[["graph_id", "node_index", "name", "op", "layer"]]
        return values.merge(nodes, on=["graph_id", "node_index"], how="left").sort_values(
            ["graph_id", "node_index"], ignore_index=True
        )

    @cached_property
    def captures(self) -> pd.DataFrame:
        """--capture: the captured tensors (graph, node, name, type, shape, bytes)."""
        return self.raw("captures").sort_values(["graph_id", "node_index"], ignore_index=True)

    def captured(self, graph_id: int, node_index: int) -> np.ndarray:
        """A captured tensor's values as float32, shaped (ne3, ne2, ne1, ne0): for kq_soft_max,
        (1, heads, queries, keys)."""
        rows = self.captures[(self.captures["graph_id"] == graph_id) & (self.captures["node_index"] == node_index)]
        if rows.empty:
            raise KeyError((graph_id, node_index))
        row = rows.iloc[0]
        with open(self.path / CAPTURES_FILE, "rb") as file:
            file.seek(int(row["offset"]))
            data = file.read(int(row["nbytes"]))
        shape = tuple(int(row[f"ne{d}"]) for d in (3, 2, 1, 0))
        return decode_tensor(data, str(row["type"]), shape)

    @cached_property
    def memory_map(self) -> pd.DataFrame:
        """The model file's byte layout: one row per region (header, metadata, tensor, padding, ...)."""
        return self.raw("memory_map")

    @cached_property
    def buffers(self) -> pd.DataFrame:
        """Each backend buffer: name, usage, size, kind, and when graphs used it."""
        buffers = self.raw("buffers")
        tensors = self.raw("tensors")
        buffers["kind"] = buffer_kinds(buffers, tensors)
        seen = buffer_seen_times(self.graphs, self.raw("structure_nodes"), self.raw("edges"), tensors)
        buffers = buffers.merge(seen, on="buffer_id", how="left")
        for column in ("first_seen_ns", "last_seen_ns"):
            buffers[column] = buffers[column].astype("Int64")
        buffers["buffer_id"] = buffers["buffer_id"].astype("Int32")
        return buffers.rename(columns={"buffer_id": "buffer"}).sort_values("buffer", ignore_index=True)

    @cached_property
    def moe_routing(self) -> pd.DataFrame:
        """Mixture-of-experts models: per graph, MoE layer, token of the batch and slot, the expert
        chosen and its weight, with the graph's phase, the layer, the token's position and
        sequence (experts.routing_rows). Empty for a dense model."""
        return routing_rows(self.raw("moe_routing"), self.graphs, self.tokens, self.raw("structure_nodes"))

    @cached_property
    def expert_nodes(self) -> pd.DataFrame:
        """Each node of each structure that reads experts by ids (MUL_MAT_ID, ADD_ID), with the weight
        it reads and one expert's slice of it in bytes (experts.expert_nodes)."""
        return expert_nodes(self.raw("structure_nodes"), self.raw("edges"), self.raw("tensors"))

    @cached_property
    def expert_reads(self) -> pd.DataFrame:
        """Per graph with routing and node reading experts by ids: the experts its batch chose, and
        the bytes of its weight that reads (experts.expert_reads)."""
        return expert_reads(self.raw("moe_routing"), self.graphs, self.expert_nodes)

    @cached_property
    def moe_experts(self) -> pd.DataFrame:
        """Per MoE layer and expert: tokens routed, weight mass, bytes read, estimated share of
        the layer's expert time (experts.expert_table)."""
        return expert_table(self.moe_routing, self.expert_reads, self.expert_nodes, self.graphs, self.raw("node_times"))

    @cached_property
    def tokens(self) -> pd.DataFrame:
        """One row per token of each graph's batch (stored as lists on the graph's row)."""
        columns = {
            "token_ids": "token_id",
            "token_positions": "pos",
            "token_seq_ids": "seq_id",
            "token_outputs": "output",
            "token_texts": "text",
        }
        graphs = self.arrow("graphs")
        lists = graphs.column("token_ids").combine_chunks()
        graph_of = pc.list_parent_indices(lists).to_numpy()  # each token's graph row
        starts = np.concatenate(([0], np.cumsum(pc.list_value_length(lists).fill_null(0).to_numpy())))
        tokens = pd.DataFrame(
            {
                "graph_id": graphs.column("graph_id").to_numpy()[graph_of],
                "batch_index": token_batch_indexes(graphs, graph_of, np.arange(len(graph_of)) - starts[graph_of]),
                **{
                    name: pc.list_flatten(graphs.column(stored).combine_chunks()).to_numpy(zero_copy_only=False)
                    for stored, name in columns.items()
                },
            }
        )
        types = {
            "graph_id": "int32",
            "batch_index": "int32",
            "pos": "int32",
            "token_id": "int32",
            "seq_id": "int32",
            "output": "bool",
            "text": "str",
        }
        tokens = tokens[list(types)].astype(types)
        return tokens.sort_values(["graph_id", "batch_index"], ignore_index=True)


def token_batch_indexes(graphs: pa.Table, graph_of: np.ndarray, in_list: np.ndarray) -> np.ndarray:
    """Each token's index in its llama_decode batch (the tokens of `graphs`' lists, flattened:
    their graph's row and place in its list): as stored, or, in a run recorded before the
    indexes were kept, its graph's first index plus its place (a ubatch taken in the batch's order)."""
    indexes = graphs.column("first_batch_index").to_numpy()[graph_of].astype(np.int64) + in_list
    if "token_batch_indexes" in graphs.schema.names:
        stored = graphs.column("token_batch_indexes").combine_chunks()
        kept = pc.is_valid(stored).to_numpy(zero_copy_only=False)[graph_of]
        if kept.any():
            indexes[kept] = pc.list_flatten(stored).to_numpy()
    return indexes
