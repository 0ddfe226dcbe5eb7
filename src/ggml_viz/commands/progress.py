"""Progress on standard error while a command works, where standard error is a terminal (rich's
bar or spinner, gone when done); nothing where it is not (a pipe, a file, CI's log).

The layers below report through callbacks (an exporter's ExportOptions.progress, a collector's
`progress`) or announce long steps (log.long_step): they know nothing of rich.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..log import listening_to_steps

Report = Callable[[int, int], None]  # (done, total; 0: not known)
Update = Callable[[str], None]  # what is being done now


def _console() -> Any | None:
    """A console on standard error, or None where standard error is not a terminal."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True)
    return console if console.is_terminal and not console.is_dumb_terminal else None


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Report]:
    """A bar while the block runs; the block reports (done, total) to the function it gets."""
    console = _console()
    if console is None:
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=None)
        # a long step below (an older run's totals summed) says itself in the bar's place
        with listening_to_steps(lambda step: progress.update(task, description=step or description)):
            yield lambda done, total: progress.update(task, completed=done, total=total or None)


@contextlib.contextmanager
def spinner(description: str) -> Iterator[Update]:
    """A spinner saying what is being done while the block runs; the block says its steps to
    the function it gets. The long steps announced below it show in it too."""
    console = _console()
    if console is None:
        yield lambda text: None
        return
    with console.status(description) as status:
        shown: list[str] = [description]

        def update(text: str) -> None:
            shown[0] = text
            status.update(text)

        with listening_to_steps(lambda step: status.update(step or shown[0])):
            yield update


@contextlib.contextmanager
def showing_steps() -> Iterator[None]:
    """The long steps announced while the block runs (log.long_step: an older run's node events
    summed at its first open, ...), each as a spinner while it runs."""
    console = _console()
    if console is None:
        yield
        return
    running: list[Any] = []

    def listener(step: str | None) -> None:
        if step is not None and not running:
            running.append(console.status(step))
            running[0].start()
        elif step is None and running:
            running.pop().stop()

    with listening_to_steps(listener):
        try:
            yield
        finally:
            while running:
                running.pop().stop()
