"""`ggml-viz limits` on this machine, with ggml's own kernels, and a real SmolLM2 run judged
against what it measured: kept per machine, written into the run, said in the summary, queried."""

from __future__ import annotations

import json
import shutil

import pytest

import ggml_viz
from ggml_viz.analysis.roofline import node_floors, run_limits
from ggml_viz.analysis.summary import summarize
from ggml_viz.runformat.limits import limits_file, stored_limits
from ggml_viz.runformat.manifest import write_manifest

from .smollm2 import ggml_viz_cli

# small and quick: what is measured is checked for sense here, against outside tools elsewhere
QUICK = ["--threads", "1", "--types", "F32", "Q4_1", "--size-mib", "64", "--repeats", "1", "--no-gpu"]


@pytest.fixture(autouse=True)
def no_limits_left():
    """The session's other tests record runs: limits kept here would go into them."""
    yield
    limits_file().unlink(missing_ok=True)


@pytest.fixture
def run_here(runs_by_recorder, tmp_path):
    """A copy of a recorded SmolLM2 run (Q4_1 weights) the test may change."""
    return shutil.copytree(runs_by_recorder["c"].path, tmp_path / "five.ggmlviz")


def measured(limits, what, kind="F32", threads=1):
    rows = [
        row
        for row in limits["measurements"]
        if row["what"] == what and row["type"] == kind and row["threads"] == threads
    ]
    assert len(rows) == 1, (what, kind, threads, limits["measurements"])
    return rows[0]


def test_limits_are_measured_once_kept_per_machine_and_written_into_the_run(run_here):
    # GIVEN a run recorded on this machine, and no limits kept for it (another test may have measured)
    limits_file().unlink(missing_ok=True)
    assert stored_limits() is None

    # WHEN its limits are measured for it
    first = ggml_viz_cli("limits", "--for", str(run_here), *QUICK, "--json")

    # THEN they are kept for this machine and in the run's manifest, the same object
    assert first.returncode == 0, first.stderr
    limits = json.loads(first.stdout)
    assert stored_limits() == limits
    assert json.loads((run_here / "manifest.json").read_text())["limits"] == limits
    # the run's weight type is among those measured, beside the ones asked for
    read = measured(limits, "memory_read", None)  # ggml-viz's read kernel: no ggml type
    assert read["note"] == "ggml-viz's read kernel: 1 thread summing 64-bit words"
    q4_1 = measured(limits, "matmul", "Q4_1")
    assert 1 < read["gb_per_s"] < 1000, read  # a memory, not a cache nor a disk
    assert read["bytes"] >= 64 << 20 and read["seconds"] > 0
    assert q4_1["gflop_per_s"] == pytest.approx(q4_1["flops"] / q4_1["seconds"] / 1e9)
    assert measured(limits, "matvec", "Q4_1")["gb_per_s"] <= 2 * read["gb_per_s"]
    disk = next(row for row in limits["measurements"] if row["what"] == "disk_read")
    assert disk["gb_per_s"] > 0 and "MiB file" in disk["note"]
    step = measured(limits, "node_step", None)  # a node's cost beyond its work: well under 100 µs
    assert 0 < step["seconds"] < 1e-4 and "µs a node" in step["note"]

    # WHEN asked again: the kept limits are shown, not measured again
    again = ggml_viz_cli("limits", *QUICK, "--json")
    assert json.loads(again.stdout)["measured"] == limits["measured"]

    # ... unless --again is given
    fresh = ggml_viz_cli("limits", *QUICK, "--json", "--again")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["measurements"] != limits["measurements"]


