from __future__ import annotations

import argparse
import json
from typing import Any

from .base import Command


class PluginsCommand(Command):
    """List the exporters and findings: the built-in ones and those of installed plugins.

    Another installed package adds its own through entry points in the groups
    ggml_viz.exporters and ggml_viz.findings (see the README's "Plugins"). A plugin that
    failed to load is listed with its error; the other commands name it in one warning.

    example:
      ggml-viz plugins
      ggml-viz plugins --json
    """

    name = "plugins"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")

    def run(self, args: argparse.Namespace) -> int:
        plugins = describe_plugins()
        if args.json:
            print(json.dumps(plugins, indent=2))
            return 0
        from rich.console import Console
        from rich.table import Table

        console = Console()
        exporters = Table("format", "file endings", "from", "what", title="exporters", title_justify="left")
        for row in plugins["exporters"]:
            exporters.add_row(row["name"], " ".join(row["extensions"]), row["source"], row["summary"])
        console.print(exporters)
        findings = Table("finding", "shown", "from", "what", title="findings", title_justify="left")
        for row in plugins["findings"]:
            shown = f"section {row['section']!r}" if row["section"] else "among the findings"
            findings.add_row(row["name"], shown, row["source"], row["summary"])
        console.print(findings)
        if plugins["failed"]:
            failed = Table("group", "entry point", "from", "error", title="failed to load", title_justify="left")
            for row in plugins["failed"]:
                failed.add_row(row["group"], row["entry_point"], row["source"], row["error"], style="yellow")
            console.print(failed)
        return 0


def describe_plugins() -> dict[str, Any]:
    """Every exporter and finding, built-in or a plugin's, and the plugins that failed to load."""
    from ..analysis.findings import BUILTIN_FINDINGS, finding_plugins
    from ..export.registry import EXPORTERS, exporter_plugins
    from ..plugins import BUILT_IN

    exporter_group, finding_group = exporter_plugins(), finding_plugins()
    exporters = [(exporter, BUILT_IN) for exporter in EXPORTERS.values()]
    exporters += [(plugin.value, plugin.origin.distribution) for plugin in exporter_group.loaded]
    findings = [(finding, BUILT_IN) for finding in BUILTIN_FINDINGS]
    findings += [(plugin.value, plugin.origin.distribution) for plugin in finding_group.loaded]
    return {
        "exporters": [
            {"name": e.name, "extensions": list(e.extensions), "summary": e.summary, "source": source}
            for e, source in exporters
        ],
        "findings": [
            {"name": f.name, "section": f.title or None, "summary": f.summary, "source": source}
            for f, source in findings
        ],
        "failed": [
            {
                "group": f.origin.group,
                "entry_point": f.origin.entry_point,
                "source": f.origin.distribution,
                "error": f.error,
            }
            for f in exporter_group.failed + finding_group.failed
        ],
    }
