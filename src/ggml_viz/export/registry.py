"""Every exporter (the built-in ones, then installed plugins'), and finding one by name or by
the output's extension."""

from __future__ import annotations

import functools
from pathlib import Path

from .._errors import CommandError
from ..plugins import PluginGroup, load_group
from .base import Exporter
from .graphs import DotExporter, PngGraphExporter, SvgGraphExporter
from .pictures import MemoryPngExporter, MemorySvgExporter, TimelinePngExporter, TimelineSvgExporter
from .profiles import SpeedscopeExporter, TensorBoardExporter
from .report import HtmlReportExporter
from .tables import CsvExporter, ParquetExporter, RoutingExporter
from .tensors import NpzExporter, SafetensorsExporter
from .traces import ChromeJsonExporter, PerfettoExporter

# The built-in exporters; plugins (entry-point group ggml_viz.exporters) add theirs after these.
EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        PerfettoExporter(),
        ChromeJsonExporter(),
        CsvExporter(),
        ParquetExporter(),
        RoutingExporter(),
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


EXPORTERS_GROUP = "ggml_viz.exporters"


@functools.cache
def exporter_plugins() -> PluginGroup[Exporter]:
    """The installed packages' exporters (loaded once per process, when first asked for)."""
    return load_group(EXPORTERS_GROUP, Exporter, taken=EXPORTERS.keys())


def all_exporters() -> dict[str, Exporter]:
    """The built-in exporters, then the plugins' (one that failed to load is named once on stderr)."""
    plugins = exporter_plugins()
    plugins.warn_failures()
    return {**EXPORTERS, **{plugin.value.name: plugin.value for plugin in plugins.loaded}}


def exporter_for(name: str | None, output: Path) -> Exporter:
    """The exporter called `name`, or the one claiming the longest matching extension of `output`
    (of two claiming the same ending, the built-in, or the plugin loaded first)."""
    exporters = all_exporters()
    if name:
        if name not in exporters:
            raise CommandError(f"unknown format {name!r}; choose one of {', '.join(exporters)}")
        return exporters[name]
    filename = output.name.lower()
    matches = [
        (len(ext), exporter) for exporter in exporters.values() for ext in exporter.extensions if filename.endswith(ext)
    ]
    if not matches:
        known = ", ".join(ext for exporter in exporters.values() for ext in exporter.extensions)
        raise CommandError(f"cannot tell the format from {output.name!r} (known endings: {known}); give --format")
    return max(matches, key=lambda match: match[0])[1]
