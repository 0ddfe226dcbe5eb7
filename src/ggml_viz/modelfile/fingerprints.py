"""Fingerprints of a model file's tensors: how a weight the program left unnamed is found in
the file by its bytes (capture/weight_names.py).

A program that reads its weights into memory byte for byte (whisper.cpp does, and names none
of them) gives the recorder nothing but their addresses. The recorder hashes three samples of
each such weight's bytes (capture/core/recorder.c: weight_fingerprint); the same hash of each
tensor's bytes in the file says which tensor it is. Both sides must hash alike: FNV-1a (64
bits) over the first, the middle and the last 64 bytes (all of them when fewer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

SAMPLE_BYTES = 64
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def _fnv1a(hash_: int, data: bytes) -> int:
    for byte in data:
        hash_ = ((hash_ ^ byte) * _FNV_PRIME) & _MASK
    return hash_


def sample_offsets(nbytes: int) -> tuple[int, int, int, int]:
    """The sample length and where the three samples start, relative to the tensor."""
    k = min(nbytes, SAMPLE_BYTES)
    return k, 0, (nbytes - k) // 2, nbytes - k


def weight_fingerprint(data: bytes) -> int:
    """The fingerprint of a tensor's bytes, as the recorder computes it."""
    k, first, middle, last = sample_offsets(len(data))
    hash_ = _FNV_OFFSET
    for start in (first, middle, last):
        hash_ = _fnv1a(hash_, data[start : start + k])
    return hash_


def _file_fingerprint(handle: BinaryIO, start: int, nbytes: int) -> int:
    k, *offsets = sample_offsets(nbytes)
    hash_ = _FNV_OFFSET
    for offset in offsets:
        handle.seek(start + offset)
        hash_ = _fnv1a(hash_, handle.read(k))
    return hash_


def tensor_fingerprints(layout: Any) -> dict[tuple[int, int], list[str]]:
    """Per (nbytes, fingerprint): the names of the tensors of a model layout (a reader's: a path
    and tensors with name, start and end) whose bytes have it."""
    found: dict[tuple[int, int], list[str]] = {}
    with Path(layout.path).open("rb") as handle:
        for tensor in layout.tensors:
            nbytes = tensor.end - tensor.start
            found.setdefault((nbytes, _file_fingerprint(handle, tensor.start, nbytes)), []).append(tensor.name)
    return found
