"""The graph journal: each graph's row and node times, on disk the moment it is recorded.

Writing a graph's few rows to the Arrow streams costs far more, in the traced program's
time, than the bytes are worth; so graphs are appended here, one `os.write` per batch of
graphs the recorder writes, and moved to the streams in larger batches. A crash loses only
graphs not yet journaled (see ContextTracer: at most the last half second's): the reader
takes the graphs the
streams lack from the journal. Records are length-prefixed and
checksummed, so a torn last record is recognized and left out. (JSON and raw arrays, not
pickle: a run directory may come from someone else.)

Record: b"GVJ1", u32 JSON length, u32 timed nodes n, the graph row as JSON, node_index
int32[n], start_ns int64[n], end_ns int64[n], u32 CRC-32 of everything before it.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GVJ1"
_HEAD = struct.Struct("<4sII")
_CRC = struct.Struct("<I")
JOURNAL_FILE = "graphs.journal"


def encode(row: dict[str, Any], node_index: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> bytes:
    text = json.dumps(row, separators=(",", ":")).encode()
    body = _HEAD.pack(MAGIC, len(text), len(node_index)) + text
    if len(node_index):
        body += node_index.astype("<i4").tobytes() + start_ns.astype("<i8").tobytes() + end_ns.astype("<i8").tobytes()
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
        end = position + _HEAD.size + text_length + n_times * 20
        if magic != MAGIC or end + _CRC.size > len(data):
            break
        if _CRC.unpack_from(data, end)[0] != zlib.crc32(data[position:end]):
            break
        text_start = position + _HEAD.size
        times_start = text_start + text_length
        try:
            row = json.loads(data[text_start:times_start])
        except ValueError:
            break
        node_index = np.frombuffer(data, "<i4", n_times, times_start)
        start_ns = np.frombuffer(data, "<i8", n_times, times_start + 4 * n_times)
        end_ns = np.frombuffer(data, "<i8", n_times, times_start + 12 * n_times)
        records.append((row, {"node_index": node_index, "start_ns": start_ns, "end_ns": end_ns}))
        position = end + _CRC.size
    return records
