"""Machines' limits as kept (runformat/limits.py) and looked up (analysis/roofline.Limits)."""

from __future__ import annotations

import json

import pytest

from ggml_viz._errors import RunFormatError
from ggml_viz.analysis.roofline import Limits
from ggml_viz.runformat.limits import (
    check_limits,
    limits_file,
    same_machine,
    store_limits,
    stored_limits,
    this_machine,
)
from ggml_viz.runformat.manifest import new_manifest

from ..machine_limits import limits_of, row

LIMITS = limits_of(
    row("memory_read", 1, None, gb=15.0), row("memory_read", 4, None, gb=40.0),
    row("matmul", 1, "F32", gflop=60.0), row("matmul", 4, "F32", gflop=200.0), row("matmul", 4, "Q4_K", gflop=300.0),
    row("matvec", 4, "Q4_K", gb=25.0, gflop=90.0), row("memory_read", None, "F32", gb=3000.0, device="CUDA0"),
    row("node_step", 4, None, seconds=6e-7),
)  # fmt: skip


def test_the_nearest_measured_thread_count_at_or_below_the_one_used_judges_it():
    limits = Limits.from_json(LIMITS)
    assert limits.threads_measured() == [1, 4]
    assert [limits.nearest_threads(n) for n in (1, 2, 4, 8, None)] == [1, 1, 4, 4, 4]
    assert limits.nearest_threads(3, "CUDA0") is None  # (a GPU has no thread count)


def test_the_peak_is_the_weight_type_s_else_f32_s():
    limits = Limits.from_json(LIMITS)
    assert limits.peak("CPU", 4, "q4_k") == (300.0, "Q4_K")  # (the run's types are lower case)
    assert limits.peak("CPU", 4, "Q6_K") == (200.0, "F32")
    assert limits.peak("CPU", 1, None) == (60.0, "F32")
    assert limits.bandwidth("CPU", 4) == 40.0 and limits.bandwidth("CUDA0", None) == 3000.0
    assert limits.kernel_read("CPU", 4, "Q4_K") == 25.0 and limits.kernel_read("CPU", 1, "Q4_K") is None
    assert limits.node_step_ns(4) == pytest.approx(600.0) and limits.node_step_ns(1) is None


def test_limits_are_kept_per_machine_and_given_to_the_runs_it_records():
    limits_file().unlink(missing_ok=True)
    path = store_limits(LIMITS)
    assert path == limits_file() and stored_limits() == LIMITS
    assert new_manifest("x")["limits"] == LIMITS
    other = {**this_machine(), "host": "elsewhere"}
    assert stored_limits(other) is None and limits_file(other) != path
    assert same_machine(this_machine(), LIMITS["machine"]) and not same_machine(other, LIMITS["machine"])
    path.unlink()
    assert new_manifest("x")["limits"] is None


def test_limits_of_version_1_are_read_in_a_run_but_measured_again_for_this_machine():
    # GIVEN limits of version 1, whose CPU memory_read was ggml's F32 matrix-vector kernel (type F32)
    old = {**limits_of(row("memory_read", 1, "F32", gb=14.0), row("matmul", 1, "F32", gflop=60.0)), "version": 1}
    # WHEN a run's manifest holds them, THEN they still judge it
    assert Limits.from_json(old).bandwidth("CPU", 1) == 14.0
    # WHEN they are this machine's kept limits, THEN they count as never measured (measured again)
    path = store_limits(old)
    try:
        assert stored_limits() is None
        assert new_manifest("x")["limits"] is None
    finally:
        path.unlink()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]", "holds no ggml-viz limits"),
        ('{"version": 99, "measurements": []}', "limits of version 99"),
        (json.dumps({**LIMITS, "measurements": [{"what": "rm -rf"}]}), "a measurement of an unknown kind"),
    ],
)
def test_a_damaged_or_foreign_limits_file_is_one_clear_error_and_never_stops_a_recording(text, said):
    with pytest.raises(RunFormatError, match=said):
        check_limits(json.loads(text), "the file")
    path = limits_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    try:
        assert stored_limits() is None
        assert new_manifest("x")["limits"] is None
    finally:
        path.unlink()


def test_the_findings_say_where_the_threads_judged_at_are_not_the_run_s():
    from ggml_viz.analysis.roofline import limit_findings

    step = {
        "of_limit": 0.25,
        "gb_per_s": 10.0,
        "bandwidth_gb_per_s": 40.0,
        "threads": 4,
        "weight_type": "Q4_K",
        "kernel_gb_per_s": 25.0,
    }
    unknown = {"limits": {"judged_at": [4], "threads": {"decode": None, "prompt": None}}, "decode_step": step}
    assert limit_findings(unknown) == [
        "Decode runs at 25% of this machine's read bandwidth: 10.0 of 40.0 GB/s at 4 threads; the Q4_K "
        "matrix-vector kernel alone reads at most 25.0 GB/s here.",
        "The run does not say how many threads computed it: it is judged at 4 threads, the most measured.",
    ]
    more = {"limits": {"judged_at": [4], "threads": {"decode": 8, "prompt": 8}}}
    assert limit_findings(more) == [
        "The run computed with 8 threads, judged at the nearest measured below (4): "
        "`ggml-viz limits --for RUN` measures 8."
    ]
    assert limit_findings({"limits": {"judged_at": [4], "threads": {"decode": 4}}}) == []
    assert limit_findings({"limits": None}) == []


def test_limits_slower_at_more_threads_are_named():
    # GIVEN limits whose F32 matrix product came out slower at 4 threads than at 1 (busy cores)
    busy = limits_of(
        row("memory_read", 1, None, gb=15.0),
        row("memory_read", 4, None, gb=40.0),
        row("matmul", 1, "F32", gflop=60.0),
        row("matmul", 4, "F32", gflop=45.0),
    )
    limits = Limits.from_json(busy)
    # THEN that measurement is named, with both rates; the bandwidth, faster at 4, is not
    assert limits.slower_with_more_threads() == ["matmul F32: 45.0 GFLOP/s at 4 threads, 60.0 at 1"]
    assert Limits.from_json(LIMITS).slower_with_more_threads() == []
