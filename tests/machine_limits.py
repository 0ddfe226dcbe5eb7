"""Limits as `ggml-viz limits` keeps them, made by hand for tests whose outcome must not depend on
how busy a shared machine's second core was when they ran: measured ones are checked against
outside tools in tests/integration/test_limits_against_stream.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ggml_viz.runformat.limits import LIMITS_VERSION, this_machine
from ggml_viz.runformat.manifest import write_manifest

NODE_STEP_SECONDS = 1e-9  # a node's step the same at both counts, and too small to count beside its work


def row(
    what: str,
    threads: int | None,
    kind: str | None,
    gb: float | None = None,
    gflop: float | None = None,
    device: str = "CPU",
    seconds: float = 1.0,
) -> dict[str, Any]:
    """One measurement as `ggml-viz limits` writes it."""
    return {
        "device": device,
        "threads": threads,
        "what": what,
        "type": kind,
        "gb_per_s": gb,
        "gflop_per_s": gflop,
        "bytes": 1,
        "flops": 1,
        "seconds": seconds,
        "repeats": 1,
        "note": None,
    }


def limits_of(*rows: dict[str, Any]) -> dict[str, Any]:
    """Limits of this machine holding these measurements."""
    return {
        "version": LIMITS_VERSION,
        "measured": "2026-11-27T00:00:00+00:00",
        "machine": this_machine(),
        "measurements": list(rows),
    }


def twice_as_fast_at_two_threads(types: tuple[str, ...] = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")) -> dict[str, Any]:
    """This machine's limits at 1 and 2 threads, every rate twice as high at 2, a node's step the
    same at both and negligible: a CPU node then takes half its time at two threads."""
    rows = []
    for n in (1, 2):
        rows.append(row("memory_read", n, None, n * 10.0))
        rows.append(row("node_step", n, None, seconds=NODE_STEP_SECONDS))
        for kind in types:
            rows += [row("matvec", n, kind, n * 8.0, n * 16.0), row("matmul", n, kind, n * 0.5, n * 50.0)]
    return limits_of(*rows)


def keep_in_run(run: Path, limits: dict[str, Any]) -> None:
    """Write limits into a closed run's manifest, as `ggml-viz limits --for` does."""
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["limits"] = limits
    write_manifest(run, manifest)
