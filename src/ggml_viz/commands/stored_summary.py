"""The summary kept in the run: `ggml-viz summary` computes a run's summary once, keeps it in the run
directory (SUMMARY_FILE), and answers from it again without reading a table. Computing it takes
pandas, pyarrow and every analysis (a second or more to import and run, however small the run);
reading it back, the standard library.

What it was computed from is its key, and a summary whose key differs is computed again (and kept
again): each file of the run (its name, size, modification and change times, inode; the manifest's
bytes by their hash), the summary's `--top`, ggml-viz's version and its own code's files (an edited
or reinstalled ggml-viz computes anew), and pandas', NumPy's and pyarrow's installed files. None is
kept or read:
- for a run whose manifest says it is still recording: its files change, and whether its recorder
  still lives changes what the summary says (`recording`, or `incomplete` once it died);
- with a findings plugin installed (an entry point of `ggml_viz.findings`): a plugin's sentences are
  its own code's, which no key here covers, so each summary runs it;
- for a folder that is no single run (a joined run, a dormant recording's windows, a spool not yet
  collected).
A run directory that cannot be written is summarized each time, silently.

The summary is kept as JSON (json.dumps(summary, default=str), the data `summary --json` prints) with
its `run` (the path as the command was given it) taken out: the tables and the JSON are made from
that same data, computed or read back, so the two answers are the same bytes.

This module imports only the standard library: it runs before any table is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from .._version import __version__

SUMMARY_FILE = "summary-cache.json"
KEY_VERSION = 1
MANIFEST = "manifest.json"  # runformat.schema.MANIFEST_FILE (not imported: it imports pyarrow)
# A folder holding one of these is not one run as it stands (analysis/join/folder.py's JOIN_FILE,
# capture/preload/control.py's DORMANT_FILE, runformat.schema.SPOOL_DIR).
NOT_A_SINGLE_RUN = ("join.json", "dormant.json", "spool")
FINDINGS_GROUP = "ggml_viz.findings"  # analysis/findings.py's entry-point group
ANALYSIS_LIBRARIES = ("pandas", "numpy", "pyarrow")
PACKAGE = Path(__file__).resolve().parents[1]


def plain(summary: Any) -> Any:
    """The summary as the JSON data `summary --json` prints (what cannot be JSON as its str())."""
    return json.loads(json.dumps(summary, default=str))


def as_json(summary: Any) -> str:
    """`summary --json`'s text of plain() data."""
    return json.dumps(summary, indent=2)


def summary_key(run_dir: Path, top: int) -> str | None:
    """The key of the summary of the run at `run_dir` as it is now, or None where no summary of it
    is kept (still recording, not one run, a findings plugin installed, no readable manifest)."""
    try:
        manifest_bytes = (run_dir / MANIFEST).read_bytes()
        manifest = json.loads(manifest_bytes)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("status") in (None, "recording"):
        return None
    if any(os.path.lexists(run_dir / name) for name in NOT_A_SINGLE_RUN) or findings_plugins_installed():
        return None
    try:
        files = sorted(_run_files(run_dir))
    except OSError:
        return None
    parts = {
        "key_version": KEY_VERSION,
        "top": top,
        "experiment_id": manifest.get("experiment_id"),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "files": files,
        "ggml_viz": [__version__, _code_signature()],
        "libraries": [_installed_signature(name) for name in ANALYSIS_LIBRARIES],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _run_files(run_dir: Path, prefix: str = "") -> Iterator[tuple[str, int, int, int, int]]:
    """(name, size, mtime_ns, ctime_ns, inode) of each file under run_dir but the kept summary."""
    with os.scandir(run_dir) as entries:
        for entry in entries:
            name = prefix + entry.name
            if not prefix and entry.name.startswith(SUMMARY_FILE):  # itself, and its partial writes
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from _run_files(Path(entry.path), name + "/")
            else:
                stat = entry.stat()
                yield name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def _code_signature() -> str:
    """What changes when ggml-viz's own Python code does (an edit, a reinstall): its files' names,
    sizes and modification times."""
    found = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "static")]
        for name in files:
            if name.endswith(".py"):
                stat = os.stat(os.path.join(folder, name))
                found.append((os.path.relpath(os.path.join(folder, name), PACKAGE), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(json.dumps(sorted(found)).encode()).hexdigest()


def _installed_signature(module: str) -> list[Any] | None:
    """Where a library is installed and when its files were written (without importing it)."""
    try:
        spec = find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        stat = os.stat(spec.origin)
    except OSError:
        return [spec.origin]
    return [spec.origin, stat.st_size, stat.st_mtime_ns]


def findings_plugins_installed() -> bool:
    """Whether any package on sys.path declares an entry point of the findings group (read from the
    packages' metadata files, as importlib.metadata finds them, without its slower scan)."""
    header = f"[{FINDINGS_GROUP}]"
    for entry in sys.path:
        try:
            listing = os.scandir(entry or ".")
        except OSError:
            continue
        with listing:
            for item in listing:
                if item.name.endswith((".dist-info", ".egg-info")):
                    try:
                        with open(os.path.join(item.path, "entry_points.txt"), encoding="utf-8") as file:
                            if header in file.read():
                                return True
                    except (OSError, UnicodeDecodeError):
                        continue
    return False


def read_summary(run_dir: Path, top: int) -> dict[str, Any] | None:
    """The kept summary of the run (plain() data, its `run` the path given here), or None where
    none is kept for it as it is now."""
    try:
        kept = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not isinstance(kept.get("summary"), dict):
        return None
    key = summary_key(run_dir, top)
    if key is None or kept.get("key") != key:
        return None
    return {"run": str(run_dir), **kept["summary"]}


def keep_summary(run_dir: Path, top: int, key: str | None, summary: dict[str, Any]) -> None:
    """Keep plain() summary data computed from the run as it was when `key` was taken, if the run
    is still so now (a run that changed meanwhile is not kept); silently nothing where the run
    directory cannot be written."""
    if key is None or summary_key(run_dir, top) != key:
        return
    kept = {
        "key": key,
        "top": top,
        "ggml_viz": __version__,
        "summary": {k: v for k, v in summary.items() if k != "run"},
    }
    partial = run_dir / f"{SUMMARY_FILE}.{os.getpid()}.partial"
    try:
        partial.write_text(json.dumps(kept), encoding="utf-8")
        os.replace(partial, run_dir / SUMMARY_FILE)
    except OSError:
        try:
            partial.unlink()
        except OSError:
            pass
