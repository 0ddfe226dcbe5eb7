"""Names for the weights a program left unnamed, from the model file.

ggml names an unnamed tensor `leaf_N` in each graph, by its place there: whisper.cpp's weights
are all such, so a run of whisper-cli would show `leaf_17` where the file says
`encoder.blocks.0.attn.query.weight`, without layers and without the file bytes each op reads.
The preload library fingerprints each unnamed weight in host memory the first time a graph
reads it (SPOOL_WEIGHTS frames); a weight whose fingerprint one tensor of the model file has
is given that tensor's name in the structs the graphs carry, before they are decoded, so that
everything after (descriptions, layers, the memory map's file ranges) sees the file's name.
A fingerprint several file tensors share (identical bytes) names nothing: counted as
ambiguous, as is a weight found in no file (unmatched).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..contract.records import WEIGHT_PRINT
from .ggml_api import TENSOR_DTYPE, field_bytes

NAME_BYTES = field_bytes("name").stop - field_bytes("name").start


class WeightNames:
    """The file names of one context's unnamed weights, by their data address. `in_files`:
    the fingerprints of its model files' tensors (tensor_fingerprints, one per file), asked
    for only when a weight without a name comes (never for llama.cpp's, all named)."""

    def __init__(self, in_files: Callable[[], Iterable[dict[tuple[int, int], list[str]]]]) -> None:
        self._files = in_files
        self._in_files: dict[tuple[int, int], list[str]] | None = None
        self._names: dict[int, bytes] = {}
        self._addresses = np.zeros(0, dtype=np.uint64)
        self.counts = {"named": 0, "ambiguous": 0, "unmatched": 0}

    def learn(self, prints: bytes) -> None:
        """The weights of a SPOOL_WEIGHTS frame."""
        if self._in_files is None:
            self._in_files = {}
            for file in self._files():
                for key, names in file.items():
                    self._in_files.setdefault(key, []).extend(names)
        for data, nbytes, fingerprint in np.frombuffer(prints, dtype=WEIGHT_PRINT.dtype).tolist():
            names = self._in_files.get((nbytes, fingerprint), [])
            kind = "named" if len(names) == 1 else "ambiguous" if names else "unmatched"
            self.counts[kind] += 1
            if kind == "named":
                self._names[data] = names[0].encode()[: NAME_BYTES - 1]
        self._addresses = np.fromiter(self._names, dtype=np.uint64, count=len(self._names))

    def rename(self, leaves: bytes) -> bytes:
        """Leaf structs (TENSOR_DTYPE bytes) with the named weights' names in them."""
        if not len(self._addresses) or not leaves:
            return leaves
        structs = np.frombuffer(leaves, dtype=TENSOR_DTYPE)
        hits = np.flatnonzero(np.isin(structs["data"], self._addresses))
        if not len(hits):
            return leaves
        structs = structs.copy()
        for row in hits.tolist():
            structs["name"][row] = self._names[int(structs["data"][row])]
        return structs.tobytes()
