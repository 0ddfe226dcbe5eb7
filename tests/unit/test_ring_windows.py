"""A ring (`ggml-viz run --keep-minutes`) deletes its oldest windows by the time the program spent in
each, the windows being collected included."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ggml_viz.capture.core.recording import Recording
from ggml_viz.capture.preload.collector import SpoolCollector
from ggml_viz.capture.preload.control import DORMANT_FILE
from ggml_viz.capture.preload.windows import WINDOWS_DIR, DormantRecording, Window
from ggml_viz.capture.settings import CaptureSettings

SECOND = 1_000_000_000


def _ring(tmp_path: Path) -> DormantRecording:
    """A ring keeping 6 s (windows of 3 s) whose program, before the test's windows, ran none."""
    ring = DormantRecording(tmp_path / "ring.ggmlviz", CaptureSettings(), keep_minutes=0.1)
    ring.control.close()  # no program follows it here
    return ring


def _written_window(ring: DormantRecording, number: int, start_ns: int, seconds: float) -> Window:
    """A window whose run is written: the program was in it `seconds` from `start_ns`."""
    run_dir = ring.run_dir / WINDOWS_DIR / f"{number:04d}.ggmlviz"
    run_dir.mkdir(parents=True)
    window = Window(number, run_dir, 3.0, None, time.monotonic(), done=True)
    window.start_ns, window.end_ns = start_ns, start_ns + int(seconds * SECOND)
    ring.windows.append(window)
    ring.described["windows"].append(ring._entry(window, "complete"))
    return window


def _open_window(ring: DormantRecording, number: int, asked_s_ago: float, entered_ns: int | None) -> Window:
    """The window being collected: asked for `asked_s_ago`, entered by the program at `entered_ns` (or
    not yet)."""
    run_dir = ring.run_dir / WINDOWS_DIR / f"{number:04d}.ggmlviz"
    collector = SpoolCollector(Recording(run_dir, settings=ring.settings))
    collector.start_ns = entered_ns
    window = Window(number, run_dir, 3.0, collector, time.monotonic() - asked_s_ago)
    ring.windows.append(window)
    ring.described["windows"].append(ring._entry(window, "recording"))
    return window


def _kept(ring: DormantRecording) -> list[int]:
    """The windows its description does not list as removed."""
    return [entry["window"] for entry in ring.described["windows"] if entry["status"] != "removed"]


def test_a_window_the_program_never_entered_covers_nothing(tmp_path: Path) -> None:
    # GIVEN a ring of 6 s whose program spent 3 s, 3 s and 1.26 s in its last three windows (it
    # ended in the last), and a window asked for 2.9 s ago that the program never entered
    ring = _ring(tmp_path)
    now = time.monotonic_ns()
    for number, (seconds_ago, seconds) in enumerate([(9.0, 3.0), (6.0, 3.0), (3.0, 1.26)], start=1):
        _written_window(ring, number, now - int(seconds_ago * SECOND), seconds)
    _open_window(ring, 4, asked_s_ago=2.9, entered_ns=None)
    # WHEN the collector goes round
    ring.poll()
    # THEN the three written windows stay: the last two hold 4.26 s of the program, short of 6 s
    assert _kept(ring) == [1, 2, 3, 4]
    assert all((ring.run_dir / WINDOWS_DIR / f"{number:04d}.ggmlviz").exists() for number in (1, 2, 3))


def test_the_window_the_program_is_in_counts_from_when_it_entered(tmp_path: Path) -> None:
    # GIVEN the same ring, the program 2 s into the window being collected
    ring = _ring(tmp_path)
    now = time.monotonic_ns()
    for number, (seconds_ago, seconds) in enumerate([(11.0, 3.0), (8.0, 3.0), (5.0, 3.0)], start=1):
        _written_window(ring, number, now - int(seconds_ago * SECOND), seconds)
    _open_window(ring, 4, asked_s_ago=2.0, entered_ns=now - 2 * SECOND)
    # WHEN the collector goes round
    ring.poll()
    # THEN 2 s + 3 s + 3 s cover the last 6 s: the oldest window goes, from disk too
    assert _kept(ring) == [2, 3, 4]
    assert not (ring.run_dir / WINDOWS_DIR / "0001.ggmlviz").exists()
    assert [entry["status"] for entry in json.loads((ring.run_dir / DORMANT_FILE).read_text())["windows"]] == [
        "removed",
        "complete",
        "complete",
        "recording",
    ]
