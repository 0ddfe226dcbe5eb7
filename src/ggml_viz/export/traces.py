"""Trace exports: Perfetto's native protobuf and Chrome's JSON trace events.

Both show one track per context (named by its backend), one slice per graph (its tokens in
the args) with its nodes' slices nested inside, and counters for the bytes in use per
buffer kind and the KV cache's cells in use. A run with GPU times adds, under each context,
a track per GPU: one slice per kernel, memcpy or memset of the graphs the GPU timer traced,
at its times on the GPU, named by the kernel's function, its node in the args.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.breakdowns import backends
from ..analysis.memory import bytes_in_use, kv_cache_fill
from ..runformat.reader import Run
from ..runformat.schema import NO_ID
from .base import (
    Exporter,
    ExportOptions,
    described_gpu_rows,
    in_chunks,
    node_names,
    timed_events,
    window_graphs,
    window_note,
)

CHROME_EVENT_WARNING = 1_000_000  # chrome://tracing struggles above this
PERFETTO_UI_LIMIT = 2 * 2**30  # bytes: ui.perfetto.dev's in-browser trace processor tops out near here
GPU_TID = 1000  # Chrome trace events: a context's GPU lanes are threads GPU_TID + 100 * device + lane


def graph_slices(run: Run, graphs: pd.DataFrame) -> list[dict[str, Any]]:
    """One slice per graph of `graphs` (rows of run.graphs), in time order."""
    graphs = graphs.sort_values("start_ns")
    tokens = run.tokens
    tokens = tokens[tokens["graph_id"].isin(graphs["graph_id"])]  # (a window's: not a day's 1.75M graphs)
    tokens = tokens.groupby("graph_id")["text"].agg("".join)
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


def counters(run: Run, graphs: pd.DataFrame) -> list[tuple[str, int, float]]:
    """(counter name, time ns, value) samples, one per graph of `graphs`."""
    in_use = bytes_in_use(run)
    in_use = in_use[in_use["graph_id"].isin(graphs["graph_id"])]
    samples = [(f"{row.kind} bytes in use", int(row.start_ns), float(row.bytes)) for row in in_use.itertuples()]
    fill = kv_cache_fill(run)
    fill = fill[fill["graph_id"].isin(graphs["graph_id"])] if not fill.empty else fill
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


class GpuKernels:
    """The GPU's kernels, copies and memsets of the graphs a trace holds, a chunk of graphs at
    a time, and the lane each goes to. Slices on one track must nest, and a GPU's need not: a
    kernel may start before the one before it ends (programmatic dependent launch), streams
    run side by side. So each (context, device) track has lanes, and a slice takes the first
    lane free at its start: the first lane holds every slice that overlaps none before it."""

    def __init__(self, run: Run, graphs: pd.DataFrame) -> None:
        self.run = run
        self.present = bool(run.gpu_graphs["graph_id"].isin(graphs["graph_id"]).any())
        self.names = node_names(run) if self.present else None
        self.context_of = run.graphs.set_index("graph_id")["context_id"]
        self.lane_ends: dict[tuple[int, int], list[int]] = {}  # per (context, device): each lane's last end

    def of_graphs(self, graph_ids: list[int]) -> pd.DataFrame:
        """The slices of some graphs, in graph order and, per graph, in start order, with
        their context and node (described_gpu_rows); none for a run without GPU times."""
        if not self.present:
            return pd.DataFrame({"graph_id": pd.Series(dtype="int32")})
        rows = described_gpu_rows(self.run, "gpu_kernels", graph_ids, self.names)
        rows["context_id"] = self.context_of.reindex(rows["graph_id"]).to_numpy(np.int64)
        return rows.sort_values(["graph_id", "start_ns"], kind="stable", ignore_index=True)

    def lane(self, row: Any) -> tuple[int, bool]:
        """The lane of a slice on its (context, device) track, and whether it opens the lane."""
        ends = self.lane_ends.setdefault((int(row.context_id), int(row.device)), [])
        for lane, last in enumerate(ends):
            if row.start_ns >= last:
                ends[lane] = int(row.end_ns)
                return lane, False
        ends.append(int(row.end_ns))
        return len(ends) - 1, True


def _gpu_track_name(device: int) -> str:
    return f"GPU {device}"


def _kernel_name(row: Any) -> str:
    """A GPU slice's name: the kernel's function (quantize_q8_1), or the copy's kind (memcpy HtoD)."""
    return row.kernel if row.kind == "kernel" or row.kernel == row.kind else f"{row.kind} {row.kernel}"


