"""A recording: the run being written and the llama contexts attached to it.

Everything here runs inside the traced program, so nothing may raise into it: a
failure is said once, the run is closed as incomplete, and inference goes on.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import CaptureError, GgmlVizError
from ..modelfile.fingerprints import tensor_fingerprints
from ..modelfile.layout import memory_map_rows, read_layout, sampled_hash
from ..runformat.manifest import new_experiment_id, new_manifest
from ..runformat.writer import RunWriter, prepare_run_dir, unique_run_dir
from . import ggml_api, llama_hooks, llama_info
from .context_tracer import (
    WRITE_INTERVAL_NS,
    ClosedDecode,
    ContextTracer,
    GraphCall,
    GraphRecorder,
    NativeContextTracer,
    PythonContextTracer,
    warmup_tokens,
)
from .gpu import python_program
from .gpu.gpu_times import GpuTimes
from .gpu.records import GpuWindow, parse_window
from .graph_decoder import TensorCatalog
from .log import say, say_once
from .native_recorder import IMPORT_ERROR as NATIVE_IMPORT_ERROR
from .native_recorder import NativeGraphRecorder, native_available
from .preload_library import claim_from_preload
from .python_recorder import PythonGraphRecorder
from .raw_graph import Capture, Mode, RawGraph, RepeatedGraph
from .settings import CaptureSettings

_active: Recording | None = None

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


def active_recording() -> Recording | None:
    return _active


class Recording:
    """Records every llama context created while it is active into one run directory.

    Use `ggml_viz.record(...)` (a context manager) rather than this class directly.
    """

    def __init__(
        self,
        output: str | os.PathLike[str],
        *,
        settings: CaptureSettings | None = None,
        metadata: dict[str, Any] | None = None,
        verbose: bool = False,
        overwrite: bool = False,
        lazy: bool = False,
    ) -> None:
        self.output = Path(output)
        self.settings = settings or CaptureSettings()
        self.metadata = dict(metadata or {})
        self.verbose = verbose
        self.lazy = lazy  # create the run only when a context attaches (the start-up hook)
        self.experiment_id = new_experiment_id()
        self.writer: RunWriter | None = None
        self.tracers: list[ContextTracer] = []
        self.catalog = TensorCatalog()
        self.lock = threading.RLock()  # stop() flushes graphs, which takes it again
        self.failed: str | None = None
        self.enabled = True
        self.n_graphs = 0
        self.n_events = 0
        self.dropped_graphs = 0
        self.captured_tensors = 0
        self.captured_bytes = 0
        self.bound_reached = False
        self.dropped_events = 0
        self.graph_sizes: list[int] = []  # nodes of each written graph, by graph id (keep-last bound)
        self.recorder_used: str | None = None
        self.model_paths: dict[int, str] = {}
        self.model_sources: dict[str, str] = {}  # a model file's absolute path: where it came from (hf://...)
        self.layouts: dict[str, Any] = {}  # each model file's layout, once read (store_memory_map)
        self._fingerprints: dict[str, dict[tuple[int, int], list[str]]] = {}
        self.gpu_times: GpuTimes | None = None  # GPU trace windows into the run's GPU tables
        self.gpu_info: dict[str, Any] = {}  # the GPU timer's state, as the recorder said it
        self._idle_writer: threading.Thread | None = None  # started with the first context
        self._stopping = threading.Event()
        if not lazy:
            self._open_writer(prepare_run_dir(self.output, overwrite=overwrite))

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> Recording:
        global _active
        if _active is not None:
            raise CaptureError(f"a recording is already active (to {_active.output}); stop it first")
        _active = self
        try:
            ggml_api.check_tensor_layout()
        except CaptureError as error:
            self.enabled = False
            self.fail(str(error))
            return self
        llama_hooks.install(self)
        if llama_hooks.existing_contexts():
            say(
                "a llama context already existed when recording started; it is not recorded, because "
                "llama.cpp fixes the eval callback when a context is created: start recording before Llama(...)"
            )
        return self

    def flush_tracer(self, tracer: ContextTracer) -> None:
        """Write what a tracer holds and stop it (its context is going away)."""
        with self.lock:
            if tracer.mode is not Mode.OFF:
                self._guarded(tracer.flush)
            tracer.stop()

    def stop(self) -> None:
        global _active
        self._stopping.set()
        if self._idle_writer is not None:
            self._idle_writer.join()
        # Contexts and models the program dropped but that wait in reference cycles are freed
        # now, each context's graphs written by the llama_free hook while its model lives;
        # then no collection may free a model while the graphs left are written (their
        # token texts read its vocabulary).
        gc.collect()
        with collection_paused(), self.lock:
            for tracer in self.tracers:
                self.flush_tracer(tracer)
        with self.lock:
            llama_hooks.uninstall(self)
            if _active is self:
                _active = None
            if not self.tracers and self.failed is None:
                say_once(
                    "no llama context was created while recording, so no graph was recorded: start recording "
                    "before Llama(...) (llama.cpp fixes the eval callback when a context is created)"
                )
            if self.writer is None:
                return
            self._guarded(self._finish_gpu_timer)
            keep = self._graphs_kept_by_bound()
            self._update_counts()
            try:
                self.writer.close(complete=self.failed is None, reason=self.failed, keep_graphs=keep)
            except OSError as error:
                say(f"could not finish the run in {self.output}: {error}")
            if self.verbose:
                say(f"run written to {self.output} ({self.n_graphs} graphs, {self.n_events} node events)")

    def __enter__(self) -> Recording:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def annotate(self, **generation: Any) -> None:
        """Add to the manifest's "generation" section (prompt, settings, generated text)."""
        self.metadata.update(generation)
        self._update_manifest(generation=self.metadata)

    def fail(self, reason: str) -> None:
        """Stop recording for good; the run stays readable and is marked incomplete."""
        if self.failed is None:
            self.failed = reason
            say(f"recording stopped: {reason}; inference goes on untraced")
        for tracer in self.tracers:
            tracer.stop()
        self._update_manifest(incomplete_reason=reason)

    # -- called from llama_hooks ---------------------------------------------------

    def remember_model_path(self, model: int, path: str) -> None:
        self.model_paths[model] = path

    def remember_model_source(self, path: str | os.PathLike[str], source: str) -> None:
        """Where the model file at `path` came from (hf://org/repo/file@commit): its manifest entry says so."""
        self.model_sources[os.path.abspath(path)] = source

    def attach(self, params: Any, model: int) -> ContextTracer | None:
        """A context is about to be created: give it our eval callback (or leave it alone)."""
        if not self.enabled or self.failed is not None:
            return None
        if params.cb_eval:
            say_once("the program installs its own eval callback; that context is not recorded")
            return None
        if not claim_from_preload():
            say_once("another ggml binding's graphs are already recorded in this process (by the preload library); "
                     "its llama-cpp-python contexts are recorded there too, without their tokens")  # fmt: skip
            return None
        with self.lock:
            try:
                recorder = self._new_recorder()
                if self.writer is None:
                    self._open_writer(unique_run_dir(self.output))
                # the decode bracket in C where the native recorder runs and llama_batch is as expected
                tracer: ContextTracer
                token_text = llama_info.TokenText(model)
                if isinstance(recorder, NativeGraphRecorder) and llama_info.batch_offsets() is not None:
                    gpu = python_program.gpu_reading(self.settings)
                    tracer = NativeContextTracer(self, len(self.tracers), token_text, int(params.n_ubatch), recorder,
                                                 gpu)  # fmt: skip
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

    def _new_recorder(self) -> GraphRecorder:
        selection = self.settings.selection
        inline_timing = self.settings.timing == "inline"
        if self.settings.recorder == "native":
            if native_available():
                self.recorder_used = "native"
                recorder = NativeGraphRecorder(selection, inline_timing, self.settings.values)
                if not self.tracers:
                    python_program.configure_gpu_timer(self.settings)
                return recorder
            say_once(
                f"the native recorder is not available ({NATIVE_IMPORT_ERROR}); recording with the slower "
                "Python recorder (reinstall ggml-viz with a C compiler to get it back)"
            )
        self.recorder_used = "python"
        return PythonGraphRecorder(selection, inline_timing, self.settings.values)

    def _write_when_idle(self) -> None:
        """The idle writer: a program that stops calling llama_decode has its last graphs
        written within about two batch intervals (else they would wait for its next call)."""
        while not self._stopping.wait(WRITE_INTERVAL_NS / 1e9):
            with collection_paused(), self.lock:
                for tracer in self.tracers:
                    self._guarded(tracer.write_if_idle)

    def context_created(self, tracer: ContextTracer, ctx: int, params: Any, model: int) -> None:
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

    def store_memory_map(self, path: str) -> None:
        """The model file's byte layout, once per file: which bytes each weight read comes from."""
        assert self.writer is not None
        model_files = dict(self.writer.manifest.get("model_files") or {})
        if path in model_files:
            return
        try:
            layout = read_layout(path)
            entry: dict[str, Any] = {
                "size": layout.file_size, "content_hash": sampled_hash(path, layout.data_offset),
                "version": layout.version, "alignment": layout.alignment, "data_offset": layout.data_offset,
                "tensors": len(layout.tensors), "problems": layout.problems,
            }  # fmt: skip
            self.writer.append("memory_map", memory_map_rows(layout))
            self.layouts[path] = layout
        except (GgmlVizError, OSError) as error:  # the recording goes on without the map
            entry = {"error": str(error)}
            say(f"no memory map for {path}: {error}")
        model_files[path] = entry
        self.writer.update_manifest(model_files=model_files)

    @contextmanager
    def graph_batch(self) -> Iterator[None]:
        """Graphs written inside reach the journal in one write, when the batch ends."""
        writer = self.writer
        if writer is None:
            yield
            return
        writer.journal_deferred = True
        try:
            yield
        finally:
            writer.journal_deferred = False
            with self.lock:
                self._guarded(writer.sync_journal)

    def write_graph(self, tracer: ContextTracer, raw: RawGraph, call: ClosedDecode, ubatch: int) -> None:
        with self.lock:
            if not self._dropped_by_bound(raw.n_nodes):
                self._guarded(lambda: self._write_graph(tracer, raw, call, ubatch))

    def write_repeats(self, tracer: ContextTracer, repeats: list[GraphCall]) -> None:
        """Graphs that each repeat the graph written before them, in one go: no structure
        to decode, and their rows go to the streams together."""
        with self.lock:
            kept: list[GraphCall] = []
            kept_events = 0
            for repeat in repeats:
                if not self._dropped_by_bound(repeat.graph.n_nodes, kept_events):
                    kept.append(repeat)
                    kept_events += repeat.graph.n_nodes
            if kept:
                self._guarded(lambda: self._write_repeats(tracer, kept))

    def _dropped_by_bound(self, n_nodes: int, unwritten_events: int = 0) -> bool:
        """keep-first: once a graph would pass the event bound (with the events of graphs
        kept but not yet written), it and every later graph are dropped (and counted)."""
        bound = self.settings.max_events
        over_bound = bound is not None and self.n_events + unwritten_events + n_nodes > bound
        if self.settings.policy != "keep-first" or not (self.bound_reached or over_bound):
            return False
        self.bound_reached = True
        self.count_dropped(n_nodes)
        for other in self.tracers:
            other.count_only()
        return True

    def _write_graph(self, tracer: ContextTracer, raw: RawGraph, call: ClosedDecode, ubatch: int) -> None:
        assert self.writer is not None
        graph_id = self.n_graphs
        decoded = self.catalog.decode(raw, graph_id, tracer.context_id)
        writer = self.writer
        writer.append("buffers", decoded.new_buffers)
        writer.append("tensors", decoded.new_tensors)
        writer.append("structure_nodes", decoded.new_structure_nodes)
        writer.append("edges", decoded.new_edges)
        row = _graph_row(tracer, graph_id, decoded.structure_id, raw, call, ubatch, self._phase(decoded.structure_id))
        writer.append_graph(row, decoded.node_times)
        if self.gpu_times is not None:
            self.gpu_times.graph_written(tracer.context_id, graph_id, decoded.structure_id, raw.graph_start_ns)
        if raw.values is not None and len(raw.values):
            writer.append("node_values", values_rows(graph_id, raw.values))
        for capture in raw.captures:
            self._write_capture(graph_id, capture)
        self._count_written([raw.n_nodes])

    def _write_repeats(self, tracer: ContextTracer, repeats: list[GraphCall]) -> None:
        assert self.writer is not None
        structure_id = self.catalog.repeated_structure(tracer.context_id)
        rows = [
            _graph_row(tracer, self.n_graphs + index, structure_id, graph, call, ubatch, self._phase(structure_id))
            for index, (graph, call, ubatch) in enumerate(repeats)
        ]
        self.writer.append_graph_rows(rows)
        if self.gpu_times is not None:
            for row in rows:
                self.gpu_times.graph_written(tracer.context_id, row["graph_id"], structure_id, row["start_ns"])
        self._count_written([repeat.graph.n_nodes for repeat in repeats])

    def _count_written(self, graph_sizes: list[int]) -> None:
        self.n_graphs += len(graph_sizes)
        self.n_events += sum(graph_sizes)
        self.graph_sizes.extend(graph_sizes)

    def _write_capture(self, graph_id: int, capture: Capture) -> None:
        assert self.writer is not None
        offset = self.writer.append_capture(capture.data)
        self.writer.append(
            "captures",
            {"graph_id": [graph_id], "node_index": [capture.node], "name": [capture.name],
             "type": [ggml_api.type_name(capture.ggml_type)], **{f"ne{d}": [capture.ne[d]] for d in range(4)},
             "offset": [offset], "nbytes": [len(capture.data)]},
        )  # fmt: skip
        self.captured_tensors += 1
        self.captured_bytes += len(capture.data)

    def add_gpu_window(self, window: GpuWindow) -> None:
        """A closed GPU trace window: its kernels mapped to the nodes of the graphs written."""
        with self.lock:
            if self.gpu_times is not None:
                self._guarded(lambda: self.gpu_times.add_window(window))  # type: ignore[union-attr]

    def take_gpu_window(self) -> None:
        """A GPU window of this process closed (the C extension's timer): into the run."""
        taken = python_program.take_window()
        if taken is not None:
            self.add_gpu_window(parse_window(taken))

    def _finish_gpu_timer(self) -> None:
        if any(t.reads_at_compute is not None and t.reads_at_compute.on_cuda for t in self.tracers):
            if python_program.finish():
                self.take_gpu_window()
            self.gpu_timer_state({
                "mode": "off" if self.settings.detail == "graph" else self.settings.gpu,
                "window": self.settings.gpu_window, "period": self.settings.gpu_period,
                **python_program.timer_state(),
            })  # fmt: skip
        if self.gpu_times is not None:
            self.gpu_times.finish()

    def gpu_timer_state(self, info: dict[str, Any]) -> None:
        """What the GPU timer used (its mode, CUPTI's library and clock) or why it timed nothing."""
        self.gpu_info = {**self.gpu_info, **info}

    def count_dropped(self, n_nodes: int) -> None:
        self.dropped_graphs += 1
        self.dropped_events += n_nodes

    def _graphs_kept_by_bound(self) -> set[int] | None:
        """keep-last: the last whole graphs within the bound (None: keep every graph)."""
        bound = self.settings.max_events
        if bound is None or self.settings.policy != "keep-last" or self.n_events <= bound:
            return None
        kept: set[int] = set()
        total = 0
        for graph_id in range(len(self.graph_sizes) - 1, -1, -1):
            total += self.graph_sizes[graph_id]
            if total > bound:
                break
            kept.add(graph_id)
        dropped = len(self.graph_sizes) - len(kept)
        self.dropped_graphs += dropped
        self.dropped_events += sum(self.graph_sizes) - sum(self.graph_sizes[g] for g in kept)
        return kept

    # -- internals -----------------------------------------------------------------

    def _phase(self, structure_id: int) -> str:
        """The phase of a graph of this structure computed outside any llama call."""
        return self.catalog.structure_phases.get(structure_id, "other")

    def tensor_fingerprints(self, path: str) -> dict[tuple[int, int], list[str]]:
        """The fingerprints of a model file's tensors (modelfile/fingerprints.py), read once per
        file however many contexts ask (whisper.cpp's four schedulers share one model)."""
        if path not in self._fingerprints:
            self._fingerprints[path] = tensor_fingerprints(self.layouts[path])
        return self._fingerprints[path]

    def open_run(self) -> None:
        """Create the run where the recording goes, if it is not yet made (a lazy recording)."""
        if self.writer is None:
            self._open_writer(self.output)

    def _open_writer(self, run_dir: Path) -> None:
        if self.lazy:
            run_dir = prepare_run_dir(run_dir)
        self.output = run_dir
        manifest = new_manifest(self.experiment_id)
        manifest["generation"] = self.metadata
        manifest["capture"] = self.settings.describe()
        manifest["versions"]["llama_cpp_system_info"] = _safe(llama_info.system_info)
        manifest["versions"]["ggml"] = _safe(ggml_api.ggml_build_info)
        self.writer = RunWriter(run_dir, self.experiment_id, manifest)
        self.gpu_times = GpuTimes(self.writer.append)

    def _update_counts(self) -> None:
        if self.writer is not None and self.recorder_used:
            self.writer.manifest["capture"]["recorder"] = self.recorder_used
        counts = {
            "graphs": self.n_graphs,
            "node_events": self.n_events,
            "dropped_graphs": self.dropped_graphs,
            "dropped_events": self.dropped_events,
            "untimed_graphs": sum(tracer.recorder.clock.mismatches for tracer in self.tracers),
            "captured_tensors": self.captured_tensors,
            "captured_bytes": self.captured_bytes,
            "captures_skipped": sum(tracer.recorder.captures_skipped[0] for tracer in self.tracers),
            "capture_bytes_skipped": sum(tracer.recorder.captures_skipped[1] for tracer in self.tracers),
            "contexts": len(self.tracers),
        }
        self._update_manifest(counts=counts)
        if self.gpu_info or (self.gpu_times is not None and self.gpu_times.counts["windows"]):
            traced = self.gpu_times.summary() if self.gpu_times is not None else {}
            self._update_manifest(gpu={**self.gpu_info, **traced})

    def _update_manifest(self, **fields: Any) -> None:
        writer = self.writer
        if writer is not None:
            self._guarded(lambda: writer.update_manifest(**fields))

    def _guarded(self, action: Any) -> None:
        """Run a recording step; on failure stop recording instead of raising."""
        try:
            action()
        except Exception as error:
            self.fail(f"{type(error).__name__}: {error}")


