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
from . import journal
from .manifest import STATUS_INCOMPLETE, STATUS_RECORDING
from .memory_sources import buffer_kinds, buffer_seen_times, bytes_read, edge_memory
from .schema import (
    CAPTURES_FILE,
    DERIVED_COLUMNS,
    FORMAT_NAME,
    GRAPH_TABLES,
    MANIFEST_FILE,
    META_EXPERIMENT_ID,
    NO_ID,
    OPTIONAL_COLUMNS,
    OPTIONAL_TABLES,
    PARQUET_SUFFIX,
    READER_SUPPORTED_VERSIONS,
    STREAM_SUFFIX,
    TABLES,
)
from .structure_layers import structure_layers


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
        self._raw: dict[str, pa.Table] = {table: self._read_table(table) for table in TABLES}
        self._derive_node_layers()
        self._drop_unfinished_graphs()
        self._add_journaled_graphs()
        self.manifest["status"] = _effective_status(self.manifest)

    def __repr__(self) -> str:
        return f"<Run {self.path} {self.experiment_id[:8]} {self.manifest['status']}>"

    @property
    def status(self) -> str:
        return str(self.manifest["status"])

    def raw(self, table: str) -> pd.DataFrame:
        """A table exactly as stored (ids, no joins)."""
        return self._raw[table].to_pandas()

    @cached_property
    def graphs(self) -> pd.DataFrame:
        graphs = self.raw("graphs").drop(columns=[c for c in TABLES["graphs"].names if c.startswith("token_")])
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
        graphs = self.raw("graphs")[["graph_id", "structure_id"]]
        nodes = graphs.merge(self.raw("structure_nodes"), on="structure_id").drop(columns="structure_id")
        times = self.raw("node_times").astype({"start_ns": "Int64", "end_ns": "Int64", "wait_ns": "Int64"})
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
        return self._describe_edges(self.raw("graphs"), self.raw("edges"))

    def edges_of(self, graph_id: int, node_index: int | None = None) -> pd.DataFrame:
        """The rows of `edges` for one graph (or one node of it), without building them all."""
        graphs = self.raw("graphs")
        graph = graphs[graphs["graph_id"] == graph_id]
        edges = self.raw("edges")
        edges = edges[edges["structure_id"].isin(graph["structure_id"])]
        if node_index is not None:
            edges = edges[edges["node_index"] == node_index]
        return self._describe_edges(graph, edges)

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
        nodes = self.nodes[["graph_id", "node_index", "name", "op", "layer"]]
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
        seen = buffer_seen_times(self.raw("graphs"), self.raw("structure_nodes"), self.raw("edges"), tensors)
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
        graphs = self.raw("graphs")
        tokens = graphs[["graph_id", "first_batch_index", *columns]].explode(list(columns), ignore_index=True)
        tokens = tokens.dropna(subset=["token_ids"]).rename(columns=columns)
        tokens["batch_index"] = tokens["first_batch_index"] + tokens.groupby("graph_id").cumcount()
        types = {"graph_id": "int32", "batch_index": "int32", "pos": "int32", "token_id": "int32",
                 "seq_id": "int32", "output": "bool", "text": "str"}  # fmt: skip
        tokens = tokens[list(types)].astype(types)
        return tokens.sort_values(["graph_id", "batch_index"], ignore_index=True)

    def _drop_unfinished_graphs(self) -> None:
        """A graph's row is written after its structure and node times: rows of a graph
        without one are from the graph a crash interrupted, and are left out."""
        finished = self._raw["graphs"].column("graph_id")
        for table in GRAPH_TABLES:
            data = self._raw[table]
            keep = pc.is_in(data.column("graph_id"), value_set=finished)
            if not pc.all(keep).as_py():
                self._raw[table] = data.filter(keep)

    def _add_journaled_graphs(self) -> None:
        """A run still open, or cut short, keeps its latest graphs in the journal."""
        known = set(self._raw["graphs"].column("graph_id").to_pylist())
        rows, times = [], []
        for row, node_times in journal.read(self.path / journal.JOURNAL_FILE):
            if row.get("graph_id") in known:
                continue
            rows.append(row)
            waits = np.ma.masked_less(node_times.pop("wait_ns"), 0)
            times.append({"graph_id": np.full(len(node_times["node_index"]), row["graph_id"], np.int32), **node_times,
                          "wait_ns": pa.array(waits, type=pa.int64())})  # fmt: skip
        if not rows:
            return
        try:
            graphs = pa.Table.from_pylist(rows, schema=self._raw["graphs"].schema)
            node_times = pa.Table.from_pylist([], schema=self._raw["node_times"].schema)
            for part in times:
                node_times = pa.concat_tables([node_times, pa.table(part, schema=self._raw["node_times"].schema)])
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as error:
            raise RunFormatError(f"{self.path}: the graph journal is damaged ({error})") from None
        self._raw["graphs"] = pa.concat_tables([self._raw["graphs"], graphs])
        self._raw["node_times"] = pa.concat_tables([self._raw["node_times"], node_times])

    def _derive_node_layers(self) -> None:
        """A run written before structure_nodes held each node's layer: infer it here, from
        the run's own structures (the rule the recorder follows), once per structure."""
        nodes = self._raw["structure_nodes"]
        if "layer" in nodes.schema.names:
            return
        layer = structure_layers(nodes.to_pandas(), self.raw("edges"), self.raw("tensors"), self.raw("buffers"))
        self._raw["structure_nodes"] = nodes.append_column(TABLES["structure_nodes"].field("layer"), pa.array(layer))

    def _read_table(self, table: str) -> pa.Table:
        parquet_path = self.path / (table + PARQUET_SUFFIX)
        stream_path = self.path / (table + STREAM_SUFFIX)
        if parquet_path.exists():
            data = pq.read_table(parquet_path)
        elif stream_path.exists():
            data = _read_stream_tolerantly(stream_path, table)
        elif table in OPTIONAL_TABLES:  # a run from before the table existed
            return TABLES[table].empty_table()
        else:
            raise RunFormatError(f"{self.path} has no '{table}' table: the run is damaged or not a ggml-viz run")
        found = (data.schema.metadata or {}).get(META_EXPERIMENT_ID, b"").decode()
        if found != self.experiment_id:
            raise RunFormatError(
                f"{self.path}: table '{table}' belongs to experiment {found or '?'} but the manifest "
                f"says {self.experiment_id}; the directory mixes files of different recordings"
            )
        for column in OPTIONAL_COLUMNS.get(table, ()):
            if column not in data.schema.names:  # a run from before the column existed
                field = TABLES[table].field(column)
                data = data.append_column(field, pa.nulls(len(data), field.type))
        missing = set(TABLES[table].names) - set(data.schema.names) - set(DERIVED_COLUMNS.get(table, ()))
        if missing:
            raise RunFormatError(f"{self.path}: table '{table}' lacks columns {sorted(missing)}")
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


def _read_stream_tolerantly(path: Path, table: str) -> pa.Table:
    """Every whole batch of a stream; a batch cut short by a crash is left out."""
    batches = []
    with pa.OSFile(str(path), "rb") as source:
        try:
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFormatError(f"{path} cannot be read as a table: {error}") from None
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError):
                break  # the tail a crash cut off
    return pa.Table.from_batches(batches, schema=schema)


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
