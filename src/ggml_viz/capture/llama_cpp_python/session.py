"""A recording of this Python process's llama contexts: llama-cpp-python's, attached through
its own functions (hooks.py) as each context is created, each with a recorder (C or Python).
"""

from __future__ import annotations

import ctypes
import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..._errors import CaptureError
from ...log import say, say_once
from ...runformat.writer import unique_run_dir
from ..core import ggml_api
from ..core.context_tracer import WRITE_INTERVAL_NS, warmup_tokens
from ..core.extension import IMPORT_ERROR as EXTENSION_IMPORT_ERROR
from ..core.extension import extension_available
from ..core.recording import Recording, value_or_none
from ..gpu.records import parse_window
from ..gpu.vulkan_layer import enable_in_this_process
from . import gpu, hooks, llama_info
from .c_recorder import CGraphRecorder
from .python_recorder import PythonGraphRecorder
from .tracers import CContextTracer, InProcessTracer, PythonContextTracer

_active: InProcessRecording | None = None

_pauses_lock = threading.Lock()
_pauses = [0, False]  # collection_paused() blocks open; whether collection was on before the first


@contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection, in any thread, while graphs are written outside a decode call:
    a collection could drop a Llama held in a reference cycle, and freeing its context and
    model (llama_free, then the model's free) would pull the vocabulary that the graphs'
    token texts are read from out from under the writer. Blocks may overlap (the idle writer
    and stop()); collection resumes after the last, if it was on before the first."""
    with _pauses_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()


def active_recording() -> InProcessRecording | None:
    return _active


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


class InProcessRecording(Recording[InProcessTracer]):
    """Records every llama context llama-cpp-python creates while it is active into one run
    directory. Use `ggml_viz.record(...)` (a context manager) rather than this class directly."""

    def __init__(self, output: str | os.PathLike[str], **options: Any) -> None:
        # before the run directory is made: without llama-cpp-python, one line says how to get it
        ggml_api.require_llama_cpp_python("recording a Python program's llama contexts (ggml_viz.record, record)")
        super().__init__(output, **options)  # (settings, metadata, verbose, overwrite, lazy: the base's)
        self.enabled = True  # False: this ggml's tensor layout is not one ggml-viz reads
        self.model_paths: dict[int, str] = {}
        self.model_sources: dict[str, str] = {}  # a model file's absolute path: where it came from (hf://...)
        self._idle_writer: threading.Thread | None = None  # started with the first context
        self._stopping = threading.Event()

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> InProcessRecording:
        global _active
        if _active is not None:
            raise CaptureError(f"a recording is already active (to {_active.output}); stop it first")
        _active = self
        # GPU times on Vulkan: the layer in the instance llama.cpp creates when it loads a model
        enable_in_this_process(self.settings.gpu, self.settings.detail)
        try:
            ggml_api.check_tensor_layout()
        except CaptureError as error:
            self.enabled = False
            self.fail(str(error))
            return self
        hooks.install(self)
        if hooks.existing_contexts():
            say(
                "a llama context already existed when recording started; it is not recorded, because "
                "llama.cpp fixes the eval callback when a context is created: start recording before Llama(...)"
            )
        return self

    def _flush_tracers(self) -> None:
        self._stopping.set()
        if self._idle_writer is not None:
            self._idle_writer.join()
        # Contexts and models the program dropped but that wait in reference cycles are freed
        # now, each context's graphs written by the llama_free hook while its model lives;
        # then no collection may free a model while the graphs left are written (their
        # token texts read its vocabulary).
        gc.collect()
        with collection_paused():
            super()._flush_tracers()

    def _detach(self) -> None:
        global _active
        hooks.uninstall(self)
        if _active is self:
            _active = None
        if not self.tracers and self.failed is None:
            say_once(
                "no llama context was created while recording, so no graph was recorded: start recording "
                "before Llama(...) (llama.cpp fixes the eval callback when a context is created)"
            )

    def __enter__(self) -> InProcessRecording:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- called from hooks.py -------------------------------------------------------

    def remember_model_path(self, model: int, path: str) -> None:
        self.model_paths[model] = path

    def remember_model_source(self, path: str | os.PathLike[str], source: str) -> None:
        """Where the model file at `path` came from (hf://org/repo/file@commit): its manifest entry says so."""
        self.model_sources[os.path.abspath(path)] = source

    def attach(self, params: Any, model: int) -> InProcessTracer | None:
        """A context is about to be created: give it our eval callback (or leave it alone)."""
        if not self.enabled or self.failed is not None:
            return None
        if params.cb_eval:
            say_once("the program installs its own eval callback; that context is not recorded")
            return None
        if not claim_from_preload():
            say_once(
                "another ggml binding's graphs are already recorded in this process (by the preload library); "
                "its llama-cpp-python contexts are recorded there too, without their tokens"
            )
            return None
        with self.lock:
            try:
                recorder = self._new_recorder()
                if self.writer is None:
                    self._open_writer(unique_run_dir(self.output))
                # the decode bracket in C where the C recorder runs and llama_batch is as expected
                tracer: InProcessTracer
                token_text = llama_info.TokenText(model)
                if isinstance(recorder, CGraphRecorder) and llama_info.batch_offsets() is not None:
                    reading = gpu.gpu_reading(self.settings)
                    tracer = CContextTracer(
                        self, len(self.tracers), token_text, int(params.n_ubatch), recorder, reading
                    )
                else:
                    tracer = PythonContextTracer(self, len(self.tracers), token_text, int(params.n_ubatch), recorder)
            except (CaptureError, OSError) as error:
                self.fail(str(error))
                return None
            tracer.warmup = warmup_tokens(*llama_info.bos_eos(model))
            self.tracers.append(tracer)
            if self._idle_writer is None:
                self._idle_writer = threading.Thread(
                    target=self._write_when_idle, name="ggml-viz idle writer", daemon=True
                )
                self._idle_writer.start()
        if tracer.reads_at_compute is None:  # else no eval callback: graphs read at the compute call
            params.cb_eval = recorder.callback
            params.cb_eval_user_data = recorder.user_data
        return tracer

    def _new_recorder(self) -> CGraphRecorder | PythonGraphRecorder:
        selection = self.settings.selection
        inline_timing = self.settings.timing == "inline"
        if self.settings.recorder == "c":
            if extension_available():
                self.recorder_used = "c"
                recorder = CGraphRecorder(selection, inline_timing, self.settings.values, self.settings.routing == "on")
                if not self.tracers:
                    gpu.configure_gpu_timer(self.settings)
                return recorder
            say_once(
                f"the C recorder is not available ({EXTENSION_IMPORT_ERROR}); recording with the slower "
                "Python recorder (reinstall ggml-viz with a C compiler to get it back)"
            )
        self.recorder_used = "python"
        return PythonGraphRecorder(selection, inline_timing, self.settings.values, self.settings.routing == "on")

    def _write_when_idle(self) -> None:
        """The idle writer: a program that stops calling llama_decode has its last graphs
        written within about two batch intervals (else they would wait for its next call)."""
        while not self._stopping.wait(WRITE_INTERVAL_NS / 1e9):
            with collection_paused(), self.lock:
                for tracer in self.tracers:
                    self._guarded(tracer.write_if_idle)

    def context_created(self, tracer: InProcessTracer, ctx: int, params: Any, model: int) -> None:
        def describe() -> None:
            assert self.writer is not None
            model_info = llama_info.model_info(model, self.model_paths.get(model))
            if model_info["path"] in self.model_sources:
                model_info["source"] = self.model_sources[model_info["path"]]
            context = {"context_id": tracer.context_id, "model": model_info, **llama_info.context_info(ctx, params)}
            contexts = [*self.writer.manifest["contexts"], context]
            self.writer.update_manifest(contexts=contexts, model=self.writer.manifest["model"] or model_info)
            if model_info["path"]:
                self.store_memory_map(model_info["path"])
            if self.verbose:
                say(f"recording context {tracer.context_id} ({model_info['description']}, n_ctx {context['n_ctx']})")

        self._guarded(describe)

    def take_gpu_window(self) -> None:
        """A GPU window of this process closed (the C extension's timer): into the run."""
        taken = gpu.take_window()
        if taken is not None:
            self.add_gpu_window(parse_window(taken))

    def _finish_gpu_timer(self) -> None:
        if any(t.reads_at_compute is not None and t.reads_at_compute.timed_device for t in self.tracers):
            if gpu.finish():
                self.take_gpu_window()
            self.gpu_timer_state(
                {
                    "mode": "off" if self.settings.detail == "graph" else self.settings.gpu,
                    "window": self.settings.gpu_window,
                    "period": self.settings.gpu_period,
                    **gpu.timer_state(),
                }
            )
        super()._finish_gpu_timer()

    def _program_versions(self) -> dict[str, Any]:
        return {**super()._program_versions(), "llama_cpp_system_info": value_or_none(llama_info.system_info)}
