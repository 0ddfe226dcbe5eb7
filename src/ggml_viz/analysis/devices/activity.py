"""What each device did during each step, as one table of intervals on one clock.

A step is one graph of the head (the process that runs the llama calls); its activity rows say
which device computed which node when (`compute`), and when data moved between devices
(`transfer`):

- CPU nodes carry their own times (the CPU backend's ticks): a row each, the device their
  output's buffer belongs to (`CPU`).
- GPU nodes (CUDA) are timed by the GPU's records: every kernel the timer mapped to a node is a
  row on its device (`CUDA0`, ...); the scheduler's copies between splits and weight uploads
  (kernels table rows with kind memcpy and no node) are transfers.
- Nodes a worker computed for the head (the RPC backend, a joined run): a row each from the
  worker's own ticks, brought to the head's clock by the join, on the device the head named
  (`RPC0[host:port]`); the messages on the wire during a step are transfers.

Nothing here depends on a model's names: the layer of a node is the run's own `layer` column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...runformat.reader import Run
from ..buffer_device import device_of_buffer

ACTIVITY_COLUMNS = ["graph_id", "node_index", "device", "kind", "layer", "op", "start_ns", "end_ns"]
COMPUTE, TRANSFER = "compute", "transfer"
# The wire's lane in a distributed run (its transfers are no device's compute).
WIRE = "wire"


def empty_activity() -> pd.DataFrame:
    return pd.DataFrame(
        {
            column: pd.Series(dtype="object" if column in ("device", "kind", "op", "layer") else "int64")
            for column in ACTIVITY_COLUMNS
        }
    )


def run_activity(run: Run, graph_ids: Sequence[int] | None = None) -> pd.DataFrame:
    """A single process's activity: its timed host nodes, and on CUDA the GPU's kernels and copies
    (of some graphs only, where `graph_ids` names them: a long run's sample reads no more)."""
    nodes = run.nodes if graph_ids is None else run.nodes_of(list(graph_ids))
    timed = nodes[nodes["start_ns"].notna() & nodes["end_ns"].notna()]
    frames = [_node_rows(timed, timed["start_ns"], timed["end_ns"], timed["buffer_name"].map(device_of_buffer))]
    if run.has_gpu_times:
        frames.append(_gpu_rows(run, nodes, graph_ids))
    return _concat(frames)


def joined_activity(head: Run, remote_nodes: pd.DataFrame, transfers: pd.DataFrame) -> pd.DataFrame:
    """A distributed run's activity on the head's clock: the head's own, its workers' nodes (each on
    the device the head named for it), and the wire's messages during the head's graphs."""
    frames = [run_activity(head)]
    if not remote_nodes.empty:
        timed = remote_nodes[remote_nodes["start_ns"].notna()]
        head_nodes = head.nodes[["graph_id", "node_index", "layer", "buffer_name"]]
        placed = timed.merge(
            head_nodes, left_on=["head_graph_id", "head_node_index"], right_on=["graph_id", "node_index"], how="left"
        )
        device = placed["buffer_name"].map(device_of_buffer).fillna(placed["host"])
        frames.append(
            pd.DataFrame(
                {
                    "graph_id": placed["head_graph_id"].to_numpy(np.int64),
                    "node_index": placed["head_node_index"].to_numpy(np.int64),
                    "device": device.to_numpy(),
                    "kind": COMPUTE,
                    "layer": placed["layer"].to_numpy(),
                    "op": placed["op"].to_numpy(),
                    "start_ns": placed["start_ns"].to_numpy(np.int64),
                    "end_ns": placed["end_ns"].to_numpy(np.int64),
                }
            )
        )
    if not transfers.empty:
        during = transfers[transfers["head_graph_id"] >= 0]
        frames.append(
            pd.DataFrame(
                {
                    "graph_id": during["head_graph_id"].to_numpy(np.int64),
                    "node_index": -1,
                    "device": WIRE,
                    "kind": TRANSFER,
                    "layer": pd.NA,
                    "op": during["command"].to_numpy(),
                    "start_ns": during["sent_ns"].to_numpy(np.int64),
                    "end_ns": during["received_ns"].to_numpy(np.int64),
                }
            )
        )
    return _concat(frames)


def _node_rows(nodes: pd.DataFrame, start: pd.Series, end: pd.Series, device: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "graph_id": nodes["graph_id"].to_numpy(np.int64),
            "node_index": nodes["node_index"].to_numpy(np.int64),
            "device": device.fillna("CPU").to_numpy(),
            "kind": COMPUTE,
            "layer": nodes["layer"].to_numpy(),
            "op": nodes["op"].to_numpy(),
            "start_ns": start.to_numpy(np.int64),
            "end_ns": end.to_numpy(np.int64),
        }
    )


def _gpu_rows(run: Run, nodes: pd.DataFrame, graph_ids: Sequence[int] | None = None) -> pd.DataFrame:
    """The GPU's kernels and copies in traced graphs: a node's work where it was mapped to one,
    a transfer where it was a copy of no node's (the scheduler's, between splits); of `graph_ids` only, where given."""
    kernels = run.gpu_kernels
    kernels = kernels[kernels["graph_id"] >= 0 if graph_ids is None else kernels["graph_id"].isin(list(graph_ids))]
    if kernels.empty:
        return empty_activity()
    described = kernels.merge(
        nodes[["graph_id", "node_index", "layer", "op"]], on=["graph_id", "node_index"], how="left"
    )
    # a kernel of no node (a graph whose kernels could not be mapped) is still the GPU's busy time
    transfer = (described["kind"] != "kernel") & (described["node_index"] < 0)
    return pd.DataFrame(
        {
            "graph_id": described["graph_id"].to_numpy(np.int64),
            "node_index": described["node_index"].to_numpy(np.int64),
            "device": (run.gpu_timer.backend + described["device"].astype(str)).to_numpy(),
            "kind": np.where(transfer, TRANSFER, COMPUTE),
            "layer": described["layer"].to_numpy(),
            "op": described["op"].fillna(described["kind"]).to_numpy(),
            "start_ns": described["start_ns"].to_numpy(np.int64),
            "end_ns": described["end_ns"].to_numpy(np.int64),
        }
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return empty_activity()
    return pd.concat(frames, ignore_index=True)[ACTIVITY_COLUMNS]
