"""Reading the Arrow streams of a run being recorded, a little at a time.

A live viewer opens a growing run again each time it gains graphs (a few times a second).
Reading every stream from its start would make each update cost the length of the run, so
this module remembers, per stream file, how far it has read (the end of the last whole
message) and what it found there; opening the run again reads only the messages appended
since. A file is known again by its device, inode and schema (whose metadata names the
recording): a run directory replaced by another recording is read afresh.

What is remembered:
- `read_stream`: a small table (graphs, tensors, structures, ...), whole;
- `node_times_segment`: for a segment of node times (most of a run's bytes, never held),
  where each batch lies in the file and which graphs it holds, so that a window of graphs
  reads only its batches; and the node totals of the batches read so far, to which an
  update adds the new batches' totals;
- `read_part`: a small table's Parquet part (a full segment became one), whole;
- `part_totals`: the node totals of a Parquet part a full segment became (written once, whole).

A message still being written, or cut off by a crash, ends what is read: the next read
starts again from the last whole message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import RunFormatError
from .totals import merge_totals

FILES_KEPT = 256  # stream files remembered (each kind), the least recently read forgotten first
CHUNKS_BEFORE_COMBINING = 64  # a remembered table's chunks before they are combined into one

_lock = threading.RLock()  # the viewer's requests run in threads (and totals_of reads tables)


class _Message(NamedTuple):
    batch: pa.RecordBatch
    start: int  # the message's offset in the file
    end: int  # just past it


@dataclass
class _Tail:
    """How far a stream file has been read."""

    identity: tuple[int, int]  # st_dev, st_ino
    schema: pa.Schema
    offset: int  # just past the last message taken


def _new_messages(path: Path, known: _Tail | None) -> tuple[_Tail, list[_Message], bool]:
    """The record batches of the stream at `path` after `known` (all of them when the file
    is not the one `known` read), each with where its message lies; the tail just past
    them; and whether they continue `known`."""
    try:
        stat = os.stat(path)
        with pa.OSFile(str(path), "rb") as source:
            reader = pa.ipc.MessageReader.open_stream(source)
            schema = pa.ipc.read_schema(reader.read_next_message())
            identity = (stat.st_dev, stat.st_ino)
            continues = (
                known is not None
                and known.identity == identity
                and stat.st_size >= known.offset
                and known.schema.equals(schema, check_metadata=True)
            )
            offset = known.offset if continues and known is not None else source.tell()
            source.seek(offset)
            reader = pa.ipc.MessageReader.open_stream(source)
            messages = []
            while True:
                try:
                    message = reader.read_next_message()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):
                    break  # being written, or cut off by a crash: read again next time
                end = source.tell()
                if message.type == "record batch":
                    messages.append(_Message(pa.ipc.read_record_batch(message, schema), offset, end))
                offset = end
    except (StopIteration, pa.ArrowInvalid, OSError) as error:
        raise RunFormatError(f"{path} cannot be read as a table: {error or 'it is empty'}") from None
    return _Tail(identity, schema, offset), messages, continues


def stream_schema(path: Path) -> pa.Schema:
    """The schema of the stream at `path` (its first message alone is read)."""
    with pa.OSFile(str(path), "rb") as source:
        try:
            return pa.ipc.read_schema(pa.ipc.MessageReader.open_stream(source).read_next_message())
        except StopIteration:
            raise pa.ArrowInvalid("the stream is empty (no schema)") from None


def read_stream_once(path: Path) -> pa.Table:
    """Every whole batch of the stream at `path`, remembering nothing."""
    tail, messages, _ = _new_messages(path, None)
    return pa.Table.from_batches([m.batch for m in messages], schema=tail.schema)


# -- small tables, whole -----------------------------------------------------------------

_tables: dict[str, tuple[_Tail, pa.Table]] = {}


def read_stream(path: Path) -> pa.Table:
    """Every whole batch of the stream at `path`, reading only what was appended since the
    last call for the same file."""
    with _lock:
        key = str(path)
        known = _tables.pop(key, None)
        tail, messages, continues = _new_messages(path, known[0] if known else None)
        new = pa.Table.from_batches([m.batch for m in messages], schema=tail.schema)
        table = pa.concat_tables([known[1], new]) if continues and known is not None else new
        if table.column(0).num_chunks > CHUNKS_BEFORE_COMBINING:
            table = table.combine_chunks()
        _remember(_tables, key, (tail, table))
        return table


# -- node times, indexed ----------------------------------------------------------------


class _Batch(NamedTuple):
    start: int  # its message's offset
    first_graph: int
    last_graph: int


@dataclass
class NodeTimesSegment:
    """What is known of one node-times segment: the batches read (graphs all finished),
    where they lie, and their node totals."""

    path: Path
    tail: _Tail
    batches: list[_Batch] = field(default_factory=list)
    totals: dict[str, pa.Table] | None = None  # None: no node times yet

    def read_graphs(self, wanted: np.ndarray) -> pa.Table:
        """The rows of the batches read that can hold some of the `wanted` graphs (sorted ids):
        a few graphs at each end of a run read the batches at its ends, not all between."""
        starts = [b.start for b in self.batches if holds_any(wanted, b.first_graph, b.last_graph)]
        batches = []
        with pa.OSFile(str(self.path), "rb") as source:
            for start in starts:
                source.seek(start)
                message = pa.ipc.MessageReader.open_stream(source).read_next_message()
                batches.append(pa.ipc.read_record_batch(message, self.tail.schema))
        return pa.Table.from_batches(batches, schema=self.tail.schema)


_segments: dict[str, NodeTimesSegment] = {}


def node_times_segment(
    path: Path, finished: pa.Array, totals_of: Callable[[pa.Table], dict[str, Any]]
) -> NodeTimesSegment:
    """The segment at `path`, its new batches taken up to the first that holds a graph not
    in `finished` (the recorder writes a batch's node times before its graphs' rows, so
    the batches after it are not finished either): indexed, and their totals
    (`totals_of(node times)`) added to the segment's."""
    with _lock:
        key = str(path)
        known = _segments.pop(key, None)
        tail, messages, continues = _new_messages(path, known.tail if known else None)
        segment = known if continues and known is not None else NodeTimesSegment(path, tail)
        resume = messages[0].start if messages else tail.offset  # what is not taken is read again
        segment.tail = _Tail(tail.identity, tail.schema, resume)
        taken: list[pa.RecordBatch] = []
        # (one lookup of all their graph ids in `finished`: a hash table of a long run's graphs
        # built once, not per batch)
        graph_ids = [message.batch.column("graph_id").to_numpy() for message in messages]
        found = pc.is_in(pa.array(np.concatenate(graph_ids or [np.empty(0, np.int32)])), value_set=finished).to_numpy(
            False
        )
        offset = 0
        for message, graph_id in zip(messages, graph_ids, strict=True):
            if len(graph_id):
                if not found[offset : offset + len(graph_id)].all():
                    break
                offset += len(graph_id)
                segment.batches.append(_Batch(message.start, int(graph_id.min()), int(graph_id.max())))
                taken.append(message.batch)
            segment.tail = _Tail(tail.identity, tail.schema, message.end)
        if taken:
            new_totals = totals_of(pa.Table.from_batches(taken, schema=tail.schema))
            segment.totals = new_totals if segment.totals is None else merge_totals([segment.totals, new_totals])
        _remember(_segments, key, segment)
        return segment


