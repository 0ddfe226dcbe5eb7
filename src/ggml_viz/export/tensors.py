"""Captured tensors (`--capture`) as NumPy .npz or safetensors files, to compare with a
reference implementation. Each array is named `NAME@graph<G>` and keeps ggml's dimension
order reversed into numpy's (ne3, ne2, ne1, ne0); the graph and its token positions go
with it (npz: in `__meta__`, a JSON string; safetensors: in the file's metadata)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import GgmlVizError
from ..runformat.reader import Run
from .base import Exporter, ExportOptions


def captured_tensors(run: Run, patterns: tuple[str, ...]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    captures = run.captures
    if captures.empty:
        raise GgmlVizError(f"{run.path} holds no captured tensors: record with --capture PATTERN")
    chosen = captures[[any(fnmatch.fnmatchcase(name, p) for p in patterns or ("*",)) for name in captures["name"]]]
    if chosen.empty:
        raise GgmlVizError(
            f"no captured tensor matches {', '.join(patterns)} (captured: "
            f"{', '.join(sorted(set(captures['name']))[:8])}…)"
        )
    positions = run.tokens.groupby("graph_id")["pos"].apply(list)
    arrays, meta = {}, {}
    for row in chosen.itertuples():
        key = f"{row.name}@graph{row.graph_id}"
        arrays[key] = run.captured(int(row.graph_id), int(row.node_index))
        graph_positions = [int(p) for p in positions.get(row.graph_id, [])]
        meta[key] = {
            "name": row.name,
            "graph_id": int(row.graph_id),
            "node_index": int(row.node_index),
            "ggml_type": row.type,
            "token_positions": graph_positions,
        }
    return arrays, meta


class NpzExporter(Exporter):
    name = "npz"
    extensions = (".npz",)
    summary = "captured tensors (--tensors GLOB) as a NumPy .npz archive, with graph and token positions"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        arrays, meta = captured_tensors(run, options.tensors)
        contents: dict[str, Any] = {"__meta__": np.array(json.dumps(meta)), **arrays}
        with open(output, "wb") as file:
            np.savez(file, **contents)
        return f"{len(arrays):,} tensors"


class SafetensorsExporter(Exporter):
    name = "safetensors"
    requires = ("safetensors",)
    extensions = (".safetensors",)
    summary = "captured tensors (--tensors GLOB) as safetensors, with graph and token positions in its metadata"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        from safetensors.numpy import save_file

        arrays, meta = captured_tensors(run, options.tensors)
        save_file(
            {k: np.ascontiguousarray(v) for k, v in arrays.items()},
            str(output),
            metadata={k: json.dumps(v) for k, v in meta.items()},
        )
        return f"{len(arrays):,} tensors"
