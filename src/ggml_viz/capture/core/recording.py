"""A recording: the run being written and the context tracers writing into it.

Every path writes through one Recording: a Python program's llama contexts, attached in the
process (llama_cpp_python/session.py's InProcessRecording), and a native program's, whose
graphs its spool brings (preload/collector.py). A failure is said once, the run is closed as
incomplete, and the traced program goes on: nothing here may raise into it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from ..._errors import GgmlVizError
from ...log import say
from ...modelfile.fingerprints import tensor_fingerprints
from ...modelfile.layout import memory_map_rows, read_layout, sampled_hash
from ...runformat.manifest import new_experiment_id, new_manifest
from ...runformat.writer import RunWriter, prepare_run_dir
from ..contract.constants import ROUTING_UNREADABLE
from ..gpu.gpu_times import GpuTimes
from ..gpu.records import GpuWindow
from ..settings import CaptureSettings
from . import ggml_api
from .context_tracer import ClosedDecode, ContextTracer, GraphCall
from .event_bound import EventBound
from .graph_decoder import TensorCatalog
from .observer import RecordingObserver
from .raw_graph import ROUTING_KEPT, Capture, Mode, RawGraph, RepeatedGraph, Routing

TracerT = TypeVar("TracerT", bound=ContextTracer)


class Recording(Generic[TracerT]):
    """Records the graphs of every context its tracers (TracerT: the path's kind) follow into
    one run directory. A Python program records with `ggml_viz.record(...)`, a native program
    with `ggml-viz run`: neither makes this class directly."""

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
        self.tracers: list[TracerT] = []
        self.catalog = TensorCatalog()
        self.lock = threading.RLock()  # stop() flushes graphs, which takes it again
        self.failed: str | None = None
        self.bound = EventBound(self.settings.max_events, self.settings.policy)
        self.captured_tensors = 0
        self.captured_bytes = 0
        self.routing_unreadable = 0  # MoE layers whose experts could not be read (ids off the host, no reader)
        self._routing: list[dict[str, Any]] = []  # moe_routing rows of graphs written, not yet in the stream
        self.recorder_used: str | None = None
        self.layouts: dict[str, Any] = {}  # each model file's layout, once read (store_memory_map)
        self._fingerprints: dict[str, dict[tuple[int, int], list[str]]] = {}
        self.gpu_times: GpuTimes | None = None  # GPU trace windows into the run's GPU tables
        self.gpu_info: dict[str, Any] = {}  # the GPU timer's state, as the recorder said it
        self.observer: RecordingObserver | None = None  # told of each graph as it is written (--metrics)
        self._structure_ops: dict[int, np.ndarray] = {}  # each structure's nodes' ops (for the observer)
        if not lazy:
            self._open_writer(prepare_run_dir(self.output, overwrite=overwrite))

    # -- life cycle ---------------------------------------------------------------

    def flush_tracer(self, tracer: ContextTracer) -> None:
        """Write what a tracer holds and stop it (its context is going away)."""
        with self.lock:
            if tracer.mode is not Mode.OFF:
                self._guarded(tracer.flush)
            tracer.stop()

    def stop(self) -> None:
        self._flush_tracers()
        with self.lock:
            self._detach()
            if self.writer is None:
                return
            self._guarded(self._finish_gpu_timer)
            self._guarded(self._write_routing)
            keep = self.bound.kept_graphs()
            self._update_counts()
            try:
                self.writer.close(complete=self.failed is None, reason=self.failed, keep_graphs=keep)
            except OSError as error:
                say(f"could not finish the run in {self.output}: {error}")
            if self.verbose:
                say(f"run written to {self.output} ({self.bound.graphs} graphs, {self.bound.events} node events)")

    def _flush_tracers(self) -> None:
        """Write what every tracer holds, and stop them."""
        with self.lock:
            for tracer in self.tracers:
                self.flush_tracer(tracer)

    def _detach(self) -> None:
        """Let go of what the recording attached to (under its lock, before the run closes):
        nothing here; a native program's graphs come from its spool."""

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

    def store_memory_map(self, path: str) -> None:
        """The model file's byte layout, once per file: which bytes each weight read comes from."""
        assert self.writer is not None
        model_files = dict(self.writer.manifest.get("model_files") or {})
        if path in model_files:
            return
        try:
            layout = read_layout(path)
            entry: dict[str, Any] = {
                "size": layout.file_size,
                "content_hash": sampled_hash(path, layout.data_offset),
                "version": layout.version,
                "alignment": layout.alignment,
                "data_offset": layout.data_offset,
                "tensors": len(layout.tensors),
                "problems": layout.problems,
            }
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
                self._guarded(self._write_routing)

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
        """keep-first: a graph past the bound is dropped, and every context only counts from then on."""
        if not self.bound.drops(n_nodes, unwritten_events):
            return False
        for other in self.tracers:
            other.count_only()
        return True

    def _write_graph(self, tracer: ContextTracer, raw: RawGraph, call: ClosedDecode, ubatch: int) -> None:
        assert self.writer is not None
        graph_id = self.bound.graphs
        decoded = self.catalog.decode(raw, graph_id, tracer.context_id)
        writer = self.writer
        writer.append("buffers", decoded.new_buffers)
        writer.append("tensors", decoded.new_tensors)
        writer.append("structure_nodes", decoded.new_structure_nodes)
        writer.append("edges", decoded.new_edges)
        row = _graph_row(tracer, graph_id, decoded.structure_id, raw, call, ubatch, self._phase(decoded.structure_id))
        writer.append_graph(row, decoded.node_times)
        if self.observer is not None:
            self._observe_op_times(tracer.context_id, raw, decoded.structure_id, decoded.node_times)
        if self.gpu_times is not None:
            self.gpu_times.graph_written(tracer.context_id, graph_id, decoded.structure_id, raw.graph_start_ns)
        if raw.values is not None and len(raw.values):
            writer.append("node_values", values_rows(graph_id, raw.values))
        for capture in raw.captures:
            self._write_capture(graph_id, capture)
        if raw.routing:
            # a batch's graphs' routing goes to its stream in one write, when the batch ends
            self._routing.append(routing_rows(graph_id, raw.routing, np.array(row["token_outputs"], bool)))
            self.routing_unreadable += sum(routing.status == ROUTING_UNREADABLE for routing in raw.routing)
            if not writer.journal_deferred:
                self._write_routing()
        self.bound.count_written([raw.n_nodes])

    def _write_routing(self) -> None:
        """The routing of the graphs written since the last call, as one batch of rows."""
        if self._routing and self.writer is not None:
            rows, self._routing = self._routing, []
            joined = {
                column: np.concatenate([part[column] for part in rows]) for column in rows[0] if column != "weight"
            }
            weights = pa.concat_arrays([part["weight"] for part in rows])  # nulls kept
            self.writer.append("moe_routing", {**joined, "weight": weights})

    def _write_repeats(self, tracer: ContextTracer, repeats: list[GraphCall]) -> None:
        assert self.writer is not None
        structure_id = self.catalog.repeated_structure(tracer.context_id)
        rows = [
            _graph_row(tracer, self.bound.graphs + index, structure_id, graph, call, ubatch, self._phase(structure_id))
            for index, (graph, call, ubatch) in enumerate(repeats)
        ]
        self.writer.append_graph_rows(rows)
        if self.gpu_times is not None:
            for row in rows:
                self.gpu_times.graph_written(tracer.context_id, row["graph_id"], structure_id, row["start_ns"])
        self.bound.count_written([repeat.graph.n_nodes for repeat in repeats])

    def _write_capture(self, graph_id: int, capture: Capture) -> None:
        assert self.writer is not None
        offset = self.writer.append_capture(capture.data)
        self.writer.append(
            "captures",
            {
                "graph_id": [graph_id],
                "node_index": [capture.node],
                "name": [capture.name],
                "type": [ggml_api.type_name(capture.ggml_type)],
                **{f"ne{d}": [capture.ne[d]] for d in range(4)},
                "offset": [offset],
                "nbytes": [len(capture.data)],
            },
        )
        self.captured_tensors += 1
        self.captured_bytes += len(capture.data)

    def add_gpu_window(self, window: GpuWindow) -> None:
        """A closed GPU trace window: its kernels mapped to the nodes of the graphs written."""
        with self.lock:
            if self.gpu_times is not None:
                self._guarded(lambda: self.gpu_times.add_window(window))  # type: ignore[union-attr]
            self.tell_observer(lambda observer: observer.observe_gpu_window(window))

    def _finish_gpu_timer(self) -> None:
        if self.gpu_times is not None:
            self.gpu_times.finish()

    def gpu_timer_state(self, info: dict[str, Any]) -> None:
        """What the GPU timer used (its mode, CUPTI's library and clock) or why it timed nothing."""
        self.gpu_info = {**self.gpu_info, **info}

    def count_dropped(self, n_nodes: int) -> None:
        self.bound.count_dropped(n_nodes)

    def _observe_op_times(self, context_id: int, raw: RawGraph, structure_id: int, node_times: dict) -> None:
        """Tell the observer the graph's node times by op. A graph that repeats the one before it
        comes without its nodes: its ops are its structure's, as first seen."""
        if len(raw.nodes):
            self._structure_ops[structure_id] = raw.nodes["op"].copy()
        ops = self._structure_ops.get(structure_id)
        index = node_times["node_index"]
        if ops is None or not len(index) or len(ops) <= int(index.max()):
            return
        nanoseconds = np.bincount(ops[index], weights=node_times["end_ns"] - node_times["start_ns"])
        times = {ggml_api.op_name(op): float(ns) / 1e9 for op, ns in enumerate(nanoseconds.tolist()) if ns > 0}
        self.tell_observer(lambda observer: observer.observe_graph(context_id, times))

    def tell_observer(self, message: Callable[[RecordingObserver], None]) -> None:
        """Tell the observer, if any; one that fails is let go (said once): the recording goes on."""
        observer = self.observer
        if observer is None:
            return
        try:
            message(observer)
        except Exception as error:
            self.observer = None
            say(f"live metrics stopped: {type(error).__name__}: {error}; the recording goes on")

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
        manifest["versions"].update(self._program_versions())
        self.writer = RunWriter(run_dir, self.experiment_id, manifest)
        self.gpu_times = GpuTimes(self.writer.append)

    def _program_versions(self) -> dict[str, Any]:
        """What the manifest's versions say of the traced program's llama.cpp and ggml when the
        run is made (a native program's come with its spool)."""
        return {"llama_cpp_system_info": None, "ggml": value_or_none(ggml_api.ggml_build_info)}

    def loss_counts(self) -> dict[str, int]:
        """What the recording has not recorded so far: graphs and node events past the event bound,
        tensor captures skipped, MoE routing reads dropped (the manifest's counts of them)."""
        return {
            "dropped_graphs": self.bound.dropped_graphs,
            "dropped_events": self.bound.dropped_events,
            "untimed_graphs": sum(tracer.recorder.clock.mismatches for tracer in self.tracers),
            "captures_skipped": sum(tracer.recorder.captures_skipped[0] for tracer in self.tracers),
            "capture_bytes_skipped": sum(tracer.recorder.captures_skipped[1] for tracer in self.tracers),
            "routing_dropped": sum(tracer.recorder.routing_reads[2] for tracer in self.tracers),
        }

    def _update_counts(self) -> None:
        if self.writer is not None and self.recorder_used:
            self.writer.manifest["capture"]["recorder"] = self.recorder_used
        counts = {
            "graphs": self.bound.graphs,
            "node_events": self.bound.events,
            **self.loss_counts(),
            "captured_tensors": self.captured_tensors,
            "captured_bytes": self.captured_bytes,
            "routing_unreadable": self.routing_unreadable,
            # MoE layers whose routing was read: answered (each a cut in its graph), at the tick
            # that ended their node (no cut), read at a tick that did not hold and dropped
            "routing_answered": sum(tracer.recorder.routing_reads[0] for tracer in self.tracers),
            "routing_at_ticks": sum(tracer.recorder.routing_reads[1] for tracer in self.tracers),
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


def routing_rows(graph_id: int, routing: list[Routing], outputs: np.ndarray) -> dict[str, Any]:
    """moe_routing rows: per MoE layer read, one per token of the batch and slot (a layer whose
    ids could not be read has none). A layer's rows are the graph's tokens, or, where it computes
    fewer (llama.cpp's last layer keeps only the tokens whose logits are wanted: `outputs`),
    those tokens; rows that fit neither (a graph whose tokens were not read: a ubatch whose token
    lookup is not in host memory) get token_index -1."""
    read = [layer for layer in routing if layer.status in ROUTING_KEPT]
    empty = np.zeros(0, np.int32)

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate([empty, *parts]).astype(dtype)

    shapes = [layer.experts.shape for layer in read]  # (rows, slots)
    counts = [rows * slots for rows, slots in shapes]
    return {
        "graph_id": np.full(sum(counts), graph_id, np.int32),
        "node_index": np.repeat(np.array([layer.node for layer in read], np.int32), counts),
        "row": joined([np.repeat(np.arange(rows), slots) for rows, slots in shapes], np.int32),
        "token_index": joined([np.repeat(_layer_tokens(rows, outputs), slots) for rows, slots in shapes], np.int32),
        "slot": joined([np.tile(np.arange(slots), rows) for rows, slots in shapes], np.int32),
        "expert": joined([layer.experts.ravel() for layer in read], np.int32),
        # NaN (no weights found) as null
        "weight": pa.array(joined([layer.weights.ravel() for layer in read], np.float32), from_pandas=True),
        "n_expert": np.repeat(np.array([layer.n_expert for layer in read], np.int32), counts),
    }


def _layer_tokens(n_rows: int, outputs: np.ndarray) -> np.ndarray:
    """Which of the graph's tokens a layer's rows are (see routing_rows)."""
    if n_rows == len(outputs):
        return np.arange(n_rows)
    if n_rows == int(outputs.sum()) and n_rows:
        return np.flatnonzero(outputs)
    return np.full(n_rows, -1)


def values_rows(graph_id: int, values: np.ndarray) -> dict[str, Any]:
    """node_values rows from the recorder's statistics (sums over the finite values)."""
    readable = values[values["readable"] != 0]
    n = readable["n"].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = readable["sum"] / n
        variance = np.maximum(readable["sum_squares"] / n - mean * mean, 0.0)
        mean_abs = readable["sum_abs"] / n
    return {
        "graph_id": np.full(len(readable), graph_id, dtype=np.int32),
        "node_index": readable["node"].astype(np.int32),
        "n": readable["n"],
        "nan": readable["nan"],
        "inf": readable["inf"],
        "min": readable["min"],
        "max": readable["max"],
        "mean": mean,
        "std": np.sqrt(variance),
        "mean_abs": mean_abs,
    }


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
    tokens, places = decode.tokens_of_graph(ubatch, getattr(graph, "input_ids", None)) if decode else ({}, np.arange(0))
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
        "first_batch_index": int(places[0]) if n_tokens else ubatch * tracer.n_ubatch,
        "token_batch_indexes": places.tolist() if n_tokens else [],
        # a call that fed no tokens (a plain ggml program's compute): what its structure computes
        "phase": structure_phase if decode is None or decode.phase == "other" else decode.phase,
        "detail": graph.detail,
    }


def value_or_none(function: Any) -> Any:
    """What function() returns, or None where it raises: a version the program's libraries may not tell."""
    try:
        return function()
    except Exception:
        return None
