"""Exporters: one class per format, found by name or by the output file's extension.

An exporter has a `name`, the file `extensions` it claims, a one-line `summary`, and
`export(run, output, options) -> str` (what it wrote, in words). Adding a format is adding
a class to `EXPORTERS` (see `registry.py`), or, from another package, an entry point in the
group `ggml_viz.exporters` (`registry.exporter_plugins`); `all_exporters()` holds both.

`joined_trace.py` is the one export of a joined distributed run rather than of a run: its
Chrome/Perfetto trace across hosts (`ggml-viz join --trace`).
"""

from __future__ import annotations

from .base import Exporter, ExportOptions
from .registry import EXPORTERS, all_exporters, exporter_for

__all__ = ["EXPORTERS", "ExportOptions", "Exporter", "all_exporters", "exporter_for"]
