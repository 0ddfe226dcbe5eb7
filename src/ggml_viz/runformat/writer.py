"""Writes a run directory: streams appended per graph, turned into Parquet at the end.

Crash safety: every table is an Arrow IPC stream whose batches reach the file as soon
as they are written, so a killed recorder loses at most the graph it was recording.
`close()` converts each stream to Parquet (written under a temporary name, then
renamed) and only then marks the manifest complete.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import CaptureError
from . import journal
from .manifest import STATUS_COMPLETE, STATUS_INCOMPLETE, new_manifest, utc_now, write_manifest
from .schema import (
    CAPTURES_FILE,
    GRAPH_TABLES,
    MANIFEST_FILE,
    PARQUET_SUFFIX,
    SPARSE_TABLES,
    TABLES,
    stream_segment_name,
    stream_segments,
    table_schema,
)
from .streams import stream_schema
from .totals import totals_of_parquet_run, write_totals

PARQUET_ROW_GROUP = 1 << 17  # rows: a window of a long run reads the row groups it overlaps
ROLL_ROWS = 1 << 23  # a stream segment holds at most this many rows (256 MiB of node times) ...
ROLL_SECONDS = 600.0  # ... and is at most this old: then the table goes on in a new segment


def prepare_run_dir(path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Check that `path` can hold a new run and create it; one clear error otherwise."""
    run_dir = Path(path)
    if run_dir.exists():
        if not run_dir.is_dir():
            raise CaptureError(f"{run_dir} exists and is not a directory")
        if _is_taken(run_dir):
            if not overwrite:
                raise CaptureError(f"{run_dir} already exists and is not empty (choose another name)")
            if not (run_dir / MANIFEST_FILE).exists():
                raise CaptureError(f"refusing to replace {run_dir}: it is not a ggml-viz run")
            shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CaptureError(f"cannot write the run to {run_dir}: {error.strerror or error}") from None
    return run_dir


def unique_run_dir(path: str | os.PathLike[str]) -> Path:
    """`path`, or `path` with -1, -2, ... before its suffix when it is already taken."""
    original = Path(path)
    candidate, counter = original, 0
    while _is_taken(candidate):
        counter += 1
        candidate = original.with_name(f"{original.stem}-{counter}{original.suffix}")
    return candidate


# A native program recorded without `ggml-viz run` leaves only this folder (its spool):
# the run is written beside it.
SPOOL_DIR = "spool"


def _is_taken(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(child.name != SPOOL_DIR for child in path.iterdir()))


# Graphs journaled before they are written to the streams in one batch.
GRAPHS_PER_BATCH = 64
# Streams are compressed batch by batch as they are written (zstd: a run in progress takes about
# what its Parquet will, not three times as much, and its close rewrites less); every Arrow reader
# (pyarrow, polars, DuckDB's arrow scan) decompresses them.
STREAM_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


