"""Model files as an attacker or a bad download makes them: a valid file with a few bytes
overwritten, maybe cut short. Reading one must succeed or say what is wrong, quickly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from ggml_viz._errors import ModelFileError
from ggml_viz.modelfile.layout import read_layout


def read_mutated(data: Any, valid: bytes, path: Path) -> None:
    """Overwrite 1 to 6 bytes of `valid` (hypothesis draws them from `data`), maybe cut it, write
    it to `path`: reading it succeeds or raises ModelFileError, within a second."""
    mutated = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    path.write_bytes(bytes(mutated))
    started = time.perf_counter()
    try:
        read_layout(path)
    except ModelFileError:
        pass
    assert time.perf_counter() - started < 1.0


def refused_fast(content: bytes, path: Path, message: str) -> None:
    """A malformed file written to `path` gets one ModelFileError naming the file and saying
    `message`, within a second."""
    path.write_bytes(content)
    started = time.perf_counter()
    with pytest.raises(ModelFileError) as error:
        read_layout(path)
    assert time.perf_counter() - started < 1.0
    assert message in str(error.value)
    assert str(path) in str(error.value)
