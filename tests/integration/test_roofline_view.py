"""The roofline in the viewer's statistics, in Chromium on a real SmolLM2 run: one run
whose manifest holds this machine's limits (measured small: one thread, F32, 64 MiB), the
same run without them. The chart places each op with FLOPs where the summary says, draws
the memory roof and the F32 peak the limits hold, names an op's numbers on hover, and lists
the ops without FLOPs beside it; a run without limits says how to measure them."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import ggml_viz
from ggml_viz.analysis.summary import summarize
from ggml_viz.capture.limits import measure
from ggml_viz.runformat.manifest import write_manifest
from ggml_viz.ui import payloads
from ggml_viz.ui.app import RunRegistry, create_app

from ..browser import checked_page, chromium, serving
from ..payload_shapes import shape_problems
from .smollm2 import greedy, load_model

pytestmark = [pytest.mark.model, pytest.mark.browser]

NO_LIMITS_COMMAND = "ggml-viz limits --for RUN"


def rate(x: float | None) -> str:
    """A rate as the viewer writes it (format.js fmtRate)."""
    if x is None or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    size = abs(x)
    for least, digits in ((100, 0), (10, 1), (0.01, 2)):
        if size >= least:
            return f"{x:.{digits}f}"  # (toFixed: the same digits but on an exact binary half)
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent):+d}"


def percent(x: float) -> str:
    """A share as the viewer writes it (format.js fmtPct)."""
    return f"{100 * x:.1f} %"


def placed_and_moving(roofline: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ops the chart places (FLOPs, bytes and a rate above zero) and those it lists beside it."""
    rows = roofline["by_op"]
    placed = [r for r in rows if r["flops"] > 0 and r["bytes"] > 0 and (r["gflop_per_s"] or 0) > 0]
    return placed, [r for r in rows if r not in placed]


def measured(limits: dict[str, Any], what: str, threads: int, kind: str = "F32") -> float:
    """The best rate of one measurement at `threads` (GB/s for memory_read, else GFLOP/s of `kind`)."""
    rate_of = "gb_per_s" if what == "memory_read" else "gflop_per_s"
    rows = [m for m in limits["measurements"] if (m["device"], m["what"], m["threads"]) == ("CPU", what, threads)]
    return max(m[rate_of] for m in rows if what == "memory_read" or m["type"] == kind)


def record_runs(folder: Path, model_path: Path) -> dict[str, Path]:
    """A real SmolLM2 run with this machine's limits in its manifest ("limits"), and the
    same run without them ("none")."""
    plain = folder / "plain.ggmlviz"
    with ggml_viz.record(plain, metadata={"prompt": "The capital of France is"}):
        greedy(load_model(model_path), n_predict=4)
    judged = folder / "judged.ggmlviz"
    shutil.copytree(plain, judged)
    manifest = ggml_viz.open(judged).manifest
    # (Q6_K measured too: SmolLM2's Q4_1 file holds none, so no node is judged by its peak)
    limits = measure([1], ["F32", "Q6_K"], size_mib=64, repeats=1, gpus=False)
    write_manifest(judged, {**manifest, "limits": limits})
    return {"limits": judged, "none": plain}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_path) -> dict[str, Path]:
    return record_runs(tmp_path_factory.mktemp("roofline"), model_path)


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser):
    with checked_page(browser, height=1000) as page:
        yield page


def open_statistics(page, url: str) -> None:
    page.goto(f"{url}#stats")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("[data-testid=roofline]")


