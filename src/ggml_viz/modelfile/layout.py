"""The byte layout of a model file: every region, every tensor's exact file range.

`read_layout` reads GGUF (gguf_layout.py) and whisper.cpp's legacy ggml format (ggml_legacy.py),
told apart by the file's magic, into one `ModelLayout` (model_layout.py); everything downstream
(the memory map table, `ggml-viz memmap`) reads that alone. Model files are untrusted: a
malformed one gives one `ModelFileError` naming what is wrong and where.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from .._errors import ModelFileError
from ..categories import category_of
from ..layers import NO_LAYER
from . import ggml_legacy, gguf_layout
from .model_layout import ModelLayout, Region, TensorLayout

_READERS: dict[bytes, Callable[[BinaryIO, Path, int], ModelLayout]] = {
    gguf_layout.MAGIC: gguf_layout.read_gguf_layout,
    ggml_legacy.MAGIC: ggml_legacy.read_ggml_legacy_layout,
}
# Magic numbers of llama.cpp's formats before GGUF (as little-endian uint32), said by name.
_OLD_LLAMA_FORMATS = {b"fmgg": "ggmf", b"tjgg": "ggjt", b"algg": "ggla"}


def read_layout(path: str | os.PathLike[str]) -> ModelLayout:
    """The validated layout of the model file at `path` (GGUF, or whisper.cpp's legacy ggml
    format); ModelFileError if it is malformed or of another format."""
    file_path = Path(path)
    try:
        file_size = file_path.stat().st_size
        with file_path.open("rb") as handle:
            magic = handle.read(4)
            reader = _READERS.get(magic)
            if reader is None:
                raise ModelFileError(_unknown_format(file_path, magic, file_size))
            return reader(handle, file_path, file_size)
    except OSError as error:
        raise ModelFileError(f"cannot read {file_path}: {error.strerror or error}") from None


def _unknown_format(path: Path, magic: bytes, file_size: int) -> str:
    if len(magic) < 4:
        return f"{path} is not a model file: the magic number at byte 0 runs past its end ({file_size} bytes)"
    if magic in _OLD_LLAMA_FORMATS:
        return f"{path} is in llama.cpp's old {_OLD_LLAMA_FORMATS[magic]} format, which ggml-viz does not read"
    return (
        f"{path} is not a model file ggml-viz reads: it starts with {magic!r}, not {gguf_layout.MAGIC!r} (GGUF)"
        f" nor {ggml_legacy.MAGIC!r} (whisper.cpp's legacy ggml format)"
    )


__all__ = [
    "NO_LAYER",
    "ModelLayout",
    "Region",
    "TensorLayout",
    "category_of",
    "memory_map_rows",
    "read_layout",
    "sampled_hash",
]


SAMPLED_HASH_CHUNKS = 16
SAMPLED_HASH_CHUNK_BYTES = 1 << 16


def sampled_hash(path: str | os.PathLike[str], header_bytes: int) -> str:
    """A content hash that costs about the same for any model size: BLAKE2b of the file
    size, its first `header_bytes` (a layout's data_offset: GGUF's header, metadata and tensor
    infos, which name and place every tensor; the legacy format's hyperparameters, mel filters
    and vocabulary) in full, and 16 evenly spaced 64 KiB chunks of the rest, the last
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


def memory_map_rows(layout: ModelLayout) -> dict[str, list[Any]]:
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
            "ne0": shape[0],
            "ne1": shape[1],
            "ne2": shape[2],
            "ne3": shape[3],
            "n_elements": tensor.n_elements if tensor else 0,
            "layer": tensor.layer if tensor else NO_LAYER,
            "category": tensor.category if tensor else "",
            "padding_after": tensor.padding_after if tensor else 0,
        }
        for name, value in row.items():
            columns[name].append(value)
    return columns


MEMORY_MAP_COLUMNS = ("model_path", "kind", "name", "start", "end", "type", "ne0", "ne1", "ne2", "ne3",
                      "n_elements", "layer", "category", "padding_after")  # fmt: skip
