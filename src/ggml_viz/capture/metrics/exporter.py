"""The recording's live metrics in Prometheus's form: a registry of their own, fed by the collector
(RunMetrics is a RecordingObserver) and served over HTTP from a daemon thread of `ggml-viz run`,
as OpenMetrics text when the scraper asks for it (prometheus_client's own server).

Names follow Prometheus's conventions: a `ggml_viz_` prefix, base units (seconds), `_total` for
counters (docs/always-on.md lists each). Token and request figures come from the decode calls,
which every recording mode brings; per-op time only from graphs recorded with their node times.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from ..core.context_tracer import batch_arrays, batch_phase
from ..core.graph_records import decode_calls
from ..core.observer import Warmup
from ..gpu.records import GpuWindow
from .served import ServedRequests

# Time to first token runs from a prompt's first call to its logits: tens of milliseconds to
# minutes (a long prompt on a CPU); a token step, milliseconds to a second; a decode call, both.
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
REQUEST_PHASES = ("prompt", "decode")  # the calls of requests (not the warm-up, not a plain program's)

# What the recording did not record (Recording.loss_counts, SpoolCollector.loss_counts): each a counter.
LOSSES = {
    "dropped_events": ("ggml_viz_dropped_node_events", "Node events not recorded: past the event bound"),
    "dropped_graphs": ("ggml_viz_dropped_graphs", "Graphs not recorded: past the event bound"),
    "untimed_graphs": ("ggml_viz_untimed_graphs", "Graphs recorded without node times (another backend's)"),
    "captures_skipped": ("ggml_viz_skipped_captures", "Tensor captures skipped (past the capture bound)"),
    "capture_bytes_skipped": ("ggml_viz_skipped_capture_bytes", "Bytes of the tensor captures skipped"),
    "routing_dropped": (
        "ggml_viz_dropped_routing_reads",
        "MoE routing reads dropped (read at a tick that did not hold)",
    ),
    "spools_damaged": ("ggml_viz_damaged_spools", "Spool files found damaged: their frames from there on are lost"),
}


class RunMetrics:
    """The metrics of one recorded program, told by its collector what it reads."""

    def __init__(self, program: Sequence[str] = ()) -> None:
        disable_created_metrics()  # no `_created` series beside each counter: a scrape's noise here
        self.registry = CollectorRegistry()
        registry = self.registry
        self.op_seconds = Counter(
            "ggml_viz_op_seconds", "Time of recorded graphs' nodes, by ggml op", ["op"], registry=registry
        )
        self.prompt_tokens = Counter("ggml_viz_prompt_tokens", "Prompt tokens computed", registry=registry)
        self.generated_tokens = Counter(
            "ggml_viz_generated_tokens", "Tokens generated: each prompt's first, then each fed back", registry=registry
        )
        self.requests = Counter("ggml_viz_requests", "Requests begun (a sequence's prompt)", registry=registry)
        self.call_seconds = Histogram(
            "ggml_viz_decode_call_seconds",
            "Decode calls (llama_decode) of requests and their time, by phase",
            ["phase"],
            buckets=CALL_BUCKETS,
            registry=registry,
        )
        for phase in REQUEST_PHASES:  # both series from the start: a dashboard's rates have data at once
            self.call_seconds.labels(phase)
        self.first_token_seconds = Histogram(
            "ggml_viz_time_to_first_token_seconds",
            "Per request: from the start of its first decode call to the end of the call giving its first token",
            buckets=FIRST_TOKEN_BUCKETS,
            registry=registry,
        )
        self.token_step_seconds = Histogram(
            "ggml_viz_time_per_output_token_seconds",
            "Per token generated after a request's first: the time since its previous token",
            buckets=TOKEN_STEP_BUCKETS,
            registry=registry,
        )
        self.kv_cells_used = Gauge(
            "ggml_viz_kv_cells_used",
            "KV cells the context's sequences hold: each its highest position since its request began, + 1",
            ["context"],
            registry=registry,
        )
        self.kv_cells_capacity = Gauge(
            "ggml_viz_kv_cells_capacity", "KV cells of the context (n_ctx)", ["context"], registry=registry
        )
        self.program_info = Info("ggml_viz_program", "The program recorded and its model", registry=registry)
        self.program = Path(program[0]).name if program else ""
        self.program_info.info({"program": self.program, "model": ""})
        self.gpu_busy: Gauge | None = None  # registered with the first GPU window: absent without GPU times
        self.losses = _Losses()
        registry.register(self.losses)
        self.served: dict[int, ServedRequests] = {}
        self.warmup: dict[int, Warmup] = {}

    # -- RecordingObserver ---------------------------------------------------------

    def observe_context(self, context_id: int, description: Mapping[str, Any], warmup: Warmup) -> None:
        self.warmup[context_id] = warmup
        label = str(context_id)
        if context_id not in self.served:  # (described again by each window of a dormant recording: its requests go on)
            self.served[context_id] = ServedRequests()
            self.kv_cells_used.labels(label).set(0)
        if description.get("n_ctx"):
            self.kv_cells_capacity.labels(label).set(int(description["n_ctx"]))
        model = description.get("model") or {}
        name = model.get("description") or model.get("name") or ""
        if name and context_id == 0:
            self.program_info.info({"program": self.program, "model": str(name)})

    def observe_calls(self, context_id: int, decodes: Any) -> None:
        served = self.served.setdefault(context_id, ServedRequests())
        warmup = self.warmup.get(context_id, ())
        for _, start_ns, end_ns, _, _, batch in decode_calls(decodes):
            if batch is None:  # graphs outside any call
                continue
            phase = batch_phase(batch, warmup)
            if phase not in REQUEST_PHASES:
                continue
            self.call_seconds.labels(phase).observe((end_ns - start_ns) / 1e9)
            tokens = batch_arrays(batch)
            outcome = served.read_call(start_ns, end_ns, tokens["seq_id"], tokens["pos"], tokens["output"])
            self.prompt_tokens.inc(outcome.prompt_tokens)
            self.generated_tokens.inc(outcome.generated_tokens)
            self.requests.inc(outcome.requests_begun)
            for seconds in outcome.first_token_seconds:
                self.first_token_seconds.observe(seconds)
            for seconds in outcome.token_step_seconds:
                self.token_step_seconds.observe(seconds)
        self.kv_cells_used.labels(str(context_id)).set(served.cells_used)

    def observe_graph(self, context_id: int, op_seconds: Mapping[str, float]) -> None:
        for op, seconds in op_seconds.items():
            self.op_seconds.labels(op).inc(max(seconds, 0.0))

    def observe_gpu_window(self, window: GpuWindow) -> None:
        share = busy_share(window)
        if share is None:
            return
        if self.gpu_busy is None:
            self.gpu_busy = Gauge(
                "ggml_viz_gpu_busy_ratio",
                "Share of the latest GPU trace window in which the GPU ran kernels, copies or memsets",
                registry=self.registry,
            )
        self.gpu_busy.set(share)

    def observe_recorder(self, counts: Mapping[str, int]) -> None:
        self.losses.counts = dict(counts)


class _Losses(Collector):
    """The recording's counts of what it did not record, as counters (zero until told otherwise)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self.counts  # replaced whole by the collector's thread: read once
        for key, (name, documentation) in LOSSES.items():
            yield CounterMetricFamily(name, documentation, value=counts.get(key, 0))


