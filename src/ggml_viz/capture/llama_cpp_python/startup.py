"""Recording without a code change: run at start-up by ggml_viz_startup.pth.

The .pth line imports this module only when GGML_VIZ_OUTPUT is set. Even then
llama_cpp is not imported here: an import hook starts the recording right after the
program itself imports `llama_cpp.llama_cpp`, so programs that never use it pay nothing.

The variables it reads are declared once, in ggml_viz.capture.settings: the hook's own
(HOOK_VARIABLES: GGML_VIZ_OUTPUT, _DISABLE, _VERBOSE) and the capture settings
(CAPTURE_SETTINGS, read by settings_from_environment). README.md's table, made from the
same rows, lists them all.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

_TARGET = "llama_cpp.llama_cpp"
_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def start_from_environment() -> None:
    """Start recording the way the environment says (called once the target is imported)."""
    from ...log import say
    from ..settings import settings_from_environment
    from .session import InProcessRecording, active_recording

    if active_recording() is not None:
        return
    try:
        recording = InProcessRecording(
            os.environ["GGML_VIZ_OUTPUT"],
            settings=settings_from_environment(),
            verbose=_flag("GGML_VIZ_VERBOSE"),
            lazy=True,
        )
        recording.start()
    except Exception as error:  # the traced program must run on regardless
        say(f"recording is off: {error}")
        return
    atexit.register(recording.stop)
    if recording.verbose:
        say(f"recording llama.cpp contexts of pid {os.getpid()} to {recording.output}")


class _StartAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of llama_cpp.llama_cpp to start recording."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _remove_finder()
            start_from_environment()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _StartAfterImport)]


def install() -> None:
    if not os.environ.get("GGML_VIZ_OUTPUT") or _flag("GGML_VIZ_DISABLE"):
        return
    if _TARGET not in sys.modules:
        # ggml-viz's Vulkan layer, which times GPU nodes on Vulkan (elsewhere it passes every call
        # on): before llama_cpp loads ggml, whose Vulkan backend reads the loader's variables once
        from ..gpu.vulkan_layer import enable_in_this_process

        enable_in_this_process(os.environ.get("GGML_VIZ_GPU", ""), os.environ.get("GGML_VIZ_DETAIL", ""))
    if _TARGET in sys.modules:
        start_from_environment()
    else:
        sys.meta_path.insert(0, _StartAfterImport())


install()
