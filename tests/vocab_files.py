"""llama.cpp's own vocabulary-only GGUF files (19 architectures' tokenizers, no tensors), as
`make test` extracts them from the llama-cpp-python sdist: where the tests find them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .build_cache import cache_folder

MISSING = "llama.cpp's vocabulary GGUF files are missing (`make test` extracts them)"


def vocab_folder() -> Path:
    return Path(os.environ.get("GGML_VIZ_VOCAB_FILES", cache_folder() / "llama-vocab-0.3.36"))


def vocab_files() -> list[Path]:
    return sorted(vocab_folder().glob("ggml-vocab-*.gguf"))


def require_vocab_files() -> list[Path]:
    """The files, or the test skips (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every
    tool must be there)."""
    files = vocab_files()
    if not files:
        if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return files


def require_vocab_file(name: str) -> Path:
    """One of them by its family (`qwen2` for ggml-vocab-qwen2.gguf)."""
    path = vocab_folder() / f"ggml-vocab-{name}.gguf"
    if not path.exists():
        require_vocab_files()  # skips (or fails) when the folder is missing
        pytest.fail(f"{path} is missing among llama.cpp's vocabulary files")
    return path