class RunWriter:
    """Appends a recording's tables to a run directory."""

    def __init__(self, run_dir: Path, experiment_id: str, manifest: dict[str, Any] | None = None) -> None:
        self.run_dir = run_dir
        self.experiment_id = experiment_id
        self.manifest = manifest if manifest is not None else new_manifest(experiment_id)
        self.rows: dict[str, int] = {table: 0 for table in TABLES if table not in SPARSE_TABLES}
        self._tables: dict[str, _OpenTable] = {}
        for table in TABLES:
            if table not in SPARSE_TABLES:  # those begin with their first rows
                self._tables[table] = self._open_segment(table, 0)
        self.graphs_per_batch = GRAPHS_PER_BATCH
        self._pending_rows: list[dict[str, Any]] = []
        self._pending_times: list[tuple[np.ndarray, ...]] = []
        self._unjournaled: list[bytes] = []  # journal records of graphs appended since the last sync
        # Set by a caller appending several graphs at once: one journal write for all.
        self.journal_deferred = False
        self._journal = journal.JournalWriter(run_dir / journal.JOURNAL_FILE)
        self._captures: Any = None
        write_manifest(run_dir, self.manifest)  # last: a run with a manifest has all its tables

    def append(self, table: str, columns: Mapping[str, Any]) -> None:
        """Append rows given as one array per column; the columns must match the schema
        (an empty mapping: no rows)."""
        if not columns:
            return
        if table not in self._tables:
            self._tables[table] = self._open_segment(table, 0)
        schema = self._tables[table].schema
        first = columns[schema.names[0]]
        if len(first) == 0:
            return
        self._write_batch(
            table, pa.record_batch([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)
        )

    def _open_segment(self, table: str, segment: int) -> _OpenTable:
        sink = pa.OSFile(str(self.run_dir / stream_segment_name(table, segment)), "wb")
        schema = table_schema(table, self.experiment_id)
        stream = pa.ipc.new_stream(sink, schema, options=STREAM_OPTIONS)
        # An empty batch puts the schema on disk now: a reader can open the stream at once.
        stream.write_batch(pa.record_batch([pa.array([], type=f.type) for f in schema], schema=schema))
        sink.flush()
        return _OpenTable(sink, stream, schema, segment, 0, time.monotonic())

    def _write_batch(self, table: str, batch: pa.RecordBatch) -> None:
        open_table = self._tables[table]
        open_table.stream.write_batch(batch)
        open_table.sink.flush()
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        rows = open_table.rows + batch.num_rows
        self._tables[table] = open_table._replace(rows=rows)
        # Roll to a new segment by size or age: no stream of a long recording grows without
        # bound, and a live reader rereads only the segment still growing.
        if rows >= ROLL_ROWS or time.monotonic() - open_table.opened > ROLL_SECONDS:
            open_table.stream.close()
            open_table.sink.close()
            self._tables[table] = self._open_segment(table, open_table.segment + 1)

    def append_graph(self, row: dict[str, Any], node_times: Mapping[str, np.ndarray]) -> None:
        """A graph's row and the times of its timed nodes: into the journal now (while
        journal_deferred: at the next sync_journal), into the streams with the next batch."""
        index = node_times["node_index"]
        self._unjournaled.append(journal.encode(row, node_times))
        if not self.journal_deferred:
            self.sync_journal()
        self._pending_rows.append(row)
        self._pending_times.append((np.full(len(index), row["graph_id"], dtype=np.int32), index,
                                    node_times["start_ns"], node_times["end_ns"], node_times["wait_ns"]))  # fmt: skip
        if len(self._pending_rows) >= self.graphs_per_batch:
            self.flush_graphs()

    def append_graph_rows(self, rows: list[dict[str, Any]]) -> None:
        """Rows of graphs without node times, straight into the graphs stream in one batch
        (after the journal's graphs, so that the stream keeps graph order)."""
        if rows:
            self.flush_graphs()
            self._write_batch("graphs", pa.RecordBatch.from_pylist(rows, schema=self._tables["graphs"].schema))

    def sync_journal(self) -> None:
        """Journal the graphs appended since the last call: one write for all of them."""
        if self._unjournaled:
            self._journal.append(b"".join(self._unjournaled))
            self._unjournaled = []

    def flush_graphs(self) -> None:
        """Move the journal's graphs to the streams: node times first, then the graph rows
        that make them count, then an empty journal."""
        if not self._pending_rows:
            return
        graph_id, index, start, end, wait = (np.concatenate(parts) for parts in zip(*self._pending_times, strict=True))
        self.append("node_times", {"graph_id": graph_id, "node_index": index, "start_ns": start, "end_ns": end,
                                   "wait_ns": np.ma.masked_less(wait, 0)})  # fmt: skip
        self._write_batch(
            "graphs", pa.RecordBatch.from_pylist(self._pending_rows, schema=self._tables["graphs"].schema)
        )
        self._pending_rows, self._pending_times, self._unjournaled = [], [], []
        self._journal.clear()

    def append_capture(self, data: bytes) -> int:
        """Append a captured tensor's bytes to captures.bin; returns their offset there."""
        if self._captures is None:
            self._captures = open(self.run_dir / CAPTURES_FILE, "ab")  # noqa: SIM115 - closed in close()
        offset = self._captures.tell()
        self._captures.write(data)
        self._captures.flush()
        return offset

    def update_manifest(self, **fields: Any) -> None:
        self.manifest.update(fields)
        write_manifest(self.run_dir, self.manifest)

    def close(self, *, complete: bool = True, reason: str | None = None, keep_graphs: set[int] | None = None) -> None:
        """Finish the streams; on a complete recording turn them into Parquet files,
        keeping only the rows of `keep_graphs` when it is given (the keep-last bound)."""
        self.flush_graphs()
        self._journal.close(remove=True)
        if self._captures is not None:
            self._captures.close()
        for open_table in self._tables.values():
            open_table.stream.close()
            open_table.sink.close()
        self._tables.clear()
        if complete:
            for table in TABLES:
                if table in SPARSE_TABLES and not stream_segments(self.run_dir, table):
                    continue
                kept = _stream_to_parquet(self.run_dir, table, keep_graphs)
                self.rows[table] = kept
            write_totals(self.run_dir, totals_of_parquet_run(self.run_dir), self.experiment_id)
        self.manifest["finished"] = utc_now()
        self.manifest["status"] = STATUS_COMPLETE if complete else STATUS_INCOMPLETE
        self.manifest["incomplete_reason"] = reason
        self.manifest["counts"] = {**self.manifest.get("counts", {}), **{f"{t}_rows": n for t, n in self.rows.items()}}
        write_manifest(self.run_dir, self.manifest)


class _OpenTable(NamedTuple):
    sink: pa.NativeFile
    stream: pa.ipc.RecordBatchStreamWriter
    schema: pa.Schema  # kept: building a schema per append costs more than the append
    segment: int  # which stream segment of the table (see stream_segment_name)
    rows: int  # rows in this segment
    opened: float  # when it was opened (time.monotonic)


def _stream_to_parquet(run_dir: Path, table: str, keep_graphs: set[int] | None) -> int:
    """The table's stream as one Parquet file, batch by batch (bounded memory at any length),
    in row groups of about PARQUET_ROW_GROUP rows; returns the rows kept."""
    parquet_path = run_dir / (table + PARQUET_SUFFIX)
    partial = run_dir / (table + PARQUET_SUFFIX + ".partial")
    keep = pa.array(sorted(keep_graphs), pa.int32()) if keep_graphs is not None and table in GRAPH_TABLES else None
    segments = stream_segments(run_dir, table)
    rows = 0
    with pq.ParquetWriter(partial, stream_schema(segments[0]), compression="zstd") as parquet:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for segment in segments:
            with pa.OSFile(str(segment), "rb") as source:
                reader = pa.ipc.open_stream(source)
                for batch in reader:
                    if keep is not None:
                        batch = batch.filter(pc.is_in(batch.column("graph_id"), value_set=keep))
                    pending.append(batch)
                    pending_rows += batch.num_rows
                    if pending_rows >= PARQUET_ROW_GROUP:
                        parquet.write_table(pa.Table.from_batches(pending, parquet.schema), row_group_size=pending_rows)
                        rows, pending, pending_rows = rows + pending_rows, [], 0
        parquet.write_table(pa.Table.from_batches(pending, parquet.schema), row_group_size=max(pending_rows, 1))
        rows += pending_rows
    os.replace(partial, parquet_path)
    for segment in segments:
        segment.unlink()
    return rows
