"""A dormant recording (`ggml-viz run --dormant`, `--keep-minutes`): the program runs with the preload
library in, recording no graph, each llama call's batch still written; windows of a few seconds are
recorded on demand (`ggml-viz capture`, SIGUSR1) or back to back (a ring), each a complete run of its
own under RUN/windows/.

The run directory of a dormant recording holds:
  dormant.json         what it is: the program, its windows (no manifest: it is not a run itself)
  control              the window control the traced process maps (control.py)
  spool/G/PID.spool    the dormant spool of generation G: llama calls only, removed once read
  windows/NNNN.ggmlviz each window's run, its spool collected inside it by a plain SpoolCollector
  requests/ID.json     a window asked for by `ggml-viz capture`; ID.answer.json: the run, or why not
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...log import say
from ...runformat.writer import prepare_run_dir
from ..contract.records import DECODE
from ..core.context_tracer import warmup_tokens
from ..core.observer import RecordingObserver
from ..core.recording import Recording
from ..settings import CaptureSettings
from .collector import SpoolCollector, SpoolRecording
from .control import CONTROL_FILE, DORMANT_FILE, WindowControl
from .spool import CONTEXT, END, SPOOL_DIR, TAKE, Frame, SpoolReader

WINDOWS_DIR = "windows"
REQUESTS_DIR = "requests"
DEFAULT_WINDOW_S = 10.0
# A ring's windows: a quarter of what it keeps, and no shorter than this (each is a run of its own)
MIN_RING_WINDOW_S = 3.0
ANSWER_SUFFIX = ".answer.json"
STEER_INTERVAL_S = 0.05


def ring_window_seconds(keep_minutes: float) -> float:
    return max(keep_minutes * 60 / 4, MIN_RING_WINDOW_S)


def read_dormant(run_dir: Path) -> dict[str, Any] | None:
    """A dormant recording's description, or None if `run_dir` is not one."""
    try:
        with open(run_dir / DORMANT_FILE, encoding="utf-8") as file:
            described: dict[str, Any] = json.load(file)
    except (OSError, ValueError):
        return None
    return described


