"""Writes a run directory: streams appended per graph, turned into Parquet as they fill and at the end.

Crash safety: every table is an Arrow IPC stream whose batches reach the file as soon
as they are written, so a killed recorder loses at most the graph it was recording.
A long recording's streams roll to a new segment as they fill (ROLL_ROWS, ROLL_SECONDS);
a full segment becomes a Parquet part in the background (written under a temporary name,
renamed, and only then its stream removed) with the node totals of its events, so that a
run in progress takes about its final size on disk and its close converts only the last
segments. `close()` converts what is left and only then marks the manifest complete; when
the recording outran the conversion (segments waiting for it), the close waits for none of
them: it marks the run complete with those segments pending and starts a converter of its
own for them (runformat/conversion.py), so that stopping a recording takes seconds
whatever its length.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
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
from .conversion import CONVERSION_PENDING, TOTALS_OF_PARTS, start_converter
from .manifest import STATUS_COMPLETE, STATUS_INCOMPLETE, new_manifest, utc_now, write_manifest
from .parts import to_parquet
from .schema import (
    CAPTURES_FILE,
    GRAPH_TABLES,
    MANIFEST_FILE,
    OPTIONAL_COLUMNS,
    PARQUET_SUFFIX,
    SPARSE_TABLES,
    TABLES,
    parquet_parts,
    part_name,
    stream_segment_name,
    table_metadata,
    table_schema,
    table_segments,
)
from .totals import (
    GRAPH_OP_TOTALS,
    NODE_TOTALS,
    TOTALS_SCHEMAS,
    compute_totals,
    connect,
    merge_totals,
    one_line,
    parquet_files,
    totals_of_parquet_run,
    write_totals,
)

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
# The node times' stream is compressed batch by batch as it is written (zstd: 8 bytes an event,
# not 32); every Arrow reader (pyarrow, polars, DuckDB's arrow scan) decompresses it. The other
# streams are not: their batches are a few graphs' rows, and each compressed buffer costs about
# as much to read back as the rows themselves (631,580 graph rows in batches of 64: 6.9 s
# compressed, 0.5 s plain, for 0.15 KB a graph, 0.3 bytes a node event).
STREAM_OPTIONS = {"node_times": pa.ipc.IpcWriteOptions(compression="zstd")}


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
        # What a node-times part's totals need besides its events (kept as written: small tables) ...
        self._described: dict[str, list[pa.RecordBatch]] = {table: [] for table in _DESCRIBING}
        # ... and the phase and structure of the graphs in the open node-times segment.
        self._segment_graphs: list[pa.RecordBatch] = []
        self._rolled: list[_Rolled] = []  # full segments, to become parts once their graphs' rows are written
        self._parts = _PartWriter(run_dir, experiment_id)
        # Whether a close that leaves segments to convert starts the converter (False: the
        # caller converts them, conversion.convert_pending).
        self.detached_converter = True
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
        optional = OPTIONAL_COLUMNS.get(table, ())  # (as nulls where not given: as an older writer left them)
        arrays = [
            pa.nulls(len(first), f.type)
            if f.name in optional and f.name not in columns
            else pa.array(columns[f.name], type=f.type)
            for f in schema
        ]
        self._write_batch(table, pa.record_batch(arrays, schema=schema))
        self._hand_over_rolled()

    def _open_segment(self, table: str, segment: int) -> _OpenTable:
        sink = pa.OSFile(str(self.run_dir / stream_segment_name(table, segment)), "wb")
        schema = table_schema(table, self.experiment_id)
        stream = pa.ipc.new_stream(sink, schema, options=STREAM_OPTIONS.get(table))
        # An empty batch puts the schema on disk now: a reader can open the stream at once.
        stream.write_batch(pa.record_batch([pa.array([], type=f.type) for f in schema], schema=schema))
        sink.flush()
        return _OpenTable(sink, stream, schema, segment, 0, time.monotonic())

    def _write_batch(self, table: str, batch: pa.RecordBatch) -> None:
        open_table = self._tables[table]
        open_table.stream.write_batch(batch)
        open_table.sink.flush()
        if table in self._described:
            self._described[table].append(batch)
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        rows = open_table.rows + batch.num_rows
        self._tables[table] = open_table._replace(rows=rows)
        # Roll to a new segment by size or age: no stream of a long recording grows without
        # bound, the full one becomes a Parquet part, and a live reader rereads only the
        # segment still growing.
        if rows >= ROLL_ROWS or time.monotonic() - open_table.opened > ROLL_SECONDS:
            open_table.stream.close()
            open_table.sink.close()
            graphs = None
            if table == "node_times":
                graphs, self._segment_graphs = self._segment_graphs, []
            self._rolled.append(_Rolled(table, open_table.segment, graphs))
            self._tables[table] = self._open_segment(table, open_table.segment + 1)

    def _hand_over_rolled(self) -> None:
        """Full segments to the part writer (called once the rows of the graphs whose node
        times they hold are written, so that a reader of the parts finds those graphs)."""
        for rolled in self._rolled:
            self._parts.submit(rolled, self._descriptions())
        self._rolled = []

    def _descriptions(self) -> dict[str, pa.Table]:
        return {
            table: pa.Table.from_batches(batches, schema=table_schema(table, self.experiment_id))
            for table, batches in self._described.items()
        }

    def append_graph(self, row: dict[str, Any], node_times: Mapping[str, np.ndarray]) -> None:
        """A graph's row and the times of its timed nodes: into the journal now (while
        journal_deferred: at the next sync_journal), into the streams with the next batch."""
        index = node_times["node_index"]
        self._unjournaled.append(journal.encode(row, node_times))
        if not self.journal_deferred:
            self.sync_journal()
        self._pending_rows.append(row)
        self._pending_times.append(
            (
                np.full(len(index), row["graph_id"], dtype=np.int32),
                index,
                node_times["start_ns"],
                node_times["end_ns"],
                node_times["wait_ns"],
            )
        )
        if len(self._pending_rows) >= self.graphs_per_batch:
            self.flush_graphs()

    def append_graph_rows(self, rows: list[dict[str, Any]]) -> None:
        """Rows of graphs without node times, straight into the graphs stream in one batch
        (after the journal's graphs, so that the stream keeps graph order)."""
        if rows:
            self.flush_graphs()
            self._write_batch("graphs", pa.RecordBatch.from_pylist(rows, schema=self._tables["graphs"].schema))
            self._hand_over_rolled()

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
        rows = [{key: row[key] for key in _SEGMENT_GRAPHS.names} for row in self._pending_rows]
        self._segment_graphs.append(pa.RecordBatch.from_pylist(rows, schema=_SEGMENT_GRAPHS))
        schema = self._tables["node_times"].schema
        columns = {
            "graph_id": graph_id,
            "node_index": index,
            "start_ns": start,
            "end_ns": end,
            "wait_ns": np.ma.masked_less(wait, 0),
        }
        self._write_batch(
            "node_times", pa.record_batch([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)
        )
        self._write_batch(
            "graphs", pa.RecordBatch.from_pylist(self._pending_rows, schema=self._tables["graphs"].schema)
        )
        self._pending_rows, self._pending_times, self._unjournaled = [], [], []
        self._journal.clear()
        self._hand_over_rolled()

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

    @property
    def parts_while_recording(self) -> bool:
        """Whether full segments become parts while recording (True); False: they wait for
        the close, which leaves them to the converter (a recording that must leave every core
        to its program)."""
        return self._parts.while_recording

    @parts_while_recording.setter
    def parts_while_recording(self, value: bool) -> None:
        self._parts.while_recording = value

    def wait_for_parts(self) -> None:
        """Until the full segments handed over so far are Parquet parts (or failed to become
        ones: their streams stay, and the close converts them)."""
        self._parts.wait()

    def close(self, *, complete: bool = True, reason: str | None = None, keep_graphs: set[int] | None = None) -> None:
        """Finish the streams; on a complete recording turn them into Parquet files,
        keeping only the rows of `keep_graphs` when it is given (the keep-last bound)."""
        self.flush_graphs()
        self._journal.close(remove=True)
        if self._captures is not None:
            self._captures.close()
        last = []  # the open segments: converted below, with any a worker could not convert
        for table, open_table in self._tables.items():
            open_table.stream.close()
            open_table.sink.close()
            last.append(_Rolled(table, open_table.segment, self._segment_graphs if table == "node_times" else None))
        self._tables.clear()
        pending: list[str] = []
        if complete:
            if keep_graphs is None:
                pending = self._finish_in_parts(last)
            else:
                self._parts.wait()
                self._finish_whole(keep_graphs)
        else:
            self._parts.stop()  # (a recording that failed: what was not converted stays in its streams)
        self._parts.close()
        self.manifest["finished"] = utc_now()
        self.manifest["status"] = STATUS_COMPLETE if complete else STATUS_INCOMPLETE
        self.manifest["incomplete_reason"] = reason
        self.manifest["counts"] = {**self.manifest.get("counts", {}), **{f"{t}_rows": n for t, n in self.rows.items()}}
        write_manifest(self.run_dir, self.manifest)
        if pending and self.detached_converter:
            start_converter(self.run_dir)

    def _finish_in_parts(self, last: list[_Rolled]) -> list[str]:
        """The last segments converted, with any a worker failed to convert (two at a time:
        the close waits for the longest); a table that never rolled becomes `TABLE.parquet`,
        one that did gains its last parts; then the totals, summed part by part. Unless
        segments wait for the worker (the recording outran it): then none is converted
        here, all are left pending (`_leave_pending`). Returns the segments left."""
        descriptions = self._descriptions()
        waiting = self._parts.stop()  # (the segment being converted is finished first: one, seconds)
        if waiting:
            return self._leave_pending(self._parts.take_failed() + waiting + last)
        left = self._parts.take_failed() + last
        segments = {table: sum(rolled.table == table for rolled in left) for table in {r.table for r in left}}
        # (largest first: node times, then graphs, then the small tables two at a time)
        left.sort(key=lambda rolled: (rolled.table != "node_times", rolled.table != "graphs"))
        self._parts.convert_now(
            [(rolled, segments[rolled.table] == 1 and rolled.segment == 0) for rolled in left], descriptions
        )  # fmt: skip  (one segment 0: the table never rolled)
        failed = self._parts.take_failed()
        if failed:
            raise OSError(f"cannot write the run's Parquet files: {'; '.join(self._parts.failures[-len(failed) :])}")
        for table in segments:
            self.rows[table] = _rows_stored(self.run_dir, table)
        if not self._parts.store_totals():  # a part's totals could not be summed as it was written: from all parts
            write_totals(self.run_dir, totals_of_parquet_run(self.run_dir), self.experiment_id)
        return []

    def _leave_pending(self, left: list[_Rolled]) -> list[str]:
        """The run complete with these segments still streams, listed in the manifest for the
        converter (each to become its part, `TABLE.N.parquet`), and the totals of the parts
        written so far stored for the reader to add the pending ones' to."""
        left.sort(key=lambda rolled: (rolled.table, rolled.segment))
        pending = [stream_segment_name(rolled.table, rolled.segment) for rolled in left]
        stored = self._parts.store_totals(suffix=TOTALS_OF_PARTS)
        self.manifest.update(conversion=CONVERSION_PENDING, pending_parts=pending, totals_of_parts=stored)
        return pending

    def _finish_whole(self, keep_graphs: set[int]) -> None:
        """Every table one Parquet file of the kept graphs' rows (the keep-last bound: a
        small part of what was recorded), and its totals summed from them."""
        for table in TABLES:
            sources = table_segments(self.run_dir, table)
            if table in SPARSE_TABLES and not sources:
                continue
            keep = pa.array(sorted(keep_graphs), pa.int32()) if table in GRAPH_TABLES else None
            self.rows[table] = to_parquet(sources, self.run_dir / f"{table}{PARQUET_SUFFIX}", keep)
        write_totals(self.run_dir, totals_of_parquet_run(self.run_dir), self.experiment_id)


# The tables a node-times part's totals read beside its graphs, kept by the writer as written.
_DESCRIBING = ("structure_nodes", "tensors")
# What the totals read of a graph's row.
_SEGMENT_GRAPHS = pa.schema([("graph_id", pa.int32()), ("phase", pa.string()), ("structure_id", pa.int32())])


class _Rolled(NamedTuple):
    """A table's segment whose stream is closed, to become a Parquet part."""

    table: str
    segment: int
    graphs: list[pa.RecordBatch] | None  # node times: their graphs' phase and structure


class _PartWriter:
    """Turns closed stream segments into Parquet parts on a thread of its own (the recording
    goes on), summing the node totals of each node-times part as it is written: the close
    then stores the totals without reading the run's events again.

    A segment that fails to become a part keeps its stream (a reader reads it there, the
    close tries again); a part whose totals could not be summed leaves the totals to the
    close, from all the parts."""

    def __init__(self, run_dir: Path, experiment_id: str) -> None:
        self.run_dir = run_dir
        self.experiment_id = experiment_id
        # One worker while recording, fed by a queue: a daemon, so that a program ending
        # without closing its run is not held up (a part cut short stays `.partial`, its
        # stream read in its place). Not concurrent.futures: it refuses work once the
        # interpreter is exiting, when a Python program's run is closed.
        self._queue: queue.Queue[tuple[_Rolled, dict[str, pa.Table]]] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # the running totals, added to by two threads at the close
        self._node_totals: pa.Table | None = None
        # Each graph's op times, written to their file part by part in segment order (a
        # part summed early waits for those before it): held in memory they would grow with the run.
        self._graph_op_file: pq.ParquetWriter | None = None
        self._graph_op_waiting: dict[int, pa.Table] = {}
        self._graph_op_next = 0  # the node-times segment whose graph-op totals are written next
        self._sound = True  # every node-times part's totals summed
        self._failed: list[_Rolled] = []  # segments not converted (their streams stay)
        self.failures: list[str] = []  # why, one line each
        self.while_recording = True  # False: segments submitted are held for the close
        self._held: list[_Rolled] = []

    def submit(self, rolled: _Rolled, descriptions: dict[str, pa.Table]) -> None:
        """Convert the segment on the worker, after those submitted before it."""
        if not self.while_recording:
            self._held.append(rolled)
            return
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="ggml-viz-parts", daemon=True)
            self._worker.start()
        self._queue.put((rolled, descriptions))

    def _work(self) -> None:
        while True:
            rolled, descriptions = self._queue.get()
            try:
                self._convert(rolled, descriptions)
            finally:
                self._queue.task_done()

    def stop(self) -> list[_Rolled]:
        """Convert no more: the segments submitted but not begun (and those held), in order;
        the one the worker is converting is finished first."""
        waiting, self._held = self._held, []
        while True:
            try:
                rolled, _ = self._queue.get_nowait()
            except queue.Empty:
                break
            waiting.append(rolled)
            self._queue.task_done()
        self._queue.join()
        return waiting

    def convert_now(self, segments: list[tuple[_Rolled, bool]], descriptions: dict[str, pa.Table]) -> None:
        """Convert these segments (each: whether it is its table's only one, to become
        `TABLE.parquet`), two at a time: the caller waits for the longest, not the sum."""
        self.wait()
        for first in range(0, len(segments), 2):
            (rolled, whole), *beside = segments[first : first + 2]
            helpers = [
                threading.Thread(target=self._convert, args=(other, descriptions, other_whole))
                for other, other_whole in beside
            ]
            for helper in helpers:
                helper.start()
            self._convert(rolled, descriptions, whole)
            for helper in helpers:
                helper.join()

    def _convert(self, rolled: _Rolled, descriptions: dict[str, pa.Table], whole: bool = False) -> None:
        stream = self.run_dir / stream_segment_name(rolled.table, rolled.segment)
        name = f"{rolled.table}{PARQUET_SUFFIX}" if whole else part_name(rolled.table, rolled.segment)
        try:
            rows = to_parquet([stream], self.run_dir / name, None)
        except Exception as error:  # (the recording goes on) its stream stays: read there, converted at the close
            with self._lock:
                self.failures.append(f"{stream.name}: {one_line(error)}")
                self._failed.append(rolled)
            return
        if rolled.graphs is not None:
            self._add_totals(self.run_dir / name, rolled.segment, rows, rolled.graphs, descriptions)

    def _add_totals(
        self, part: Path, segment: int, rows: int, graphs: list[pa.RecordBatch], descriptions: dict[str, pa.Table]
    ) -> None:
        """The part's node totals, added to the run's: sound only if every event of the
        part found its graph and node (a structure described after its graphs' events were
        written would leave some out: then the close sums all parts instead)."""
        import duckdb

        connection = connect()
        try:
            connection.register("graphs", pa.Table.from_batches(graphs, schema=_SEGMENT_GRAPHS))
            for table, data in descriptions.items():
                connection.register(table, data)
            connection.execute(f"create view node_times as select * from {parquet_files([part])}")
            totals = compute_totals(connection)
        except duckdb.Error:
            totals = None
        finally:
            connection.close()
        with self._lock:
            if totals is None or _events_counted(totals) != rows or not _same_time(totals):
                self._sound = False
                return
            parts = [{NODE_TOTALS: table} for table in (self._node_totals, totals[NODE_TOTALS]) if table is not None]
            self._node_totals = merge_totals(parts)[NODE_TOTALS]
            self._graph_op_waiting[segment] = totals[GRAPH_OP_TOTALS]
            while self._sound and self._graph_op_next in self._graph_op_waiting:
                self._write_graph_op_totals(self._graph_op_waiting.pop(self._graph_op_next))
                self._graph_op_next += 1

    def _write_graph_op_totals(self, table: pa.Table) -> None:
        try:
            if self._graph_op_file is None:
                metadata = table_metadata(GRAPH_OP_TOTALS, self.experiment_id)
                schema = TOTALS_SCHEMAS[GRAPH_OP_TOTALS].with_metadata(metadata)
                self._graph_op_file = pq.ParquetWriter(
                    self._graph_op_path(after=".partial"), schema, compression="zstd", write_page_checksum=True
                )
            self._graph_op_file.write_table(table.cast(self._graph_op_file.schema))
        except (OSError, pa.ArrowException):
            self._sound = False  # (summed again from the parts at the close)

    def _graph_op_path(self, before: str = "", after: str = "") -> Path:
        return self.run_dir / f"{GRAPH_OP_TOTALS}{before}{PARQUET_SUFFIX}{after}"

    def take_failed(self) -> list[_Rolled]:
        with self._lock:
            failed, self._failed = self._failed, []
        return failed

    def wait(self) -> None:
        """Until the worker has converted every segment submitted."""
        self._queue.join()

    def store_totals(self, suffix: str = "") -> bool:
        """Store the run's totals from its parts' (each graph's ops in one part: its events
        are written together); False (nothing stored) if some part's could not be summed.
        With a `suffix` (TOTALS_OF_PARTS): the totals of the parts written so far, of a run
        whose other segments are left to convert (none written yet: empty totals)."""
        with self._lock:
            sound = self._sound and not self._graph_op_waiting
            written, self._graph_op_file = self._graph_op_file, None
            if written is not None:
                written.close()
            if sound and suffix and written is None and self._node_totals is None:
                empty = {name: schema.empty_table() for name, schema in TOTALS_SCHEMAS.items()}
                write_totals(self.run_dir, empty, self.experiment_id, suffix=suffix)
                return True
            if not sound or written is None or self._node_totals is None:
                self._graph_op_path(after=".partial").unlink(missing_ok=True)
                return False
            os.replace(self._graph_op_path(after=".partial"), self._graph_op_path(before=suffix))
            write_totals(self.run_dir, {NODE_TOTALS: self._node_totals}, self.experiment_id, suffix=suffix)
            return True

    def close(self) -> None:
        """Wait for the worker; graph-op totals not stored (a run closed incomplete, or
        kept in part) are dropped: the reader sums them from what was kept."""
        self.wait()
        if self._graph_op_file is not None:
            self._graph_op_file.close()
            self._graph_op_file = None
            self._graph_op_path(after=".partial").unlink(missing_ok=True)


def _events_counted(totals: dict[str, pa.Table]) -> int:
    return int(pc.sum(totals[NODE_TOTALS].column("timed")).as_py() or 0)


def _same_time(totals: dict[str, pa.Table]) -> bool:
    """Both totals sum the same time: every event found its node's op too."""
    return bool(
        pc.sum(totals[NODE_TOTALS].column("time_ns")).as_py()
        == pc.sum(totals[GRAPH_OP_TOTALS].column("time_ns")).as_py()
    )


class _OpenTable(NamedTuple):
    sink: pa.NativeFile
    stream: pa.ipc.RecordBatchStreamWriter
    schema: pa.Schema  # kept: building a schema per append costs more than the append
    segment: int  # which stream segment of the table (see stream_segment_name)
    rows: int  # rows in this segment
    opened: float  # when it was opened (time.monotonic)


def _rows_stored(run_dir: Path, table: str) -> int:
    return sum(pq.read_metadata(path).num_rows for path in parquet_parts(run_dir, table))
