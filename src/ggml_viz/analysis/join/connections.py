"""Which worker connection is which head connection, and the messages both sides of one recorded."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...runformat.reader import Run


def rpc_connections(run: Run) -> list[dict[str, Any]]:
    """The RPC connections the run's manifest lists (each with its role, addresses, opening time)."""
    return list((run.manifest.get("rpc") or {}).get("connections") or [])


def _messages(run: Run) -> pd.DataFrame:
    messages = run.raw("rpc_messages")
    return messages.sort_values(["connection", "sequence", "is_response"], ignore_index=True)


def _request_signature(messages: pd.DataFrame, connection: int) -> tuple[tuple[str, int], ...]:
    rows = messages[(messages["connection"] == connection) & ~messages["is_response"]]
    return tuple(zip(rows["command"].tolist(), rows["bytes"].tolist(), strict=True))


def match_connections(head: Run, worker: Run) -> dict[int, int]:
    """The worker's connections that are the head's: {worker connection: head connection}.
    A worker may have served other heads, or this head's host before, from the same local port
    (ports are reused): of the connections whose addresses mirror a head connection's, the one
    that carried the same requests (commands and sizes) is it."""
    head_connections = [c for c in rpc_connections(head) if c.get("role") == "head"]
    head_messages, worker_messages = _messages(head), _messages(worker)
    signature_of = {
        int(c["connection"]): _request_signature(head_messages, int(c["connection"])) for c in head_connections
    }
    opened = {int(c["connection"]): int(c.get("opened_ns") or 0) for c in rpc_connections(worker)}
    matched: dict[int, int] = {}
    ambiguous: list[tuple[dict[str, Any], list[int]]] = []
    for theirs in head_connections:
        mirrors = [
            int(mine["connection"])
            for mine in rpc_connections(worker)
            if mine.get("peer") == theirs.get("local") and mine.get("local") == theirs.get("peer")
        ]
        if len(mirrors) > 1:
            expected = signature_of[int(theirs["connection"])]
            mirrors = [m for m in mirrors if _request_signature(worker_messages, m) == expected] or mirrors
        if len(mirrors) == 1:
            matched[mirrors[0]] = int(theirs["connection"])
        elif mirrors:
            ambiguous.append((theirs, mirrors))
    if ambiguous:  # the same requests twice (two runs of one program): the one opened when the head's was
        head_opened = {int(c["connection"]): int(c.get("opened_ns") or 0) for c in head_connections}
        differences = [opened[w] - head_opened[h] for w, h in matched.items()]
        rough_offset = int(np.median(differences)) if differences else 0  # the clocks' offset, roughly
        for theirs, mirrors in ambiguous:
            when = int(theirs.get("opened_ns") or 0) + rough_offset
            matched[min(mirrors, key=lambda m: abs(opened[m] - when))] = int(theirs["connection"])
    if not matched:  # the addresses were translated between the hosts: the same requests, then
        signatures = dict(signature_of)
        for mine in rpc_connections(worker):
            signature = _request_signature(worker_messages, int(mine["connection"]))
            same = [number for number, theirs in signatures.items() if theirs == signature and signature]
            if len(same) == 1:
                matched[int(mine["connection"])] = same[0]
                signatures.pop(same[0])
    return matched


def paired_messages(head: Run, worker: Run, connections: dict[int, int]) -> pd.DataFrame:
    """Each message both sides recorded, once: the head's columns and the worker's (w_*)."""
    head_messages = _messages(head)
    worker_messages = _messages(worker)
    worker_messages = worker_messages[worker_messages["connection"].isin(list(connections))].copy()
    worker_messages["head_connection"] = worker_messages["connection"].map(connections)
    pairs = head_messages.merge(
        worker_messages[
            ["head_connection", "connection", "sequence", "is_response", "command", "bytes", "start_ns", "end_ns"]
        ].rename(
            columns={
                "connection": "w_connection",
                "command": "w_command",
                "bytes": "w_bytes",
                "start_ns": "w_start_ns",
                "end_ns": "w_end_ns",
                "head_connection": "connection",
            }
        ),
        on=["connection", "sequence", "is_response"],
    )
    return pairs[(pairs["command"] == pairs["w_command"]) & (pairs["bytes"] == pairs["w_bytes"])]