def _kernel_args(row: Any) -> dict[str, Any]:
    node = int(row.node_index)
    fused = int(row.group_end) if node >= 0 and row.group_end > node else None
    text = lambda value: value if isinstance(value, str) and value else None  # noqa: E731 - none for empty or NA
    return {
        "kernel": text(row.name),  # the whole name, demangled
        "kind": row.kind,
        "node name": text(row.node_name),
        "op": text(row.op),
        "node": None if node < 0 else node,
        "fused through node": fused,  # ggml-cuda computed nodes node..group_end with these kernels
        "busy_ns": int(row.busy_ns),  # its share of the GPU's busy time (overlap counted once)
        "bytes": int(row.bytes) if row.bytes else None,
        "stream": int(row.stream),
        "graph": int(row.graph_id),
    }


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


def _span(name: str, category: str, pid: int, tid: int, ts_us: float, duration_ns: int, args: dict) -> dict[str, Any]:
    """A complete event ("X") of the Chrome trace format."""
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": pid,
        "tid": tid,
        "ts": ts_us,
        "dur": duration_ns / 1000.0,
        "args": args,
    }


def _row_span(row: Any, name: str, category: str, tid: int, us: Any, args: dict) -> dict[str, Any]:
    """A node's or a kernel's span: its context's process, its start and end from the row."""
    return _span(name, category, int(row.context_id), tid, us(row.start_ns), row.end_ns - row.start_ns, args)


def _named(pid: int, tid: int, name: str, what: str = "thread_name") -> dict[str, Any]:
    """A metadata event ("M") naming a process or a thread (a track)."""
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}


class ChromeJsonExporter(Exporter):
    name = "chrome-json"
    extensions = (".json",)
    summary = "Chrome trace events (chrome://tracing, Perfetto's legacy JSON import)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        graphs = window_graphs(run, options)
        origin = int(run.graphs["start_ns"].min()) if len(run.graphs) else 0
        us = lambda ns: (int(ns) - origin) / 1000.0  # noqa: E731 - microseconds from the run's start
        written = gpu_written = graphs_done = 0
        with open(output, "w", encoding="utf-8") as file:
            first = True

            def write(events: list[dict[str, Any]]) -> None:  # the events array, a piece at a time
                nonlocal first
                for event in events:
                    file.write(("" if first else ",") + json.dumps(event, separators=(",", ":")))
                    first = False

            file.write('{"displayTimeUnit":"ns","traceEvents":[')
            for context_id, name in _context_names(run).items():
                write([_named(context_id, 0, name, "process_name"), _named(context_id, 1, "graphs")])
            write(
                [
                    _span(
                        f"graph {graph['graph_id']} ({graph['phase']})",
                        "graph",
                        graph["context_id"],
                        1,
                        us(graph["start_ns"]),
                        graph["end_ns"] - graph["start_ns"],
                        {"tokens": graph["tokens"], "nodes": graph["n_nodes"]},
                    )
                    for graph in graph_slices(run, graphs)
                ]
            )
            gpu = GpuKernels(run, graphs)
            for chunk in in_chunks(sorted(int(g) for g in graphs["graph_id"])):
                events = timed_events(run, chunk)
                write(
                    [_row_span(row, row.op, "node", 1, us, _node_args(row)) for row in events.itertuples(index=False)]
                )
                for row in gpu.of_graphs(list(chunk)).itertuples(index=False):
                    lane, opens = gpu.lane(row)
                    tid = GPU_TID + 100 * int(row.device) + lane
                    if opens:
                        name = _gpu_track_name(row.device) + (f" (overlapping, {lane + 1})" if lane else "")
                        write([_named(int(row.context_id), tid, name)])
                    write([_row_span(row, _kernel_name(row), "gpu", tid, us, _kernel_args(row))])
                    gpu_written += 1
                written += len(events)
                graphs_done += len(chunk)
                options.progress(graphs_done, len(graphs))
            write(
                [
                    {"ph": "C", "name": counter, "pid": 0, "tid": 0, "ts": us(time_ns), "args": {"value": value}}
                    for counter, time_ns, value in counters(run, graphs)
                ]
            )
            file.write("]}")
        options.progress(len(graphs), len(graphs))
        warning = (
            f" — over {CHROME_EVENT_WARNING:,} events: chrome://tracing may not cope; the Perfetto export will"
            if written + gpu_written > CHROME_EVENT_WARNING
            else ""
        )
        window = window_note(run, graphs)
        kernels = f", {gpu_written:,} GPU kernels and copies" if gpu.present else ""
        return f"{written:,} node events{kernels} and {len(graphs):,} graphs{window} as Chrome trace events{warning}"


