"""The decode bracket of a llama-cpp-python context: one call before and one after each
llama_decode, kept in Python (PythonContextTracer: with the Python recorder, and the oracle)
or in the C extension (CContextTracer)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Protocol

from ..core.context_tracer import (
    GRAPHS_PER_WRITE,
    WRITE_INTERVAL_NS,
    ClosedDecode,
    ContextTracer,
    DecodeCall,
    GraphRecorder,
    GraphWriter,
    closed_decodes,
)
from ..core.raw_graph import Mode
from . import gpu
from .c_recorder import CGraphRecorder
from .gpu import GpuReading
from .llama_info import batch_offsets, read_batch
from .python_recorder import PythonGraphRecorder


class InProcessWriter(GraphWriter, Protocol):
    """The recording of this process's contexts (session.py's InProcessRecording)."""

    def take_gpu_window(self) -> None: ...


class InProcessTracer(ContextTracer):
    """A context of this process: llama_cpp_python/hooks.py calls begin_decode and end_decode
    around each of its llama_decode calls, and the recording's idle writer write_if_idle."""

    recording: InProcessWriter

    def __init__(
        self,
        recording: InProcessWriter,
        context_id: int,
        token_text: Callable[[int], str],
        n_ubatch: int,
        recorder: GraphRecorder,
    ) -> None:
        super().__init__(recording, context_id, token_text, n_ubatch, recorder)
        # A context on a GPU: its graphs are read at the compute call (no eval callback)
        self.reads_at_compute: GpuReading | None = None
        self._in_decode = False  # between begin_decode and end_decode: the recorder is in use

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

    def _open_call(self, batch: Any) -> None:
        """A llama_decode call begins with this batch."""
        raise NotImplementedError

    def _close_call(self, return_code: int) -> None:
        """The call returned: close its graphs, and write them if a batch is due."""
        raise NotImplementedError


class PythonContextTracer(InProcessTracer):
    """The decode bracket in Python: with the Python recorder, and as the oracle of the C one."""

    def __init__(
        self,
        recording: InProcessWriter,
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
        if isinstance(self.recorder, PythonGraphRecorder):  # (the C recorder's own bracket decides in C)
            self.recorder.read_input_ids = len(decode.tokens["token_id"]) > 1
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
        if isinstance(self.recorder, PythonGraphRecorder):
            self.recorder.read_input_ids = False
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


class CContextTracer(InProcessTracer):
    """The decode bracket in the C extension (PythonContextTracer is its test oracle):
    around each llama_decode, one call into C before and one after; Python
    runs only when GRAPHS_PER_WRITE graphs or WRITE_INTERVAL_NS have passed. Between two
    calls of a generation Python runs with cold caches, several times slower than C."""

    def __init__(
        self,
        recording: InProcessWriter,
        context_id: int,
        token_text: Callable[[int], str],
        n_ubatch: int,
        recorder: CGraphRecorder,
        gpu_reading: GpuReading | None = None,
    ) -> None:
        super().__init__(recording, context_id, token_text, n_ubatch, recorder)
        offsets = batch_offsets()
        assert offsets is not None, "attach chooses this tracer only for a llama_batch laid out as expected"
        in_c = recorder.c_recorder
        in_c.set_decode_rules(
            self.settings.detail == "graph", self.settings.sample or 0, GRAPHS_PER_WRITE, WRITE_INTERVAL_NS, offsets
        )
        self._begin, self._end, self._take_decodes = in_c.begin_decode, in_c.end_decode, in_c.take_decodes
        self.reads_at_compute = gpu_reading
        self._address = in_c.address

    def _open_call(self, batch: Any) -> None:
        self._begin(ctypes.addressof(batch))
        if self.reads_at_compute is not None:  # the graphs computed on this thread are this call's
            gpu.begin_call(self._address, self.context_id, self.reads_at_compute)

    def _close_call(self, return_code: int) -> None:
        write_now = self._end(return_code)  # 1: enough graphs wait; -1: the recorder failed
        gpu_window = self.reads_at_compute is not None and gpu.end_call()
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
