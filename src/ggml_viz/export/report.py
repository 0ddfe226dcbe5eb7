"""One self-contained HTML file with the viewer's main views, for sharing: the page, its
script and style, and the run's answers embedded, so it opens offline from a file.

The page's Content-Security-Policy forbids every connection, so opening it can reach
nothing. Embedded data is JSON inside a non-executing script element, with `<` escaped, so
no string from a run can close the element or become markup. What a report holds: the
overview, statistics (with the roofline, where the run holds its machine's measured limits),
the memory tracks, the whole timeline (every node for runs up to EVENT_LIMIT timed events,
summed per pixel column beyond), one graph (collapsed and each layer) with its
compute-buffer occupancy, and the event log's rows (without sources).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..runformat.reader import Run
from ..ui.context import json_safe
from ..ui.inline import inline_modules
from ..ui.run_view import RunView
from .base import Exporter, ExportOptions
from .graphs import default_graph

EVENT_LIMIT = 100_000
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'none'"


def report_answers(view: RunView, graph_id: int) -> dict[str, Any]:
    overview = view.overview
    n_timed = view.n_timed
    width = 1_000_000 if n_timed <= EVENT_LIMIT else 4000  # every node its own bar, or per-pixel sums
    answers: dict[str, Any] = {
        "runs": {
            "runs": [
                {
                    "run_id": "r0",
                    "name": view.path.name,
                    "status": overview["summary"]["status"],
                    "graphs": overview["summary"]["graphs"],
                }
            ],
            "live": False,
        },
        "overview": overview,
        "stats": view.statistics,
        "memory": {"disk": view.disk_track, "buffers": view.buffer_track},
        "timeline": view.timeline(0, max(view.duration_ns, 1), width) if n_timed <= EVENT_LIMIT else None,
        "graphs": {"graphs": [g for g in view.graph_list() if g["graph_id"] == graph_id]},
        f"occupancy/{graph_id}": view.compute_occupancy(graph_id),
        # captured attention stays in the run (open it with `ggml-viz view`)
        "attention-index": {**view.attention_index, "graphs": {}},
        "experts": view.experts,
        "requests": view.requests,
        "whatif": view.whatif,
        "slots": view.slots,
    }
    if answers["timeline"] is None:
        answers["timeline"] = view.timeline(0, max(view.duration_ns, 1), width)
    collapsed = view.graph(graph_id, None)
    answers[f"graph/{graph_id}/"] = collapsed
    for layer in collapsed["layers"]:
        answers[f"graph/{graph_id}/{layer}"] = view.graph(graph_id, layer)
    shown = np.arange(min(view.n_events, EVENT_LIMIT))
    rows: list[Mapping[str, Any]] = list(view.event_rows(shown))
    answers["events"] = {key: [row[key] for row in rows] for key in rows[0]} if rows else {}
    answers["events"].pop("event", None)
    if rows:  # for the file-region filter: the weights each event's node reads, by file range
        ranges, reads = view.weight_file_reads(shown)
        answers["weight_ranges"] = ranges
        answers["events"]["weights"] = reads
    return answers


def report_html(view: RunView, graph_id: int) -> str:
    static = resources.files("ggml_viz.ui").joinpath("static")
    page = static.joinpath("index.html").read_text(encoding="utf-8")
    body = page[page.index("<body>") + len("<body>") : page.index("</body>")]
    data = json.dumps(json_safe({"answers": report_answers(view, graph_id)}), separators=(",", ":"), allow_nan=False)
    data = data.replace("<", "\\u003c")  # nothing inside can end the script element
    script = inline_modules()  # the page's ES modules, as one script
    if re.search(r"</script", script, re.IGNORECASE):  # pragma: no cover - guards the inlining below
        raise ValueError("the viewer's script contains '</script'")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f'<title>ggml-viz report: {_escape(view.path.name)}</title>\n<link rel="icon" href="data:,">\n'
        f"<style>\n{static.joinpath('app.css').read_text(encoding='utf-8')}\n</style>\n</head>\n<body>{body}"
        f'<script type="application/json" id="ggml-viz-data">{data}</script>\n'
        f'<script type="module">\n{script}\n</script>\n</body>\n</html>\n'
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class HtmlReportExporter(Exporter):
    name = "html"
    extensions = (".html", ".htm")
    summary = "one self-contained HTML file with the viewer's main views (offline, for sharing)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        view = RunView("r0", run.path)
        graph_id = default_graph(run) if options.graph_id is None else options.graph_id
        output.write_text(report_html(view, graph_id), encoding="utf-8")
        return f"{output}: {output.stat().st_size / 2**20:,.1f} MiB, graph {graph_id} included"
