"""Reading the spool a native program's preload library writes (its layout: spool.h beside it).

A spool is read as it grows: `SpoolReader.read_new()` gives the whole frames written since
the last call and leaves a frame cut short (the program is writing it, or died in it) for
later. What a SPOOL_TAKE frame holds comes back as the same named records the Python
extension gives (GraphRecord, RepeatRecord, DecodesRecord), so both paths share the code
that turns records into a run.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..._errors import RunFormatError
from ...runformat.schema import SPOOL_DIR
from ..contract.constants import (
    SPOOL_CONNECTION,
    SPOOL_CONTEXT,
    SPOOL_END,
    SPOOL_FAILED,
    SPOOL_GPU,
    SPOOL_MAGIC,
    SPOOL_START,
    SPOOL_TAKE,
    SPOOL_UNTRACED,
    SPOOL_VERSIONS_PARTS,
    SPOOL_WEIGHTS,
    SPOOL_WIRE,
)
from ..contract.records import (
    DECODE,
    FRAME_HEADER,
    GRAPH_HEAD,
    GRAPH_PARTS,
    TAKE_HEAD,
    DecodesRecord,
    GraphRecord,
    RepeatRecord,
)

MAGIC = SPOOL_MAGIC
START, CONTEXT, TAKE, FAILED, END, GPU = SPOOL_START, SPOOL_CONTEXT, SPOOL_TAKE, SPOOL_FAILED, SPOOL_END, SPOOL_GPU
WEIGHTS, UNTRACED, CONNECTION, WIRE = SPOOL_WEIGHTS, SPOOL_UNTRACED, SPOOL_CONNECTION, SPOOL_WIRE
KINDS = (START, CONTEXT, TAKE, FAILED, END, GPU, WEIGHTS, UNTRACED, CONNECTION, WIRE)
MAX_FRAME_BYTES = 1 << 34  # no take is this large: a size past it is damage
TRAILER_BYTES = 4  # the payload's CRC-32
SPOOL_SUFFIX = ".spool"
# A spool of an earlier version (its magic) has the graph parts of its day.
PARTS_OF = {magic: GRAPH_PARTS[:count] for magic, count in SPOOL_VERSIONS_PARTS.items()}


def graph_header_dtype(parts: tuple[str, ...] = GRAPH_PARTS) -> np.dtype:
    """A graph's header in a SPOOL_TAKE frame, with the sizes of these parts (the contract's
    SpoolGraphHeader, with fewer in an earlier spool's)."""
    if len(parts) == len(GRAPH_PARTS):
        return GRAPH_HEAD.dtype
    fields = [field.numpy for field in GRAPH_HEAD.fields if field.name != "part_sizes"]
    return np.dtype([*fields, ("part_sizes", "<u8", (len(parts),))])


@dataclass
class Take:
    """What a SPOOL_TAKE frame holds: one take of a context's recorder."""

    decodes: DecodesRecord
    token_texts: dict[int, str]
    graphs: list[GraphRecord | RepeatRecord]


class Frame(NamedTuple):
    kind: int
    context_id: int
    payload: bytes
    parts: tuple[str, ...] = GRAPH_PARTS  # a graph's parts in its spool's version

    def json(self) -> dict[str, Any]:
        return json.loads(self.payload.decode("utf-8", "replace"))

    def take(self) -> Take:
        return parse_take(self.payload, self.parts)


@dataclass
class SpoolReader:
    """Reads one spool file from where it left off. A frame whose checksum is wrong stops the
    reading there (`damage` says where): the frames before it are kept."""

    path: Path
    offset: int = 0  # bytes read so far
    damage: str | None = None
    _started: bool = False  # the magic was read
    _parts: tuple[str, ...] = GRAPH_PARTS
    _pending: bytes = field(default=b"", repr=False)

    def read_new(self) -> list[Frame]:
        """The whole frames written since the last call (RunFormatError: not a spool at all)."""
        if self.damage is not None:
            return []
        with open(self.path, "rb") as spool:
            spool.seek(self.offset)
            data = self._pending + spool.read()
            self.offset = spool.tell()
        position = 0
        if not self._started:
            if len(data) < len(MAGIC):
                self._pending = data
                return []
            if data[: len(MAGIC)] not in PARTS_OF:
                raise RunFormatError(f"{self.path} is not a ggml-viz spool")
            position, self._started, self._parts = len(MAGIC), True, PARTS_OF[data[: len(MAGIC)]]
        frames = []
        while len(data) - position >= FRAME_HEADER.size:
            kind, context_id, size = _frame_header(data, position)
            end = position + FRAME_HEADER.size + size
            if kind not in KINDS or size > MAX_FRAME_BYTES:
                self.damage = f"{self.path.name}: a damaged frame header at byte {self.offset - len(data) + position}"
                break
            if len(data) < end + TRAILER_BYTES:
                break  # being written, or cut short by the program's death
            payload = data[position + FRAME_HEADER.size : end]
            (checksum,) = struct.unpack_from("<I", data, end)
            if checksum != zlib.crc32(payload):
                self.damage = f"{self.path.name}: a damaged frame at byte {self.offset - len(data) + position}"
                break
            frames.append(Frame(kind, context_id, payload, self._parts))
            position = end + TRAILER_BYTES
        self._pending = data[position:] if self.damage is None else b""
        return frames

    @property
    def unread_bytes(self) -> int:
        """Bytes at the end that make no whole frame (a frame cut short by a crash, if the writer is gone)."""
        return len(self._pending)


