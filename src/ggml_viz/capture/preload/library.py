"""The preload library (preload.c and its siblings here), seen from Python: where it is.
(A Python program's own recording asks it for the process: llama_cpp_python/session.py.)"""

from __future__ import annotations

from pathlib import Path

from ..._errors import CaptureError

PRELOAD_LIBRARY = Path(__file__).with_name("libggml_viz_preload.so")


def preload_path() -> Path:
    """The preload library (CaptureError if this installation was built without it)."""
    if not PRELOAD_LIBRARY.exists():
        raise CaptureError(
            f"the preload library for native programs is missing ({PRELOAD_LIBRARY}): reinstall ggml-viz with a C "
            "compiler to record native programs"
        )
    return PRELOAD_LIBRARY
