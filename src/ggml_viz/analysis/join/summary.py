"""A joined run's summary: where the time went across hosts (compute per host, the wire, the
head's waits, the slowest worker) and where one step's time goes."""

from __future__ import annotations

from typing import TypedDict

import pandas as pd

from .joined import Joined


class JoinedHead(TypedDict):
    run: str  # the head run's folder name
    graphs: int
    time_ns: int  # in llama calls


class JoinedHost(TypedDict):
    host: str
    role: str  # "head" or "worker"
    run: str
    status: str
    graphs: int
    compute_ns: int  # a worker: its graphs' time; the head: its time in llama calls less its waits
    head_wait_ns: int
    clock_offset_ns: int
    clock_uncertainty_ns: int
    clock_consistent: bool


class JoinedWire(TypedDict):
    messages: int
    bytes: int
    bytes_during_graphs: int
    tensor_bytes_during_graphs: int
    time_ns: int  # what the head waited beyond its workers' compute


class RemoteNodeCounts(TypedDict):
    nodes: int
    timed: int
    matched_to_head: int


class JoinedStep(TypedDict):
    """One step of a phase, the median over its graphs."""

    phase: str
    graphs: int
    step_ns: int
    head_own_ns: int
    worker_compute_ns: dict[str, int]  # by host
    wire_and_protocol_ns: int


class JoinedSummary(TypedDict):
    """Where the time went across hosts (summarize_joined)."""

    experiment_id: str
    head: JoinedHead
    hosts: list[JoinedHost]
    wire: JoinedWire
    splits: int
    remote_compute_ns: int
    head_wait_ns: int
    head_idle_share: float | None
    slowest_worker: str | None
    remote_nodes: RemoteNodeCounts
    steps: list[JoinedStep]


def summarize_joined(joined: Joined) -> JoinedSummary:
    """Where the time went across hosts: compute per host, the wire, the head's waits, the slowest worker."""
    hosts = joined.tables["hosts"]
    splits = joined.tables["splits"]
    transfers = joined.tables["transfers"]
    head_graphs = joined.head.run.graphs
    head_time = int((head_graphs["decode_end_ns"] - head_graphs["decode_start_ns"]).sum()) if len(head_graphs) else 0
    in_graphs = transfers[transfers["head_graph_id"] >= 0] if not transfers.empty else transfers
    wait = int(splits["head_wait_ns"].clip(lower=0).sum()) if not splits.empty else 0
    compute = int(splits["compute_ns"].sum()) if not splits.empty else 0
    per_host: list[JoinedHost] = []
    for row in hosts.itertuples():
        mine = splits[splits["host"] == row.host] if not splits.empty else splits
        per_host.append(
            {
                "host": row.host,
                "role": row.role,
                "run": row.run,
                "status": row.status,
                "graphs": int(row.graphs),
                # a worker: its graphs' time; the head: its time in llama calls less its waits for
                # the workers (its own part: its CPU nodes, serializing and sending)
                "compute_ns": int(mine["compute_ns"].sum())
                if not mine.empty
                else (max(head_time - wait, 0) if row.role == "head" else 0),
                "head_wait_ns": int(mine["head_wait_ns"].clip(lower=0).sum()) if not mine.empty else 0,
                "clock_offset_ns": int(row.clock_offset_ns),
                "clock_uncertainty_ns": int(row.clock_uncertainty_ns),
                "clock_consistent": bool(row.clock_consistent),
            }
        )
    workers = [host for host in per_host if host["role"] == "worker"]
    counts = [remote.counts() for remote in joined.remote]
    return {
        "experiment_id": joined.experiment_id,
        "head": {"run": joined.head.run.path.name, "graphs": len(head_graphs), "time_ns": head_time},
        "hosts": per_host,
        "wire": {
            "messages": len(transfers),
            "bytes": int(transfers["bytes"].sum()) if len(transfers) else 0,
            "bytes_during_graphs": int(in_graphs["bytes"].sum()) if len(in_graphs) else 0,
            "tensor_bytes_during_graphs": int(in_graphs["data_bytes"].sum()) if len(in_graphs) else 0,
            # what the head waited beyond its workers' compute: the wire and the protocol's handling
            "time_ns": max(wait - compute, 0),
        },
        "splits": len(splits),
        "remote_compute_ns": compute,
        "head_wait_ns": wait,
        "head_idle_share": wait / head_time if head_time else None,
        "slowest_worker": max(workers, key=lambda host: host["compute_ns"])["host"] if workers else None,
        "remote_nodes": {
            "nodes": sum(count["nodes"] for count in counts),
            "timed": sum(count["timed"] for count in counts),
            "matched_to_head": sum(count["matched_to_head"] for count in counts),
        },
        "steps": _steps(head_graphs, splits),
    }


def _steps(head_graphs: pd.DataFrame, splits: pd.DataFrame) -> list[JoinedStep]:
    """One step of each phase (prompt, decode, ...), the median over its graphs: the head's time in
    the llama call, its own part (less its waits), each worker's compute, and the rest of the waits
    (the wire and the protocol)."""
    if head_graphs.empty:
        return []
    step = head_graphs.set_index("graph_id")
    step = pd.DataFrame({"phase": step["phase"], "step_ns": step["decode_end_ns"] - step["decode_start_ns"]})
    mine = splits[splits["head_graph_id"] >= 0] if len(splits) else pd.DataFrame(columns=["head_graph_id", "host"])
    waits = mine.groupby("head_graph_id")["head_wait_ns"].sum() if len(mine) else pd.Series(dtype="int64")
    computes = mine.pivot_table(index="head_graph_id", columns="host", values="compute_ns", aggfunc="sum")
    step = step.join(waits.rename("wait_ns")).join(computes).fillna(0)
    hosts = list(computes.columns)
    rows: list[JoinedStep] = []
    for phase, graphs in step.groupby("phase", sort=False):
        wire = graphs["wait_ns"] - graphs[hosts].sum(axis=1) if hosts else graphs["wait_ns"]
        rows.append(
            {
                "phase": phase,
                "graphs": len(graphs),
                "step_ns": int(graphs["step_ns"].median()),
                "head_own_ns": int((graphs["step_ns"] - graphs["wait_ns"]).median()),
                "worker_compute_ns": {host: int(graphs[host].median()) for host in hosts},
                "wire_and_protocol_ns": int(wire.clip(lower=0).median()),
            }
        )
    return rows