# -- Parquet parts, written once and whole: read once ----------------------------------

_parts_read: dict[str, tuple[tuple[int, int, int], pa.Table]] = {}


def read_part(path: Path) -> pa.Table:
    """The Parquet part at `path` of a small table, read once per file."""
    with _lock:
        key = str(path)
        identity = _identity(path)
        known = _parts_read.pop(key, None)
        table = known[1] if known is not None and known[0] == identity else _read_parquet(path)
        _remember(_parts_read, key, (identity, table))
        return table


def _read_parquet(path: Path) -> pa.Table:
    return pq.ParquetFile(path).read()  # (pq.read_table would import pyarrow.dataset)


def _identity(path: Path) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size


# -- parts of node times, summed once ------------------------------------------------------

_part_totals: dict[str, tuple[tuple[int, int, int], dict[str, pa.Table]]] = {}


def part_totals(path: Path, totals_of: Callable[[Path], tuple[dict[str, pa.Table], bool]]) -> dict[str, pa.Table]:
    """The node totals of the Parquet part at `path` (`totals_of(path)`: the totals, and
    whether they count all its events), summed once per file while they do."""
    with _lock:
        key = str(path)
        identity = _identity(path)
        known = _part_totals.pop(key, None)
        if known is not None and known[0] == identity:
            totals = known[1]
        else:
            totals, whole = totals_of(path)
            if not whole:  # some of its graphs unknown to the reader yet: summed again next time
                return totals
        _remember(_part_totals, key, (identity, totals))
        return totals


def holds_any(wanted: np.ndarray, first: Any, last: Any) -> bool:
    """Whether some of the `wanted` graph ids (sorted) lie in first..last (None: unknown, maybe)."""
    if first is None or last is None:
        return True
    return bool(np.searchsorted(wanted, first, "left") < np.searchsorted(wanted, last, "right"))


def _remember(memo: dict[str, Any], key: str, value: Any) -> None:
    memo[key] = value  # (popped before: now the most recent)
    while len(memo) > FILES_KEPT:
        memo.pop(next(iter(memo)))