def values_rows(graph_id: int, values: np.ndarray) -> dict[str, Any]:
    """node_values rows from the recorder's statistics (sums over the finite values)."""
    readable = values[values["readable"] != 0]
    n = readable["n"].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = readable["sum"] / n
        variance = np.maximum(readable["sum_squares"] / n - mean * mean, 0.0)
        mean_abs = readable["sum_abs"] / n
    return {
        "graph_id": np.full(len(readable), graph_id, dtype=np.int32), "node_index": readable["node"].astype(np.int32),
        "n": readable["n"], "nan": readable["nan"], "inf": readable["inf"], "min": readable["min"],
        "max": readable["max"], "mean": mean, "std": np.sqrt(variance), "mean_abs": mean_abs,
    }  # fmt: skip


def _graph_row(
    tracer: ContextTracer,
    graph_id: int,
    structure_id: int,
    graph: RawGraph | RepeatedGraph,
    call: ClosedDecode,
    ubatch: int,
    structure_phase: str,
) -> dict[str, Any]:
    """A graph's row of the `graphs` table: when it ran, in which llama_decode call, on which
    tokens (outside any: in the phase its structure computes, structure_phase)."""
    decode = call.decode
    tokens = decode.tokens_of_ubatch(ubatch) if decode else {}
    n_tokens = len(tokens.get("token_id", ()))
    return {
        "graph_id": graph_id,
        "context_id": tracer.context_id,
        "decode_index": decode.index if decode else -1,
        "ubatch_index": ubatch,
        "structure_id": structure_id,
        "start_ns": graph.graph_start_ns,
        "end_ns": graph.end_of_graph_ns,
        "decode_start_ns": decode.start_ns if decode else -1,
        "decode_end_ns": call.end_ns if decode else -1,
        "return_code": call.return_code,
        "n_nodes": graph.n_nodes,
        "n_tokens": n_tokens,
        "token_ids": tokens["token_id"].tolist() if n_tokens else [],
        "token_positions": tokens["pos"].tolist() if n_tokens else [],
        "token_seq_ids": tokens["seq_id"].tolist() if n_tokens else [],
        "token_outputs": tokens["output"].tolist() if n_tokens else [],
        "token_texts": tracer.token_texts(tokens["token_id"]) if n_tokens else [],
        "first_batch_index": ubatch * tracer.n_ubatch,
        # a call that fed no tokens (a plain ggml program's compute): what its structure computes
        "phase": structure_phase if decode is None or decode.phase == "other" else decode.phase,
        "detail": graph.detail,
    }


def _safe(function: Any) -> Any:
    try:
        return function()
    except Exception:
        return None
