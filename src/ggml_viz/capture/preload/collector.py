"""The collector: turns a native program's spool (what the preload library wrote) into the run.

`ggml-viz run -- llama-server ...` collects while the program runs, so a live viewer follows
it; a spool left by `LD_PRELOAD=... GGML_VIZ_OUTPUT=...` without the wrapper is collected by
the first ggml-viz command that opens the run (`collect_spooled_run`). Either way the run is
written by the same Recording, context tracers and graph decoder as a Python program's: the
spool's records are the ones the Python extension hands over.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..._errors import GgmlVizError, RunFormatError
from ...layers import NO_LAYER
from ...log import say
from ...modelfile.ggml_legacy import vocabulary_tokens
from ...modelfile.layout import ModelLayout, read_layout
from ...runformat.schema import MANIFEST_FILE
from ..contract import digest
from ..core import ggml_api
from ..core.context_tracer import ClosedDecode, ContextTracer, closed_decodes, warmup_tokens
from ..core.graph_records import GraphRecordReader
from ..core.models import described_size
from ..core.raw_graph import Mode, RawGraph, RepeatedGraph
from ..core.recording import Recording
from ..core.weight_names import WeightNames
from ..gpu.records import parse_window
from ..settings import CaptureSettings, settings_from_environment
from .rpc import message_columns
from .spool import (
    CONNECTION,
    CONTEXT,
    END,
    FAILED,
    GPU,
    SPOOL_DIR,
    START,
    TAKE,
    UNTRACED,
    WEIGHTS,
    WIRE,
    DecodesRecord,
    Frame,
    GraphRecord,
    SpoolReader,
    first_frame,
    spool_files,
)

# The recording a native program's spool is written into: its tracers are SpoolContextTracers.
SpoolRecording = Recording["SpoolContextTracer"]


class SpoolRecorder:
    """A GraphRecorder whose graphs come from spool frames: the recording itself happened in
    the traced process, in C."""

    callback: Any = None
    abort_callback: Any = None
    user_data: int | None = None
    open_nodes = 0
    failure: str | None = None

    def __init__(self, inline_timing: bool) -> None:
        self.mode = Mode.RECORD
        self.time_nodes = True
        self.inline_timing = inline_timing
        self.reader = GraphRecordReader(inline_timing)
        self.clock = self.reader.clock
        self.captures_skipped = (0, 0)
        self.routing_reads = (0, 0, 0)
        self.records: list[Any] = []

    def take_graphs(self, boundary_ns: int) -> list[RawGraph | RepeatedGraph]:
        records, self.records = self.records, []
        return self.reader.graphs(records)

    def close_graph(self, boundary_ns: int) -> int:
        return len(self.records)

    def chain_abort(self, callback: Any, data: Any) -> None:
        """The program's abort callback is chained in the traced process."""

    def drop_open(self) -> None:
        """No graph is in flight here: frames hold closed graphs only."""

    def take_counted(self) -> int:
        return 0

    def discard(self) -> None:
        self.records = []


