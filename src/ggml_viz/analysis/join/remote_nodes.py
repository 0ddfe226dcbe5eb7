"""The remote_nodes table: each node a worker computed for the head, with its time there and the
head graph's node it is, made a chunk of graphs at a time."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...runformat.reader import Run
from .members import Member
from .tables import concat_frames, worker_rows

REMOTE_NODES_SCHEMA = pa.schema(
    [("host", pa.string()), ("worker_run", pa.string()), ("head_graph_id", pa.int64()),
     ("head_node_index", pa.int64()), ("worker_graph_id", pa.int64()), ("worker_node_index", pa.int64()),
     ("name", pa.string()), ("op", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
     ("duration_ns", pa.int64())]
)  # fmt: skip


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
        return concat_frames(list(self.chunks()))

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
        return worker_rows(
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


def remote_nodes_of(head: Run, worker: Member, splits: pd.DataFrame) -> RemoteNodes:
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
