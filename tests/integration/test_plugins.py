"""Plugins: a small package installed with pip into a temporary folder adds an exporter, findings
and a summary section through entry points; its broken parts are named once and the command goes on.

The package is written here as a wheel (a zip of its module and its .dist-info: no build
backend needed) and installed with `pip install --target`; the real `ggml-viz` then runs in a
subprocess with that folder on its path, as it would with the package installed beside it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.runformat.synthetic import write_synthetic_run

DISTRIBUTION, VERSION = "ggml-viz-demo-plugin", "0.1"
SOURCE = f"{DISTRIBUTION} {VERSION}"

# What its pyproject.toml would say under [project.entry-points."ggml_viz.exporters"] and "ggml_viz.findings"
ENTRY_POINTS = {
    "ggml_viz.exporters": {
        "graph-count": "ggml_viz_demo_plugin:GraphCountExporter",
        "exploding-export": "ggml_viz_demo_plugin:ExplodingExporter",  # raises when it exports
        "csv-again": "ggml_viz_demo_plugin:CsvAgain",  # takes the built-in csv's name
    },
    "ggml_viz.findings": {
        "graph-total": "ggml_viz_demo_plugin:GraphTotal",
        "softmax-share": "ggml_viz_demo_plugin:SoftmaxShare",  # titled: a section of its own
        "broken": "ggml_viz_demo_plugin.missing:Nothing",  # its module does not exist
        "not-a-finding": "ggml_viz_demo_plugin:NOT_A_FINDING",  # the wrong type
        "exploding": "ggml_viz_demo_plugin:Exploding",  # raises when called
    },
}

MODULE = """
from ggml_viz.analysis.findings import Finding
from ggml_viz.export import Exporter


class GraphCountExporter(Exporter):
    name = "graph-count"
    extensions = (".graphcount.txt",)
    summary = "the number of graphs, as text"

    def export(self, run, output, options):
        output.write_text(f"{len(run.graphs)} graphs\\n")
        return f"{len(run.graphs)} graphs counted"


class ExplodingExporter(Exporter):
    name = "exploding-export"
    extensions = (".boom",)

    def export(self, run, output, options):
        raise RuntimeError("the exporter's own bug")


class CsvAgain(Exporter):
    name = "csv"
    extensions = (".csv",)


class GraphTotal(Finding):
    name = "graph-total"
    summary = "how many graphs the run holds"

    def find(self, run, context):
        return [f"Demo plugin: {len(run.graphs)} graphs, {len(context.phases)} phases."]


class SoftmaxShare(Finding):
    name = "softmax-share"
    title = "softmax (demo plugin)"
    summary = "SOFT_MAX's share of node time"

    def find(self, run, context):
        totals = run.node_totals
        share = totals.loc[totals["op"] == "SOFT_MAX", "time_ns"].sum() / totals["time_ns"].sum()
        return [f"SOFT_MAX takes {share:.1%} of node time."]


class Exploding(Finding):
    name = "exploding"

    def find(self, run, context):
        raise RuntimeError("the finding's own bug")


NOT_A_FINDING = "just a string"
"""


def write_wheel(folder: Path) -> Path:
    """The demo package as a wheel: its module, METADATA, WHEEL, entry_points.txt and RECORD."""
    info = f"{DISTRIBUTION.replace('-', '_')}-{VERSION}.dist-info"
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in targets.items()) + "\n"
        for group, targets in ENTRY_POINTS.items()
    )
    files = {
        "ggml_viz_demo_plugin/__init__.py": textwrap.dedent(MODULE),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {VERSION}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ggml-viz tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points,
    }
    record = "".join(f"{path},sha256={_digest(text)},{len(text.encode())}\n" for path, text in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    wheel = folder / f"{DISTRIBUTION.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """A folder the demo package is installed into, as pip installs it."""
    folder = tmp_path_factory.mktemp("plugin")
    site = folder / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, "--target", str(site), str(write_wheel(folder))], check=True, capture_output=True)
    return site


@pytest.fixture(scope="module")
def run_path(tmp_path_factory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("run") / "s.ggmlviz", graphs=4, layers=2)


def ggml_viz_cli(site: Path, *argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`ggml-viz ARGV` in a fresh interpreter that sees the plugin package (and this checkout's ggml_viz)."""
    path = os.pathsep.join([str(site), str(Path(ggml_viz.__file__).parents[1])])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    command = [sys.executable, "-m", "ggml_viz", *map(str, argv)]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ggml-viz: warning:")]


