"""GGML_VK_PERF_LOGGER's report read (ggml-vulkan's own per-op timing, printed to standard error
when that variable is set): for the Vulkan tests and benchmarks/gpu_check.sh alike. Plain Python:
importable without pytest."""

from __future__ import annotations

import re

# One op's line of GGML_VK_PERF_LOGGER's report: "MUL_MAT_VEC q8_0 m=32000 n=1 k=64: 1 x 52848.8 us = 52848.8 us"
_PERF_LINE = re.compile(r"^(?P<name>[A-Z0-9_]+)\b[^\n]*?: (?P<count>\d+) x [0-9.e+]+ us = (?P<total>[0-9.e+]+) us")


def perf_logger_reports(stderr: str) -> list[dict[str, float]]:
    """GGML_VK_PERF_LOGGER's reports, one per graph computed (its default frequency), each its
    ops' total microseconds by the name it gives them (fused ops joined: RMS_NORM_MUL)."""
    reports: list[dict[str, float]] = []
    for line in stderr.splitlines():
        if line.startswith("Vulkan Timings:"):
            reports.append({})
            continue
        found = _PERF_LINE.match(line)
        if found and reports:
            name = found["name"]
            reports[-1][name] = reports[-1].get(name, 0.0) + float(found["total"])
    return reports


def ggml_op_of(logged: str, ops: set[str]) -> str:
    """The ggml op a logger name stands for: the longest of `ops` it begins with ("MUL_MAT_VEC"
    and "MUL_MAT_ADD": MUL_MAT; "RMS_NORM_MUL": RMS_NORM, the first node of the fused group,
    which carries the group's time in ggml-viz's tables too)."""
    candidates = [op for op in ops if logged == op or logged.startswith(op + "_")]
    if not candidates and logged == "GLU":  # the logger names the op, ggml-viz its kind (SWIGLU, GEGLU, ...)
        candidates = [op for op in ops if op.endswith("GLU")]
    return max(candidates, key=len) if candidates else logged