def first_frame(path: Path) -> Frame | None:
    """A spool's first frame (its START), read alone: not the whole spool. None if it is not
    there whole and sound."""
    with open(path, "rb") as spool:
        head = spool.read(len(MAGIC) + FRAME_HEADER.size)
        if len(head) < len(MAGIC) + FRAME_HEADER.size or head[: len(MAGIC)] not in PARTS_OF:
            return None
        kind, context_id, size = _frame_header(head, len(MAGIC))
        if kind not in KINDS or size > MAX_FRAME_BYTES:
            return None
        rest = spool.read(size + TRAILER_BYTES)
    if len(rest) < size + TRAILER_BYTES or struct.unpack_from("<I", rest, size)[0] != zlib.crc32(rest[:size]):
        return None
    return Frame(kind, context_id, rest[:size])


def spool_files(run_dir: Path) -> list[Path]:
    """The spool files of a run (one per traced process), oldest first."""
    folder = run_dir / SPOOL_DIR
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*" + SPOOL_SUFFIX), key=lambda path: (path.stat().st_mtime, path.name))


def parse_take(payload: bytes, graph_parts: tuple[str, ...] = GRAPH_PARTS) -> Take:
    """A SPOOL_TAKE payload (see spool.h), checked against its own sizes; its graphs have
    `graph_parts` (an earlier spool's lack the later ones: empty)."""
    header_dtype = graph_header_dtype(graph_parts)
    try:
        head = np.frombuffer(_cut(payload, 0, TAKE_HEAD.size), TAKE_HEAD.dtype)[0]
        n_calls, n_tokens, n_graphs, text_bytes = (int(head[field.name]) for field in TAKE_HEAD.fields)
        position = TAKE_HEAD.size
        calls = _cut(payload, position, n_calls * DECODE.size)
        position += len(calls)
        columns = []
        for width in (4, 4, 4, 1):
            columns.append(_cut(payload, position, n_tokens * width))
            position += n_tokens * width
        lengths = np.frombuffer(_cut(payload, position, n_tokens * 4), np.uint32)
        position += n_tokens * 4
        texts = _cut(payload, position, text_bytes)
        position += text_bytes
        token_texts: dict[int, str] = {}
        if text_bytes:
            ends = np.cumsum(lengths, dtype=np.int64)
            for token, start, end in zip(
                np.frombuffer(columns[0], np.int32).tolist(), (ends - lengths).tolist(), ends.tolist(), strict=True
            ):
                token_texts[token] = texts[start:end].decode("utf-8", "replace")
        graphs: list[GraphRecord | RepeatRecord] = []
        for _ in range(n_graphs):
            header = np.frombuffer(_cut(payload, position, header_dtype.itemsize), header_dtype)[0]
            position += header_dtype.itemsize
            if header["plain_repeat"]:
                graphs.append(RepeatRecord(int(header["n_nodes"]), int(header["start_ns"]), int(header["end_ns"])))
                continue
            parts: dict[str, bytes] = dict.fromkeys(GRAPH_PARTS, b"")
            for name, size in zip(graph_parts, header["part_sizes"].tolist(), strict=True):
                parts[name] = _cut(payload, position, size)
                position += size
            graphs.append(
                GraphRecord(
                    **parts,
                    boundary_ns=int(header["boundary_ns"]),
                    same=bool(header["same"]),
                    n_timed=int(header["n_timed"]),
                    end_ns=int(header["end_ns"]),
                )
            )
    except ValueError as error:
        raise RunFormatError(f"a damaged spool frame: {error}") from None
    if position != len(payload):
        raise RunFormatError(f"a spool frame holds {len(payload) - position} bytes more than it says")
    return Take(DecodesRecord(calls, *columns), token_texts, graphs)


def _frame_header(data: bytes, position: int) -> tuple[int, int, int]:
    """A SpoolFrameHeader's kind, context and payload size."""
    header = np.frombuffer(data, FRAME_HEADER.dtype, 1, position)[0]
    return int(header["kind"]), int(header["context_id"]), int(header["size"])


def _cut(payload: bytes, start: int, size: int) -> bytes:
    if start + size > len(payload):
        raise RunFormatError("a spool frame is shorter than its sizes say")
    return payload[start : start + size]
