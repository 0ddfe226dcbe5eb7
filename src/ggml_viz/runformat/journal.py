"""The graph journal: each graph's row and node times, on disk the moment it is recorded.

Writing a graph's few rows to the Arrow streams costs far more, in the traced program's
time, than the bytes are worth; so graphs are appended here, one `os.write` per batch of
graphs the recorder writes, and moved to the streams in larger batches. A crash loses only
graphs not yet journaled (see ContextTracer: at most the last half second's): the reader
takes the graphs the
streams lack from the journal. Records are length-prefixed and
checksummed, so a torn last record is recognized and left out. (JSON and raw arrays, not
pickle: a run directory may come from someone else.)

Record: b"GVJ2", u32 JSON length, u32 timed nodes n, the graph row as JSON, node_index
int32[n], start_ns int64[n], end_ns int64[n], wait_ns int64[n] (-1: not seen), u32 CRC-32
of everything before it. (b"GVJ1" records, from older versions, have no wait_ns.)
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GVJ2"
_MAGIC_WITHOUT_WAITS = b"GVJ1"
_HEAD = struct.Struct("<4sII")
_CRC = struct.Struct("<I")
_TIMES = (("node_index", "<i4"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("wait_ns", "<i8"))
JOURNAL_FILE = "graphs.journal"


def encode(row: dict[str, Any], times: Mapping[str, np.ndarray]) -> bytes:
    """A graph's record: its row, and its node times (node_index, start_ns, end_ns, wait_ns)."""
    text = json.dumps(row, separators=(",", ":")).encode()
    body = _HEAD.pack(MAGIC, len(text), len(times["node_index"])) + text
    if len(times["node_index"]):
        body += b"".join(times[column].astype(dtype).tobytes() for column, dtype in _TIMES)
    return body + _CRC.pack(zlib.crc32(body))


class JournalWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def append(self, record: bytes) -> None:
        written = os.write(self._fd, record)
        if written != len(record):
            raise OSError(f"short write to {self.path} ({written} of {len(record)} bytes)")

    def clear(self) -> None:
        """Everything in the journal has reached the streams."""
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)

    def close(self, remove: bool) -> None:
        os.close(self._fd)
        if remove:
            self.path.unlink(missing_ok=True)


def read(path: Path) -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Every whole record: (graph row, node times); stops at a torn or damaged record."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records = []
    position = 0
    while position + _HEAD.size <= len(data):
        magic, text_length, n_times = _HEAD.unpack_from(data, position)
        columns = _TIMES if magic == MAGIC else _TIMES[:-1]
        end = position + _HEAD.size + text_length + n_times * sum(np.dtype(dtype).itemsize for _, dtype in columns)
        if magic not in (MAGIC, _MAGIC_WITHOUT_WAITS) or end + _CRC.size > len(data):
            break
        if _CRC.unpack_from(data, end)[0] != zlib.crc32(data[position:end]):
            break
        text_start = position + _HEAD.size
        times_start = text_start + text_length
        try:
            row = json.loads(data[text_start:times_start])
        except ValueError:
            break
        times = {}
        for column, dtype in columns:
            times[column] = np.frombuffer(data, dtype, n_times, times_start)
            times_start += n_times * np.dtype(dtype).itemsize
        times.setdefault("wait_ns", np.full(n_times, -1, dtype=np.int64))
        records.append((row, times))
        position = end + _CRC.size
    return records