class PerfettoExporter(Exporter):
    name = "perfetto"
    requires = ("perfetto",)
    extensions = (".perfetto-trace", ".pftrace")
    summary = "Perfetto's native protobuf trace (ui.perfetto.dev, trace_processor)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        graphs = window_graphs(run, options)
        sequence = 0x6767  # one writer: every packet on one trusted sequence
        # A trace file is a sequence of packets: Trace messages serialized one after the other
        # read as one. The trace goes out a chunk of graphs at a time, in bounded memory.
        trace = pb.Trace()
        track_of: dict[int, int] = {}
        for position, (context_id, name) in enumerate(sorted(_context_names(run).items())):
            uuid = 1000 + position
            track_of[context_id] = uuid
            packet = trace.packet.add()
            packet.track_descriptor.uuid = uuid
            packet.track_descriptor.name = name
        counter_tracks: dict[str, int] = {}
        samples = counters(run, graphs)
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

        gpu = GpuKernels(run, graphs)
        gpu_tracks: dict[tuple[int, int, int], int] = {}

        def gpu_track(row: Any) -> int:
            """The track of a GPU slice: its lane of its device's track under its context's,
            described when first used (the lanes of a device share its name, and merge in the UI)."""
            lane, _ = gpu.lane(row)
            key = (int(row.context_id), int(row.device), lane)
            if key not in gpu_tracks:
                gpu_tracks[key] = 2000 + len(gpu_tracks)
                descriptor = trace.packet.add().track_descriptor
                descriptor.uuid = gpu_tracks[key]
                descriptor.parent_uuid = track_of[key[0]]
                descriptor.name = _gpu_track_name(key[1])
                descriptor.description = (
                    f"kernels, copies and memsets at their times on the GPU ({run.gpu_timer.source})"
                )
                descriptor.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
                descriptor.sibling_merge_key = f"gpu {key[1]}"
            return gpu_tracks[key]

        begin, end = pb.TrackEvent.Type.TYPE_SLICE_BEGIN, pb.TrackEvent.Type.TYPE_SLICE_END
        slices = graph_slices(run, graphs)
        done = gpu_done = graphs_done = size = 0
        warned = False
        with open(output, "wb") as file:
            # Graph slices with their nodes nested: per graph, begin, nodes in time order, end;
            # then the GPU's slices of the graph on its GPU tracks.
            for chunk in in_chunks(slices):
                graph_ids = [graph["graph_id"] for graph in chunk]
                events = timed_events(run, graph_ids)
                by_graph = dict(tuple(events.groupby("graph_id", sort=False)))
                kernels = gpu.of_graphs(graph_ids)
                kernels_of = dict(tuple(kernels.groupby("graph_id", sort=False)))
                for graph in chunk:
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
                    slice_event(graph["end_ns"], track, end)
                    on_gpu = kernels_of.get(graph["graph_id"])
                    if on_gpu is not None:
                        for row in on_gpu.itertuples(index=False):
                            lane_track = gpu_track(row)
                            annotate(slice_event(row.start_ns, lane_track, begin, _kernel_name(row)), _kernel_args(row))
                            slice_event(row.end_ns, lane_track, end)
                done += len(events)
                gpu_done += len(kernels)
                graphs_done += len(chunk)
                size += file.write(trace.SerializeToString())
                trace.Clear()
                options.progress(graphs_done, len(graphs))
                expected = size / graphs_done * len(graphs)
                if not warned and expected > PERFETTO_UI_LIMIT:
                    warned = True
                    options.notice(_too_big(graphs, expected))
            for counter, time_ns, value in samples:
                counter_event = slice_event(time_ns, counter_tracks[counter], pb.TrackEvent.Type.TYPE_COUNTER)
                counter_event.double_counter_value = value
            size += file.write(trace.SerializeToString())
        window = window_note(run, graphs)
        big = f"; {_too_big(graphs, size)}" if size > PERFETTO_UI_LIMIT else ""
        kernels = f", {gpu_done:,} GPU kernels and copies" if gpu.present else ""
        return (
            f"{done:,} node events{kernels} and {len(graphs):,} graphs{window} as a Perfetto trace "
            f"({size:,} bytes){big}"
        )


def _too_big(graphs: pd.DataFrame, size: float) -> str:
    """What to say of a trace past what Perfetto's UI opens, with a window that fits."""
    per_graph = size / max(len(graphs), 1)
    fits = max(1, int(PERFETTO_UI_LIMIT * 0.8 / per_graph))
    first = int(graphs["graph_id"].min()) if len(graphs) else 0
    return (
        f"about {size / 2**30:,.1f} GiB: Perfetto's UI opens traces up to about 2 GiB (trace_processor "
        f"reads larger ones); export a window, such as --graphs {first}-{first + fits - 1} "
        f"({fits:,} graphs)"
    )
