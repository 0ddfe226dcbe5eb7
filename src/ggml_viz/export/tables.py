"""The reader's tables as CSV or Parquet files, one per table, in a folder.

The tables of node events (`nodes`, `edges`: one row per node, or per node and source, of
every graph) are written a chunk of graphs at a time, so an export of any length holds one
chunk in memory; the others are small. A graph or time window limits all of them to its
graphs. A run with GPU times adds its GPU tables (gpu_kernels and gpu_node_times, a chunk of
graphs at a time, each row with its phase and its node's name, op and layer, as `ggml-viz
query` shows them; gpu_graphs as the reader gives it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .._errors import CommandError
from ..runformat.reader import Run
from .base import Exporter, ExportOptions, described_gpu_rows, in_chunks, node_names, window_graphs

TABLE_NAMES = ("graphs", "nodes", "edges", "tokens", "buffers", "tensors", "memory_map")
GPU_TABLE_NAMES = ("gpu_kernels", "gpu_node_times", "gpu_graphs")  # a run with GPU times only
MOE_TABLE_NAMES = ("moe_routing", "moe_experts")  # a mixture of experts' run with its routing only
# one row per graph, token or routed token: cut to the window
PER_GRAPH = ("graphs", "tokens", "gpu_graphs", "moe_routing")


def table_names(run: Run) -> tuple[str, ...]:
    """The tables an export of `run` writes."""
    return (
        TABLE_NAMES
        + (GPU_TABLE_NAMES if not run.gpu_graphs.empty else ())
        + (MOE_TABLE_NAMES if len(run.raw("moe_routing")) else ())
    )


def reader_tables(run: Run, options: ExportOptions) -> Iterator[tuple[str, Iterator[pd.DataFrame]]]:
    """Each table, as the chunks to write one after the other."""
    graphs = window_graphs(run, options)
    ids = sorted(graphs["graph_id"].tolist())
    chunks = list(in_chunks(ids))
    for name in table_names(run):
        if name == "nodes":
            yield name, (run.nodes_of(chunk) for chunk in chunks)
        elif name == "edges":
            yield name, (run.edges_of_graphs(chunk) for chunk in chunks)
        elif name in ("gpu_kernels", "gpu_node_times"):
            names = node_names(run)
            yield name, (described_gpu_rows(run, name, chunk, names) for chunk in chunks)
        elif name in PER_GRAPH:
            table = getattr(run, name)
            yield name, iter([table[table["graph_id"].isin(ids)]])
        else:
            yield name, iter([getattr(run, name)])


class _TablesExporter(Exporter):
    suffix = ""

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        output.mkdir(parents=True, exist_ok=True)
        written = []
        tables = len(table_names(run))
        for done, (name, chunks) in enumerate(reader_tables(run, options)):
            rows = self.write(chunks, output / f"{name}{self.suffix}")
            written.append(f"{name} ({rows:,} rows)")
            options.progress(done + 1, tables)
        return f"{output}/: " + ", ".join(written)

    def write(self, chunks: Iterator[pd.DataFrame], path: Path) -> int:
        """Write the chunks as one file; returns the rows written."""
        raise NotImplementedError


class CsvExporter(_TablesExporter):
    name = "csv"
    extensions = (".csv",)
    summary = (
        "the reader's tables (graphs, nodes, edges, tokens, buffers, tensors, memory_map, gpu_*, moe_*) as CSV files"
    )
    suffix = ".csv"

    def write(self, chunks: Iterator[pd.DataFrame], path: Path) -> int:
        rows, started = 0, False
        for chunk in chunks:
            chunk.to_csv(path, index=False, mode="a" if started else "w", header=not started)
            rows, started = rows + len(chunk), True
        if not started:  # a window without graphs
            path.write_text("")
        return rows


class ParquetExporter(_TablesExporter):
    name = "parquet"
    extensions = (".parquet",)
    summary = "the reader's tables, joined and described, as Parquet files"
    suffix = ".parquet"

    def write(self, chunks: Iterator[pd.DataFrame], path: Path) -> int:
        rows = 0
        writer: Any = None
        try:
            for chunk in chunks:
                if writer is None:
                    table = pa.Table.from_pandas(chunk, preserve_index=False)
                    writer = pq.ParquetWriter(path, table.schema, compression="zstd")
                else:  # later chunks take the first one's column types
                    table = pa.Table.from_pandas(chunk, schema=writer.schema, preserve_index=False)
                writer.write_table(table)
                rows += len(chunk)
        finally:
            if writer is not None:
                writer.close()
        return rows


class RoutingExporter(Exporter):
    name = "moe-routing"
    extensions = ()
    summary = (
        "a mixture of experts' routing alone, one row per graph, MoE layer, token and slot (run.moe_routing): "
        "a .csv or .parquet file, for tools that reorder or place experts by their use"
    )

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        ids = window_graphs(run, options)["graph_id"]
        routing = run.moe_routing
        routing = routing[routing["graph_id"].isin(ids)]
        if not len(run.raw("moe_routing")):
            raise CommandError("this run recorded no mixture-of-experts routing (a dense model, or --routing off)")
        writer = CsvExporter() if output.suffix.lower() == ".csv" else ParquetExporter()
        rows = writer.write(iter([routing]), output)
        return f"{output}: {rows:,} routed (token, slot) rows"
