"""What a model file's byte layout is, whatever its format: every region and every tensor's
exact file range; and the bounded reading every format's reader shares.

Model files are untrusted (people download them), so a reader checks every count, length,
type, dimension and offset against the file's size before it trusts it, and reads the header
in bounded time and memory: a malformed file gives one `ModelFileError` naming what is wrong
and where.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .._errors import ModelFileError
from ..layers import NO_LAYER

MAX_ELEMENTS = 1 << 62


@dataclass(frozen=True)
class TensorLayout:
    name: str
    type: str  # as ggml names it: f32, f16, q4_k, ...
    shape: tuple[int, ...]  # ne0, ne1, ... as in ggml (fastest-varying first)
    n_elements: int
    start: int  # absolute file offset of the first byte
    end: int  # one past the last byte
    padding_after: int  # alignment padding between this tensor and what follows
    layer: int
    category: str

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.nbytes / self.n_elements if self.n_elements else 0.0


@dataclass(frozen=True)
class Region:
    """A byte range of the file. GGUF: header, metadata, tensor_infos, padding, tensor.
    whisper.cpp's legacy format: header, mel_filters, vocabulary, tensor_header, tensor.
    Either: unexplained (bytes that belong to nothing: reported as a problem) or trailing
    (after the last tensor). Regions of one tensor carry its name."""

    kind: str
    start: int
    end: int
    name: str = ""

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class ModelLayout:
    format: str  # "gguf", or "ggml": whisper.cpp's legacy ggml format
    path: Path
    file_size: int
    version: int  # the GGUF version; 0 for the legacy format, which has none
    alignment: int  # of tensor data; 1 where tensors are packed one after the other
    data_offset: int  # where the tensors start: GGUF's data section, the legacy format's first tensor record
    metadata: dict[str, Any]
    tensors: list[TensorLayout]
    regions: list[Region]
    problems: list[str] = field(default_factory=list)  # layout oddities that are not fatal

    def tensor(self, name: str) -> TensorLayout | None:
        return self._by_name.get(name)

    @property
    def _by_name(self) -> dict[str, TensorLayout]:
        cache = self.__dict__.get("_by_name_cache")
        if cache is None:
            cache = self.__dict__["_by_name_cache"] = {tensor.name: tensor for tensor in self.tensors}
        return cache

    def summary(self, by: str) -> list[dict[str, Any]]:
        """Bytes, share of the tensor bytes and bits per weight, grouped by layer, category or type."""
        groups: dict[Any, list[TensorLayout]] = {}
        for tensor in self.tensors:
            groups.setdefault(getattr(tensor, by), []).append(tensor)
        total = sum(t.nbytes for t in self.tensors) or 1
        rows = []
        for key, members in groups.items():
            nbytes = sum(t.nbytes for t in members)
            elements = sum(t.n_elements for t in members)
            label = "none" if by == "layer" and key == NO_LAYER else key
            rows.append(
                {
                    by: label,
                    "tensors": len(members),
                    "bytes": nbytes,
                    "share": nbytes / total,
                    "bits_per_weight": 8 * nbytes / elements,
                }
            )
        return sorted(rows, key=lambda row: -row["bytes"])

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "file_size": self.file_size,
            "version": self.version,
            "alignment": self.alignment,
            "data_offset": self.data_offset,
            "architecture": self.metadata.get("general.architecture"),
            "tensors": [{**asdict(t), "shape": list(t.shape), "bytes": t.nbytes} for t in self.tensors],
            "regions": [{**asdict(r), "bytes": r.nbytes} for r in self.regions],
            "problems": self.problems,
            "summary": {by: self.summary(by) for by in ("category", "type", "layer")},
        }


class BoundedReader:
    """Reads a file part by part from the start, each part checked against the file's size
    before it is read, through a 1 MiB window: no length read from the file is trusted."""

    format_name = "model"  # what the errors call the file

    def __init__(self, handle: BinaryIO, path: Path, file_size: int) -> None:
        self.handle = handle
        self.path = path
        self.file_size = file_size
        self.position = 0
        self.buffer = b""
        self.buffer_start = 0

    def fail(self, message: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a valid {self.format_name} file: {message}")

    def read(self, size: int, what: str) -> bytes:
        if size < 0 or self.position + size > self.file_size:
            raise self.fail(f"{what} at byte {self.position} runs past the end of the file ({self.file_size} bytes)")
        offset = self.position - self.buffer_start
        if offset < 0 or offset + size > len(self.buffer):
            self.handle.seek(self.position)
            self.buffer = self.handle.read(max(size, 1 << 20))
            self.buffer_start, offset = self.position, 0
        self.position += size
        return self.buffer[offset : offset + size]

    def skip(self, size: int, what: str) -> None:
        if size < 0 or self.position + size > self.file_size:
            raise self.fail(f"{what} at byte {self.position} runs past the end of the file ({self.file_size} bytes)")
        self.position += size

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def remaining(self) -> int:
        return self.file_size - self.position

    def tensor_size(self, name: str, shape: tuple[int, ...], ggml_type: int) -> tuple[str, int, int]:
        """(type name, bytes, elements) of a tensor; refused if its type is unknown to ggml, a
        dimension is not positive, its element count is beyond addressing, or its rows do not
        fill whole quantization blocks."""
        try:
            quant = GGMLQuantizationType(ggml_type)
            block_elements, block_bytes = GGML_QUANT_SIZES[quant]
        except (ValueError, KeyError):
            raise self.fail(f"tensor {name!r} has unknown type {ggml_type}") from None
        n_elements = 1
        for dim in shape:
            if dim <= 0:
                raise self.fail(f"tensor {name!r} has a {'zero' if dim == 0 else 'negative'} dimension {shape}")
            n_elements *= dim
            if n_elements > MAX_ELEMENTS:
                raise self.fail(f"tensor {name!r} of shape {shape} has more elements than can be addressed")
        if shape[0] % block_elements:
            raise self.fail(
                f"tensor {name!r}: {shape[0]} is not a multiple of {quant.name}'s block of {block_elements}"
            )
        return quant.name.lower(), n_elements // block_elements * block_bytes, n_elements
