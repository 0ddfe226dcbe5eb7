"""Opening a run by its path, as every command, the viewer and `ggml_viz.open` do: a folder that
holds only the spool a native program left (recorded with LD_PRELOAD by hand, without `ggml-viz
run`) is collected into the run first, once; any other folder is read as it is."""

from __future__ import annotations

import os
from pathlib import Path

from ..._errors import RunFormatError
from ...runformat.reader import Run, open_run
from ...runformat.schema import MANIFEST_FILE, SPOOL_DIR
from .control import DORMANT_FILE


def collect_and_open(path: str | os.PathLike[str]) -> Run:
    """The run at `path`, its spool collected first where that is all it holds; RunFormatError
    if it is not a run."""
    run_dir = Path(path)
    if (run_dir / DORMANT_FILE).exists():  # no run itself: its windows are
        from .windows import describe_windows, read_dormant

        raise RunFormatError(describe_windows(run_dir, read_dormant(run_dir) or {}))
    if not (run_dir / MANIFEST_FILE).exists() and (run_dir / SPOOL_DIR).is_dir():
        from .collector import collect_spooled_run  # the recording machinery, only for a spool

        collect_spooled_run(run_dir)
    return open_run(run_dir)
