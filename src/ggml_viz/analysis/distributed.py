"""One experiment across hosts: a head's run joined with the runs of its RPC workers.

llama.cpp's distributed inference: `rpc-server` on each worker, `--rpc host:port` on the head,
whose scheduler sends each split of a graph that runs on a worker as a graph of its own
(GRAPH_COMPUTE, or GRAPH_RECOMPUTE when the worker still holds it), sets the split's inputs there
(SET_TENSOR) and reads its results back (GET_TENSOR). Recorded with `ggml-viz run`, each side
holds the protocol's messages as they passed it (`rpc_messages`, capture/rpc.py), numbered on
their connection in the same order, and the worker holds each graph it computed, node by node.

The join:
- connections: a head's connection and a worker's are the same one when their addresses mirror
  each other (the head's local address is the worker's peer); where none does (addresses
  translated between the hosts), when their requests are the same commands of the same sizes;
- clocks: the hosts' clocks differ by an offset θ (worker = head + θ). Every message bounds it:
  a request reached the worker after the head began sending it (θ <= worker's first byte −
  head's send), a response reached the head after the worker began sending it (θ >= worker's
  send − head's first byte). The tightest bounds over every message are the interval θ lies in;
  the offset used is its middle, and its half width the uncertainty (as NTP bounds a clock,
  with every message of the run as a sample). Worker times are stated on the head's clock.
- splits: each graph a worker computed follows the GRAPH_(RE)COMPUTE request it received last;
  that request, found on the head by its number, lies in one of the head's graphs;
- nodes: the worker's graph is the head's split, node for node: its nodes are matched to the
  head graph's nodes of the same name, in order.

`write_joined()` writes the experiment as one run (runformat/merge.py: the members' contexts
side by side, a lane per host in the viewer, on the head's clock), the joined tables as Parquet
beside it and a `join.json` naming the member runs (which stay where they are); `ggml-viz query`
over the folder reads the joined tables with the member runs' own views.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import GgmlVizError
from ..runformat.manifest import new_experiment_id
from ..runformat.merge import MergeMember, merge_runs
from ..runformat.reader import Run, open_run

JOIN_FILE = "join.json"
JOIN_FORMAT = "ggml-viz-join"
JOIN_VERSION = 1
JOINED_TABLES = ("hosts", "splits", "transfers", "remote_nodes")
REMOTE_NODES_SCHEMA = pa.schema(
    [("host", pa.string()), ("worker_run", pa.string()), ("head_graph_id", pa.int64()),
     ("head_node_index", pa.int64()), ("worker_graph_id", pa.int64()), ("worker_node_index", pa.int64()),
     ("name", pa.string()), ("op", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
     ("duration_ns", pa.int64())]
)  # fmt: skip
COMPUTE_COMMANDS = ("GRAPH_COMPUTE", "GRAPH_RECOMPUTE")


@dataclass
class ClockOffset:
    """A worker's clock against the head's: worker time = head time + offset_ns."""

    offset_ns: int
    uncertainty_ns: int  # the offset lies within offset_ns ± uncertainty_ns
    lower_ns: int  # the bounds the messages gave
    upper_ns: int
    messages: int  # messages both sides recorded, each one bound
    consistent: bool  # the bounds did not cross (else: the clocks drifted, or a side is not the run it seems)
    method: str = (
        "message bounds: each request reached the worker after the head sent it, "
        "each response the head after the worker sent it"
    )


@dataclass
class Member:
    run: Run
    role: str  # head | worker
    host: str  # the head: its machine's name; a worker: the address it serves on
    pid: int | None
    clock: ClockOffset | None = None
    connections: dict[int, int] = field(default_factory=dict)  # worker's connection -> head's

    @property
    def offset(self) -> int:
        return self.clock.offset_ns if self.clock else 0


def _connections(run: Run) -> list[dict[str, Any]]:
    return list((run.manifest.get("rpc") or {}).get("connections") or [])


def _messages(run: Run) -> pd.DataFrame:
    messages = run.raw("rpc_messages")
    return messages.sort_values(["connection", "sequence", "is_response"], ignore_index=True)


def _role(run: Run) -> str:
    roles = {connection.get("role") for connection in _connections(run)}
    if "head" in roles:
        return "head"
    if "worker" in roles:
        return "worker"
    raise GgmlVizError(
        f"{run.path} holds no connection of ggml's RPC protocol: record the head and each worker with "
        "`ggml-viz run` (the worker: `ggml-viz run -o worker.ggmlviz -- ggml-rpc-server ...`)"
    )


def _member(run: Run) -> Member:
    role = _role(run)
    program = run.manifest.get("program") or {}
    if role == "worker":
        served = sorted({c["local"] for c in _connections(run) if c.get("role") == "worker"})
        host = ", ".join(served)
    else:
        host = (run.manifest.get("recorder") or {}).get("host") or "head"
    return Member(run, role, host, program.get("pid"))


def _request_signature(messages: pd.DataFrame, connection: int) -> tuple[tuple[str, int], ...]:
    rows = messages[(messages["connection"] == connection) & ~messages["is_response"]]
    return tuple(zip(rows["command"].tolist(), rows["bytes"].tolist(), strict=True))


def match_connections(head: Run, worker: Run) -> dict[int, int]:
    """The worker's connections that are the head's: {worker connection: head connection}.
    A worker may have served other heads, or this head's host before, from the same local port
    (ports are reused): of the connections whose addresses mirror a head connection's, the one
    that carried the same requests (commands and sizes) is it."""
    head_connections = [c for c in _connections(head) if c.get("role") == "head"]
    head_messages, worker_messages = _messages(head), _messages(worker)
    signature_of = {
        int(c["connection"]): _request_signature(head_messages, int(c["connection"])) for c in head_connections
    }
    opened = {int(c["connection"]): int(c.get("opened_ns") or 0) for c in _connections(worker)}
    matched: dict[int, int] = {}
    ambiguous: list[tuple[dict[str, Any], list[int]]] = []
    for theirs in head_connections:
        mirrors = [
            int(mine["connection"])
            for mine in _connections(worker)
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
        for mine in _connections(worker):
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


def clock_offset(pairs: pd.DataFrame) -> ClockOffset | None:
    """The worker's clock offset, bounded by every message both sides recorded (module doc)."""
    if pairs.empty:
        return None
    difference = (pairs["w_start_ns"] - pairs["start_ns"]).to_numpy(np.int64)
    response = pairs["is_response"].to_numpy(bool)
    upper = int(difference[~response].min()) if (~response).any() else None
    lower = int(difference[response].max()) if response.any() else None
    if upper is None or lower is None:  # one direction only: no interval, the one bound
        bound = upper if upper is not None else lower
        assert bound is not None
        return ClockOffset(bound, abs(bound), bound, bound, len(pairs), consistent=True)
    consistent = lower <= upper
    middle = (lower + upper) // 2
    return ClockOffset(middle, abs(upper - lower) // 2, lower, upper, len(pairs), consistent)


@dataclass
class Joined:
    """A head run and its workers' runs, joined."""

    head: Member
    workers: list[Member]
    experiment_id: str
    tables: dict[str, pd.DataFrame]  # hosts, splits, transfers
    remote: list[RemoteNodes]  # per worker (the remote_nodes table, made a chunk at a time)

    def remote_nodes(self) -> pd.DataFrame:
        """The remote_nodes table at once (a short run's)."""
        return _concat([remote.frame() for remote in self.remote])

    @property
    def members(self) -> list[Member]:
        return [self.head, *self.workers]


def join_runs(runs: list[Run]) -> Joined:
    members = [_member(run) for run in runs]
    heads = [member for member in members if member.role == "head"]
    if len(heads) != 1:
        found = ", ".join(str(member.run.path) for member in heads) or "none"
        raise GgmlVizError(f"a join needs exactly one head run (a program run with --rpc); found {found}")
    head = heads[0]
    workers = [member for member in members if member.role == "worker"]
    if not workers:
        raise GgmlVizError("a join needs the run of at least one worker (`ggml-viz run -- ggml-rpc-server ...`)")
    transfers, splits, remote_nodes = [], [], []  # remote nodes: per worker, made when written
    head_graphs = head.run.graphs
    for worker in workers:
        worker.connections = match_connections(head.run, worker.run)
        if not worker.connections:
            raise GgmlVizError(
                f"{worker.run.path} shares no connection with the head run {head.run.path}: "
                "not a worker of that head, or recorded at another time"
            )
        pairs = paired_messages(head.run, worker.run, worker.connections)
        worker.clock = clock_offset(pairs)
        transfers.append(_transfers(pairs, worker, head_graphs))
        worker_splits = _splits(head, worker, pairs)
        splits.append(worker_splits)
        remote_nodes.append(_remote_nodes(head.run, worker, worker_splits))
    tables = {
        "hosts": _hosts(head, workers),
        "transfers": _concat(transfers),
        "splits": _concat(splits),
    }
    return Joined(head, workers, new_experiment_id(), tables, remote_nodes)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
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


def _transfers(pairs: pd.DataFrame, worker: Member, head_graphs: pd.DataFrame) -> pd.DataFrame:
    """Each message on the wire: sent and received, on the head's clock."""
    offset = worker.offset
    to_worker = ~pairs["is_response"]
    worker_start = pairs["w_start_ns"] - offset
    worker_end = pairs["w_end_ns"] - offset
    sent = np.where(to_worker, pairs["start_ns"], worker_start)
    received = np.where(to_worker, worker_end, pairs["end_ns"])
    return _worker_rows(
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


def _worker_rows(worker: Member, columns: dict[str, Any]) -> pd.DataFrame:
    """A joined table's rows of one worker: its host and run, then `columns`."""
    return pd.DataFrame({"host": worker.host, "worker_run": worker.run.path.name, **columns})


def _splits(head: Member, worker: Member, pairs: pd.DataFrame) -> pd.DataFrame:
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
    rows = _worker_rows(
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


@dataclass
class RemoteNodes:
    """The nodes a worker computed for the head, each with its time there (on the head's clock) and
    the head graph's node it is (matched by name, in order). The matching depends only on the two
    graphs' structures, so it is worked out once per pair of structures (`mapping`); the rows,
    one per node event, are made a chunk of graphs at a time: memory stays bounded at any length."""

    worker: Member
    pairs: pd.DataFrame  # per split: worker_graph_id, head_graph_id, worker_structure, head_structure
    mapping: pd.DataFrame  # per pair of structures, per worker node: its name, op, head_node_index

    def counts(self) -> dict[str, int]:
        """Remote nodes, those the worker timed, those matched to the head graph's nodes."""
        if self.mapping.empty:
            return {"nodes": 0, "timed": 0, "matched_to_head": 0}
        keys = ["worker_structure", "head_structure"]
        per_pair = self.mapping.groupby(keys).agg(
            n=("name", "size"), matched=("head_node_index", lambda i: (i >= 0).sum())
        )
        splits = self.pairs.merge(per_pair.reset_index(), on=keys)
        graphs = pa.array(sorted(set(self.pairs["worker_graph_id"].tolist())), pa.int32())
        timed = self.worker.run.dataset("node_times").count_rows(filter=pc.field("graph_id").isin(graphs))
        return {"nodes": int(splits["n"].sum()), "timed": int(timed), "matched_to_head": int(splits["matched"].sum())}

    def chunks(self, graphs: int = 256) -> Iterator[pd.DataFrame]:
        pairs = self.pairs.sort_values(["head_graph_id", "worker_graph_id"], ignore_index=True)
        for first in range(0, len(pairs), graphs) if not self.mapping.empty else ():
            yield self._rows(pairs.iloc[first : first + graphs])

    def frame(self) -> pd.DataFrame:
        """Every row at once (a short run's; a long one's: chunks)."""
        return _concat(list(self.chunks()))

    def _rows(self, pairs: pd.DataFrame) -> pd.DataFrame:
        worker = self.worker
        nodes = pairs.merge(self.mapping, on=["worker_structure", "head_structure"])
        times = worker.run.node_times_of(sorted(set(pairs["worker_graph_id"].tolist())))
        nodes = nodes.merge(
            times[["graph_id", "node_index", "start_ns", "end_ns"]].rename(
                columns={"graph_id": "worker_graph_id", "node_index": "worker_node_index"}
            ),
            on=["worker_graph_id", "worker_node_index"],
            how="left",
        )
        start = nodes["start_ns"].astype("Int64") - worker.offset
        end = nodes["end_ns"].astype("Int64") - worker.offset
        return _worker_rows(
            worker,
            {
                "head_graph_id": nodes["head_graph_id"].to_numpy(),
                "head_node_index": nodes["head_node_index"].to_numpy(),
                "worker_graph_id": nodes["worker_graph_id"].to_numpy(),
                "worker_node_index": nodes["worker_node_index"].to_numpy(),
                "name": nodes["name"].to_numpy(),
                "op": nodes["op"].to_numpy(),
                "start_ns": start,
                "end_ns": end,
                "duration_ns": end - start,
            },
        ).sort_values(["head_graph_id", "worker_graph_id", "worker_node_index"], ignore_index=True)


def _remote_nodes(head: Run, worker: Member, splits: pd.DataFrame) -> RemoteNodes:
    """The worker's remote nodes: each split's pair of structures, matched once per pair."""
    columns = ["worker_graph_id", "head_graph_id", "worker_structure", "head_structure"]
    if splits.empty:
        return RemoteNodes(worker, pd.DataFrame(columns=columns), pd.DataFrame())
    structure_of_worker = worker.run.graphs.set_index("graph_id")["structure_id"]
    structure_of_head = head.graphs.set_index("graph_id")["structure_id"]
    pairs = pd.DataFrame(
        {
            "worker_graph_id": splits["worker_graph_id"].to_numpy(),
            "head_graph_id": splits["head_graph_id"].to_numpy(),
            "worker_structure": splits["worker_graph_id"].map(structure_of_worker).to_numpy(),
            "head_structure": splits["head_graph_id"].map(structure_of_head).fillna(-1).astype(np.int64).to_numpy(),
        }
    )
    worker_nodes = _structure_nodes(worker.run)
    head_nodes = _structure_nodes(head)
    mappings = []
    for (worker_structure, head_structure), _ in pairs.groupby(["worker_structure", "head_structure"]):
        mine = worker_nodes.get(worker_structure)
        if mine is None:
            continue
        theirs = head_nodes.get(head_structure)
        matched = _match_in_order(mine["name"].tolist(), theirs["name"].tolist() if theirs is not None else [])
        head_index = theirs["node_index"].to_numpy()[np.maximum(matched, 0)] if theirs is not None else 0
        mappings.append(
            mine.rename(columns={"node_index": "worker_node_index"}).assign(
                worker_structure=worker_structure,
                head_structure=head_structure,
                head_node_index=np.where(np.array(matched) >= 0, head_index, -1),
            )
        )
    return RemoteNodes(worker, pairs, pd.concat(mappings, ignore_index=True) if mappings else pd.DataFrame())


def _structure_nodes(run: Run) -> dict[int, pd.DataFrame]:
    """Each structure's nodes, in order: node_index, name, op."""
    nodes = run.raw("structure_nodes").merge(run.raw("tensors")[["tensor_id", "name", "op"]], on="tensor_id")
    nodes = nodes.sort_values(["structure_id", "node_index"])
    return {
        int(structure): group[["node_index", "name", "op"]].reset_index(drop=True)
        for structure, group in nodes.groupby("structure_id")
    }


def _match_in_order(names: list[str], candidates: list[str]) -> list[int]:
    """For each name, the position of the next candidate of that name after the last match (-1: none)."""
    positions: dict[str, list[int]] = {}
    for position, name in enumerate(candidates):
        positions.setdefault(name, []).append(position)
    matched, after = [], -1
    for name in names:
        mine = positions.get(name, [])
        at = bisect.bisect_right(mine, after)
        found = mine[at] if at < len(mine) else -1
        matched.append(found)
        after = found if found >= 0 else after
    return matched


def _hosts(head: Member, workers: list[Member]) -> pd.DataFrame:
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


# ---- summary ---------------------------------------------------------------------------------


def summarize_joined(joined: Joined) -> dict[str, Any]:
    """Where the time went across hosts: compute per host, the wire, the head's waits, the slowest worker."""
    hosts = joined.tables["hosts"]
    splits = joined.tables["splits"]
    transfers = joined.tables["transfers"]
    head_graphs = joined.head.run.graphs
    head_time = int((head_graphs["decode_end_ns"] - head_graphs["decode_start_ns"]).sum()) if len(head_graphs) else 0
    in_graphs = transfers[transfers["head_graph_id"] >= 0] if not transfers.empty else transfers
    wait = int(splits["head_wait_ns"].clip(lower=0).sum()) if not splits.empty else 0
    compute = int(splits["compute_ns"].sum()) if not splits.empty else 0
    per_host = []
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
        "remote_nodes": {key: sum(count[key] for count in counts) for key in ("nodes", "timed", "matched_to_head")},
        "steps": _steps(head_graphs, splits),
    }


def _steps(head_graphs: pd.DataFrame, splits: pd.DataFrame) -> list[dict[str, Any]]:
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
    rows = []
    for phase, graphs in step.groupby("phase", sort=False):
        wire = graphs["wait_ns"] - graphs[hosts].sum(axis=1) if hosts else graphs["wait_ns"]
        rows.append({
            "phase": phase, "graphs": len(graphs), "step_ns": int(graphs["step_ns"].median()),
            "head_own_ns": int((graphs["step_ns"] - graphs["wait_ns"]).median()),
            "worker_compute_ns": {host: int(graphs[host].median()) for host in hosts},
            "wire_and_protocol_ns": int(wire.clip(lower=0).median()),
        })  # fmt: skip
    return rows


def render_joined(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    head = summary["head"]
    console.print(
        f"[bold]distributed run[/] {summary['experiment_id']}: head {head['run']}, "
        f"{head['graphs']} graphs, {head['time_ns'] / 1e6:.2f} ms in llama calls"
    )
    table = Table("host", "role", "run", "graphs", "compute", "head waited", "clock offset", "status")
    for host in summary["hosts"]:
        offset = (
            (
                f"{host['clock_offset_ns'] / 1e3:+.1f} ± {host['clock_uncertainty_ns'] / 1e3:.1f} µs"
                + ("" if host["clock_consistent"] else " (bounds crossed)")
            )
            if host["role"] == "worker"
            else "—"
        )
        table.add_row(
            host["host"],
            host["role"],
            host["run"],
            str(host["graphs"]),
            f"{host['compute_ns'] / 1e6:.2f} ms",
            f"{host['head_wait_ns'] / 1e6:.2f} ms" if host["role"] == "worker" else "—",
            offset,
            host["status"],
        )
    console.print(table)
    wire = summary["wire"]
    console.print(
        f"wire: {wire['messages']} messages, {wire['bytes'] / 2**20:.2f} MiB in all (the model's upload "
        f"included); during graphs {wire['bytes_during_graphs'] / 2**10:.1f} KiB "
        f"({wire['tensor_bytes_during_graphs'] / 2**10:.1f} KiB of tensors)"
    )
    share = summary["head_idle_share"]
    console.print(
        f"head waited for its workers {summary['head_wait_ns'] / 1e6:.2f} ms"
        + (f" ({share:.0%} of its time in llama calls)" if share is not None else "")
        + f"; beyond their compute (the wire, the protocol): {wire['time_ns'] / 1e6:.2f} ms"
    )
    steps = summary.get("steps") or []
    if steps:
        workers = list(steps[0]["worker_compute_ns"])
        table = Table("one step (median)", "graphs", "in the llama call", "head's own", *workers, "wire, protocol",
                      title="where a step's time goes")  # fmt: skip
        for step in steps:
            table.add_row(step["phase"], str(step["graphs"]), f"{step['step_ns'] / 1e6:.2f} ms",
                          f"{step['head_own_ns'] / 1e6:.2f} ms",
                          *(f"{step['worker_compute_ns'].get(w, 0) / 1e6:.2f} ms" for w in workers),
                          f"{step['wire_and_protocol_ns'] / 1e6:.2f} ms")  # fmt: skip
        console.print(table)
    nodes = summary["remote_nodes"]
    console.print(
        f"remote nodes: {nodes['nodes']} ({nodes['timed']} timed on their worker, "
        f"{nodes['matched_to_head']} matched to the head's graph); slowest worker: {summary['slowest_worker']}"
    )


# ---- the joined folder ------------------------------------------------------------------------


def write_joined(joined: Joined, output: Path) -> dict[str, Any]:
    """The experiment as one run (the members merged, a context per host, every time on the
    head's clock: what the viewer and the exports open), the joined tables as Parquet beside it,
    and join.json naming the member runs (which stay where they are); returns its summary."""
    if output.exists() and not is_joined(output):
        raise GgmlVizError(f"{output} exists and is not a joined experiment: give the joined experiment a new folder")
    if output.exists():  # an earlier join of these runs, say: replaced
        shutil.rmtree(output)
    splits = joined.tables["splits"]
    # a worker's graphs for this head (it may have served others before or after)
    served = (
        {host: set(rows["worker_graph_id"].tolist()) for host, rows in splits.groupby("host")} if len(splits) else {}
    )
    merge_runs([MergeMember(member.run, member.offset, {"host": member.host, "role": member.role},
                            served.get(member.host, set()) if member.role == "worker" else None)
                for member in joined.members], output, joined.experiment_id,
               distributed={"join": JOIN_FILE, "hosts": [m.host for m in joined.members]})  # fmt: skip
    for name, table in joined.tables.items():
        table.to_parquet(output / f"{name}.parquet", index=False)
    _write_remote_nodes(joined, output / "remote_nodes.parquet")
    summary = summarize_joined(joined)
    description = {
        "format": JOIN_FORMAT,
        "version": JOIN_VERSION,
        "experiment_id": joined.experiment_id,
        "members": [
            {
                "role": member.role,
                "host": member.host,
                "pid": member.pid,
                "run_experiment_id": member.run.experiment_id,
                "path": os.path.relpath(member.run.path.resolve(), output.resolve()),
                "status": member.run.status,
                "clock": asdict(member.clock) if member.clock else None,
            }
            for member in joined.members
        ],
        "summary": summary,
    }
    (output / JOIN_FILE).write_text(json.dumps(description, indent=1, default=str))
    return summary


def _write_remote_nodes(joined: Joined, path: Path) -> None:
    """The remote_nodes table, a chunk of graphs at a time."""
    writer: pq.ParquetWriter | None = None
    try:
        for remote in joined.remote:
            for chunk in remote.chunks():
                table = pa.Table.from_pandas(chunk, schema=REMOTE_NODES_SCHEMA, preserve_index=False)
                writer = writer or pq.ParquetWriter(path, REMOTE_NODES_SCHEMA, compression="zstd")
                writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        pq.write_table(REMOTE_NODES_SCHEMA.empty_table(), path)


def is_joined(path: Path) -> bool:
    return (path / JOIN_FILE).is_file()


def open_joined(path: Path) -> tuple[dict[str, Any], list[Run], dict[str, Path]]:
    """A joined folder: its description, its member runs, its tables' files."""
    try:
        description = json.loads((path / JOIN_FILE).read_text())
    except (OSError, ValueError) as error:
        raise GgmlVizError(f"{path / JOIN_FILE} cannot be read: {error}") from None
    if description.get("format") != JOIN_FORMAT:
        raise GgmlVizError(f"{path} is not a joined ggml-viz experiment")
    runs = [open_run((path / member["path"]).resolve()) for member in description["members"]]
    tables = {name: path / f"{name}.parquet" for name in JOINED_TABLES if (path / f"{name}.parquet").exists()}
    return description, runs, tables


# ---- one trace across hosts -------------------------------------------------------------------


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
