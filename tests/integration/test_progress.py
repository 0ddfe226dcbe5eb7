"""Progress on standard error while a command works: shown where standard error is a terminal,
nothing where it is a pipe (a script's, CI's log)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.runformat.totals import GRAPH_OP_TOTALS, NODE_TOTALS

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")}, "TERM": "xterm", "COLUMNS": "120"}


def older_run(folder: Path) -> Path:
    """A run without stored totals (as an older ggml-viz wrote it): its first open sums its node events."""
    # (enough node events that summing them lasts several of the spinner's refreshes, 80 ms each)
    run = write_synthetic_run(folder / "older.ggmlviz", graphs=3000, layers=8, seed=1)
    for name in (NODE_TOTALS, GRAPH_OP_TOTALS):
        (run / f"{name}.parquet").unlink()
    return run


def on_a_terminal(*args: str) -> tuple[int, str, str]:
    """`ggml-viz ARGS` with standard error a terminal (a pseudo-terminal) and standard output a pipe:
    its status, standard output and what the terminal showed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed the terminal's other end
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    out = process.stdout.read().decode() if process.stdout else ""
    return process.wait(timeout=60), out, shown.decode(errors="replace")


def test_summary_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    run = older_run(tmp_path)
    status, out, shown = on_a_terminal("summary", str(run))
    assert status == 0, shown
    assert "summing the" in shown and "node events of older.ggmlviz" in shown  # the long step, as a spinner
    assert "summing" not in out  # progress never on standard output


def test_summary_says_nothing_on_a_pipe(tmp_path: Path) -> None:
    run = older_run(tmp_path)
    answer = subprocess.run(
        [sys.executable, "-m", "ggml_viz", "summary", str(run)], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stderr == ""
    assert "\x1b" not in answer.stderr and "summing" not in answer.stdout


def test_validate_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run.ggmlviz", graphs=8, layers=2, seed=2)
    status, out, shown = on_a_terminal("validate", str(run))
    assert status in (0, 1) and f"validating {run}" in shown
    piped = subprocess.run(
        [sys.executable, "-m", "ggml_viz", "validate", str(run)], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert piped.stderr == "" and piped.stdout == out