def test_a_run_judged_against_its_limits_says_how_far_decode_and_each_op_are(run_here):
    # GIVEN a SmolLM2 run given this machine's limits
    result = ggml_viz_cli("limits", "--for", str(run_here), *QUICK)
    assert result.returncode == 0, result.stderr
    run = ggml_viz.open(run_here)
    limits = run_limits(run)

    # WHEN it is summarized
    summary = summarize(run)
    roofline = summary["roofline"]

    # THEN each node's floor is the larger of its bytes at the read bandwidth and its FLOPs at the
    # peak of its weight type (Q4_1 for the projections, F32's for the rest), at 1 thread
    bandwidth = limits.bandwidth("CPU", 1)
    floors = node_floors(run, limits)
    projection = floors[(floors["op"] == "MUL_MAT") & (floors["weight_type"] == "Q4_1")].iloc[0]
    peak = limits.peak("CPU", 1, "Q4_1")[0]
    expected = projection["timed"] * max(projection["flops"] / peak, projection["bytes"] / bandwidth)
    assert projection["floor_ns"] == pytest.approx(expected)
    assert projection["of_limit"] == pytest.approx(expected / projection["time_ns"])
    norm = floors[floors["op"] == "RMS_NORM"].iloc[0]
    assert norm["peak_gflop_per_s"] == limits.peak("CPU", 1, "F32")[0]
    assert set(floors["threads"].dropna()) == {1}  # (the run used 2: the nearest measured below)

    # per op: the floors and times summed
    by_op = {row["op"]: row for row in roofline["by_op"]}
    mul_mat = floors[(floors["op"] == "MUL_MAT")]
    assert by_op["MUL_MAT"]["of_limit"] == pytest.approx(mul_mat["floor_ns"].sum() / mul_mat["time_ns"].sum())

    # the decode step: its weights at the measured bandwidth against its median time
    step = roofline["decode_step"]
    assert step["bytes"] == summary["weight_reads"]["weight_bytes_per_decode_step"]
    assert step["floor_ns"] == pytest.approx(step["bytes"] / bandwidth)
    assert step["of_limit"] == pytest.approx(step["floor_ns"] / step["median_ns"])
    assert step["weight_type"] == "Q4_1"
    said = " ".join(summary["findings"])
    assert f"Decode runs at {step['of_limit']:.0%} of this machine's read bandwidth" in said
    assert f"{step['gb_per_s']:,.1f} of {bandwidth:,.1f} GB/s at 1 thread" in said
    assert "the op furthest from its limit" in said
    assert (
        "The run computed with 2 threads, judged at the nearest measured below (1): "
        "`ggml-viz limits --for RUN` measures 2."
    ) in said

    # and the query's node_limits holds the same rows
    query = ggml_viz_cli(
        "query", str(run_here), "select sum(floor_ns) floor, sum(time_ns) time from node_limits", "-o", "json"
    )
    assert query.returncode == 0, query.stderr
    row = json.loads(query.stdout)[0]
    assert row["floor"] == pytest.approx(floors["floor_ns"].sum())
    # ... and graph_limits each step's duration against the floors of its nodes, once each
    query = ggml_viz_cli("query", str(run_here), "select * from graph_limits where phase = 'decode'", "-o", "json")
    steps = json.loads(query.stdout)
    decode = run.graphs[run.graphs["phase"] == "decode"]
    assert sorted(step["graph_id"] for step in steps) == sorted(decode["graph_id"])
    structure = floors[(floors["phase"] == "decode") & (floors["structure_id"] == decode["structure_id"].iloc[0])]
    step = next(step for step in steps if step["graph_id"] == decode["graph_id"].iloc[0])
    assert step["floor_ns"] == pytest.approx((structure["floor_ns"] / structure["timed"]).sum())
    assert step["of_limit"] == pytest.approx(step["floor_ns"] / step["duration_ns"])


def test_a_run_without_limits_says_how_to_measure_them(run_here):
    manifest = json.loads((run_here / "manifest.json").read_text())
    manifest["limits"] = None
    write_manifest(run_here, manifest)
    result = ggml_viz_cli("summary", str(run_here))
    assert result.returncode == 0, result.stderr
    assert f"ggml-viz limits --for {run_here}" in " ".join(result.stdout.split())
    assert summarize(ggml_viz.open(run_here))["roofline"] == {"limits": None}


def test_limits_are_not_given_to_a_run_of_another_machine(run_here):
    # GIVEN a run whose manifest says it was recorded elsewhere
    manifest = json.loads((run_here / "manifest.json").read_text())
    manifest["recorder"]["host"] = "elsewhere"
    write_manifest(run_here, manifest)

    # WHEN given this machine's limits: one clear error, and the run is left as it was
    result = ggml_viz_cli("limits", "--for", str(run_here), *QUICK)
    assert result.returncode != 0
    assert "was recorded on elsewhere" in result.stderr and "measure its limits there" in result.stderr
    assert json.loads((run_here / "manifest.json").read_text()) == manifest


def test_wrong_arguments_get_one_clear_error():
    for arguments, said in (
        (["--threads", "0"], "--threads takes counts of 1 or more"),
        (["--types", "Q9_9", "--threads", "1"], "this ggml has no type Q9_9"),
    ):
        result = ggml_viz_cli("limits", *arguments, "--again")
        assert result.returncode != 0 and said in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
