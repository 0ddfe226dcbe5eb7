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
from collections.abc import Sequence
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
    detail: str = "op",
    timing: str = "inline",
    sample: int | None = None,
    ops: str | Sequence[str] | None = None,
    layers: str | None = None,
    names: str | Sequence[str] | None = None,
    max_events: int | None = None,
    policy: str = "keep-first",
    recorder: str = "native",
    values: str = "off",
    capture: str | Sequence[str] | None = None,
    capture_bytes: int | None = None,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    verbose: bool = False,
) -> Recording:
    """Record every llama context created inside the `with` block into the run `output`.

    detail: "op" times every node on its own; "graph" records structure and graph times only.
    timing: how nodes are timed. "inline" (default): each graph runs in one piece, as
        untraced, and the CPU backend's per-node callback gives the times (thread 0's view);
        "sync": each timed node is computed alone and synchronized (exact boundaries, any
        backend, slower: every node becomes its own compute call).
    sample: time nodes on every N-th decode graph and the first prompt graph only.
    ops, layers, names: time only matching nodes on their own ("MUL_MAT,ROPE", "0-3,29,none",
        "attn*"); the others are recorded as structure.
    max_events, policy: keep at most this many node events, whole graphs, the first
        ("keep-first") or the last ("keep-last"); the rest are counted as dropped.
    recorder: "native" (C extension, the default) or "python".
    values: "stats" reads every node's output after it is computed (min, max, mean, std,
        mean |x|, NaN and Inf counts; each node is then computed alone).
    capture: name globs ("kq_soft_max-*") of nodes whose whole output is stored, at most
        capture_bytes (default 64 MiB) per run; `run.captured(graph, node)` reads one back.
    metadata: stored in the manifest under "generation" (prompt, sampling settings, ...).
    overwrite: replace an existing run at `output`.
    """
    from .capture.session import Recording
    from .capture.settings import CaptureSettings, selection_from, values_from

    op_list = ops if isinstance(ops, str) or ops is None else ",".join(ops)
    settings = CaptureSettings(
        recorder=recorder,
        detail=detail,
        timing=timing,
        sample=sample,
        selection=selection_from(
            op_list, layers, list(names) if names is not None and not isinstance(names, str) else names
        ),
        max_events=max_events,
        policy=policy,
        values=values_from(
            values, capture if isinstance(capture, str) or capture is None else list(capture), capture_bytes
        ),  # fmt: skip
    )
    return Recording(output, settings=settings, metadata=metadata, overwrite=overwrite, verbose=verbose)


def open(path: str | os.PathLike[str]) -> Run:  # noqa: A001 - mirrors the builtin on purpose
    """Open a recorded run directory for reading."""
    from .runformat.reader import open_run

    return open_run(path)
