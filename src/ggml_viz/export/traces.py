"""Trace exports: Perfetto's native protobuf and Chrome's JSON trace events.

Both show one track per context (named by its backend), one slice per graph (its tokens in
the args) with its nodes' slices nested inside, and counters for the bytes in use per
buffer kind and the KV cache's cells in use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.memory import bytes_in_use, kv_cache_fill
from ..analysis.summary import backends
from ..runformat.reader import Run
from ..runformat.schema import NO_ID
from .base import Exporter, ExportOptions, timed_events

CHROME_EVENT_WARNING = 1_000_000  # chrome://tracing struggles above this


def graph_slices(run: Run) -> list[dict[str, Any]]:
    graphs = run.graphs
    tokens = run.tokens.groupby("graph_id")["text"].agg("".join)
    return [
        {
            "graph_id": int(g),
            "context_id": int(c),
            "start_ns": int(s),
            "end_ns": int(e),
            "phase": p,
            "tokens": str(tokens.get(g, "")),
            "n_nodes": int(n),
        }
        for g, c, s, e, p, n in zip(
            graphs["graph_id"],
            graphs["context_id"],
            graphs["start_ns"],
            graphs["end_ns"],
            graphs["phase"],
            graphs["n_nodes"],
            strict=True,
        )
    ]


def counters(run: Run) -> list[tuple[str, int, float]]:
    """(counter name, time ns, value) samples, one per graph."""
    samples = [
        (f"{row.kind} bytes in use", int(row.start_ns), float(row.bytes)) for row in bytes_in_use(run).itertuples()
    ]
    fill = kv_cache_fill(run)
    if not fill.empty:
        starts = run.graphs.set_index("graph_id")["start_ns"]
        for graph_id, used in fill.groupby("graph_id")["used"].max().items():
            samples.append(("KV cache cells in use", int(starts[graph_id]), float(used)))
    return samples


def _context_names(run: Run) -> dict[int, str]:
    names = {}
    for context in run.manifest.get("contexts") or []:
        model = (context.get("model") or {}).get("name") or "model"
        names[int(context["context_id"])] = f"context {context['context_id']} · {model}"
    backend = ", ".join(backends(run)) or "?"
    for context_id in run.graphs["context_id"].unique().tolist():
        names[int(context_id)] = f"{names.get(int(context_id), f'context {context_id}')} · {backend}"
    return names


def _node_args(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "op": row.op,
        "type": row.type,
        "shape": row.shape,
        "layer": None if row.layer == NO_ID else int(row.layer),
        "waiting for other threads (us)": None if row.wait_ns < 0 else row.wait_ns / 1000.0,
        "output buffer": row.buffer,
        "reads from the model file": row.reads or None,
        "graph": int(row.graph_id),
        "node": int(row.node_index),
    }


class ChromeJsonExporter(Exporter):
    name = "chrome-json"
    extensions = (".json",)
    summary = "Chrome trace events (chrome://tracing, Perfetto's legacy JSON import)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        events = timed_events(run)
        origin = int(run.graphs["start_ns"].min()) if len(run.graphs) else 0
        us = lambda ns: (int(ns) - origin) / 1000.0  # noqa: E731 - microseconds from the run's start
        trace: list[dict[str, Any]] = []
        for context_id, name in _context_names(run).items():
            trace.append({"ph": "M", "name": "process_name", "pid": context_id, "tid": 0, "args": {"name": name}})
            trace.append({"ph": "M", "name": "thread_name", "pid": context_id, "tid": 1, "args": {"name": "graphs"}})
        for graph in graph_slices(run):
            trace.append(
                {
                    "ph": "X",
                    "name": f"graph {graph['graph_id']} ({graph['phase']})",
                    "cat": "graph",
                    "pid": graph["context_id"],
                    "tid": 1,
                    "ts": us(graph["start_ns"]),
                    "dur": (graph["end_ns"] - graph["start_ns"]) / 1000.0,
                    "args": {"tokens": graph["tokens"], "nodes": graph["n_nodes"]},
                }
            )
        total = len(events)
        for done, row in enumerate(events.itertuples(index=False)):
            trace.append(
                {
                    "ph": "X",
                    "name": row.op,
                    "cat": "node",
                    "pid": int(row.context_id),
                    "tid": 1,
                    "ts": us(row.start_ns),
                    "dur": (row.end_ns - row.start_ns) / 1000.0,
                    "args": _node_args(row),
                }
            )
            if done % 100_000 == 0:
                options.progress(done, total)
        for counter, time_ns, value in counters(run):
            trace.append({"ph": "C", "name": counter, "pid": 0, "tid": 0, "ts": us(time_ns), "args": {"value": value}})
        with open(output, "w", encoding="utf-8") as file:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ns"}, file, separators=(",", ":"))
        options.progress(total, total)
        warning = (
            f" — over {CHROME_EVENT_WARNING:,} events: chrome://tracing may not cope; the Perfetto export will"
            if total > CHROME_EVENT_WARNING
            else ""
        )
        return f"{total:,} node events and {len(run.graphs):,} graphs as Chrome trace events{warning}"


class PerfettoExporter(Exporter):
    name = "perfetto"
    extensions = (".perfetto-trace", ".pftrace")
    summary = "Perfetto's native protobuf trace (ui.perfetto.dev, trace_processor)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        events = timed_events(run)
        sequence = 0x6767  # one writer: every packet on one trusted sequence
        trace = pb.Trace()
        track_of: dict[int, int] = {}
        for position, (context_id, name) in enumerate(sorted(_context_names(run).items())):
            uuid = 1000 + position
            track_of[context_id] = uuid
            packet = trace.packet.add()
            packet.track_descriptor.uuid = uuid
            packet.track_descriptor.name = name
        counter_tracks: dict[str, int] = {}
        samples = counters(run)
        for counter in sorted({sample[0] for sample in samples}):
            uuid = 5000 + len(counter_tracks)
            counter_tracks[counter] = uuid
            packet = trace.packet.add()
            packet.track_descriptor.uuid = uuid
            packet.track_descriptor.name = counter
            packet.track_descriptor.counter.unit_name = "bytes" if "bytes" in counter else "cells"

        def slice_event(time_ns: int, track: int, kind: int, name: str | None = None) -> Any:
            packet = trace.packet.add()
            packet.timestamp = int(time_ns)
            packet.trusted_packet_sequence_id = sequence
            packet.track_event.track_uuid = track
            packet.track_event.type = kind
            if name is not None:
                packet.track_event.name = name
            return packet.track_event

        def annotate(track_event: Any, args: dict[str, Any]) -> None:
            for key, value in args.items():
                if value is None:
                    continue
                annotation = track_event.debug_annotations.add()
                annotation.name = key
                if isinstance(value, int | np.integer):
                    annotation.int_value = int(value)
                else:
                    annotation.string_value = str(value)

        begin, end = pb.TrackEvent.Type.TYPE_SLICE_BEGIN, pb.TrackEvent.Type.TYPE_SLICE_END
        # Graph slices with their nodes nested: per graph, begin, nodes in time order, end.
        by_graph = dict(tuple(events.groupby("graph_id", sort=False)))
        total = len(events)
        done = 0
        for graph in sorted(graph_slices(run), key=lambda g: g["start_ns"]):
            track = track_of[graph["context_id"]]
            annotate(
                slice_event(graph["start_ns"], track, begin, f"graph {graph['graph_id']} ({graph['phase']})"),
                {"tokens": graph["tokens"], "nodes": graph["n_nodes"]},
            )
            nodes = by_graph.get(graph["graph_id"])
            if nodes is not None:
                for row in nodes.itertuples(index=False):
                    annotate(slice_event(row.start_ns, track, begin, row.op), _node_args(row))
                    slice_event(row.end_ns, track, end)
                done += len(nodes)
                options.progress(done, total)
            slice_event(graph["end_ns"], track, end)
        for counter, time_ns, value in samples:
            slice_event(time_ns, counter_tracks[counter], pb.TrackEvent.Type.TYPE_COUNTER).double_counter_value = value
        output.write_bytes(trace.SerializeToString())
        return f"{total:,} node events and {len(run.graphs):,} graphs as a Perfetto trace"