def test_plugins_lists_built_ins_plugins_and_the_ones_that_failed(plugin_site):
    # WHEN the plugins are listed, as JSON and as tables
    listed = ggml_viz_cli(plugin_site, "plugins", "--json")
    tables = ggml_viz_cli(plugin_site, "plugins")
    # THEN the built-ins come first, the plugin's exporters and findings after them, with their package
    assert listed.returncode == 0 and tables.returncode == 0, listed.stderr + tables.stderr
    plugins = json.loads(listed.stdout)
    exporters = {row["name"]: row for row in plugins["exporters"]}
    assert plugins["exporters"][0]["source"] == "built-in"
    assert exporters["graph-count"] == {
        "name": "graph-count",
        "extensions": [".graphcount.txt"],
        "summary": "the number of graphs, as text",
        "source": SOURCE,
    }
    assert exporters["csv"]["source"] == "built-in"  # the clashing plugin did not replace it
    findings = {row["name"]: row for row in plugins["findings"]}
    assert findings["node-time"]["source"] == "built-in" and findings["node-time"]["section"] is None
    assert findings["softmax-share"]["section"] == "softmax (demo plugin)"
    assert findings["graph-total"]["source"] == SOURCE
    assert "exploding" in findings  # it loads; it fails only when called
    # AND those that failed to load are listed with their error, not as warnings
    failed = {row["entry_point"]: row["error"] for row in plugins["failed"]}
    assert set(failed) == {"broken", "not-a-finding", "csv-again"}
    assert failed["broken"].startswith("ModuleNotFoundError")
    assert "not a ggml_viz.analysis.findings.Finding" in failed["not-a-finding"]
    assert "the name 'csv' is a built-in's" in failed["csv-again"]
    assert warnings_in(listed.stderr) == []
    assert "graph-count" in tables.stdout and "failed to load" in tables.stdout and SOURCE in tables.stdout


@pytest.mark.parametrize(
    "output, options", [("out.graphcount.txt", []), ("out.txt", ["--format", "graph-count"])], ids=["ending", "format"]
)
def test_export_uses_the_plugin_exporter_by_its_ending_or_name(plugin_site, run_path, tmp_path, output, options):
    # WHEN a run is exported to the plugin's format
    done = ggml_viz_cli(plugin_site, "export", run_path, "-o", tmp_path / output, *options)
    # THEN the plugin wrote it, and the one plugin exporter that failed to load was named once
    assert done.returncode == 0, done.stderr
    assert (tmp_path / output).read_text() == "4 graphs\n"
    assert "wrote graph-count: 4 graphs counted" in done.stdout
    [warning] = warnings_in(done.stderr)
    assert f"plugin 'csv-again' (ggml_viz.exporters, from {SOURCE}) left out" in warning


def test_an_exporter_raising_is_one_error_line_naming_it(plugin_site, run_path, tmp_path):
    # WHEN the plugin's exporter raises while exporting
    done = ggml_viz_cli(plugin_site, "export", run_path, "-o", tmp_path / "out.boom")
    # THEN the command fails with one line naming the plugin and its error, no traceback
    assert done.returncode == 1
    assert (
        f"ggml-viz: error: plugin 'exploding-export' (ggml_viz.exporters, from {SOURCE}) failed: "
        "RuntimeError: the exporter's own bug" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_summary_shows_the_plugin_findings_and_names_each_broken_plugin_once(plugin_site, run_path):
    # WHEN a run is summarized with the plugin installed
    done = ggml_viz_cli(plugin_site, "summary", run_path)
    # THEN the command succeeds with its usual tables, the built-in findings and the plugin's
    assert done.returncode == 0, done.stderr
    assert "time by op" in done.stdout and "memory by buffer kind" in done.stdout
    findings = done.stdout[done.stdout.index("findings") :]
    assert "takes" in findings and "Demo plugin: 4 graphs, 2 phases." in findings
    # AND the titled finding is a section of its own after the findings
    assert "softmax (demo plugin)" in findings and "SOFT_MAX takes" in findings
    assert findings.index("Demo plugin") < findings.index("softmax (demo plugin)")
    # AND each broken finding is named in exactly one warning: two that failed to load, one that raised
    warnings = warnings_in(done.stderr)
    assert len(warnings) == 3, done.stderr
    for name in ("broken", "not-a-finding", "exploding"):
        assert sum(f"plugin {name!r} (ggml_viz.findings, from {SOURCE})" in line for line in warnings) == 1
    assert "raised RuntimeError: the finding's own bug" in " ".join(warnings)


def test_summary_json_carries_the_plugin_section(plugin_site, run_path):
    done = ggml_viz_cli(plugin_site, "summary", run_path, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    [section] = summary["sections"]
    assert section["title"] == "softmax (demo plugin)" and section["source"] == SOURCE
    assert section["lines"][0].startswith("SOFT_MAX takes")
    assert "Demo plugin: 4 graphs, 2 phases." in summary["findings"]


def test_without_plugins_nothing_is_warned_and_no_section_is_added(run_path, tmp_path):
    # GIVEN no plugin package on the path (an empty folder in its place)
    done = ggml_viz_cli(tmp_path, "summary", run_path, "--json")
    assert done.returncode == 0 and warnings_in(done.stderr) == []
    assert json.loads(done.stdout)["sections"] == []
