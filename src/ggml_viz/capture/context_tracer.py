"""One traced llama context: its recorder and the bracket around each llama_decode."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from .gpu import python_program
from .inline_times import InlineClock
from .llama_info import BatchCopy, batch_arrays, batch_offsets, read_batch
from .log import say_once
from .raw_graph import Mode, RawGraph, RepeatedGraph
from .settings import CaptureSettings

if TYPE_CHECKING:
    from .gpu.python_program import GpuReading
    from .native_recorder import NativeGraphRecorder
    from .session import Recording


class GraphRecorder(Protocol):
    """What the native and the Python recorder both offer."""

    mode: Mode
    time_nodes: bool
    inline_timing: bool
    callback: Any  # the ggml_backend_sched_eval_callback handed to llama.cpp
    abort_callback: Any  # the ggml_abort_callback handed to llama.cpp (inline timing)
    user_data: int | None
    clock: InlineClock  # turns inline-timing ticks into node times

    def chain_abort(self, callback: Any, data: Any) -> None: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def open_nodes(self) -> int: ...
    def close_graph(self, boundary_ns: int) -> int: ...  # graphs waiting to be taken; -1 once failed
    def drop_open(self) -> None: ...
    @property
    def captures_skipped(self) -> tuple[int, int]: ...
    def take_graphs(self, boundary_ns: int) -> Sequence[RawGraph | RepeatedGraph]: ...
    def take_counted(self) -> int: ...
    def discard(self) -> None: ...


@dataclass
class DecodeCall:
    """The llama_decode call in progress: the tokens it fed and the graphs it ran."""

    index: int
    start_ns: int
    batch: BatchCopy
    n_ubatch: int
    warmup: tuple[tuple[int, ...], ...] = ()  # the context's warm-up batches (warmup_tokens)

    @property
    def phase(self) -> str:
        return batch_phase(self.batch, self.warmup)

    @cached_property
    def tokens(self) -> dict[str, np.ndarray]:
        return batch_arrays(self.batch)

    def tokens_of_ubatch(self, ubatch: int) -> dict[str, np.ndarray]:
        if self.batch[1] == NO_BATCH:  # a plain program's compute: one graph, its input's tokens
            return self.tokens if ubatch == 0 else {column: values[:0] for column, values in self.tokens.items()}
        chunk = slice(ubatch * self.n_ubatch, (ubatch + 1) * self.n_ubatch)
        return {column: values[chunk] for column, values in self.tokens.items()}


# Closed graphs are written in batches: per graph, Python's bookkeeping costs several times
# more in the pause between two llama_decode calls (cold caches) than in a run of them.
# A crash loses the graphs of at most the last batch.
GRAPHS_PER_WRITE = 32
WRITE_INTERVAL_NS = 500_000_000


@dataclass
class ClosedDecode:
    """A decode call (None: graphs outside any) whose graphs the recorder has closed."""

    decode: DecodeCall | None
    return_code: int
    end_ns: int
    graphs_closed: int  # graphs waiting in the recorder once this call's graphs were closed


class GraphCall(NamedTuple):
    """A repeated graph and the decode call that ran it, as ubatch number `ubatch`."""

    graph: RepeatedGraph
    call: ClosedDecode
    ubatch: int


class ContextTracer:
    """Records the graphs one llama context computes: what both decode brackets share.
    PythonContextTracer keeps the books of each llama_decode call in Python (the Python
    recorder's, and the oracle), NativeContextTracer in the C extension."""

    def __init__(
        self,
        recording: Recording,
        context_id: int,
        token_text: Callable[[int], str],
        n_ubatch: int,
        recorder: GraphRecorder,
    ) -> None:
        self.recording = recording
        self.context_id = context_id
        self.recorder = recorder
        self.settings: CaptureSettings = recording.settings
        # What this tracer does: record, count (a keep-first bound was reached) or nothing.
        # Kept here too: around each llama_decode the tracer reads it, and asking the
        # recorder costs more there, with cold caches, than the answer is worth.
        self._mode = Mode.RECORD
        self.recorder.time_nodes = self.settings.detail == "op"
        self.token_text = token_text  # token id -> its text piece
        self.n_ubatch = max(n_ubatch, 1)
        self.warmup: tuple[tuple[int, ...], ...] = ()  # its warm-up batches' tokens (warmup_tokens)
        self._last_write_ns = perf_counter_ns()
        # A context on a GPU: its graphs are read at the compute call (no eval callback)
        self.reads_at_compute: GpuReading | None = None
        self._in_decode = False  # between begin_decode and end_decode: the recorder is in use
        self._unwritten = False  # graphs were closed after the last write

    @property
    def mode(self) -> Mode:
        return self.recorder.mode

    def begin_decode(self, batch: Any) -> None:
        # Under the recording's lock: its idle writer takes graphs from the recorder only
        # while no call runs (write_if_idle).
        with self.recording.lock:
            self._in_decode = True
            self._open_call(batch)

    def end_decode(self, return_code: int) -> None:
        """The decode call returned: close its graphs; write them with the next batch."""
        with self.recording.lock:
            self._in_decode = False
            self._close_call(return_code)

    def write_if_idle(self) -> None:
        """The recording's idle writer, holding its lock: write the graphs that wait when no
        llama_decode call runs and the last write is a batch interval old. A program that
        stops decoding (a chat waiting for its user) then has its last graphs on disk, for a
        live viewer, within about twice the interval."""
        now = perf_counter_ns()
        if self._in_decode or not self._unwritten or self._mode is not Mode.RECORD or self.recorder.open_nodes:
            return
        if now - self._last_write_ns >= WRITE_INTERVAL_NS:
            self._write_closed(now)

    def flush(self) -> None:
        """Write what is in flight (the recording is stopping)."""
        raise NotImplementedError

    def _open_call(self, batch: Any) -> None:
        """A llama_decode call begins with this batch."""
        raise NotImplementedError

    def _close_call(self, return_code: int) -> None:
        """The call returned: close its graphs, and write them if a batch is due."""
        raise NotImplementedError

    def _take_closed(self) -> list[ClosedDecode]:
        """The decode calls whose graphs are closed and not yet written (none are kept after)."""
        raise NotImplementedError

    def _count_dropped(self) -> None:
        counted = self.recorder.take_counted()
        if counted:
            self.recording.count_dropped(counted)

    def _write_closed(self, now: int) -> None:
        """Take the closed graphs from the recorder and write each with its decode call."""
        self._last_write_ns, self._unwritten = now, False
        closed = self._take_closed()
        failure = self.recorder.failure
        if failure is not None:  # write the graphs closed before the failure, then stop
            self.recorder.drop_open()
        elif self.mode is not Mode.RECORD:
            return
        mismatches = self.recorder.clock.mismatches
        graphs = self.recorder.take_graphs(now)
        if self.recorder.clock.mismatches > mismatches:
            say_once(
                "some graphs did not report their nodes the way ggml's CPU backend does (another backend "
                "computed them?): they keep graph times only; --timing sync times nodes on any backend"
            )
        taken = 0
        repeats: list[GraphCall] = []  # written together, when a graph of another kind or the end comes
        with self.recording.graph_batch():
            for call in closed:
                for ubatch, raw in enumerate(graphs[taken : call.graphs_closed]):
                    if isinstance(raw, RepeatedGraph):
                        repeats.append(GraphCall(raw, call, ubatch))
                        continue
                    if repeats:
                        self.recording.write_repeats(self, repeats)
                        repeats = []
                    self.recording.write_graph(self, raw, call, ubatch)
                taken = max(taken, call.graphs_closed)
            if repeats:
                self.recording.write_repeats(self, repeats)
        if failure is not None:
            self.recorder.discard()
            self.recording.fail(failure)

    def token_texts(self, token_ids: np.ndarray) -> list[str]:
        return [self.token_text(int(token)) if token >= 0 else "" for token in token_ids.tolist()]

    def count_only(self) -> None:
        self._mode = self.recorder.mode = Mode.COUNT
        self.recorder.discard()
        self._take_closed()

    def stop(self) -> None:
        self._mode = self.recorder.mode = Mode.OFF
        self.recorder.discard()
        self._take_closed()


class PythonContextTracer(ContextTracer):
    """The decode bracket in Python: with the Python recorder, and as the oracle of the C one."""

    def __init__(
        self,
        recording: Recording,
        context_id: int,
        token_text: Callable[[int], str],
        n_ubatch: int,
        recorder: GraphRecorder,
    ) -> None:
        super().__init__(recording, context_id, token_text, n_ubatch, recorder)
        self._time_nodes = self.settings.detail == "op"  # as the recorder was last told
        self.decode: DecodeCall | None = None
        self.n_decodes = 0
        self.n_prompt_decodes = 0
        self.n_decode_decodes = 0
        self._closed: list[ClosedDecode] = []  # decode calls whose graphs wait to be written

    def _open_call(self, batch: Any) -> None:
        if self._mode is Mode.RECORD and self.recorder.open_nodes:  # a graph computed outside llama_decode
            self._close_open_graph(None, 0, perf_counter_ns())
        decode = DecodeCall(self.n_decodes, perf_counter_ns(), read_batch(batch), self.n_ubatch, self.warmup)
        self.decode = decode
        self.n_decodes += 1
        time_nodes = self._time_nodes_now(decode)
        if time_nodes != self._time_nodes:
            self.recorder.time_nodes = self._time_nodes = time_nodes

    def _time_nodes_now(self, decode: DecodeCall) -> bool:
        """--detail and --sample: should the graphs of this call be timed node by node?"""
        if self.settings.detail == "graph":
            return False
        sample = self.settings.sample
        if decode.phase == "prompt":
            self.n_prompt_decodes += 1
            return sample is None or self.n_prompt_decodes == 1
        self.n_decode_decodes += 1
        return sample is None or (self.n_decode_decodes - 1) % sample == 0

    def _close_call(self, return_code: int) -> None:
        now = perf_counter_ns()
        decode, self.decode = self.decode, None
        if self._mode is Mode.COUNT:
            self._count_dropped()
        elif self._mode is Mode.RECORD and decode is not None:
            pending = self._close_open_graph(decode, return_code, now)
            self._unwritten = True
            if pending < 0 or pending >= GRAPHS_PER_WRITE or now - self._last_write_ns >= WRITE_INTERVAL_NS:
                self._write_closed(now)  # a failed recorder: what it closed before failing, then stop

    def _close_open_graph(self, decode: DecodeCall | None, return_code: int, now: int) -> int:
        """Close the graph in flight; returns the graphs waiting to be written, -1 if the recorder failed."""
        pending = self.recorder.close_graph(now)
        if pending >= 0:
            self._closed.append(ClosedDecode(decode, return_code, now, pending))
        return pending

    def flush(self) -> None:
        """Write what is in flight (the recording is stopping)."""
        now = perf_counter_ns()
        if self._mode is Mode.RECORD and self.recorder.open_nodes:
            self._close_open_graph(self.decode, 0, now)
        self._write_closed(now)

    def _take_closed(self) -> list[ClosedDecode]:
        closed, self._closed = self._closed, []
        return closed


# native/recorder.h: the lowest position of a call without a llama_batch (a plain ggml program's
# compute), whose tokens, if any, are the ids its graph looked up.
NO_BATCH = -2

# llama-server's probe of its context before serving (common_context_can_seq_rm): token 0
# twice, the memory cleared after. No request: counted with the warm-up.
PROBE_BATCH = (0, 0)


def warmup_tokens(bos: int | None, eos: int | None) -> tuple[tuple[int, ...], ...]:
    """The batches llama.cpp's programs decode before any prompt, at the start of a
    sequence: the warm-up (common_init: the vocabulary's BOS then EOS, the memory cleared
    after) and llama-server's probe. Only these two-token forms are recognized: a lone BOS
    can be a real prompt (generation from nothing)."""
    if bos is None or eos is None or bos < 0 or eos < 0 or bos == eos:
        return (PROBE_BATCH,)
    return ((int(bos), int(eos)), PROBE_BATCH)


def batch_phase(batch: BatchCopy, warmup: tuple[tuple[int, ...], ...] = ()) -> str:
    """`decode` for a decode step: each token alone in its sequence, past the sequence's
    start, its logits computed (a server's slots step together so, one token each);
    `prompt` for a batch that starts a sequence or feeds several tokens of one (a server
    step that mixes a prompt with other slots' decoding is a prompt step); `warmup` for the
    context's warm-up batches (`warmup`: their tokens, at the start of a sequence); `other`
    for none."""
    n_tokens, lowest_position = batch[0], batch[1]
    if n_tokens == 0 or lowest_position == NO_BATCH:
        return "other"
    if lowest_position == 0 and any(n_tokens == len(tokens) for tokens in warmup):
        if tuple(np.frombuffer(batch[2], np.int32).tolist()) in warmup:
            return "warmup"
    if n_tokens == 1:
        return "prompt" if lowest_position == 0 else "decode"
    outputs, seq_ids = np.frombuffer(batch[5], np.bool_), np.frombuffer(batch[4], np.int32)
    one_step = lowest_position > 0 and n_tokens <= 256 and outputs.all() and len(np.unique(seq_ids)) == n_tokens
    return "decode" if one_step else "prompt"


class NativeContextTracer(ContextTracer):
    """The decode bracket in the C extension (PythonContextTracer is its test oracle):
    around each llama_decode, one call into C before and one after; Python
    runs only when GRAPHS_PER_WRITE graphs or WRITE_INTERVAL_NS have passed. Between two
    calls of a generation Python runs with cold caches, several times slower than C."""

    def __init__(
        self,
        recording: Recording,
        context_id: int,
        token_text: Callable[[int], str],
        n_ubatch: int,
        recorder: NativeGraphRecorder,
        gpu: GpuReading | None = None,
    ) -> None:
        super().__init__(recording, context_id, token_text, n_ubatch, recorder)
        offsets = batch_offsets()
        assert offsets is not None, "attach chooses this tracer only for a llama_batch laid out as expected"
        native = recorder.native
        native.set_decode_rules(
            self.settings.detail == "graph", self.settings.sample or 0, GRAPHS_PER_WRITE, WRITE_INTERVAL_NS, offsets
        )
        self._begin, self._end, self._take_decodes = native.begin_decode, native.end_decode, native.take_decodes
        self.reads_at_compute = gpu
        self._address = native.address

    def _open_call(self, batch: Any) -> None:
        self._begin(ctypes.addressof(batch))
        if self.reads_at_compute is not None:  # the graphs computed on this thread are this call's
            python_program.begin_call(self._address, self.context_id, self.reads_at_compute)

    def _close_call(self, return_code: int) -> None:
        write_now = self._end(return_code)  # 1: enough graphs wait; -1: the recorder failed
        gpu_window = self.reads_at_compute is not None and python_program.end_call()
        if self._mode is Mode.RECORD:
            self._unwritten = True
            if write_now or gpu_window:  # a GPU window's graphs go first, then its kernels
                self._write_closed(perf_counter_ns())
        elif self._mode is Mode.COUNT:
            self._count_dropped()
        if gpu_window:
            self.recording.take_gpu_window()

    def flush(self) -> None:
        self._end(0)  # the graph in flight ends with the call that runs it, if any
        self._write_closed(perf_counter_ns())

    def _take_closed(self) -> list[ClosedDecode]:
        return closed_decodes(self._take_decodes(), self.n_ubatch, self.warmup)


def closed_decodes(record: Any, n_ubatch: int, warmup: tuple[tuple[int, ...], ...] = ()) -> list[ClosedDecode]:
    """The ClosedDecodes of a DecodesRecord (from the C recorder, or a native program's spool)."""
    from .native_recorder import decode_calls

    closed = []
    for index, start_ns, end_ns, return_code, graphs_closed, batch in decode_calls(record):
        decode = DecodeCall(index, start_ns, batch, n_ubatch, warmup) if batch is not None else None
        closed.append(ClosedDecode(decode, return_code, end_ns, graphs_closed))
    return closed
