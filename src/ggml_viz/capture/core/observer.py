"""What a recording tells whoever watches it live (`ggml-viz run --metrics`: capture/metrics/):
the contexts described, the decode calls closed, the graphs' node times, the GPU's windows and
the recorder's drop counts, as they come. The collectors call it (preload/collector.py, and
any collector of the same spool); the run is written the same with or without an observer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..gpu.records import GpuWindow

Warmup = tuple[tuple[int, ...], ...]  # a context's warm-up batches' tokens (context_tracer.warmup_tokens)


class RecordingObserver(Protocol):
    def observe_context(self, context_id: int, description: Mapping[str, Any], warmup: Warmup) -> None:
        """A llama context described (the manifest's context: n_ctx, n_batch, n_ubatch, n_seq_max, model)."""

    def observe_calls(self, context_id: int, decodes: Any) -> None:
        """The decode calls a take closed (a DecodesRecord), whatever is recorded of their graphs."""

    def observe_graph(self, context_id: int, op_seconds: Mapping[str, float]) -> None:
        """A recorded graph's nodes timed on their own: their time by ggml op name."""

    def observe_gpu_window(self, window: GpuWindow) -> None:
        """A closed GPU trace window."""

    def observe_recorder(self, counts: Mapping[str, int]) -> None:
        """The recording's counts so far of what it did not record (Recording.loss_counts)."""
