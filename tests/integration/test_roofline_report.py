"""The roofline in the offline HTML report: a report of a run holding this machine's limits
shows the chart (its SVG points and roofs) and the table of ops, with nothing fetched; one
of a run without limits says how to measure them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.analysis.summary import summarize
from ggml_viz.commands import main

from ..browser import chromium, open_offline
from .test_roofline_view import NO_LIMITS_COMMAND, check_the_chart, check_the_floors, check_the_tooltip, record_runs

pytestmark = [pytest.mark.model, pytest.mark.browser]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_path) -> dict[str, Path]:
    return record_runs(tmp_path_factory.mktemp("roofline-report"), model_path)


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def exported(run: Path, report: Path) -> Path:
    assert main(["export", str(run), "-o", str(report)]) == 0
    return report


def embedded_roofline(report: Path) -> dict:
    """The roofline the report carries in its embedded answers."""
    data = re.search(
        r'<script type="application/json" id="ggml-viz-data">(.*?)</script>', report.read_text(encoding="utf-8"), re.S
    )
    assert data
    return json.loads(data.group(1))["answers"]["overview"]["summary"]["roofline"]


def open_report_statistics(browser, report: Path):
    page, requests, errors = open_offline(browser, report, height=1000)
    page.click("#tabs button[data-tab=stats]")
    page.wait_for_selector("[data-testid=roofline]")
    return page, requests, errors


def test_the_report_of_a_run_with_limits_draws_its_roofline_offline(browser, runs, tmp_path):
    # GIVEN the report of a run holding this machine's limits
    report = exported(runs["limits"], tmp_path / "judged.html")
    roofline = summarize(ggml_viz.open(runs["limits"]))["roofline"]
    assert embedded_roofline(report)["by_op"] == json.loads(json.dumps(roofline["by_op"]))
    # WHEN its statistics are opened from the file
    page, requests, errors = open_report_statistics(browser, report)
    # THEN the roofline's SVG holds the ops' points and the roofs, the table and the floors
    check_the_chart(page, roofline)
    check_the_tooltip(page, roofline)
    check_the_floors(page, roofline)
    page.close()
    assert requests == [report.as_uri()], requests  # the file itself, and nothing else
    assert not errors, errors


def test_the_report_of_a_run_without_limits_says_how_to_measure_them(browser, runs, tmp_path):
    report = exported(runs["none"], tmp_path / "plain.html")
    assert embedded_roofline(report) == {"limits": None}
    page, requests, errors = open_report_statistics(browser, report)
    assert NO_LIMITS_COMMAND in page.inner_text("[data-testid=roofline-none]")
    assert page.locator("[data-testid=roofline-chart]").count() == 0
    page.close()
    assert not errors, errors
