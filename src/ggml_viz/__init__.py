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

import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import CaptureError, GgmlVizError, RunFormatError
from ._version import __version__
from .capture.settings import keyword_parameters, settings_docstring, settings_from_options

if TYPE_CHECKING:
    from .capture.llama_cpp_python.session import InProcessRecording
    from .runformat.reader import Run

__all__ = ["CaptureError", "GgmlVizError", "RunFormatError", "__version__", "open", "record"]


def record(
    output: str | os.PathLike[str],
    *,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    verbose: bool = False,
    **settings: Any,
) -> InProcessRecording:
    """Record every llama context created inside the `with` block into the run `output`.

    metadata: stored in the manifest under "generation" (prompt, sampling settings, ...).
    overwrite: replace an existing run at `output`.
    verbose: say what is attached and where the run goes.

    The other keyword arguments are the capture settings, the same as the options of
    `ggml-viz record` and the GGML_VIZ_* variables (ggml_viz.capture.settings.CAPTURE_SETTINGS);
    ops, layers, names and capture take comma-separated text or a sequence of items. An
    unknown one raises TypeError.
    """
    from .capture.llama_cpp_python.session import InProcessRecording

    return InProcessRecording(
        output, settings=settings_from_options(settings), metadata=metadata, overwrite=overwrite, verbose=verbose
    )


def _describe_settings(function: Callable[..., Any]) -> None:
    """Give `function` (taking **settings) the capture settings in its signature and docstring, for help()."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    first_keyword = next(i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.KEYWORD_ONLY)
    parameters[first_keyword:first_keyword] = keyword_parameters()
    function.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    if function.__doc__:
        function.__doc__ += "\n    The capture settings:\n" + settings_docstring()


_describe_settings(record)


def open(path: str | os.PathLike[str]) -> Run:  # noqa: A001 - mirrors the builtin on purpose
    """Open a recorded run directory for reading (a native program's spool left in it is
    collected into the run first)."""
    from .capture.preload.opening import collect_and_open

    return collect_and_open(path)
