"""Messages from the recorder to the traced program's stderr, one line each."""

from __future__ import annotations

import sys

_said: set[str] = set()


def say(message: str) -> None:
    print(f"ggml-viz: {message}", file=sys.stderr, flush=True)


def say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        say(message)
