"""ggml-viz: where the time goes and where the bytes live in GGML inference.

    with ggml_viz.record("out.ggmlviz"):
        llm = llama_cpp.Llama("model.gguf")
        llm("The capital of France is", max_tokens=8)

    run = ggml_viz.open("out.ggmlviz")
    run.nodes.groupby("op").duration_ns.sum()

Start recording before the Llama(...) is created: llama.cpp fixes a context's eval
callback when the context is made.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ._errors import CaptureError, GgmlVizError, RunFormatError
from ._version import __version__

if TYPE_CHECKING:
    from .capture.session import Recording
    from .runformat.reader import Run

__all__ = ["CaptureError", "GgmlVizError", "RunFormatError", "__version__", "open", "record"]


def record(
    output: str | os.PathLike[str],
    *,
    metadata: dict[str, Any] | None = None,
    max_events: int | None = None,
    overwrite: bool = False,
    verbose: bool = False,
) -> Recording:
    """Record every llama context created inside the `with` block into the run `output`.

    metadata: stored in the manifest under "generation" (prompt, sampling settings, ...).
    max_events: keep at most this many node events (whole graphs; the rest are counted as dropped).
    overwrite: replace an existing run at `output`.
    """
    from .capture.session import Recording

    return Recording(output, metadata=metadata, max_events=max_events, overwrite=overwrite, verbose=verbose)


def open(path: str | os.PathLike[str]) -> Run:  # noqa: A001 - mirrors the builtin on purpose
    """Open a recorded run directory for reading."""
    from .runformat.reader import open_run

    return open_run(path)