def check_the_chart(page, roofline: dict[str, Any]) -> None:
    """The chart on the page holds the summary's ops and the limits' roofs, in its numbers."""
    placed, moving = placed_and_moving(roofline)
    limits = roofline["limits"]
    threads = max(limits["judged_at"])
    # one point per op with FLOPs, and only those
    points = page.locator("[data-testid=roofline-chart] [data-testid=roofline-point]")
    assert sorted(points.evaluate_all("els => els.map((el) => el.dataset.op)")) == sorted(r["op"] for r in placed)
    assert "MUL_MAT" in [r["op"] for r in placed]
    # the memory roof and the F32 peak, labelled with what the limits measured (no roof of Q6_K,
    # measured but judging no node)
    kinds = page.locator("[data-testid=roofline-roof]").evaluate_all(
        "els => els.map((el) => [el.dataset.kind, el.dataset.type || ''])"
    )
    assert sorted(kinds) == [["compute", "F32"], ["memory", ""]]
    labels = page.locator("[data-testid=roofline-roof-label]").all_text_contents()
    assert f"memory {rate(measured(limits, 'memory_read', threads))} GB/s" in labels
    assert f"F32 {rate(measured(limits, 'matmul', threads))} GFLOP/s" in labels
    # a bigger time, a bigger point
    radius = {
        op: float(r) for op, r in points.evaluate_all("els => els.map((el) => [el.dataset.op, el.getAttribute('r')])")
    }
    smallest = min(placed, key=lambda r: r["time_ns"])["op"]
    assert radius["MUL_MAT"] > radius[smallest]
    # the ops without FLOPs beside the chart, their GB/s against the bandwidth
    listed = page.locator("[data-testid=roofline-moving-op]").evaluate_all("els => els.map((el) => el.dataset.op)")
    assert sorted(listed) == sorted(r["op"] for r in moving)
    for row in moving:
        text = page.inner_text(f"[data-testid=roofline-moving-op][data-op='{row['op']}']")
        assert f"{rate(row['gb_per_s'])} GB/s" in text
    # each op's bound and share of its limit in the table
    for row in roofline["by_op"]:
        cells = page.locator(f"[data-testid=roofline-table] tr[data-op='{row['op']}'] td").all_text_contents()
        op, _, _, _, _, bound, _, of_limit = cells  # op, time, GFLOP/s, GB/s, FLOPs/byte, bound, at best, of limit
        assert (op, bound, of_limit) == (row["op"], row["bound"], percent(row["of_limit"]))


def hovered_tooltip(page, op: str) -> str:
    page.hover(f"[data-testid=roofline-point][data-op='{op}']")
    page.wait_for_selector("[data-testid=tooltip]:not([hidden])")
    return page.inner_text("[data-testid=tooltip]")


def check_the_tooltip(page, roofline: dict[str, Any]) -> None:
    row = next(r for r in roofline["by_op"] if r["op"] == "MUL_MAT")
    text = hovered_tooltip(page, "MUL_MAT")
    assert text.startswith("MUL_MAT")
    for said in (
        f"{rate(row['gflop_per_s'])} GFLOP/s",
        f"{rate(row['gb_per_s'])} GB/s",
        f"{row['bound']}-bound",
        f"{percent(row['of_limit'])} of limit",
    ):
        assert said in text, (said, text)


def check_the_floors(page, roofline: dict[str, Any]) -> None:
    floors = page.inner_text("[data-testid=roofline-floors]")
    if roofline["decode_step"]:
        step = roofline["decode_step"]
        assert f"{rate(step['gb_per_s'])} of {rate(step['bandwidth_gb_per_s'])} GB/s" in floors
        assert f"{percent(step['of_limit'])} of the limit" in floors
    if roofline["prompt"]:
        assert f"{percent(roofline['prompt']['of_limit'])} of the limit" in floors
    assert roofline["decode_step"] or roofline["prompt"]


def test_the_statistics_show_each_op_against_the_machines_roofs(page, runs):
    # GIVEN a real run holding this machine's limits, and what its summary says of them
    roofline = summarize(ggml_viz.open(runs["limits"]))["roofline"]
    with serving(page, runs["limits"]) as viewer:
        # WHEN its statistics are shown
        open_statistics(page, viewer.url)
        # THEN the roofline holds its ops and the measured roofs, and an op's numbers on hover
        check_the_chart(page, roofline)
        check_the_tooltip(page, roofline)
        check_the_floors(page, roofline)
        assert page.locator("[data-testid=roofline-none]").count() == 0


def test_a_run_without_limits_says_how_to_measure_them(page, runs):
    with serving(page, runs["none"]) as viewer:
        open_statistics(page, viewer.url)
        message = page.inner_text("[data-testid=roofline-none]")
        assert NO_LIMITS_COMMAND in message
        assert page.locator("[data-testid=roofline-chart]").count() == 0


def test_the_overview_with_limits_has_its_declared_keys(runs):
    token = "test-token"
    _, guard = create_app(RunRegistry(runs["limits"]), host="127.0.0.1", port=8765, token=token)
    with TestClient(guard, base_url="http://127.0.0.1:8765") as client:
        overview = client.get("/api/runs/r0/overview", headers={"X-GGML-Viz-Token": token}).json()
    assert overview["summary"]["roofline"]["limits"]["judged_at"] == [1]
    assert overview["summary"]["throughput_by_op"][0]["bound"] in ("memory", "compute")
    assert shape_problems(overview, payloads.OverviewPayload) == []
