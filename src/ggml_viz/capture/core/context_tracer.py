"""One traced llama context, as every recording path keeps it: the graphs its recorder closed,
each with the decode call (llama_decode, llama_process) that ran it, written in batches.

The in-process path brackets each call itself (llama_cpp_python/tracers.py); a native program's
calls come from its spool (preload/collector.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from time import perf_counter_ns
from typing import Any, NamedTuple, Protocol

import numpy as np

from ...log import say_once
from ..contract.constants import NO_BATCH
from ..settings import CaptureSettings
from .graph_records import decode_calls
from .inline_times import InlineClock
from .raw_graph import Mode, RawGraph, RepeatedGraph

# A llama_batch as copied before its call: n_tokens, the lowest position (-1: none), and the
# columns token_id (int32), pos (int32), seq_id (int32, the first of each token), output (bool).
BatchCopy = tuple[int, int, bytes, bytes, bytes, bytes]
BATCH_COLUMNS = (("token_id", np.int32), ("pos", np.int32), ("seq_id", np.int32), ("output", np.bool_))


def batch_arrays(copy: BatchCopy) -> dict[str, np.ndarray]:
    """The columns of a batch copy as numpy arrays."""
    return {name: np.frombuffer(data, dtype=dtype) for (name, dtype), data in zip(BATCH_COLUMNS, copy[2:], strict=True)}


class GraphRecorder(Protocol):
    """What the C and the Python recorder offer (and, for a native program, the spool's: preload/collector.py)."""

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
    @property
    def routing_reads(self) -> tuple[int, int, int]: ...  # MoE layers read answered, at ticks; dropped
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

    @cached_property
    def _untaken(self) -> np.ndarray:
        """Per token of the batch, whether no graph of the call has computed it yet."""
        return np.ones(len(self.tokens["token_id"]), bool)

    def tokens_of_graph(
        self, ubatch: int, input_ids: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The tokens the call's graph number `ubatch` computed, and their places in the batch.
        llama.cpp splits a batch into ubatches of its own order (a few tokens of each sequence,
        where the batch holds several): where the graph's token lookup was read (`input_ids`),
        its tokens are the batch's that it looked up (ubatch_places); else the next n_ubatch not
        yet computed, in the batch's order. The call's graphs come here in the order they ran."""
        if self.batch[1] == NO_BATCH:  # a plain program's compute: one graph, its input's tokens
            places = np.arange(len(self.tokens["token_id"]) if ubatch == 0 else 0)
        else:
            untaken = self._untaken
            looked_up = ubatch_places(self.tokens, untaken, input_ids) if input_ids is not None else None
            places = np.flatnonzero(untaken)[: self.n_ubatch] if looked_up is None else looked_up
            untaken[places] = False
        return {column: values[places] for column, values in self.tokens.items()}, places


def ubatch_places(tokens: dict[str, np.ndarray], untaken: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Which of a batch's tokens not yet computed (`untaken`) a ubatch that looked up `ids`
    holds, in its order; None where they are not among them. llama.cpp takes a ubatch's tokens
    as runs of a sequence's next tokens (the next n in the batch's order, or an equal run of
    each sequence): each id is the token after the one before it, in the same sequence, where
    that fits, else the first one not yet computed that has that id. (Tokens alike at the same
    place of two sequences' runs may go to the first: the counts stay right.)"""
    free = np.flatnonzero(untaken)
    token_ids, seq_ids = tokens["token_id"], tokens["seq_id"]
    if len(ids) <= len(free) and np.array_equal(token_ids[free[: len(ids)]], ids):
        return free[: len(ids)]  # the next tokens in the batch's order: one sequence, or unified memory
    waiting: dict[int, list[int]] = {}  # per id, its places not yet computed, last first
    for place in free[::-1].tolist():
        waiting.setdefault(int(token_ids[place]), []).append(place)
    open_ = untaken.copy()
    places: list[int] = []
    previous = -2
    for token in ids.tolist():
        following = previous + 1
        if (
            previous >= 0
            and following < len(token_ids)
            and open_[following]
            and token_ids[following] == token
            and seq_ids[following] == seq_ids[previous]
        ):
            place = following
        else:
            candidates = waiting.get(token, [])
            while candidates and not open_[candidates[-1]]:
                candidates.pop()
            if not candidates:
                return None
            place = candidates.pop()
        open_[place] = False
        places.append(place)
        previous = place
    return np.array(places, np.int64)


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
    """Records the graphs one llama context computes: what every path's tracer shares. The
    in-process tracers bracket each llama_decode themselves (llama_cpp_python/tracers.py); a
    native program's tracer writes each take of its spool (preload/collector.py)."""

    def __init__(
        self,
        recording: GraphWriter,
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
        self._unwritten = False  # graphs were closed after the last write

    @property
    def mode(self) -> Mode:
        return self.recorder.mode

    def flush(self) -> None:
        """Write what is in flight (the recording is stopping)."""
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


class GraphWriter(Protocol):
    """What a tracer asks of the recording it writes into (core/recording.py's Recording)."""

    settings: CaptureSettings
    lock: Any  # held while a tracer opens or closes a call, or writes

    def graph_batch(self) -> AbstractContextManager[None]: ...
    def write_graph(self, tracer: ContextTracer, raw: RawGraph, call: ClosedDecode, ubatch: int) -> None: ...
    def write_repeats(self, tracer: ContextTracer, repeats: list[GraphCall]) -> None: ...
    def count_dropped(self, n_nodes: int) -> None: ...
    def fail(self, reason: str) -> None: ...


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


def closed_decodes(record: Any, n_ubatch: int, warmup: tuple[tuple[int, ...], ...] = ()) -> list[ClosedDecode]:
    """The ClosedDecodes of a DecodesRecord (from the C recorder, or a native program's spool)."""
    closed = []
    for index, start_ns, end_ns, return_code, graphs_closed, batch in decode_calls(record):
        decode = DecodeCall(index, start_ns, batch, n_ubatch, warmup) if batch is not None else None
        closed.append(ClosedDecode(decode, return_code, end_ns, graphs_closed))
    return closed
