"""The preload library (native/preload.c), seen from Python: where it is, and the claim a
Python process's own recording makes on the process when the library is in it too."""

from __future__ import annotations

import ctypes
from pathlib import Path

from .._errors import CaptureError

PRELOAD_LIBRARY = Path(__file__).with_name("libggml_viz_preload.so")

_preload_claim: bool | None = None  # this process's answer, once asked


def claim_from_preload() -> bool:
    """Whether this Python process's recording may take its llama contexts. Where the preload
    library is in the process too (`ggml-viz run -- python ...`), it records the ggml that other
    bindings compute with; the first to record keeps the process. False: the preload library
    already records it."""
    global _preload_claim
    if _preload_claim is None:
        claim = getattr(ctypes.CDLL(None), "ggml_viz_preload_claim", None)
        _preload_claim = claim is None or bool(claim())
    return _preload_claim


def preload_path() -> Path:
    """The preload library (CaptureError if this installation was built without it)."""
    if not PRELOAD_LIBRARY.exists():
        raise CaptureError(
            f"the preload library for native programs is missing ({PRELOAD_LIBRARY}): reinstall ggml-viz with a C "
            "compiler to record native programs"
        )
    return PRELOAD_LIBRARY
