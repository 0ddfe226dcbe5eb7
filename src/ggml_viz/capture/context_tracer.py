"""One traced llama context: its recorder and the bracket around each llama_decode."""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .llama_info import TokenText, batch_arrays
from .raw_graph import Mode, RawGraph
from .settings import CaptureSettings

if TYPE_CHECKING:
    from .session import Recording


class GraphRecorder(Protocol):
    """What the native and the Python recorder both offer."""

    mode: Mode
    time_nodes: bool
    callback: Any  # the ggml_backend_sched_eval_callback handed to llama.cpp
    user_data: int | None

    @property
    def failure(self) -> str | None: ...
    @property
    def pending_nodes(self) -> int: ...
    def take_graphs(self, boundary_ns: int) -> list[RawGraph]: ...
    def take_counted(self) -> int: ...
    def discard(self) -> None: ...


@dataclass
class DecodeCall:
    """The llama_decode call in progress: the tokens it fed and the graphs it ran."""

    index: int
    start_ns: int
    tokens: dict[str, np.ndarray]
    n_ubatch: int
    phase: str
    graphs_done: int = 0

    def tokens_of_ubatch(self, ubatch: int) -> dict[str, np.ndarray]:
        chunk = slice(ubatch * self.n_ubatch, (ubatch + 1) * self.n_ubatch)
        return {column: values[chunk] for column, values in self.tokens.items()}


class ContextTracer:
    """Records the graphs one llama context computes."""

    def __init__(
        self, recording: Recording, context_id: int, model: int, n_ubatch: int, recorder: GraphRecorder
    ) -> None:
        self.recording = recording
        self.context_id = context_id
        self.recorder = recorder
        self.settings: CaptureSettings = recording.settings
        self.recorder.time_nodes = self.settings.detail == "op"
        self.token_text = TokenText(model)
        self.n_ubatch = max(n_ubatch, 1)
        self.decode: DecodeCall | None = None
        self.n_decodes = 0
        self.n_prompt_decodes = 0
        self.n_decode_decodes = 0

    @property
    def mode(self) -> Mode:
        return self.recorder.mode

    def begin_decode(self, batch: Any) -> None:
        if self.recorder.pending_nodes:  # graphs computed outside llama_decode
            self._write_finished(perf_counter_ns(), None, 0)
        tokens = batch_arrays(batch)
        phase = graph_phase(tokens)
        self.decode = DecodeCall(self.n_decodes, perf_counter_ns(), tokens, self.n_ubatch, phase)
        self.n_decodes += 1
        self.recorder.time_nodes = self._time_nodes_now(phase)

    def _time_nodes_now(self, phase: str) -> bool:
        """--detail and --sample: should the graphs of this call be timed node by node?"""
        if self.settings.detail == "graph":
            return False
        sample = self.settings.sample
        if phase == "prompt":
            self.n_prompt_decodes += 1
            return sample is None or self.n_prompt_decodes == 1
        self.n_decode_decodes += 1
        return sample is None or (self.n_decode_decodes - 1) % sample == 0

    def end_decode(self, return_code: int) -> None:
        self._write_finished(perf_counter_ns(), self.decode, return_code)
        self.decode = None

    def flush(self) -> None:
        """Write what is in flight (the recording is stopping)."""
        self._write_finished(perf_counter_ns(), self.decode, 0)

    def _write_finished(self, boundary_ns: int, decode: DecodeCall | None, return_code: int) -> None:
        failure = self.recorder.failure
        if failure is not None:
            self.recorder.discard()
            self.recording.fail(failure)
            return
        counted = self.recorder.take_counted()
        if counted:
            self.recording.count_dropped(counted)
        if self.mode is not Mode.RECORD:
            return
        for raw in self.recorder.take_graphs(boundary_ns):
            ubatch = decode.graphs_done if decode else 0
            tokens = decode.tokens_of_ubatch(ubatch) if decode else {}
            if decode:
                decode.graphs_done += 1
            self.recording.write_graph(self, raw, decode, ubatch, tokens, boundary_ns, return_code)

    def token_texts(self, token_ids: np.ndarray) -> list[str]:
        return [self.token_text(int(token)) if token >= 0 else "" for token in token_ids.tolist()]

    def count_only(self) -> None:
        self.recorder.mode = Mode.COUNT
        self.recorder.discard()

    def stop(self) -> None:
        self.recorder.mode = Mode.OFF
        self.recorder.discard()


def graph_phase(tokens: dict[str, np.ndarray]) -> str:
    """`prompt` for a batch of several tokens or one starting a sequence, else `decode`."""
    positions = tokens.get("pos")
    if positions is None or len(positions) == 0:
        return "other"
    return "prompt" if len(positions) > 1 or positions.min() == 0 else "decode"
