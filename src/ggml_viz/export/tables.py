"""The reader's tables as CSV or Parquet files, one per table, in a folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runformat.reader import Run
from .base import Exporter, ExportOptions

TABLE_NAMES = ("graphs", "nodes", "edges", "tokens", "buffers", "tensors", "memory_map")


def reader_tables(run: Run) -> dict[str, pd.DataFrame]:
    return {name: getattr(run, name) for name in TABLE_NAMES}


class _TablesExporter(Exporter):
    suffix = ""

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        output.mkdir(parents=True, exist_ok=True)
        written = []
        for done, (name, table) in enumerate(reader_tables(run).items()):
            self.write(table, output / f"{name}{self.suffix}")
            written.append(f"{name} ({len(table):,} rows)")
            options.progress(done + 1, len(TABLE_NAMES))
        return f"{output}/: " + ", ".join(written)

    def write(self, table: pd.DataFrame, path: Path) -> None:
        raise NotImplementedError


class CsvExporter(_TablesExporter):
    name = "csv"
    extensions = (".csv",)
    summary = "the reader's tables (graphs, nodes, edges, tokens, buffers, tensors, memory_map) as CSV files"
    suffix = ".csv"

    def write(self, table: pd.DataFrame, path: Path) -> None:
        table.to_csv(path, index=False)


class ParquetExporter(_TablesExporter):
    name = "parquet"
    extensions = (".parquet",)
    summary = "the reader's tables, joined and described, as Parquet files"
    suffix = ".parquet"

    def write(self, table: pd.DataFrame, path: Path) -> None:
        table.to_parquet(path, index=False)
