"""Every exporter, and finding one by name or by the output's extension."""

from __future__ import annotations

from pathlib import Path

from .._errors import CommandError
from .base import Exporter
from .graphs import DotExporter, PngGraphExporter, SvgGraphExporter
from .pictures import MemoryPngExporter, MemorySvgExporter, TimelinePngExporter, TimelineSvgExporter
from .profiles import SpeedscopeExporter, TensorBoardExporter
from .report import HtmlReportExporter
from .tables import CsvExporter, ParquetExporter
from .tensors import NpzExporter, SafetensorsExporter
from .traces import ChromeJsonExporter, PerfettoExporter

EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        PerfettoExporter(),
        ChromeJsonExporter(),
        CsvExporter(),
        ParquetExporter(),
        DotExporter(),
        SvgGraphExporter(),
        PngGraphExporter(),
        TimelineSvgExporter(),
        TimelinePngExporter(),
        MemorySvgExporter(),
        MemoryPngExporter(),
        SpeedscopeExporter(),
        TensorBoardExporter(),
        HtmlReportExporter(),
        NpzExporter(),
        SafetensorsExporter(),
    )
}


def exporter_for(name: str | None, output: Path) -> Exporter:
    """The exporter called `name`, or the one claiming the longest matching extension of `output`."""
    if name:
        if name not in EXPORTERS:
            raise CommandError(f"unknown format {name!r}; choose one of {', '.join(EXPORTERS)}")
        return EXPORTERS[name]
    filename = output.name.lower()
    matches = [
        (len(ext), exporter) for exporter in EXPORTERS.values() for ext in exporter.extensions if filename.endswith(ext)
    ]
    if not matches:
        known = ", ".join(ext for exporter in EXPORTERS.values() for ext in exporter.extensions)
        raise CommandError(f"cannot tell the format from {output.name!r} (known endings: {known}); give --format")
    return max(matches, key=lambda match: match[0])[1]
