"""A joined distributed run as one Chrome/Perfetto JSON trace (`ggml-viz join --trace`): a process
per host, on the head's clock."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis.join import Joined


def chrome_trace(joined: Joined, *, nodes: bool = True) -> dict[str, Any]:
    """A Chrome/Perfetto JSON trace: a process per host, all on the head's clock. The head: its
    graphs and, per split, its wait for the worker; each worker: its graphs and nodes; the wire:
    a track per worker connection with each message from sent to received."""
    events: list[dict[str, Any]] = []
    origin = int(joined.head.run.graphs["decode_start_ns"].min()) if len(joined.head.run.graphs) else 0

    def us(ns: Any) -> float:
        return (int(ns) - origin) / 1e3

    def process(pid: int, name: str) -> None:
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})

    process(1, f"head {joined.head.host} ({joined.head.run.path.name})")
    for graph in joined.head.run.graphs.itertuples():
        events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": 1,
                "name": f"graph {graph.graph_id} ({graph.phase})",
                "ts": us(graph.decode_start_ns),
                "dur": (graph.decode_end_ns - graph.decode_start_ns) / 1e3,
                "args": {"graph_id": graph.graph_id, "n_tokens": graph.n_tokens},
            }
        )
    splits = joined.tables["splits"]
    for split in splits.itertuples() if not splits.empty else ():
        if split.head_wait_ns >= 0:
            events.append(
                {
                    "ph": "X",
                    "pid": 1,
                    "tid": 2,
                    "name": f"waits for {split.host}",
                    "ts": us(split.sent_ns),
                    "dur": split.head_wait_ns / 1e3,
                    "args": {"worker_graph_id": split.worker_graph_id, "command": split.command},
                }
            )
    transfers = joined.tables["transfers"]
    for number, (worker, remote) in enumerate(zip(joined.workers, joined.remote, strict=True), start=2):
        offset = worker.offset
        process(number, f"worker {worker.host} ({worker.run.path.name})")
        for graph in worker.run.graphs.itertuples():
            events.append(
                {
                    "ph": "X",
                    "pid": number,
                    "tid": 1,
                    "name": f"graph {graph.graph_id}",
                    "ts": us(graph.start_ns - offset),
                    "dur": (graph.end_ns - graph.start_ns) / 1e3,
                }
            )
        for node in (
            (row for chunk in remote.chunks() for row in chunk.dropna(subset=["start_ns"]).itertuples())
            if nodes
            else ()
        ):
            events.append(
                {
                    "ph": "X",
                    "pid": number,
                    "tid": 1,
                    "name": node.op,
                    "ts": us(node.start_ns),
                    "dur": max(int(node.duration_ns), 0) / 1e3,
                    "args": {
                        "name": node.name,
                        "head_graph_id": node.head_graph_id,
                        "head_node_index": node.head_node_index,
                    },
                }
            )
        wire = transfers[transfers["host"] == worker.host] if len(transfers) else None
        for message in wire.itertuples() if wire is not None else ():
            events.append(
                {
                    "ph": "X",
                    "pid": number,
                    "tid": 2,
                    "name": message.command,
                    "ts": us(message.sent_ns),
                    "dur": max(int(message.latency_ns), 0) / 1e3,
                    "args": {"bytes": message.bytes, "direction": message.direction, "tensor": message.tensor_name},
                }
            )
        events.append({"ph": "M", "name": "thread_name", "pid": number, "tid": 2, "args": {"name": "wire"}})
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "waiting for workers"}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "metadata": {
            "experiment_id": joined.experiment_id,
            "clock": "the head's monotonic clock",
            "offsets": {w.host: asdict(w.clock) if w.clock else None for w in joined.workers},
        },
    }