def _write_json(path: Path, content: dict[str, Any]) -> None:
    """Whole or not at all: a reader never sees half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(content, indent=2), encoding="utf-8")
    os.replace(partial, path)


@dataclass
class Window:
    """One window: its run, being collected, and who waits for it."""

    number: int
    run_dir: Path
    requested_s: float
    # its collector while it is collected; let go once its run is written (a server left on for days
    # makes thousands of windows: each collector's recording holds its contexts' tables)
    collector: SpoolCollector | None
    opened_at: float  # time.monotonic() when asked for
    answers: list[Path] = field(default_factory=list)  # `ggml-viz capture`s waiting for it
    closing: bool = False  # the process was asked to leave it
    done: bool = False
    # what is kept of it once its collector is let go
    start_ns: int | None = None
    end_ns: int | None = None
    failed: bool = False

    @property
    def live(self) -> SpoolCollector:
        """Its collector (a window not done yet)."""
        assert self.collector is not None, f"window {self.number} is written already"
        return self.collector

    def ended_in_process(self) -> bool:
        """Every process that wrote its spool closed it (its END frame came)."""
        collector = self.live
        return collector.started and collector.ended >= len(collector.readers) - len(collector.untraced)

    def let_go(self) -> None:
        """Its run is written: keep its span and outcome, drop its collector."""
        collector = self.live
        self.start_ns, self.end_ns = collector.start_ns, collector.end_ns
        self.failed = collector.recording.failed is not None
        self.collector = None

    def span(self) -> tuple[int | None, int | None]:
        """When the program started and ended writing it."""
        if self.collector is not None:
            return self.collector.start_ns, self.collector.end_ns
        return self.start_ns, self.end_ns

    @property
    def duration_ns(self) -> int:
        start, end = self.span()
        return end - start if start is not None and end is not None else 0

    def covered_ns(self, now_ns: int) -> int:
        """How much of the program's time it holds: from when the program entered it to when it left,
        or to `now_ns` while it is still there; nothing before the program entered it (a window opened
        as the program ends may never be)."""
        start, end = self.span()
        if start is None:
            return 0
        return (end if end is not None else now_ns) - start


class DormantCalls:
    """The dormant spools (llama calls, no graphs): their contexts and calls told to the observer (the
    live metrics), each spool removed once its END frame is read, so a server left dormant for days
    fills no disk."""

    def __init__(self) -> None:
        self.observer: RecordingObserver | None = None
        self.folders: list[Path] = []
        self.readers: dict[Path, SpoolReader] = {}
        self.llama_calls = 0  # llama calls seen while dormant

    def follow(self, folder: Path) -> None:
        self.folders.append(folder)

    def poll(self) -> None:
        for folder in list(self.folders):
            for path in sorted(folder.glob("*.spool")):
                reader = self.readers.setdefault(path, SpoolReader(path))
                ended = False
                for frame in reader.read_new():
                    self._see(path, frame)
                    ended |= frame.kind == END
                if ended:
                    del self.readers[path]
                    path.unlink(missing_ok=True)
            if folder != self.folders[-1] and not any(folder.iterdir()):
                folder.rmdir()
                self.folders.remove(folder)

    def _see(self, path: Path, frame: Frame) -> None:
        if frame.kind == TAKE:
            decodes = frame.take().decodes
            self.llama_calls += int(np.sum(np.frombuffer(decodes.calls, DECODE.dtype)["index"] >= 0))
            self._tell(lambda observer: observer.observe_calls(frame.context_id, decodes))
        elif frame.kind == CONTEXT:
            description = frame.json()
            model = description.get("model") or {}
            warmup = warmup_tokens(model.get("bos"), model.get("eos"))
            self._tell(lambda observer: observer.observe_context(frame.context_id, description, warmup))

    def _tell(self, message: Callable[[RecordingObserver], None]) -> None:
        """As Recording.tell_observer: an observer that fails is let go, the recording goes on."""
        if self.observer is None:
            return
        try:
            message(self.observer)
        except Exception as error:  # noqa: BLE001 - whatever the metrics meet, the recording goes on
            self.observer = None
            say(f"live metrics stopped: {type(error).__name__}: {error}; the recording goes on")


class DormantRecording:
    """What `ggml-viz run --dormant` (or `--keep-minutes`) collects: the dormant calls, and the windows."""

    def __init__(
        self,
        run_dir: Path,
        settings: CaptureSettings,
        keep_minutes: float | None = None,
        verbose: bool = False,
        observer: RecordingObserver | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.settings = settings
        self.keep_minutes = keep_minutes
        self.verbose = verbose
        self.observer = observer  # told every context and call, dormant or in a window (live metrics)
        self.calls = DormantCalls()
        self.calls.observer = observer
        # the steering thread's and the collector's: windows, requests, the control, the description
        self.lock = threading.RLock()  # (reentrant: SIGUSR1's handler asks for a window on the main thread)
        self._steering: threading.Thread | None = None
        self._finished = threading.Event()
        for folder in (SPOOL_DIR, WINDOWS_DIR, REQUESTS_DIR):
            (run_dir / folder).mkdir(parents=True, exist_ok=True)
        first = self._dormant_folder(0)
        first.mkdir()
        self.control = WindowControl(run_dir / CONTROL_FILE, first)
        self.calls.follow(first)
        self.windows: list[Window] = []
        self.waiting: list[tuple[float, Path | None]] = []  # windows asked for: seconds, who waits
        self.described: dict[str, Any] = {
            "dormant": True,
            "collector_pid": os.getpid(),
            "program": None,
            "keep_minutes": keep_minutes,
            "window_seconds": ring_window_seconds(keep_minutes) if keep_minutes else DEFAULT_WINDOW_S,
            "windows": [],
            "ended": False,
            "exit_status": None,
        }
        self._save()

    @property
    def environment(self) -> dict[str, str]:
        """What the traced process needs to follow the control."""
        return {"GGML_VIZ_CONTROL": str(self.control.path)}

    def program_started(self, argv: list[str], pid: int) -> None:
        self.described["program"] = {"argv": argv, "pid": pid}
        self._save()

    def request(self, seconds: float | None = None, answer: Path | None = None) -> None:
        """A window of `seconds` (the default length: None), once the one open (if any) is done."""
        with self.lock:
            self.waiting.append((seconds or self.described["window_seconds"], answer))

    def start_steering(self) -> None:
        """Windows open and close on time on a thread of their own: collecting a window's graphs can
        take the collector seconds at its share of a loaded machine, and a window's end must not wait
        for that (a ring's windows would stretch, a capture wait)."""
        self._steering = threading.Thread(target=self._steer_until_finished, name="ggml-viz-windows", daemon=True)
        self._steering.start()

    def _steer_until_finished(self) -> None:
        while not self._finished.wait(STEER_INTERVAL_S):
            with self.lock:
                self.steer()

    def steer(self) -> None:
        """Windows asked for read; the window open closed when its time is up, the next opened (or the
        program switched back to dormant)."""
        self._read_requests()
        now = time.monotonic()
        current = next((w for w in self.windows if not w.closing), None)
        if current is not None and now - current.opened_at >= current.requested_s:
            current.closing = True
            current = None
            if not self.keep_minutes and not self.waiting:
                folder = self._dormant_folder(self.control.generation + 1)
                self.control.switch(folder, graphs=False)
                self.calls.follow(folder)
        if current is None and (self.keep_minutes or self.waiting):
            self._open_window()

    def poll(self) -> None:
        """Collect what the spools gained (the windows' outside the lock: the steering goes on)."""
        with self.lock:
            if self._steering is None:
                self.steer()
            self.calls.poll()
            windows = [window for window in self.windows if not window.done]
        for window in windows:
            self._collect(window)
        with self.lock:
            for window in windows:
                if window.closing and window.ended_in_process():
                    self._finish(window, exit_status=None)
            if self.keep_minutes:
                self._prune(time.monotonic_ns())

    def finish(self, exit_status: int | None) -> None:
        """The program ended: the window in progress ends as its run (or goes, if nothing reached it)."""
        self._finished.set()
        if self._steering is not None:
            self._steering.join()
        self.calls.poll()
        for window in self.windows:
            if window.done:
                continue
            self._collect(window)
            if window.live.started:
                self._finish(window, exit_status)
            else:
                self._drop(window, "the program ended before the window opened")
        for _, answer in self.waiting:
            if answer is not None:
                _write_json(answer, {"error": "the program ended before the window opened"})
        self.waiting = []
        if self.keep_minutes:
            self._prune(time.monotonic_ns())
        self.described.update(ended=True, exit_status=exit_status, llama_calls_while_dormant=self.calls.llama_calls)
        self._save()
        self.control.close()

    def _dormant_folder(self, generation: int) -> Path:
        return self.run_dir / SPOOL_DIR / str(generation)

    def _read_requests(self) -> None:
        for request in sorted((self.run_dir / REQUESTS_DIR).glob("*.json")):
            if request.name.endswith(ANSWER_SUFFIX) or request.name.endswith(".partial"):
                continue
            answer = request.with_name(request.stem + ANSWER_SUFFIX)
            try:
                seconds = float(json.loads(request.read_text(encoding="utf-8"))["seconds"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not whole yet
            request.unlink(missing_ok=True)
            if self.keep_minutes:
                _write_json(answer, {"error": "a ring recording (--keep-minutes) records its windows already"})
            else:
                self.request(seconds, answer)

    def _open_window(self) -> None:
        number = len(self.windows) + 1
        if self.keep_minutes:
            seconds, answers = float(self.described["window_seconds"]), []
        else:
            asked, answer = self.waiting.pop(0)
            seconds, answers = asked, [answer] if answer is not None else []
        run_dir = prepare_run_dir(self.run_dir / WINDOWS_DIR / f"{number:04d}.ggmlviz")
        recording: SpoolRecording = Recording(run_dir, settings=self.settings, verbose=self.verbose)
        recording.observer = self.observer
        collector = SpoolCollector(recording)
        window = Window(number, run_dir, seconds, collector, time.monotonic(), answers)
        self.windows.append(window)
        self.control.switch(run_dir / SPOOL_DIR, graphs=True)
        self.described["windows"].append(self._entry(window, "recording"))
        self._save()

    def _collect(self, window: Window) -> None:
        recording = window.live.recording
        if recording.failed is not None:
            return
        try:
            window.live.poll()
        except Exception as error:  # noqa: BLE001 - the program goes on whatever the collector meets
            recording.fail(f"collecting the spool failed: {error}")

    def _finish(self, window: Window, exit_status: int | None) -> None:
        collector = window.live
        writer = collector.recording.writer
        if writer is not None:
            writer.update_manifest(window_of=self._window_of(window))
        collector.finish(exit_status)
        window.done = True
        window.let_go()
        self._replace_entry(window, "incomplete" if window.failed else "complete")
        for answer in window.answers:
            _write_json(answer, {"run": str(window.run_dir), "status": self._entry(window, "")["status"]})

    def _drop(self, window: Window, reason: str) -> None:
        shutil.rmtree(window.run_dir, ignore_errors=True)
        window.done = True
        window.let_go()
        self._replace_entry(window, "removed")
        for answer in window.answers:
            _write_json(answer, {"error": reason})

    def _prune(self, now_ns: int) -> None:
        """A ring keeps the windows that cover its last minutes, and the one before (the first kept
        may start in the middle of one): the oldest go."""
        keep_ns = (self.keep_minutes or 0) * 60e9
        # every window counts the time the program spent in it, the ones not written yet too (a clock
        # of when a window was asked for would count a window the program never entered, and delete
        # the one the last minutes need); a collector behind its spool counts less: one window more kept
        covered = sum(w.covered_ns(now_ns) for w in self.windows if not w.done)
        for window in sorted((w for w in self.windows if w.done), key=lambda w: -w.number):
            if not window.run_dir.exists():
                continue
            if covered >= keep_ns:
                shutil.rmtree(window.run_dir, ignore_errors=True)
                self._replace_entry(window, "removed")
            covered += window.duration_ns

    def _window_of(self, window: Window) -> dict[str, Any]:
        return {
            "run": str(self.run_dir),
            "window": window.number,
            "requested_s": window.requested_s,
            "start_ns": window.span()[0],
            "end_ns": window.span()[1],
        }

    def _entry(self, window: Window, status: str) -> dict[str, Any]:
        failed = window.failed if window.collector is None else window.collector.recording.failed is not None
        return {
            **self._window_of(window),
            "run": str(window.run_dir.relative_to(self.run_dir)),
            "status": status or ("incomplete" if failed else "complete"),
        }

    def _replace_entry(self, window: Window, status: str) -> None:
        self.described["windows"] = [
            self._entry(window, status) if entry["window"] == window.number else entry
            for entry in self.described["windows"]
        ]
        self._save()

    def _save(self) -> None:
        _write_json(self.run_dir / DORMANT_FILE, self.described)


def describe_windows(run_dir: Path, described: dict[str, Any]) -> str:
    """A dormant recording, for one error: it is no run, its windows are."""
    kept = [entry for entry in described.get("windows", []) if entry.get("status") != "removed"]
    if not kept:
        return (
            f"{run_dir} is a dormant recording (ggml-viz run --dormant): it holds no graphs, and no window was "
            f"recorded yet; record one with `ggml-viz capture {run_dir} --seconds 10`"
        )
    names = ", ".join(str(run_dir / entry["run"]) for entry in kept)
    return f"{run_dir} is a dormant recording (ggml-viz run --dormant): it holds no graphs; its window runs are {names}"
