"""The joined tables of hosts, splits and transfers: each worker's graphs, its messages on the
wire and each host's clock, on the head's clock."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .members import Member

COMPUTE_COMMANDS = ("GRAPH_COMPUTE", "GRAPH_RECOMPUTE")


def concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames' rows in one frame (the empty ones left out; none: an empty frame)."""
    frames = [frame for frame in frames if not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _head_graph_at(head_graphs: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """The head graph whose call was running at each time (-1: none; the model's load, say)."""
    if head_graphs.empty:
        return np.full(len(times), -1)
    graphs = head_graphs.sort_values("decode_start_ns")
    starts = graphs["decode_start_ns"].to_numpy(np.int64)
    ends = graphs["decode_end_ns"].to_numpy(np.int64)
    at = np.searchsorted(starts, times, side="right") - 1
    inside = (at >= 0) & (times <= ends[np.maximum(at, 0)])
    return np.where(inside, graphs["graph_id"].to_numpy()[np.maximum(at, 0)], -1)


def transfers_table(pairs: pd.DataFrame, worker: Member, head_graphs: pd.DataFrame) -> pd.DataFrame:
    """Each message on the wire: sent and received, on the head's clock."""
    offset = worker.offset
    to_worker = ~pairs["is_response"]
    worker_start = pairs["w_start_ns"] - offset
    worker_end = pairs["w_end_ns"] - offset
    sent = np.where(to_worker, pairs["start_ns"], worker_start)
    received = np.where(to_worker, worker_end, pairs["end_ns"])
    return worker_rows(
        worker,
        {
            "connection": pairs["connection"].to_numpy(),
            "sequence": pairs["sequence"].to_numpy(),
            "command": pairs["command"].to_numpy(),
            "direction": np.where(to_worker, "to_worker", "to_head"),
            "bytes": pairs["bytes"].to_numpy(),
            "data_bytes": pairs["data_bytes"].to_numpy(),
            "tensor_name": pairs["tensor_name"].to_numpy(),
            # from its first byte sent to its last byte read by the receiver (which reads a request only
            # once it is done with the one before: a worker computing holds the next request unread)
            "sent_ns": sent,
            "received_ns": received,
            "latency_ns": received - sent,
            "head_graph_id": _head_graph_at(head_graphs, pairs["start_ns"].to_numpy(np.int64)),
        },
    )


def worker_rows(worker: Member, columns: dict[str, Any]) -> pd.DataFrame:
    """A joined table's rows of one worker: its host and run, then `columns`."""
    return pd.DataFrame({"host": worker.host, "worker_run": worker.run.path.name, **columns})


def splits_table(head: Member, worker: Member, pairs: pd.DataFrame) -> pd.DataFrame:
    """Each graph the worker computed: the compute request it followed, the head graph that sent
    it, the head's wait for its results, the bytes each way."""
    graphs = worker.run.graphs.sort_values("start_ns", ignore_index=True)
    computes = pairs[pairs["command"].isin(COMPUTE_COMMANDS) & ~pairs["is_response"]].sort_values("w_end_ns")
    if graphs.empty or computes.empty:
        return pd.DataFrame()
    received = computes["w_end_ns"].to_numpy(np.int64)
    at = np.searchsorted(received, graphs["decode_start_ns"].to_numpy(np.int64), side="right") - 1
    graphs = graphs[at >= 0].assign(compute=at[at >= 0])
    graphs = graphs.drop_duplicates("compute", keep="first")  # one graph per request
    request = computes.iloc[graphs["compute"].to_numpy()].reset_index(drop=True)
    offset = worker.offset
    rows = worker_rows(
        worker,
        {
            "worker_graph_id": graphs["graph_id"].to_numpy(),
            "connection": request["connection"].to_numpy(),
            "sequence": request["sequence"].to_numpy(),
            "command": request["command"].to_numpy(),
            "head_graph_id": _head_graph_at(head.run.graphs, request["start_ns"].to_numpy(np.int64)),
            "sent_ns": request["start_ns"].to_numpy(),
            "compute_start_ns": graphs["start_ns"].to_numpy() - offset,
            "compute_end_ns": graphs["end_ns"].to_numpy() - offset,
            "n_nodes": graphs["n_nodes"].to_numpy(),
        },
    )
    rows["compute_ns"] = rows["compute_end_ns"] - rows["compute_start_ns"]
    rows["head_wait_ns"] = -1
    rows["bytes_to_worker"] = 0  # its inputs and the graph (or the recompute request), framing included
    rows["bytes_to_head"] = 0  # its results
    for connection, mine in rows.groupby("connection"):  # per connection, in request order
        on_it = pairs[pairs["connection"] == connection]
        # what the head sent for a split: its inputs and its graph (a GET_TENSOR request asks for
        # the split before's results: those count with the results)
        requests = on_it[~on_it["is_response"] & (on_it["command"] != "GET_TENSOR")].sort_values("sequence")
        answers = on_it[on_it["is_response"]].sort_values("sequence")
        sequence = mine["sequence"].to_numpy(np.int64)
        order = np.argsort(sequence)
        sequence = sequence[order]
        previous = np.concatenate(([-1], sequence[:-1]))
        following = np.concatenate((sequence[1:], [np.iinfo(np.int64).max]))
        # The head's wait: from sending the compute request to the end of the first response
        # after it (the split's results: GET_TENSOR); offset-free, both times the head's.
        answer_sequence = answers["sequence"].to_numpy(np.int64)
        first = np.searchsorted(answer_sequence, sequence, side="right")
        answer_end = np.concatenate((answers["end_ns"].to_numpy(np.int64), [0]))
        sent = mine["sent_ns"].to_numpy(np.int64)[order]
        wait = np.where(first < len(answer_sequence), answer_end[first] - sent, -1)
        to_worker = _sum_between(requests, previous, sequence, closed_above=True)
        to_head = _sum_between(answers, sequence, following, closed_above=False)
        index = mine.index.to_numpy()[order]
        rows.loc[index, "head_wait_ns"] = wait
        rows.loc[index, "bytes_to_worker"] = to_worker
        rows.loc[index, "bytes_to_head"] = to_head
    return rows


def _sum_between(messages: pd.DataFrame, above: np.ndarray, below: np.ndarray, *, closed_above: bool) -> np.ndarray:
    """Per pair, the bytes of the messages (sorted by sequence) with above < sequence < below
    (<= below where closed_above)."""
    sequence = messages["sequence"].to_numpy(np.int64)
    total = np.concatenate(([0], np.cumsum(messages["bytes"].to_numpy(np.int64))))
    low = np.searchsorted(sequence, above, side="right")
    high = np.searchsorted(sequence, below, side="right" if closed_above else "left")
    return total[high] - total[np.minimum(low, high)]


def hosts_table(head: Member, workers: list[Member]) -> pd.DataFrame:
    """Each host: its run, its graphs and busy time, its clock against the head's."""
    rows = []
    for member in [head, *workers]:
        graphs = member.run.graphs
        clock = member.clock
        rows.append(
            {
                "host": member.host,
                "role": member.role,
                "run": member.run.path.name,
                "path": str(member.run.path),
                "pid": member.pid,
                "status": member.run.status,
                "graphs": len(graphs),
                "busy_ns": int((graphs["end_ns"] - graphs["start_ns"]).sum()) if len(graphs) else 0,
                "clock_offset_ns": clock.offset_ns if clock else 0,
                "clock_uncertainty_ns": clock.uncertainty_ns if clock else 0,
                "clock_messages": clock.messages if clock else 0,
                "clock_consistent": clock.consistent if clock else True,
            }
        )
    return pd.DataFrame(rows)
