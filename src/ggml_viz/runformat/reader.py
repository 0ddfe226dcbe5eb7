"""Opens a run directory: `ggml_viz.open(path)` gives a `Run` with pandas tables."""

from __future__ import annotations

import json
import os
import socket
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import RunFormatError
from ..capture.log import say  # (a module of one print: the recorder's voice, and the reader's)
from . import journal
from .labels import node_labels, structure_labels
from .manifest import STATUS_COMPLETE, STATUS_INCOMPLETE, STATUS_RECORDING
from .memory_sources import buffer_kinds, buffer_seen_times, bytes_read, edge_memory
from .schema import (
    CAPTURES_FILE,
    DERIVED_COLUMNS,
    FORMAT_NAME,
    GPU_TABLES,
    GRAPH_TABLES,
    MANIFEST_FILE,
    META_EXPERIMENT_ID,
    NO_ID,
    OPTIONAL_COLUMNS,
    OPTIONAL_TABLES,
    PARQUET_SUFFIX,
    READER_SUPPORTED_VERSIONS,
    TABLES,
    stream_segments,
)
from .streams import NodeTimesSegment, node_times_segment, read_stream, read_stream_once, stream_schema
from .structure_layers import structure_layers
from .totals import (
    GRAPH_OP_TOTALS,
    NODE_TOTALS,
    TOTALS_SCHEMAS,
    compute_totals,
    connect,
    gpu_totals,
    merge_totals,
    read_totals,
    write_totals,
)

UPGRADE_NOTICE_EVENTS = 1_000_000  # an older run's first open says it sums this many node events or more


def open_run(path: str | os.PathLike[str]) -> Run:
    """Open the run at `path` (a `NAME.ggmlviz` directory); RunFormatError if it is not one.
    A run that holds only the spool a native program left (recorded with LD_PRELOAD, without
    `ggml-viz run`) is collected into the columnar run first."""
    run_dir = Path(path)
    if not (run_dir / MANIFEST_FILE).exists() and (run_dir / "spool").is_dir():
        from ..capture.collector import collect_spooled_run  # the one step back into capture

        collect_spooled_run(run_dir)
    return Run(run_dir)


