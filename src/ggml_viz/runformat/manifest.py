"""The run's manifest: one JSON object describing the recording, written atomically, and read
back checked (its format and version, and whether a run marked `recording` still is)."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import sys
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from .._errors import RunFormatError
from .._version import __version__
from .limits import limits_for_new_run
from .machine import environment
from .schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST_FILE, READER_SUPPORTED_VERSIONS, SPOOL_DIR

STATUS_RECORDING = "recording"
STATUS_COMPLETE = "complete"
STATUS_INCOMPLETE = "incomplete"  # recording failed, or (found on read) its recorder died


def new_experiment_id() -> str:
    return uuid.uuid4().hex


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_manifest(experiment_id: str) -> dict[str, Any]:
    """The manifest of a recording that is starting now in this process."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "experiment_id": experiment_id,
        "created": utc_now(),
        "finished": None,
        "status": STATUS_RECORDING,
        "incomplete_reason": None,
        "recorder": {"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv[:]},
        "versions": package_versions(),
        "environment": environment(),
        "limits": limits_for_new_run(),  # this machine's, as `ggml-viz limits` measured them (None: never)
        "contexts": [],
        "model": None,
        "generation": {},
        "capture": {},
        "counts": {},
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Replace the manifest in one step, so a reader never sees half of one."""
    target = run_dir / MANIFEST_FILE
    partial = run_dir / (MANIFEST_FILE + ".partial")
    partial.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(partial, target)


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"ggml_viz": __version__, "python": platform.python_version()}
    for distribution in ("llama-cpp-python", "gguf", "numpy", "pyarrow"):
        try:
            versions[distribution.replace("-", "_")] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[distribution.replace("-", "_")] = None
    return versions


def load_manifest(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise RunFormatError(f"{path} is not a run directory")
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        if (path / SPOOL_DIR).is_dir():
            raise RunFormatError(
                f"{path} holds a native program's spool, not yet a run: `ggml-viz collect {path}` makes it one"
            ) from None
        raise RunFormatError(f"{path} has no {MANIFEST_FILE}: it is not a ggml-viz run") from None
    except (OSError, ValueError) as error:
        raise RunFormatError(f"{manifest_path} cannot be read: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise RunFormatError(f"{path} is not a ggml-viz run (its manifest names another format)")
    version = manifest.get("format_version")
    if version not in READER_SUPPORTED_VERSIONS:
        supported = ", ".join(map(str, READER_SUPPORTED_VERSIONS))
        raise RunFormatError(f"{path} uses run format version {version}; this ggml-viz reads version {supported}")
    if not isinstance(manifest.get("experiment_id"), str):
        raise RunFormatError(f"{manifest_path} has no experiment id")
    return manifest


# capture.recorder: which recorder wrote the run's graphs: `c` (the C recorder, in a Python
# program's process), `python` (its Python twin), `preload` (the C recorder in the preload library,
# in a native program). Runs written before say them by their old names.
RECORDERS_RENAMED = {"native": "c", "native-preload": "preload"}


def recorder_of(manifest: dict[str, Any]) -> str | None:
    """The recorder that wrote a run (capture.recorder), by its current name."""
    recorder = (manifest.get("capture") or {}).get("recorder")
    return RECORDERS_RENAMED.get(recorder, recorder) if isinstance(recorder, str) else None


def effective_status(manifest: dict[str, Any]) -> str:
    """A run still marked `recording` whose recorder is gone is `incomplete`."""
    status = str(manifest.get("status"))
    if status != STATUS_RECORDING:
        return status
    recorder = manifest.get("recorder") or {}
    if recorder.get("host") == socket.gethostname() and _process_alive(recorder.get("pid")):
        return STATUS_RECORDING
    return STATUS_INCOMPLETE


def _process_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
