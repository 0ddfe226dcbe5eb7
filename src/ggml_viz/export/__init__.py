"""Exporters: one class per format, found by name or by the output file's extension.

An exporter has a `name`, the file `extensions` it claims, a one-line `summary`, and
`export(run, output, options) -> str` (what it wrote, in words). Adding a format is adding
a class to `EXPORTERS` (see `registry.py`).
"""

from __future__ import annotations

from .base import Exporter, ExportOptions
from .registry import EXPORTERS, exporter_for

__all__ = ["EXPORTERS", "ExportOptions", "Exporter", "exporter_for"]
