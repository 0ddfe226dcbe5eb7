"""The join itself: a head's run and its workers' runs matched into one experiment (`Joined`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..._errors import GgmlVizError
from ...runformat.manifest import new_experiment_id
from ...runformat.reader import Run
from .clocks import clock_offset
from .connections import match_connections, paired_messages
from .members import Member, member_of
from .remote_nodes import RemoteNodes, remote_nodes_of
from .tables import concat_frames, hosts_table, splits_table, transfers_table


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
        return concat_frames([remote.frame() for remote in self.remote])

    @property
    def members(self) -> list[Member]:
        return [self.head, *self.workers]


def join_runs(runs: list[Run]) -> Joined:
    members = [member_of(run) for run in runs]
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
        transfers.append(transfers_table(pairs, worker, head_graphs))
        worker_splits = splits_table(head, worker, pairs)
        splits.append(worker_splits)
        remote_nodes.append(remote_nodes_of(head.run, worker, worker_splits))
    tables = {
        "hosts": hosts_table(head, workers),
        "transfers": concat_frames(transfers),
        "splits": concat_frames(splits),
    }
    return Joined(head, workers, new_experiment_id(), tables, remote_nodes)
