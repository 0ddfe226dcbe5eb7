"""One traced llama context: its eval callback and the bracket around each llama_decode."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from .llama_info import TokenText, batch_arrays
from .python_recorder import PythonGraphRecorder
from .raw_graph import RawGraph

if TYPE_CHECKING:
    from .session import Recording


class Mode(Enum):
    RECORD = "record"  # copy and time every node
    COUNT = "count"  # over the event bound: only count what is dropped
    OFF = "off"  # recording stopped (finished, or failed): answer as if untraced


@dataclass
class DecodeCall:
    """The llama_decode call in progress: which graphs it ran and which tokens it fed."""

    index: int
    start_ns: int
    tokens: dict[str, np.ndarray]
    n_ubatch: int
    graphs_done: int = 0

    def tokens_of_ubatch(self, ubatch: int) -> dict[str, np.ndarray]:
        chunk = slice(ubatch * self.n_ubatch, (ubatch + 1) * self.n_ubatch)
        return {column: values[chunk] for column, values in self.tokens.items()}


class ContextTracer:
    """Records the graphs one llama context computes."""

    def __init__(self, recording: Recording, context_id: int, model: int, n_ubatch: int) -> None:
        import llama_cpp.llama_cpp as llama_cpp

        self.recording = recording
        self.context_id = context_id
        self.mode = Mode.RECORD
        self.recorder = PythonGraphRecorder()
        self.token_text = TokenText(model)
        self.n_ubatch = max(n_ubatch, 1)
        self.decode: DecodeCall | None = None
        self.n_decodes = 0
        self.counted_nodes = 0  # nodes seen while counting (graph in flight)
        # llama.cpp keeps the raw function pointer: this object must outlive the context.
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_eval)

    def _on_eval(self, tensor: int, ask: bool, _user_data: Any) -> bool:
        if not ask:
            # Result of a node we asked for: answering False would make ggml skip the
            # rest of the graph, so this path answers True whatever happens.
            if self.mode is Mode.RECORD:
                self.recorder.on_result(perf_counter_ns())
            return True
        try:
            if self.mode is Mode.RECORD:
                if self.recorder.starts_new_graph(tensor):
                    self._finish_graph(perf_counter_ns())
                return self.recorder.on_ask(tensor)
            if self.mode is Mode.COUNT:
                self.counted_nodes += 1
        except Exception as error:  # never raise into llama.cpp
            self.recording.fail(f"the eval callback failed: {error!r}")
        return False

    def begin_decode(self, batch: Any) -> None:
        if self.recorder.n_nodes:  # a graph computed outside llama_decode
            self._finish_graph(perf_counter_ns())
        self.decode = DecodeCall(
            index=self.n_decodes, start_ns=perf_counter_ns(), tokens=batch_arrays(batch), n_ubatch=self.n_ubatch
        )
        self.n_decodes += 1

    def end_decode(self, return_code: int) -> None:
        end_ns = perf_counter_ns()
        self._finish_graph(end_ns)
        if self.decode is not None and self.mode is not Mode.OFF:
            self.recording.write_decode(self, self.decode, end_ns, return_code)
        self.decode = None

    def _finish_graph(self, boundary_ns: int) -> None:
        """Close the graph in flight at `boundary_ns` (the next graph began, or the call returned)."""
        if self.mode is Mode.COUNT and self.counted_nodes:
            self.recording.count_dropped(self.counted_nodes)
            self.counted_nodes = 0
        if self.mode is not Mode.RECORD or not self.recorder.n_nodes:
            return
        raw = self.recorder.take_graph()
        decode = self.decode
        ubatch = decode.graphs_done if decode else 0
        tokens = decode.tokens_of_ubatch(ubatch) if decode else {}
        if decode:
            decode.graphs_done += 1
        self.recording.write_graph(self, raw, decode, ubatch, tokens, boundary_ns)

    def flush(self) -> None:
        """Write what is in flight (the recording is stopping)."""
        self._finish_graph(perf_counter_ns())

    def token_texts(self, token_ids: np.ndarray) -> list[str]:
        return [self.token_text(int(token)) if token >= 0 else "" for token in token_ids.tolist()]

    def take_count_only(self) -> None:
        self.mode = Mode.COUNT
        self.recorder.take_graph()  # discard

    def stop(self) -> None:
        self.mode = Mode.OFF
        self.recorder = PythonGraphRecorder()


def graph_phase(tokens: dict[str, np.ndarray]) -> str:
    """`prompt` for a batch of several tokens or one starting a sequence, else `decode`."""
    positions = tokens.get("pos")
    if positions is None or len(positions) == 0:
        return "other"
    return "prompt" if len(positions) > 1 or positions.min() == 0 else "decode"


__all__ = ["ContextTracer", "DecodeCall", "Mode", "RawGraph", "graph_phase"]
