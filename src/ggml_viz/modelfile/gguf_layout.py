"""The byte layout of a GGUF file (versions 2 and 3): magic, version, tensor count, metadata
count; the metadata key/value pairs; the tensor infos (name, dimensions, type, offset); padding
up to the alignment; then the tensor data, each tensor at an aligned offset.

(gguf's own GGUFReader, which the tests compare this with, can hang on a huge array length and
takes seconds on a large vocabulary.)
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from ..categories import category_of
from ..layers import layer_of
from .model_layout import BoundedReader, ModelLayout, Region, TensorLayout

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ARRAY_NESTING = 4

# Metadata value types and their fixed sizes (None: variable).
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
               8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip
# Arrays longer than this are not kept in memory, only checked and skipped (tokenizer vocabularies).
_KEEP_ARRAY_ELEMENTS = 64


def read_gguf_layout(handle: BinaryIO, path: Path, file_size: int) -> ModelLayout:
    """The validated layout of the GGUF file open in `handle`; ModelFileError if it is malformed."""
    return _Parser(handle, path, file_size).parse()


class _Parser(BoundedReader):
    format_name = "GGUF"

    def string(self, what: str) -> str:
        length = self.unpack("<Q", f"the length of {what}")
        raw = self.read(length, what)
        return raw.decode("utf-8", "replace")

    def parse(self) -> ModelLayout:
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
        return ModelLayout(
            format="gguf",
            path=self.path,
            file_size=self.file_size,
            version=version,
            alignment=alignment,
            data_offset=data_offset,
            metadata=metadata,
            tensors=tensors,
            regions=regions,
            problems=problems,
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
            tensors.append(
                TensorLayout(name, type_name, shape, n_elements, start, end, padding, layer_of(name), category_of(name))
            )
            expected = end + padding
        return tensors, problems
