"""Each row's op of a per-graph op totals table as a small integer, hashed once per table.

The growth-with-context finding and the viewer's whole-run timeline both group the per-graph op
totals (some twenty million rows for a billion node events) by op; hashing every row's op name
is most of what either costs, so the codes are kept while the table lives."""

from __future__ import annotations

import weakref

import numpy as np
import pyarrow as pa

_KEPT: dict[int, tuple[weakref.ref[pa.Table], list[str], np.ndarray]] = {}  # by id(table)


def op_codes(table: pa.Table) -> tuple[list[str], np.ndarray]:
    """The ops of `table`'s `op` column in the order first met, and each row's op as its place
    among them (-1: no op). Encoded a batch at a time (a batch's dictionary mapped onto the
    names): no full-length array of op names or of Arrow's 32-bit indices."""
    held = _KEPT.get(id(table))
    if held is not None and held[0]() is table:
        return held[1], held[2]
    names: list[str] = []
    pieces = []
    for chunk in table.column("op").chunks:
        encoded = chunk.dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        names.extend(name for name in dictionary if name not in names)
        # the chunk's dictionary codes as places in `names`, and the last: a null op
        code_type = np.int16 if len(names) < 2**15 else np.int32  # (a few dozen ops: two bytes a row)
        lookup = np.array([names.index(name) for name in dictionary] + [-1], code_type)
        pieces.append(lookup[encoded.indices.fill_null(len(dictionary)).to_numpy()])
    codes = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
    _KEPT[id(table)] = (weakref.ref(table), names, codes)
    weakref.finalize(table, _KEPT.pop, id(table), None)
    return names, codes