class Run:
    """A recorded run: its manifest and its tables, joined into readable DataFrames."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest = _load_manifest(path)
        self.experiment_id: str = self.manifest["experiment_id"]
        for table in TABLES:  # every table there and this recording's: checked now, read when asked for
            self._check_schema(table)
        # Tables are read when first asked for: the node times of a long run are most of
        # its bytes, and a summary or a window of the timeline never reads them whole.
        self._raw: dict[str, pa.Table] = {}
        self._pandas: dict[str, pd.DataFrame] = {}  # raw()'s conversions, made once
        self._raw["graphs"], self._journal_only = self._graphs_with_journal()
        self.manifest["status"] = _effective_status(self.manifest)

    def __repr__(self) -> str:
        return f"<Run {self.path} {self.experiment_id[:8]} {self.manifest['status']}>"

    @property
    def status(self) -> str:
        return str(self.manifest["status"])

    def raw(self, table: str) -> pd.DataFrame:
        """A table exactly as stored (ids, no joins): a copy, the caller's to change."""
        if table not in self._pandas:
            self._pandas[table] = self.arrow(table).to_pandas()
        return self._pandas[table].copy()

    def arrow(self, table: str) -> pa.Table:
        """A table as stored, as Arrow (read on first use): only the rows of graphs that
        finished, with the graphs still in the journal of a run being recorded."""
        if table not in self._raw:
            data = self._read_table(table)
            if table == "structure_nodes":
                data = self._with_node_layers(data)
            if table in GRAPH_TABLES:
                # rows of finished graphs only (not the one a crash interrupted); the node
                # times of a graph only the journal held when the run was opened, from it
                finished = self._stream_graph_ids if table == "node_times" else self._raw["graphs"].column("graph_id")
                keep = pc.is_in(data.column("graph_id"), value_set=finished)
                if table in GPU_TABLES:  # and what the GPU ran outside any graph recorded
                    keep = pc.or_(keep, pc.equal(data.column("graph_id"), NO_ID))
                if not pc.all(keep).as_py():
                    data = data.filter(keep)
            if table == "node_times":
                data = pa.concat_tables([data, self._journaled_node_times])
            self._raw[table] = data
        return self._raw[table]

    def duckdb(self) -> Any:
        """A DuckDB connection whose views are this run's tables (`nodes`, `edges`, `graphs`,
        `node_totals`, ..., `raw_*`: see analysis/sql.py), over its files: a query over the
        node events of a run of any length streams them in DuckDB, in bounded memory.
        `run.duckdb().sql("select op, sum(duration_ns) from nodes group by op").df()` (or
        `.pl()`, `.arrow()`); close it when done."""
        from ..analysis.sql import connect_runs  # the one step up into analysis: its views

        return connect_runs(self)

    def dataset(self, table: str) -> Any:
        """A stored table as a `pyarrow.dataset.Dataset`, scanned lazily (filters and columns
        pushed down to the Parquet row groups): over its Parquet file, or, for a run still
        recording, over the table as read now."""
        import pyarrow.dataset as ds

        if table not in TABLES:
            raise RunFormatError(f"no table '{table}' (the tables: {', '.join(TABLES)})")
        parquet = self.path / (table + PARQUET_SUFFIX)
        return ds.dataset(parquet, format="parquet") if parquet.exists() else ds.dataset(self.arrow(table))

    @cached_property
    def node_totals(self) -> pd.DataFrame:
        """Per (phase, structure_id, node_index): the timed events, their time and wait
        summed, with the node's description (name, op, layer, ...) and how many graphs ran
        that structure in that phase. Every aggregate over node events is one over these
        rows (see runformat/totals.py): stored with a closed run, else computed streaming."""
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
        its kernels computed."""
        gpu = self._gpu_totals[0].to_pandas()
        totals["clock"] = pd.Series("host", index=totals.index).where(totals["timed"] > 0)
        totals["group_end"] = totals["node_index"].astype("int64")
        if gpu.empty:
            return totals
        merged = totals.merge(gpu, on=["phase", "structure_id", "node_index"], how="left")
        on_gpu = merged["gpu_timed"].fillna(0).gt(0).to_numpy() & (merged["timed"] == 0).to_numpy()
        merged["timed"] = np.where(on_gpu, merged["gpu_timed"].fillna(0), merged["timed"]).astype("int64")
        merged["time_ns"] = np.where(on_gpu, merged["gpu_ns"].fillna(0), merged["time_ns"]).astype("int64")
        merged["clock"] = np.where(on_gpu, "gpu", merged["clock"])
        merged["group_end"] = np.where(on_gpu, merged["group_end_gpu"].fillna(-1), merged["group_end"]).astype("int64")
        return merged.drop(columns=["gpu_timed", "gpu_ns", "group_end_gpu", "kernels"])

    @cached_property
    def graph_op_totals(self) -> pd.DataFrame:
        """Per graph and op: the time of its timed nodes (per-step questions, such as an op
        whose time grows with the context); the GPU's time in graphs the GPU timer traced."""
        host, gpu = self._totals[GRAPH_OP_TOTALS], self._gpu_totals[1]
        return (pa.concat_tables([host, gpu]) if gpu.num_rows else host).to_pandas()

    @cached_property
    def has_gpu_times(self) -> bool:
        """Whether the GPU timer traced graphs of this run (CUDA, CUPTI's records)."""
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

    def totals_table(self, name: str) -> pa.Table:
        """A totals table (NODE_TOTALS or GRAPH_OP_TOTALS) as Arrow, as stored."""
        return self._totals[name]

    @cached_property
    def _totals(self) -> dict[str, pa.Table]:
        stored = read_totals(self.path, self.experiment_id) if self.status == STATUS_COMPLETE else None
        return stored or self._compute_totals()

    def _compute_totals(self) -> dict[str, pa.Table]:
        """The totals by DuckDB, streaming the node times (a Parquet file, or the stream and
        journal of a run still recording); a closed run of an older ggml-viz keeps them."""
        parquet = self.path / ("node_times" + PARQUET_SUFFIX)
        if not parquet.exists():  # still recording (or cut short): its stream segments
            return self._totals_of_segments()
        try:
            events = pq.ParquetFile(parquet).metadata.num_rows
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFormatError(f"{parquet} cannot be read as a table: {error}") from None
        upgrading = self.status == STATUS_COMPLETE  # (else a run being closed: its totals come next)
        if upgrading and events >= UPGRADE_NOTICE_EVENTS:  # seconds per 10M events: say why the wait
            say(f"{self.path.name}: summing its {events:,} node events once (an older ggml-viz recorded it "
                f"without their totals); later opens read the stored totals")  # fmt: skip
        connection = connect()
        try:
            escaped = str(parquet).replace("'", "''")
            connection.execute(f"create view node_times as select * from read_parquet('{escaped}')")
            totals = self._totals_over(connection)
        finally:
            connection.close()
        if upgrading:
            try:  # an older run, upgraded: next time it opens without reading its events
                write_totals(self.path, totals, self.experiment_id)
            except OSError as error:
                if events >= UPGRADE_NOTICE_EVENTS:
                    say(f"{self.path.name}: its totals cannot be stored ({error.strerror or error}): "
                        f"every open sums its events again")  # fmt: skip
        return totals

    def _totals_over(self, connection: Any) -> dict[str, pa.Table]:
        for table in ("graphs", "structure_nodes", "tensors"):
            connection.register(table, self.arrow(table))
        return compute_totals(connection)

    def _totals_of_segments(self) -> dict[str, pa.Table]:
        """The totals of a run being recorded: each stream segment's, summed with its
        journal's. What a segment's batches add is summed once (streams.node_times_segment),
        so a live view reads only what is new."""
        parts = [segment.totals for segment in self._node_times_segments if segment.totals is not None]
        parts.append(self._totals_of_times(self._journaled_node_times))
        return merge_totals(parts)

    @cached_property
    def _node_times_segments(self) -> list[NodeTimesSegment]:
        """The node-times segments of a run being recorded, as far as their graphs finished."""
        finished = self._stream_graph_ids
        return [node_times_segment(path, finished, self._totals_of_times)
                for path in stream_segments(self.path, "node_times")]  # fmt: skip

    def _totals_of_times(self, times: pa.Table) -> dict[str, pa.Table]:
        connection = connect()
        try:
            connection.register("node_times", times)
            return self._totals_over(connection)
        finally:
            connection.close()

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

    def node_times_of(self, graph_ids: list[int]) -> pd.DataFrame:
        """The stored node times of some graphs (their row groups only, once closed)."""
        if not graph_ids:
            return TABLES["node_times"].empty_table().to_pandas()
        parquet = self.path / ("node_times" + PARQUET_SUFFIX)
        if "node_times" not in self._raw and not parquet.exists():
            return self._node_times_of_segments(graph_ids)
        if "node_times" in self._raw:
            times = self.arrow("node_times")
            wanted = pc.is_in(times.column("graph_id"), value_set=pa.array(graph_ids, pa.int32()))
            return times.filter(wanted).to_pandas()
        return self._node_times_of_row_groups(graph_ids)

    @cached_property
    def _node_times_row_groups(self) -> tuple[pq.ParquetFile, list[tuple[Any, Any]]]:
        """The closed run's node times file, and each row group's graph ids (min, max) from
        its footer's statistics ((None, None) where it has none)."""
        file = pq.ParquetFile(self.path / ("node_times" + PARQUET_SUFFIX))
        column = file.schema_arrow.get_field_index("graph_id")
        spans = []
        for index in range(file.metadata.num_row_groups):
            stats = file.metadata.row_group(index).column(column).statistics
            spans.append((stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None))
        return file, spans

    def _node_times_of_row_groups(self, graph_ids: list[int]) -> pd.DataFrame:
        """The node times of some graphs of a closed run: only the Parquet row groups whose
        graph ids can hold them."""
        file, spans = self._node_times_row_groups
        lo, hi = min(graph_ids), max(graph_ids)
        groups = [i for i, (first, last) in enumerate(spans) if first is None or (first <= hi and last >= lo)]
        data = file.read_row_groups(groups) if groups else file.schema_arrow.empty_table()
        data = data.filter(pc.is_in(data.column("graph_id"), value_set=pa.array(graph_ids, pa.int32())))
        return _with_optional_columns(data, "node_times").to_pandas()

    def _node_times_of_segments(self, graph_ids: list[int]) -> pd.DataFrame:
        """node_times_of a run being recorded: the stream batches that can hold those graphs,
        and the journal."""
        wanted = pa.array(graph_ids, pa.int32())
        lo, hi = min(graph_ids), max(graph_ids)
        parts = [segment.read_graphs(lo, hi) for segment in self._node_times_segments]
        parts = [_with_optional_columns(part, "node_times") for part in parts]
        parts = [part.filter(pc.is_in(part.column("graph_id"), value_set=wanted)) for part in parts]
        journaled = self._journaled_node_times
        parts.append(journaled.filter(pc.is_in(journaled.column("graph_id"), value_set=wanted)))
        return pa.concat_tables(parts).to_pandas()

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
    def tokens(self) -> pd.DataFrame:
        """One row per token of each graph's batch (stored as lists on the graph's row)."""
        columns = {"token_ids": "token_id", "token_positions": "pos", "token_seq_ids": "seq_id",
                   "token_outputs": "output", "token_texts": "text"}  # fmt: skip
        graphs = self.arrow("graphs")
        lists = graphs.column("token_ids").combine_chunks()
        graph_of = pc.list_parent_indices(lists).to_numpy()  # each token's graph row
        starts = np.concatenate(([0], np.cumsum(pc.list_value_length(lists).fill_null(0).to_numpy())))
        tokens = pd.DataFrame({
            "graph_id": graphs.column("graph_id").to_numpy()[graph_of],
            "batch_index": graphs.column("first_batch_index").to_numpy()[graph_of]
            + (np.arange(len(graph_of)) - starts[graph_of]),
            **{name: pc.list_flatten(graphs.column(stored).combine_chunks()).to_numpy(zero_copy_only=False)
               for stored, name in columns.items()},
        })  # fmt: skip
        types = {"graph_id": "int32", "batch_index": "int32", "pos": "int32", "token_id": "int32",
                 "seq_id": "int32", "output": "bool", "text": "str"}  # fmt: skip
        tokens = tokens[list(types)].astype(types)
        return tokens.sort_values(["graph_id", "batch_index"], ignore_index=True)

    def _graphs_with_journal(self) -> tuple[pa.Table, list[tuple[dict[str, Any], dict[str, np.ndarray]]]]:
        """The graphs table, with the graphs a run still open (or cut short) keeps only in
        its journal; and those journal records (row, node times)."""
        graphs = self._read_table("graphs")
        known = set(graphs.column("graph_id").to_pylist())
        records = [record for record in journal.read(self.path / journal.JOURNAL_FILE)
                   if record[0].get("graph_id") not in known]  # fmt: skip
        if not records:
            return graphs, records
        try:
            rows = pa.Table.from_pylist([row for row, _ in records], schema=graphs.schema)
            return pa.concat_tables([graphs, rows]), records
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as error:
            raise RunFormatError(f"{self.path}: the graph journal is damaged ({error})") from None

    @cached_property
    def _stream_graph_ids(self) -> pa.Array:
        """The graphs whose rows the tables held when the run was opened (not those only in
        its journal): their node times come from the tables."""
        journaled = pa.array([row["graph_id"] for row, _ in self._journal_only], pa.int32())
        graph_id = self._raw["graphs"].column("graph_id")
        return graph_id.filter(pc.invert(pc.is_in(graph_id, value_set=journaled)))

    @cached_property
    def _journaled_node_times(self) -> pa.Table:
        """The node times of the graphs only the journal holds."""
        schema = TABLES["node_times"]
        parts = [schema.empty_table()]
        for row, times in self._journal_only:
            waits = np.ma.masked_less(times["wait_ns"], 0)
            columns = {"graph_id": np.full(len(times["node_index"]), row["graph_id"], np.int32),
                       "node_index": times["node_index"], "start_ns": times["start_ns"], "end_ns": times["end_ns"],
                       "wait_ns": pa.array(waits, type=pa.int64())}  # fmt: skip
            try:
                parts.append(pa.table(columns, schema=schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as error:
                raise RunFormatError(f"{self.path}: the graph journal is damaged ({error})") from None
        return pa.concat_tables(parts)

    def _with_node_layers(self, nodes: pa.Table) -> pa.Table:
        """A run written before structure_nodes held each node's layer: infer it here, from
        the run's own structures (the rule the recorder follows), once per structure."""
        if "layer" in nodes.schema.names:
            return nodes
        layer = structure_layers(nodes.to_pandas(), self.raw("edges"), self.raw("tensors"), self.raw("buffers"))
        return nodes.append_column(TABLES["structure_nodes"].field("layer"), pa.array(layer))

    def _table_files(self, table: str) -> list[Path]:
        """Where a table is stored: its Parquet file, or the stream segments of a run not
        closed; none for an optional table the run does not have; RunFormatError if missing."""
        parquet = self.path / (table + PARQUET_SUFFIX)
        if parquet.exists():
            return [parquet]
        segments = stream_segments(self.path, table)
        if segments or table in OPTIONAL_TABLES:  # an optional table: from before it existed
            return segments
        raise RunFormatError(f"{self.path} has no '{table}' table: the run is damaged or not a ggml-viz run")

    def _check_schema(self, table: str) -> None:
        """The table is this recording's and has the columns this reader needs (its schema
        alone is read)."""
        files = self._table_files(table)
        if not files:
            return
        path = files[0]
        try:
            schema = pq.read_schema(path) if path.suffix == PARQUET_SUFFIX else stream_schema(path)
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFormatError(f"{path} cannot be read as a table: {error}") from None
        found = (schema.metadata or {}).get(META_EXPERIMENT_ID, b"").decode()
        if found != self.experiment_id:
            raise RunFormatError(
                f"{self.path}: table '{table}' belongs to experiment {found or '?'} but the manifest "
                f"says {self.experiment_id}; the directory mixes files of different recordings"
            )
        optional = set(OPTIONAL_COLUMNS.get(table, ())) | set(DERIVED_COLUMNS.get(table, ()))
        missing = set(TABLES[table].names) - set(schema.names) - optional
        if missing:
            raise RunFormatError(f"{self.path}: table '{table}' lacks columns {sorted(missing)}")

    def _read_table(self, table: str) -> pa.Table:
        files = self._table_files(table)
        if not files:
            return TABLES[table].empty_table()
        try:
            if files[0].suffix == PARQUET_SUFFIX:
                data = pq.ParquetFile(files[0]).read()  # (pq.read_table would import pyarrow.dataset)
            else:
                # node times whole (a user asked): read once; a small table: only what is new
                read = read_stream_once if table == "node_times" else read_stream
                data = pa.concat_tables([read(path) for path in files])
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFormatError(f"{files[0]} cannot be read as a table: {error}") from None
        return _with_optional_columns(data, table)


def _with_optional_columns(data: pa.Table, table: str) -> pa.Table:
    """A table as an older ggml-viz or an older segment wrote it, with the columns added
    since as nulls."""
    for column in OPTIONAL_COLUMNS.get(table, ()):
        if column not in data.schema.names:
            field = TABLES[table].field(column)
            data = data.append_column(field, pa.nulls(len(data), field.type))
    return data


def decode_tensor(data: bytes, ggml_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor's raw bytes as float32 (f32, f16, bf16 directly; quantized types through gguf)."""
    if ggml_type == "f32":
        values = np.frombuffer(data, dtype="<f4")
    elif ggml_type == "f16":
        values = np.frombuffer(data, dtype="<f2").astype(np.float32)
    elif ggml_type == "bf16":
        values = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif ggml_type in ("i32", "i16", "i8"):
        values = np.frombuffer(data, dtype={"i32": "<i4", "i16": "<i2", "i8": "i1"}[ggml_type]).astype(np.float32)
    else:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            quant_type = GGMLQuantizationType[ggml_type.upper()]
        except KeyError:
            raise RunFormatError(f"cannot decode a tensor of type {ggml_type}") from None
        values = dequantize(np.frombuffer(data, dtype=np.uint8), quant_type).astype(np.float32).ravel()
    return values.reshape(shape)


def _load_manifest(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise RunFormatError(f"{path} is not a run directory")
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise RunFormatError(f"{path} has no {MANIFEST_FILE}: it is not a ggml-viz run") from None
    except (OSError, ValueError) as error:
        raise RunFormatError(f"{manifest_path} cannot be read: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise RunFormatError(f"{path} is not a ggml-viz run (its manifest names another format)")
    version = manifest.get("format_version")
    if version not in READER_SUPPORTED_VERSIONS:
        supported = ", ".join(map(str, READER_SUPPORTED_VERSIONS))
        raise RunFormatError(f"{path} uses run format version {version}; this ggml-viz reads version {supported}")
    if not isinstance(manifest.get("experiment_id"), str):
        raise RunFormatError(f"{manifest_path} has no experiment id")
    return manifest


def _effective_status(manifest: dict[str, Any]) -> str:
    """A run still marked `recording` whose recorder is gone is `incomplete`."""
    status = str(manifest.get("status"))
    if status != STATUS_RECORDING:
        return status
    recorder = manifest.get("recorder") or {}
    if recorder.get("host") == socket.gethostname() and _process_alive(recorder.get("pid")):
        return STATUS_RECORDING
    return STATUS_INCOMPLETE


def _process_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