class SpoolContextTracer(ContextTracer):
    """A context of a native program: each SPOOL_TAKE frame is one write of its graphs."""

    def __init__(self, recording: SpoolRecording, context_id: int, n_ubatch: int, inline_timing: bool) -> None:
        self.texts: dict[int, str] = {}
        self.weight_names = WeightNames(list)  # the context's model files', once described
        # a plain program's tokens (read from its graphs' inputs): their text in its model file
        self.file_vocabulary: list[bytes] = []
        self.spool_recorder = SpoolRecorder(inline_timing)
        super().__init__(recording, context_id, self._text_of, n_ubatch, self.spool_recorder)
        self._decodes: DecodesRecord | None = None

    def _text_of(self, token: int) -> str:
        text = self.texts.get(token)
        if text:
            return text
        if 0 <= token < len(self.file_vocabulary):
            return self.file_vocabulary[token].decode("utf-8", "replace")
        return f"<{token}>" if self.file_vocabulary else ""

    def write_take(self, decodes: DecodesRecord, texts: dict[int, str], graphs: list[Any]) -> None:
        if self._mode is Mode.COUNT:  # past a keep-first bound: the graphs are counted as dropped
            for graph in graphs:
                self.recording.count_dropped(graph.n_nodes if hasattr(graph, "n_nodes") else len(graph.starts) // 8)
            return
        if self._mode is not Mode.RECORD:
            return
        self.texts.update(texts)
        self._decodes = decodes
        self.spool_recorder.records = graphs
        self._write_closed(time.perf_counter_ns())

    def _take_closed(self) -> list[ClosedDecode]:
        decodes, self._decodes = self._decodes, None
        return closed_decodes(decodes, self.n_ubatch, self.warmup) if decodes is not None else []

    def flush(self) -> None:
        """Everything was written as its frame came."""


class SpoolCollector:
    """Reads a run's spool files as they grow and writes what they hold into the run."""

    def __init__(self, recording: SpoolRecording) -> None:
        self.recording = recording
        self.readers: dict[Path, SpoolReader] = {}
        self.tracers: dict[tuple[Path, int], SpoolContextTracer] = {}
        self.started = False
        self.inline_timing = recording.settings.timing == "inline"
        self.ended = 0  # processes whose spool says they ended
        self.programs: list[dict[str, Any]] = []
        # processes that ran untraced (a ggml ggml-viz does not read): each said why on its stderr
        self.untraced: list[dict[str, Any]] = []
        self.libraries: dict[Path, str] = {}  # each spool's process's libggml-base
        self.connections: dict[tuple[Path, int], int] = {}  # a process's RPC connection: the run's number
        # when the first process's spool started, and the last one's ended (its START and END frames)
        self.start_ns: int | None = None
        self.end_ns: int | None = None

    @property
    def run_dir(self) -> Path:
        return self.recording.output

    def poll(self) -> int:
        """Read and write what the spools gained since the last call; returns the frames read."""
        n_frames = 0
        for path in spool_files(self.run_dir):
            reader = self.readers.setdefault(path, SpoolReader(path))
            for frame in reader.read_new():
                n_frames += 1
                with self.recording.lock:
                    self._apply(path, frame)
        if n_frames and self.recording.observer is not None:
            self.recording.tell_observer(lambda observer: observer.observe_recorder(self.loss_counts()))
        return n_frames

    def loss_counts(self) -> dict[str, int]:
        """The recording's counts of what it did not record, and the spools found damaged (their
        frames from the damage on are lost)."""
        damaged = sum(reader.damage is not None for reader in self.readers.values())
        return {**self.recording.loss_counts(), "spools_damaged": damaged}

    def _apply(self, path: Path, frame: Frame) -> None:
        handlers: dict[int, Callable[[Path, Frame], None]] = {
            START: self._start,
            CONTEXT: self._context,
            TAKE: self._take,
            FAILED: self._failed,
            END: self._end,
            GPU: self._gpu,
            WEIGHTS: self._weights,
            UNTRACED: self._untraced,
            CONNECTION: self._connection,
            WIRE: self._wire,
        }
        handlers[frame.kind](path, frame)

    def _start(self, path: Path, frame: Frame) -> None:
        info = frame.json()
        start_ns = info.get("start_ns")
        if isinstance(start_ns, int) and (self.start_ns is None or start_ns < self.start_ns):
            self.start_ns = start_ns
        written_by = info.get("contract")  # none in a spool of before the contract was written into it
        if written_by is not None and written_by != digest():
            raise RunFormatError(
                f"{path.name} was written by a preload library built from other record layouts (contract "
                f"{written_by}, this ggml-viz's {digest()}): its records cannot be read; install ggml-viz again"
            )
        self.started = True
        self.recording.open_run()  # a Python program's, made when its first spool comes
        library = info.get("ggml_library")
        if library and os.path.exists(library):
            self.libraries[path] = library
            ggml_api.use_library(library)  # the program's own op and type names
        self.programs.append({key: info.get(key) for key in ("pid", "argv", "ggml_library", "llama_library")})
        writer = self.recording.writer
        assert writer is not None
        versions = {
            **writer.manifest["versions"],
            "llama_cpp_system_info": info.get("system_info"),
            "ggml": {"version": info.get("ggml_version"), "commit": info.get("ggml_commit")},
        }
        program = {**self.programs[0], "processes": self.programs, "exit_status": None}
        capture = {**writer.manifest["capture"], "recorder": "preload", "tensor_layout": info.get("tensor_layout")}
        self.inline_timing = info.get("timing") == "inline"
        if self.inline_timing and not info.get("inline_timing_available", True):
            say("this program's ggml has no CPU backend functions to time nodes inline: graph times only")
        no_ticks = info.get("no_node_ticks")
        if self.inline_timing and no_ticks:  # an older ggml: its graphs were recorded without node times
            self.inline_timing = False
            capture["untimed_reason"] = f"{no_ticks}; --timing sync times its nodes one by one"
        writer.update_manifest(versions=versions, program=program, capture=capture)

    def _context(self, path: Path, frame: Frame) -> None:
        info = frame.json()
        recording = self.recording
        writer = recording.writer
        assert writer is not None
        context_id = len(recording.tracers)
        tracer = SpoolContextTracer(recording, context_id, int(info.get("n_ubatch") or 1), self.inline_timing)
        recording.tracers.append(tracer)
        self.tracers[(path, frame.context_id)] = tracer
        model = info.pop("model", None)
        files = [file for file in (model or info).pop("files", []) if file]
        for file in files:
            recording.store_memory_map(file)
        layouts = [recording.layouts[file] for file in files if file in recording.layouts]
        tracer.weight_names = WeightNames(
            lambda: [recording.tensor_fingerprints(file) for file in files if file in recording.layouts]
        )
        if model is not None:
            tracer.warmup = warmup_tokens(model.pop("bos", None), model.pop("eos", None))
            path_of_model = model_file(files, model.get("tensor_bytes"))
            size = os.path.getsize(path_of_model) if path_of_model and os.path.exists(path_of_model) else None
            model = {"path": path_of_model, "file_size": size, **model}
            model["description"] = described_size(model.get("description") or "", model.get("parameters"))
        elif layouts:  # a plain ggml program (whisper.cpp): its model, as its file describes it
            model = model_of_file(layouts[-1])
            tracer.file_vocabulary = vocabulary_tokens(layouts[-1]) if layouts[-1].format == "ggml" else []
        info.pop("context_id", None)
        context = {"context_id": context_id, **info, "model": model}
        writer.update_manifest(
            contexts=[*writer.manifest["contexts"], context], model=writer.manifest["model"] or model
        )
        recording.tell_observer(lambda observer: observer.observe_context(context_id, context, tracer.warmup))
        if recording.verbose:
            say(f"recording context {context_id} of {path.stem} ({(model or {}).get('description', 'ggml')})")

    def _take(self, path: Path, frame: Frame) -> None:
        tracer = self._tracer(path, frame)
        if path in self.libraries:  # the processes of a script may each load another ggml version
            ggml_api.use_library(self.libraries[path])
        take = frame.take()
        # every call, whatever is recorded of its graphs (past a keep-first bound: none)
        self.recording.tell_observer(lambda observer: observer.observe_calls(tracer.context_id, take.decodes))
        graphs = [
            graph._replace(leaves=tracer.weight_names.rename(graph.leaves)) if isinstance(graph, GraphRecord) else graph
            for graph in take.graphs
        ]
        tracer.write_take(take.decodes, take.token_texts, graphs)

    def _weights(self, path: Path, frame: Frame) -> None:
        """Unnamed weights the next take's graphs read first: named from the model file."""
        tracer = self._tracer(path, frame)
        tracer.weight_names.learn(frame.payload)
        writer = self.recording.writer
        assert writer is not None
        contexts = [dict(context) for context in writer.manifest["contexts"]]
        contexts[tracer.context_id]["weights_named_from_file"] = dict(tracer.weight_names.counts)
        writer.update_manifest(contexts=contexts)

    def _tracer(self, path: Path, frame: Frame) -> SpoolContextTracer:
        tracer = self.tracers.get((path, frame.context_id))
        if tracer is None:
            raise RunFormatError(f"{path}: records of a context the spool never described ({frame.context_id})")
        return tracer

    def _gpu(self, path: Path, frame: Frame) -> None:
        window = parse_window(frame.payload)
        contexts = window.computes["context_id"]
        for spool_context in np.unique(contexts).tolist():  # the process's context numbers, as the run's
            tracer = self.tracers.get((path, spool_context))
            contexts[contexts == spool_context] = tracer.context_id if tracer is not None else 0xFFFFFFFF
        self.recording.add_gpu_window(window)

    def _connection(self, path: Path, frame: Frame) -> None:
        """A connection of ggml's RPC protocol: into the manifest's rpc section, numbered in the run."""
        info = frame.json()
        writer = self.recording.writer
        assert writer is not None
        rpc = writer.manifest.get("rpc") or {"connections": []}
        number = len(rpc["connections"])
        self.connections[(path, int(info.pop("connection", 0)))] = number
        connection = {"connection": number, "pid": int(path.stem) if path.stem.isdigit() else None, **info}
        writer.update_manifest(rpc={**rpc, "connections": [*rpc["connections"], connection]})

    def _wire(self, path: Path, frame: Frame) -> None:
        """RPC messages that passed the process, whole: the rpc_messages table."""
        writer = self.recording.writer
        assert writer is not None
        numbers = {process: run for (spool, process), run in self.connections.items() if spool == path}
        writer.append("rpc_messages", message_columns(frame.payload, numbers))

    def _failed(self, path: Path, frame: Frame) -> None:
        self.recording.fail(f"in pid {path.stem}: {frame.payload.decode('utf-8', 'replace')}")

    def _untraced(self, path: Path, frame: Frame) -> None:
        """A process that ran untraced: noted in the run's manifest (if other processes make
        one), never said again (the process said it)."""
        self.untraced.append(frame.json())

    def _end(self, path: Path, frame: Frame) -> None:
        info = frame.json()
        self.ended += 1
        end_ns = info.get("end_ns")
        if isinstance(end_ns, int) and (self.end_ns is None or end_ns > self.end_ns):
            self.end_ns = end_ns
        skipped = (int(info.get("captures_skipped", 0)), int(info.get("capture_bytes_skipped", 0)))
        for (spool, _), tracer in self.tracers.items():
            if spool == path:
                tracer.spool_recorder.captures_skipped = skipped
                answered, at_ticks, dropped = (int(n) for n in info.get("routing_reads", (0, 0, 0)))
                tracer.spool_recorder.routing_reads = (answered, at_ticks, dropped)
                break
        gpu = info.get("gpu")
        if gpu:
            self.recording.gpu_timer_state(gpu)

    def finish(self, exit_status: int | None) -> None:
        """The program has ended: read what is left and close the run (complete when every
        process closed its spool, incomplete otherwise)."""
        try:
            self.poll()
        except (GgmlVizError, OSError) as error:
            self.recording.fail(f"reading the spool failed: {error}")
        writer = self.recording.writer
        if writer is not None and "program" in writer.manifest:
            program = {**writer.manifest["program"], "exit_status": exit_status}
            writer.update_manifest(program={**program, "untraced": self.untraced} if self.untraced else program)
        cut_short = sum(reader.unread_bytes for reader in self.readers.values())
        damage = [reader.damage for reader in self.readers.values() if reader.damage]
        if damage and self.recording.failed is None:
            self.recording.fail(f"the spool is damaged ({'; '.join(damage)}): the graphs after that are lost")
        if not self.recording.tracers and self.recording.failed is None:
            self.recording.fail(self._no_graph_reason())
        elif self.started and self.ended < len(self.readers) - len(self.untraced) and self.recording.failed is None:
            how = f"killed by signal {-exit_status}" if exit_status is not None and exit_status < 0 else "ended"
            self.recording.fail(
                f"the program {how} before closing its recording: graphs of its last half second may be missing"
                + (f" ({cut_short} bytes of a frame cut short)" if cut_short else "")
            )
        self.recording.stop()
        if self.recording.failed is None:
            shutil.rmtree(self.run_dir / SPOOL_DIR, ignore_errors=True)

    def _no_graph_reason(self) -> str:
        """Why a run that started holds no graph: the processes loaded ggml, and never computed with it
        through a call ggml-viz records."""
        loaded = sorted({str(p.get("ggml_library")) for p in self.programs if p.get("ggml_library")})
        where = f" (ggml loaded from {', '.join(loaded)})" if loaded else ""
        return (
            f"the program computed no graph with ggml through a call ggml-viz records{where}: ggml's scheduler, a "
            "backend's graph compute, ggml_graph_compute and ggml_graph_compute_with_ctx are; a ggml linked into "
            "another library that calls them directly, not through its exported symbols, passes them by"
        )


def model_of_file(layout: ModelLayout) -> dict[str, Any]:
    """The model section of a program that is not llama.cpp (whisper.cpp, anyone's ggml code),
    from the file it read: what llama.cpp says of its model, the file says here."""
    architecture = layout.metadata.get("general.architecture")
    bytes_by_type: Counter[str] = Counter()
    for tensor in layout.tensors:
        bytes_by_type[tensor.type] += tensor.nbytes
    main_type = bytes_by_type.most_common(1)  # the type of most of its bytes
    return {
        "path": str(layout.path),
        "file_size": layout.file_size,
        "name": layout.metadata.get("general.name") or Path(layout.path).stem,
        "description": " ".join(filter(None, [architecture, *(t for t, _ in main_type), f"({layout.format} file)"])),
        "architecture": architecture,
        "layers": len({tensor.layer for tensor in layout.tensors if tensor.layer != NO_LAYER}),
        "parameters": sum(tensor.n_elements for tensor in layout.tensors),
        "tensor_bytes": sum(tensor.nbytes for tensor in layout.tensors),
    }


def model_file(files: list[str], tensor_bytes: int | None) -> str | None:
    """Which of the GGUF files a process opened holds a model: the one whose tensors add up
    to the model's tensor bytes (llama_model_size), so a draft model beside the main one, or
    a vocabulary file opened first, is not mistaken for it."""
    sizes: dict[str, int] = {}
    for file in files:
        try:
            sizes[file] = sum(tensor.nbytes for tensor in read_layout(file).tensors)
        except (GgmlVizError, OSError):
            continue
    if not sizes:
        return files[0] if files else None
    return min(sizes, key=lambda file: abs(sizes[file] - (tensor_bytes or 0)))


def collect_spooled_run(run_dir: Path) -> None:
    """Turn a run that only holds a native program's spool (recorded with LD_PRELOAD, without
    `ggml-viz run`) into the columnar run. Called by open_run; once done, the spool is gone."""
    if (run_dir / MANIFEST_FILE).exists() or not spool_files(run_dir):
        return
    untraced = untraced_notes(run_dir)
    if untraced:
        raise RunFormatError(f"{run_dir} holds no run: {describe_untraced(untraced)}")
    say(f"collecting the spool in {run_dir} into the run")
    recording: SpoolRecording = Recording(run_dir, settings=settings_of_spool(run_dir))
    SpoolCollector(recording).finish(exit_status=None)


def untraced_notes(run_dir: Path) -> list[dict[str, Any]]:
    """The notes of a run folder whose every spool is a process that ran untraced (then there is
    no run to collect); empty where any process recorded."""
    frames = [first_frame(path) for path in spool_files(run_dir)]
    if not frames or any(frame is None or frame.kind != UNTRACED for frame in frames):
        return []
    return [frame.json() for frame in frames if frame is not None]


def describe_untraced(notes: list[dict[str, Any]]) -> str:
    return "; ".join(f"pid {note.get('pid')} ran untraced ({note.get('reason')})" for note in notes)


def settings_of_spool(run_dir: Path) -> CaptureSettings:
    """The settings the program recorded with: the GGML_VIZ_* environment its START frame keeps."""
    for path in spool_files(run_dir):
        frame = first_frame(path)
        if frame is not None and frame.kind == START:
            return settings_from_environment(frame.json().get("environment") or {})
    return CaptureSettings()
