"""The byte layout of a GGUF file: every region, every tensor's exact file range.

Model files are untrusted (people download them), so this reader checks every count,
length, type, dimension, alignment and offset against the file's size before it trusts
it, and reads the header in bounded time and memory: a malformed file gives one
`ModelFileError` naming what is wrong and where. (gguf's own GGUFReader, which the tests
compare this with, can hang on a huge array length and takes seconds on a large vocabulary.)

GGUF (versions 2 and 3): magic, version, tensor count, metadata count; the metadata
key/value pairs; the tensor infos (name, dimensions, type, offset); padding up to the
alignment; then the tensor data, each tensor at an aligned offset.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .._errors import ModelFileError
from ..layers import NO_LAYER, layer_of

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ARRAY_NESTING = 4
MAX_ELEMENTS = 1 << 62

# Metadata value types and their fixed sizes (None: variable).
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
               8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip
# Arrays longer than this are not kept in memory, only checked and skipped (tokenizer vocabularies).
_KEEP_ARRAY_ELEMENTS = 64


@dataclass(frozen=True)
class TensorLayout:
    name: str
    type: str
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
    """A byte range of the file: header, metadata, tensor_infos, padding, tensor, unexplained
    (bytes that belong to nothing: reported as a problem) or trailing (after the last tensor)."""

    kind: str
    start: int
    end: int
    name: str = ""

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class GGUFLayout:
    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int  # where tensor data starts (absolute)
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
            rows.append({by: label, "tensors": len(members), "bytes": nbytes, "share": nbytes / total,
                         "bits_per_weight": 8 * nbytes / elements})  # fmt: skip
        return sorted(rows, key=lambda row: -row["bytes"])

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
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


def read_layout(path: str | os.PathLike[str]) -> GGUFLayout:
    """The validated layout of the GGUF file at `path`; ModelFileError if it is malformed."""
    file_path = Path(path)
    try:
        file_size = file_path.stat().st_size
        with file_path.open("rb") as handle:
            return _Parser(handle, file_path, file_size).parse()
    except OSError as error:
        raise ModelFileError(f"cannot read {file_path}: {error.strerror or error}") from None


class _Parser:
    def __init__(self, handle: BinaryIO, path: Path, file_size: int) -> None:
        self.handle = handle
        self.path = path
        self.file_size = file_size
        self.position = 0
        self.buffer = b""
        self.buffer_start = 0

    # -- bounded reading ---------------------------------------------------------------

    def fail(self, message: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a valid GGUF file: {message}")

    def read(self, size: int, what: str) -> bytes:
        if size < 0 or self.position + size > self.file_size:
            raise self.fail(f"{what} at byte {self.position} runs past the end of the file ({self.file_size} bytes)")
        offset = self.position - self.buffer_start
        if offset + size > len(self.buffer):
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

    def string(self, what: str) -> str:
        length = self.unpack("<Q", f"the length of {what}")
        raw = self.read(length, what)
        return raw.decode("utf-8", "replace")

    def remaining(self) -> int:
        return self.file_size - self.position

    # -- the file --------------------------------------------------------------------

    def parse(self) -> GGUFLayout:
        magic = self.read(4, "the magic number")
        if magic != MAGIC:
            raise self.fail(f"it starts with {magic!r}, not {MAGIC!r}")
        version = self.unpack("<I", "the version")
        if version not in SUPPORTED_VERSIONS:
            raise self.fail(f"version {version} is not supported (only {', '.join(map(str, SUPPORTED_VERSIONS))})")
        n_tensors = self.unpack("<Q", "the tensor count")
        n_kv = self.unpack("<Q", "the metadata count")
        # The smallest metadata entry takes 13 bytes, the smallest tensor info 28: a count
        # beyond what the file can hold is a lie, said now rather than after a long read.
        if n_kv * 13 > self.remaining():
            raise self.fail(f"it claims {n_kv} metadata entries, more than its {self.file_size} bytes can hold")
        if n_tensors * 28 > self.remaining():
            raise self.fail(f"it claims {n_tensors} tensors, more than its {self.file_size} bytes can hold")
        header_end = self.position
        metadata = {}
        for index in range(n_kv):
            key = self.string(f"the key of metadata entry {index}")
            value_type = self.unpack("<I", f"the type of metadata {key!r}")
            metadata[key] = self.value(value_type, f"metadata {key!r}", depth=0)
        metadata_end = self.position
        alignment = self.alignment(metadata)
        infos = [self.tensor_info(index) for index in range(n_tensors)]
        infos_end = self.position
        data_offset = -(-infos_end // alignment) * alignment
        # A file without tensors (llama.cpp's vocabulary-only files) may end before its
        # aligned data offset: there is no data to find there. With tensors, it may not.
        if data_offset > self.file_size and n_tensors:
            raise self.fail(f"tensor data would start at byte {data_offset}, past the end of the file")
        tensors, problems = self.place_tensors(infos, data_offset, alignment)
        regions = [
            Region("header", 0, header_end),
            Region("metadata", header_end, metadata_end),
            Region("tensor_infos", metadata_end, infos_end),
        ]
        if min(data_offset, self.file_size) > infos_end:
            regions.append(Region("padding", infos_end, min(data_offset, self.file_size)))
        covered = data_offset
        for tensor in tensors:
            if tensor.start > covered:
                regions.append(Region("unexplained", covered, tensor.start))
            regions.append(Region("tensor", tensor.start, tensor.end, tensor.name))
            if tensor.padding_after:
                regions.append(Region("padding", tensor.end, tensor.end + tensor.padding_after, tensor.name))
            covered = tensor.end + tensor.padding_after
        if covered < self.file_size:
            regions.append(Region("trailing", covered, self.file_size))
        return GGUFLayout(
            self.path, self.file_size, version, alignment, data_offset, metadata, tensors, regions, problems
        )

    def value(self, value_type: int, what: str, depth: int) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[value_type], what)
        if value_type == _STRING:
            return self.string(what)
        if value_type != _ARRAY:
            raise self.fail(f"{what} has unknown value type {value_type}")
        if depth >= MAX_ARRAY_NESTING:
            raise self.fail(f"{what} nests arrays more than {MAX_ARRAY_NESTING} deep")
        element_type = self.unpack("<I", f"the element type of {what}")
        count = self.unpack("<Q", f"the length of {what}")
        if element_type in _SCALAR_FORMATS:
            size = struct.calcsize(_SCALAR_FORMATS[element_type])
            if count * size > self.remaining():
                raise self.fail(f"{what} claims {count} elements, more than the file holds")
            if count > _KEEP_ARRAY_ELEMENTS:
                self.skip(count * size, what)
                return f"<{count} × {_TYPE_NAMES[element_type]}>"
            return [self.unpack(_SCALAR_FORMATS[element_type], what) for _ in range(count)]
        if element_type not in (_STRING, _ARRAY):
            raise self.fail(f"{what} has elements of unknown type {element_type}")
        if count * 8 > self.remaining():  # every string or array needs at least 8 bytes
            raise self.fail(f"{what} claims {count} elements, more than the file holds")
        kept = [self.value(element_type, f"element {i} of {what}", depth + 1) for i in range(count)]
        return kept if count <= _KEEP_ARRAY_ELEMENTS else f"<{count} × {_TYPE_NAMES[element_type]}>"

    def alignment(self, metadata: dict[str, Any]) -> int:
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool):
            raise self.fail(f"general.alignment is {alignment!r}, not a number")
        if alignment <= 0 or alignment & (alignment - 1):
            raise self.fail(f"general.alignment is {alignment}, not a power of two")
        return alignment

    def tensor_info(self, index: int) -> tuple[str, tuple[int, ...], int, int]:
        name = self.string(f"the name of tensor {index}")
        n_dims = self.unpack("<I", f"the dimension count of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        shape = tuple(self.unpack("<Q", f"dimension {d} of tensor {name!r}") for d in range(n_dims))
        ggml_type = self.unpack("<I", f"the type of tensor {name!r}")
        offset = self.unpack("<Q", f"the data offset of tensor {name!r}")
        return name, shape, ggml_type, offset

    def place_tensors(
        self, infos: list[tuple[str, tuple[int, ...], int, int]], data_offset: int, alignment: int
    ) -> tuple[list[TensorLayout], list[str]]:
        placed = []
        seen: set[str] = set()
        for name, shape, ggml_type, offset in infos:
            if name in seen:
                raise self.fail(f"tensor {name!r} appears twice")
            seen.add(name)
            type_name, nbytes, n_elements = self.tensor_size(name, shape, ggml_type)
            if offset % alignment:
                raise self.fail(f"tensor {name!r} starts at data offset {offset}, not a multiple of {alignment}")
            start = data_offset + offset
            if start + nbytes > self.file_size:
                raise self.fail(f"the data of tensor {name!r} (bytes {start}..{start + nbytes}) runs past the end")
            placed.append((start, start + nbytes, name, type_name, shape, n_elements))
        placed.sort()
        tensors: list[TensorLayout] = []
        problems: list[str] = []
        expected = data_offset
        for index, (start, end, name, type_name, shape, n_elements) in enumerate(placed):
            if start < expected:
                previous = placed[index - 1][2] if index else "the tensor infos"
                raise self.fail(f"tensor {name!r} overlaps {previous!r}")
            if start > expected:
                problems.append(f"{start - expected} bytes at {expected} belong to no tensor (before {name!r})")
            aligned_end = min(-(-end // alignment) * alignment, self.file_size)
            following = placed[index + 1][0] if index + 1 < len(placed) else aligned_end
            if following < end:
                raise self.fail(f"tensor {placed[index + 1][2]!r} overlaps {name!r}")
            padding = min(following, aligned_end) - end
            tensors.append(TensorLayout(name, type_name, shape, n_elements, start, end, padding, layer_of(name),
                                        category_of(name)))  # fmt: skip
            expected = end + padding
        return tensors, problems

    def tensor_size(self, name: str, shape: tuple[int, ...], ggml_type: int) -> tuple[str, int, int]:
        try:
            quant = GGMLQuantizationType(ggml_type)
            block_elements, block_bytes = GGML_QUANT_SIZES[quant]
        except (ValueError, KeyError):
            raise self.fail(f"tensor {name!r} has unknown type {ggml_type}") from None
        n_elements = 1
        for dim in shape:
            if dim == 0:
                raise self.fail(f"tensor {name!r} has a zero dimension {shape}")
            n_elements *= dim
            if n_elements > MAX_ELEMENTS:
                raise self.fail(f"tensor {name!r} of shape {shape} has more elements than can be addressed")
        if shape[0] % block_elements:
            raise self.fail(
                f"tensor {name!r}: {shape[0]} is not a multiple of {quant.name}'s block of {block_elements}"
            )
        return quant.name.lower(), n_elements // block_elements * block_bytes, n_elements


def category_of(name: str) -> str:
    """input / attention / ffn / norm / output / other, from a GGUF tensor name."""
    base = name.split(".", 2)[-1] if name.startswith("blk.") else name
    if "norm" in base:
        return "norm"
    if base.startswith("token_embd") or base.startswith("token_types") or base.startswith("position_embd"):
        return "input"
    if base.startswith("attn") or base.startswith("cross_attn"):
        return "attention"
    if base.startswith("ffn"):
        return "ffn"
    if base.startswith("output") or base.startswith("cls"):
        return "output"
    return "other"


__all__ = ["GGUFLayout", "NO_LAYER", "Region", "TensorLayout", "category_of", "read_layout"]


SAMPLED_HASH_CHUNKS = 16
SAMPLED_HASH_CHUNK_BYTES = 1 << 16


def sampled_hash(path: str | os.PathLike[str], header_bytes: int) -> str:
    """A content hash that costs about the same for any model size: BLAKE2b of the file
    size, its first `header_bytes` (the header, metadata and tensor infos: what names and
    places every tensor) in full, and 16 evenly spaced 64 KiB chunks of the rest, the last
    bytes included. It tells a replaced, requantized or re-exported model from the recorded
    one; a change inside tensor data between the sampled chunks goes unseen."""
    digest = hashlib.blake2b(digest_size=16)
    size = os.path.getsize(path)
    digest.update(size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        remaining = min(header_bytes, size)
        while remaining > 0:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
        last_start = max(size - SAMPLED_HASH_CHUNK_BYTES, 0)
        for index in range(SAMPLED_HASH_CHUNKS):
            handle.seek(last_start * index // (SAMPLED_HASH_CHUNKS - 1))
            digest.update(handle.read(SAMPLED_HASH_CHUNK_BYTES))
    return digest.hexdigest()


def memory_map_rows(layout: GGUFLayout) -> dict[str, list[Any]]:
    """The layout as the columns of a run's `memory_map` table: one row per region, tensors
    with their type, shape, layer and category."""
    columns: dict[str, list[Any]] = {name: [] for name in MEMORY_MAP_COLUMNS}
    tensors = {tensor.name: tensor for tensor in layout.tensors}
    for region in layout.regions:
        tensor = tensors.get(region.name) if region.kind == "tensor" else None
        shape = [*(tensor.shape if tensor else ()), 1, 1, 1, 1][:4] if tensor else [0, 0, 0, 0]
        row = {
            "model_path": str(layout.path),
            "kind": region.kind,
            "name": region.name,
            "start": region.start,
            "end": region.end,
            "type": tensor.type if tensor else "",
            "ne0": shape[0], "ne1": shape[1], "ne2": shape[2], "ne3": shape[3],
            "n_elements": tensor.n_elements if tensor else 0,
            "layer": tensor.layer if tensor else NO_LAYER,
            "category": tensor.category if tensor else "",
            "padding_after": tensor.padding_after if tensor else 0,
        }  # fmt: skip
        for name, value in row.items():
            columns[name].append(value)
    return columns


MEMORY_MAP_COLUMNS = ("model_path", "kind", "name", "start", "end", "type", "ne0", "ne1", "ne2", "ne3",
                      "n_elements", "layer", "category", "padding_after")  # fmt: skip
