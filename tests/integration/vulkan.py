"""llama.cpp with ggml's Vulkan backend, on Mesa's lavapipe (a Vulkan device in software, on the
CPU), for the tests of GPU times on Vulkan: `make setup` builds it (scripts/build-llama.sh
vulkan) and installs Debian's mesa-vulkan-drivers."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from ..build_cache import cache_folder
from .native import missing

LLAMA_CPP_VERSION = "0.3.36"


def vulkan_llama_folder() -> Path:
    """The Vulkan build of llama.cpp (bin/, lib/): the test skips without it (fails where
    GGML_VIZ_REQUIRE_NATIVE_TOOLS says every tool must be there)."""
    folder = cache_folder() / f"llama.cpp-{LLAMA_CPP_VERSION}-vulkan"
    if not (folder / "vulkan.done").exists():
        missing(f"llama.cpp with ggml's Vulkan backend is not built in {folder} (make setup builds it)")
    return folder


def lavapipe_environment() -> dict[str, str]:
    """The variables that make the Vulkan loader pick lavapipe, and ggml-vulkan use it (it skips
    a CPU-type device unless told which devices to use)."""
    icds = sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"))
    if not icds:
        missing("Mesa's lavapipe is not installed (apt-get install mesa-vulkan-drivers)")
    return {"VK_ICD_FILENAMES": icds[0], "GGML_VK_VISIBLE_DEVICES": "0"}


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


# What ggml-viz adds to a traced program's environment for its Vulkan layer (a recording made in
# this test process adds them to its own, which the programs the tests start would inherit).
LAYER_VARIABLES = ("LD_PRELOAD", "VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS", "GGML_VK_DEBUG_MARKERS")


def environment(**extra: str) -> dict[str, str]:
    """The test process's environment, ggml-viz's own variables left out, with lavapipe picked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k not in LAYER_VARIABLES}
    return {**env, **lavapipe_environment(), **extra}
