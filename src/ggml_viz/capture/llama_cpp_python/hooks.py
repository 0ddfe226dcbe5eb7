"""Attaching to llama-cpp-python without changing the program.

llama-cpp-python creates every context through `llama_cpp.llama_cpp.llama_init_from_model`
and decodes through `llama_decode`, both looked up on the module at call time. Wrapping
them lets a recording give each new context its eval callback and bracket each decode.
The package `llama_cpp` re-exports the same functions (`from .llama_cpp import *`), so
both names are wrapped.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable
from typing import Any, Protocol

from ..core.ggml_api import address_of


class HookedRecording(Protocol):
    """What the hooks ask of the recording they serve (session.py's InProcessRecording)."""

    def attach(self, params: Any, model: int) -> Any: ...  # the new context's tracer, or None
    def context_created(self, tracer: Any, ctx: int, params: Any, model: int) -> None: ...
    def flush_tracer(self, tracer: Any) -> None: ...
    def remember_model_path(self, model: int, path: str) -> None: ...
    def fail(self, reason: str) -> None: ...


_originals: dict[str, Callable[..., Any]] = {}
_tracers: dict[int, Any] = {}  # context address -> ContextTracer, while the context lives


def _modules() -> list[Any]:
    # From sys.modules: the start-up hook runs while `llama_cpp` is still being imported,
    # before the submodule is set as an attribute of the package.
    import llama_cpp.llama_cpp  # noqa: F401

    return [sys.modules["llama_cpp.llama_cpp"], sys.modules["llama_cpp"]]


def install(recording: HookedRecording) -> None:
    modules = _modules()
    core = modules[0]
    factories = {
        "llama_init_from_model": _wrap_init,
        "llama_new_context_with_model": _wrap_init,
        "llama_decode": _wrap_decode,
        "llama_free": _wrap_free,
        "llama_set_abort_callback": _wrap_set_abort_callback,
        "llama_model_load_from_file": _wrap_load,
        "llama_load_model_from_file": _wrap_load,
    }
    for name in factories:
        original = getattr(core, name, None)
        if original is None or name in _originals:
            continue
        _originals[name] = original
        wrapper = factories[name](original, recording)
        wrapper.__ggml_viz_wrapper__ = True  # type: ignore[attr-defined]
        for module in modules:
            if getattr(module, name, None) is original:
                setattr(module, name, wrapper)


def uninstall(recording: HookedRecording) -> None:
    if "llama_cpp.llama_cpp" not in sys.modules:
        return
    for module in _modules():
        for name, original in _originals.items():
            if getattr(getattr(module, name, None), "__ggml_viz_wrapper__", False):
                setattr(module, name, original)
    _originals.clear()


def existing_contexts() -> bool:
    """Whether llama-cpp-python already holds a live context (created before recording)."""
    internals = sys.modules.get("llama_cpp._internals")
    if internals is None:
        return False
    context_class = getattr(internals, "LlamaContext", None)
    if context_class is None:
        return False
    return any(isinstance(obj, context_class) and getattr(obj, "ctx", None) for obj in gc.get_objects())


def _wrap_init(original: Callable[..., Any], recording: HookedRecording) -> Callable[..., Any]:
    @functools.wraps(original)
    def init_from_model(model: Any, params: Any) -> Any:
        tracer = None
        try:
            tracer = recording.attach(params, address_of(model))
        except Exception as error:  # never raise into the program
            recording.fail(f"attaching to a new context failed: {error!r}")
        ctx = original(model, params)
        if tracer is not None and ctx:
            _tracers[address_of(ctx)] = tracer
            if _ticks(tracer):
                _install_abort_callback(ctx, tracer, params)
                if tracer.reads_at_compute is not None:  # its CPU splits, split by split (_recorder_gpu.c)
                    tracer.recorder.tick_reads = True
            recording.context_created(tracer, address_of(ctx), params, address_of(model))
        return ctx

    return init_from_model


def _ticks(tracer: Any) -> bool:
    """Whether our abort callback times the context's CPU nodes: with inline timing, a context on
    the CPU (the eval callback), or one read at the compute call whose CPU splits tick beside a
    GPU or RPC device (gpu.GpuReading.cpu_ticks)."""
    reading = tracer.reads_at_compute
    return bool(tracer.recorder.inline_timing) and (reading is None or reading.cpu_ticks)


def _install_abort_callback(ctx: Any, tracer: Any, params: Any) -> None:
    """Inline timing ticks in the CPU backend's abort callback; a program's own abort
    callback (from the context parameters) keeps working, called from ours."""
    recorder = tracer.recorder
    if params.abort_callback:
        recorder.chain_abort(params.abort_callback, params.abort_callback_data)
    set_abort = (
        _originals.get("llama_set_abort_callback") or sys.modules["llama_cpp.llama_cpp"].llama_set_abort_callback
    )
    set_abort(ctx, recorder.abort_callback, recorder.user_data)
    recorder.hook_barriers()  # the barrier that ends each node: the wait for its stragglers


def _wrap_set_abort_callback(original: Callable[..., Any], recording: HookedRecording) -> Callable[..., Any]:
    @functools.wraps(original)
    def llama_set_abort_callback(ctx: Any, abort_callback: Any, abort_callback_data: Any) -> Any:
        tracer = _tracers.get(address_of(ctx))
        if tracer is None or not _ticks(tracer):
            return original(ctx, abort_callback, abort_callback_data)
        tracer.recorder.chain_abort(abort_callback, abort_callback_data)  # ours stays, and calls it
        return None

    return llama_set_abort_callback


def _wrap_decode(original: Callable[..., Any], recording: HookedRecording) -> Callable[..., Any]:
    @functools.wraps(original)
    def llama_decode(ctx: Any, batch: Any) -> Any:
        tracer = _tracers.get(address_of(ctx))
        if tracer is None:
            return original(ctx, batch)
        try:
            tracer.begin_decode(batch)
        except Exception as error:
            recording.fail(f"reading a batch failed: {error!r}")
        return_code = original(ctx, batch)
        # llama.cpp's own eval timer runs until the next synchronize (normally the
        # program's logits read): synchronize now, so that timer stops before our
        # bookkeeping and keeps measuring inference alone. With per-node timing the
        # backend has already synchronized after every node, so this waits for nothing.
        sys.modules["llama_cpp.llama_cpp"].llama_synchronize(ctx)
        try:
            tracer.end_decode(int(return_code))
        except Exception as error:
            recording.fail(f"finishing a graph failed: {error!r}")
        return return_code

    return llama_decode


def _wrap_free(original: Callable[..., Any], recording: HookedRecording) -> Callable[..., Any]:
    @functools.wraps(original)
    def llama_free(ctx: Any) -> Any:
        tracer = _tracers.pop(address_of(ctx), None)
        if tracer is not None:
            try:  # write its graphs while the model (its token texts) is surely alive
                recording.flush_tracer(tracer)
            except Exception as error:
                recording.fail(f"writing the graphs of a freed context failed: {error!r}")
        return original(ctx)

    return llama_free


def _wrap_load(original: Callable[..., Any], recording: HookedRecording) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_model(path_model: bytes, params: Any) -> Any:
        model = original(path_model, params)
        if model:
            path = path_model.decode(errors="replace") if isinstance(path_model, bytes) else str(path_model)
            recording.remember_model_path(address_of(model), path)
        return model

    return load_model
