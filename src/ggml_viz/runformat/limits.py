"""What this machine can do, as measured by `ggml-viz limits`: kept per machine, and in the
manifest of the runs judged against it (`manifest["limits"]`).

The limits are one JSON object (LIMITS_VERSION) whose `measurements` is a flat table, one
row per measurement, readable as a DataFrame without ggml-viz:

    device    "CPU", "CUDA0", ... (ggml's device name)
    threads   the CPU threads computing (null on a GPU)
    what      memory_read   the bytes read from memory per second (the roofline's roof): on
                            the CPU by ggml-viz's read kernel over a buffer far larger than the
                            caches (type null; version 1 used ggml's F32 matrix × vector, type
                            F32), on a GPU by ggml's F32 matrix × vector
              matvec        the same product over weights of `type` (decode's kernel): GB/s
                            of weights read, and GFLOP/s
              matmul        a matrix product of `type` weights by 256 F32 columns (a prompt's
                            kernel): GFLOP/s, the compute roof for that type
              page_cache_read, disk_read
                            the first read of a mapped file from the page cache, and from the
                            disk once its pages were dropped: GB/s
    type      ggml's type name (F32, Q4_K, ...), null where none applies
    gb_per_s, gflop_per_s, bytes, flops, seconds (the best of `repeats` runs), repeats, note

Kept in limits/ of ggml-viz's cache folder (~/.cache/ggml-viz; `limits_dir` says what moves
it), one file per machine: its host name, CPU model, core count and memory size name it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from .._errors import RunFormatError
from .machine import environment

LIMITS_VERSION = 2
# Version 1 measured the CPU's memory_read with ggml's F32 matrix-vector kernel (a quarter low on
# some CPUs): still read in the manifests of runs judged against it, never kept as this machine's.
READ_VERSIONS = (1, 2)
MEASUREMENT_KINDS = ("memory_read", "matvec", "matmul", "page_cache_read", "disk_read", "node_step")


def limits_dir() -> Path:
    """Where machines' limits are kept: GGML_VIZ_LIMITS_DIR, else limits/ in ggml-viz's cache
    folder (GGML_VIZ_CACHE, as the Makefile names it, else XDG_CACHE_HOME/ggml-viz)."""
    override = os.environ.get("GGML_VIZ_LIMITS_DIR")
    if override:
        return Path(override)
    cache = os.environ.get("GGML_VIZ_CACHE")
    return Path(cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ggml-viz") / "limits"


def this_machine() -> dict[str, Any]:
    """What names this machine: limits measured on another one do not apply here."""
    facts = environment()
    return {"host": socket.gethostname(), **{key: facts[key] for key in ("cpu_model", "cpu_cores", "memory_bytes")}}


def same_machine(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    keys = ("host", "cpu_model", "cpu_cores", "memory_bytes")
    return bool(a and b) and all(a.get(key) == b.get(key) for key in keys)  # type: ignore[union-attr]


def recorded_on(manifest: dict[str, Any]) -> dict[str, Any]:
    """The machine a run was recorded on, as its manifest names it (this_machine's keys)."""
    return {**(manifest.get("environment") or {}), "host": (manifest.get("recorder") or {}).get("host")}


def limits_file(machine: dict[str, Any] | None = None) -> Path:
    machine = machine or this_machine()
    key = json.dumps([machine.get(k) for k in ("host", "cpu_model", "cpu_cores", "memory_bytes")])
    name = f"{machine.get('host') or 'machine'}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
    return limits_dir() / name


def check_limits(limits: Any, where: str) -> dict[str, Any]:
    """The limits as read, checked: one clear error for a file that is not limits of this version."""
    if not isinstance(limits, dict) or not isinstance(limits.get("measurements"), list):
        raise RunFormatError(f"{where} holds no ggml-viz limits (no measurements list)")
    if limits.get("version") not in READ_VERSIONS:
        raise RunFormatError(
            f"{where} holds limits of version {limits.get('version')!r}; this ggml-viz reads "
            f"versions {', '.join(map(str, READ_VERSIONS))} (measure again: ggml-viz limits "
            "--again)"
        )
    for row in limits["measurements"]:
        if not isinstance(row, dict) or row.get("what") not in MEASUREMENT_KINDS:
            raise RunFormatError(f"{where}: a measurement of an unknown kind: {row!r:.200}")
    return limits


def stored_limits(machine: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """This machine's limits as last measured, or None where it was never measured (or the
    file is not of this version: measuring again replaces it)."""
    path = limits_file(machine)
    try:
        limits = check_limits(json.loads(path.read_text(encoding="utf-8")), str(path))
    except (OSError, ValueError, RunFormatError):
        return None
    return limits if limits.get("version") == LIMITS_VERSION else None


def store_limits(limits: dict[str, Any]) -> Path:
    """Keep these limits as their machine's (atomically: a reader sees the old file or the new)."""
    path = limits_file(limits.get("machine"))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    partial.write_text(json.dumps(limits, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def limits_for_new_run() -> dict[str, Any] | None:
    """The limits a run recorded on this machine starts with: the ones measured here, if any.
    Never raises: a recording must not fail for want of them."""
    try:
        return stored_limits()
    except Exception:  # noqa: BLE001 - a broken cache never stops a recording
        return None