def busy_share(window: GpuWindow) -> float | None:
    """The share of a GPU window's span (its computes and what the GPU ran) in which the GPU ran
    something: the union of its activities' intervals over the span. None: nothing ran."""
    activities = window.activities
    if not len(activities):
        return None
    starts, ends = activities["start_ns"].astype(np.int64), activities["end_ns"].astype(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # the union: each interval's part past the furthest end before it
    before = np.concatenate(([starts[0]], ends[:-1]))
    busy = int(np.maximum(ends - np.maximum(starts, before), 0).sum())
    computes = window.computes
    first = min(int(starts[0]), int(computes["start_ns"].min()) if len(computes) else int(starts[0]))
    last = max(int(ends[-1]), int(computes["end_ns"].max()) if len(computes) else int(ends[-1]))
    return min(busy / (last - first), 1.0) if last > first else None


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets; no host: every interface) as (host, port)."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT (example: 127.0.0.1:9464)")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve_metrics(metrics: RunMetrics, address: str) -> tuple[str, int]:
    """Serve `metrics` at `address` (HOST:PORT) from a daemon thread, for the life of the process:
    the address served (the port asked, or the one given for port 0). OSError where it cannot be bound."""
    host, port = parse_address(address)
    server, _ = start_http_server(port, host, registry=metrics.registry)
    bound_host, bound_port = server.server_address[:2]
    return str(bound_host), int(bound_port)
