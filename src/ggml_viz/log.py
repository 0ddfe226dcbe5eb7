"""Messages from the recorder to the traced program's stderr, one line each; long steps announced."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

_said: set[str] = set()


def say(message: str) -> None:
    print(f"ggml-viz: {message}", file=sys.stderr, flush=True)


def say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        say(message)


# Long steps (seconds on a long run: summing an older run's node events, joining a distributed
# run) are announced to whoever listens: a command shows them as progress on a terminal
# (commands/progress.py); the layers below know nothing of how.
StepListener = Callable[[str | None], None]  # a step's description as it begins; None as it ends
_step_listeners: list[StepListener] = []


@contextlib.contextmanager
def long_step(description: str) -> Iterator[None]:
    """Announce a step that may take seconds while the block runs."""
    for listener in _step_listeners:
        listener(description)
    try:
        yield
    finally:
        for listener in _step_listeners:
            listener(None)


@contextlib.contextmanager
def listening_to_steps(listener: StepListener) -> Iterator[None]:
    """`listener` hears of every long step while the block runs."""
    _step_listeners.append(listener)
    try:
        yield
    finally:
        _step_listeners.remove(listener)
