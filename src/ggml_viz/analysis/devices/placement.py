"""What another split of the model's layers between the CPU and one other device would do.

From one run where some blocks (the input, the layers, the output) ran on the CPU and some on
another device (a GPU, an RPC worker), each block's measured cost on the device it ran on, the
measured cost of moving a step's activations between the devices, and the step's host time, a
step under another `-ngl` is predicted as

    step = Σ cost(block, its device) + boundaries × cost of one boundary + host time

where llama.cpp's `-ngl n` puts the last n of the blocks (the layers, then the output) on the
other device and keeps the input (the embedding lookup) on the CPU, and a boundary is each move
of the activations from one device to the other, the last one the logits back to the CPU.

What the model leaves out: a block never measured on a device costs there what the layers
measured there cost on average (layers of a model are alike: not so for a hybrid or MoE model's
dense and sparse layers), and the input or output block costs the layers' speed ratio between
the devices times its measured cost; the host time is taken as fixed (an RPC head serializes a
larger graph when more of it is remote); contention between devices sharing memory or cores
(an RPC worker on the same machine) is whatever it was in the recording.

Memory per device: the weights each block reads (from the run's own graph: each weight tensor
once), the KV cache per layer (the run's KV buffers over the layers that held them) and the
compute buffer the device had in the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..._errors import GgmlVizError
from ...runformat.reader import Run
from .activity import COMPUTE, device_of_buffer
from .steps import HOST, SCHEDULING, TRANSFERS

INPUT = -1  # the block before the first layer; the output block is numbered n_layer
LEFT_OUT = (
    "a block never measured on a device is estimated (a layer: the mean of the layers measured there; the input "
    "or output: the layers' speed ratio between the devices); the host's time is taken as fixed; contention "
    "between devices sharing cores or memory stays as recorded; the experts of an MoE model are moved with "
    "their layer, never alone (--n-cpu-moe is not modelled)"
)


@dataclass(frozen=True)
class PlacementModel:
    """What a prediction needs, measured in one run."""

    n_layer: int
    other: str  # the device beside the CPU
    recorded_ngl: int
    cost: dict[str, dict[tuple[int, str], float]]  # per phase: (block, device) -> ns per step
    boundary_ns: dict[str, float]  # per phase: one move of the activations
    host_ns: dict[str, float]  # per phase
    tokens: dict[str, float]  # per phase: tokens per step
    weight_bytes: dict[int, int]  # per block
    kv_bytes_per_layer: float
    compute_bytes: dict[str, int]  # per device


def block_of_nodes(nodes: pd.DataFrame) -> pd.Series:
    """Each node's block: its layer; before the graph's first layer, the input; after, the output."""
    layer = pd.to_numeric(nodes["layer"], errors="coerce")
    first = nodes.loc[layer.notna()].groupby("graph_id")["node_index"].min()
    first_of = nodes["graph_id"].map(first).fillna(np.iinfo(np.int64).max)
    n_layer = int(layer.max()) + 1 if layer.notna().any() else 0
    unlayered = np.where(nodes["node_index"] < first_of, INPUT, n_layer)
    return pd.Series(np.where(layer.notna(), layer.fillna(0), unlayered).astype(np.int64), index=nodes.index)


def placement_model(head: Run, activity: pd.DataFrame, parts: pd.DataFrame) -> PlacementModel:
    """The measured costs of a run that computed on the CPU and one other device."""
    compute = activity[activity["kind"] == COMPUTE]
    devices = sorted(set(compute["device"]) - {"CPU"})
    if len(devices) != 1 or "CPU" not in set(compute["device"]):
        found = ", ".join(sorted(set(compute["device"]))) or "none"
        raise GgmlVizError(f"a placement is predicted from a run that computed on the CPU and one other device "
                           f"(a GPU, an RPC worker); this run's devices: {found}")  # fmt: skip
    other = devices[0]
    compute = compute.assign(block=block_of_nodes(compute))
    n_layer = int(compute["block"].max())  # the output block's number
    phases = head.graphs.set_index("graph_id")["phase"]
    compute = compute.assign(phase=compute["graph_id"].map(phases), ns=compute["end_ns"] - compute["start_ns"])
    steps = compute.groupby("phase")["graph_id"].nunique()
    per_block = compute.groupby(["phase", "block", "device"])["ns"].sum()
    cost = {phase: {(int(b), str(d)): float(ns) / steps[phase] for (p, b, d), ns in per_block.items() if p == phase}
            for phase in steps.index}  # fmt: skip
    placed = compute.groupby(["block", "device"])["ns"].sum().reset_index().sort_values("ns")
    on_other = set(placed.drop_duplicates("block", keep="last").query("device == @other")["block"])
    recorded_ngl = len(on_other - {INPUT})
    recorded_boundaries = _boundaries(n_layer, recorded_ngl)
    boundary_ns, host_ns = {}, {}
    for phase, mine in parts[parts["device"] == "CPU"].groupby("phase"):
        per_part = mine.groupby("part")["ns"].sum() / mine["graph_id"].nunique()
        # what crossing between the devices costs: the transfers, and the scheduler's time between
        # splits (launches are counted there too: a run all on one device keeps them)
        crossing = float(per_part.get(TRANSFERS, 0.0) + per_part.get(SCHEDULING, 0.0))
        boundary_ns[phase] = crossing / recorded_boundaries if recorded_boundaries else 0.0
        host_ns[phase] = float(per_part.get(HOST, 0.0))
    graphs = head.graphs[head.graphs["graph_id"].isin(compute["graph_id"].unique())]
    tokens = graphs.groupby("phase")["n_tokens"].mean().to_dict()
    return PlacementModel(n_layer, other, recorded_ngl, cost, boundary_ns, host_ns, tokens,
                          _weight_bytes(head), _kv_per_layer(head, n_layer), _compute_bytes(head))  # fmt: skip


def predict(model: PlacementModel, ngl_values: list[int]) -> pd.DataFrame:
    """Per -ngl: the blocks on each device, each phase's predicted step and rate, the memory each
    device needs."""
    rows = []
    for ngl in ngl_values:
        ngl = max(0, min(ngl, model.n_layer + 1))
        first_other = model.n_layer + 1 - ngl
        row: dict[str, Any] = {"ngl": ngl, "recorded": ngl == model.recorded_ngl,
                               "cpu_layers": min(first_other, model.n_layer),
                               "other_layers": max(model.n_layer - first_other, 0),
                               "output_on": model.other if ngl > 0 else "CPU"}  # fmt: skip
        for phase, costs in model.cost.items():
            total = costs.get((INPUT, "CPU"), 0.0)
            for block in range(model.n_layer + 1):
                total += _cost(model, costs, block, model.other if block >= first_other else "CPU")
            total += model.boundary_ns.get(phase, 0.0) * _boundaries(model.n_layer, ngl)
            total += model.host_ns.get(phase, 0.0)
            row[f"{phase}_step_ns"] = total
            tokens = model.tokens.get(phase, 0.0)
            row[f"{phase}_tokens_per_s"] = tokens / (total / 1e9) if total else None
        for device in ("CPU", model.other):
            on_other = device != "CPU"
            on_it = [b for b in range(INPUT, model.n_layer + 1) if (b >= first_other and b != INPUT) == on_other]
            layers = sum(1 for b in on_it if 0 <= b < model.n_layer)
            weights = sum(model.weight_bytes.get(b, 0) for b in on_it)
            used = bool(layers) or device == "CPU" or ngl > 0
            row[f"{device}_bytes"] = int(weights + layers * model.kv_bytes_per_layer
                                         + (model.compute_bytes.get(device, 0) if used else 0))  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def _boundaries(n_layer: int, ngl: int) -> int:
    """Moves of a step's activations between the devices: none with every block on the CPU; else
    to the other device where its blocks begin, and back (the logits, or the layers after)."""
    return 0 if ngl <= 0 else 2


def _cost(model: PlacementModel, costs: dict[tuple[int, str], float], block: int, device: str) -> float:
    """A block's measured cost on a device, or (never measured there) an estimate (the module's doc)."""
    if (block, device) in costs:
        return costs[(block, device)]
    layers_on = {d: [ns for (b, dd), ns in costs.items() if dd == d and 0 <= b < model.n_layer] for d in
                 ("CPU", model.other)}  # fmt: skip
    if not layers_on[device]:
        raise GgmlVizError(f"no layer ran on {device} in this run: its cost there is unknown "
                           "(record a placement with layers on both devices)")  # fmt: skip
    if 0 <= block < model.n_layer:
        return float(np.mean(layers_on[device]))
    source = "CPU" if device != "CPU" else model.other
    measured = costs.get((block, source))
    if measured is None or not layers_on[source]:
        return 0.0
    return measured * float(np.mean(layers_on[device])) / float(np.mean(layers_on[source]))


def _weight_bytes(head: Run) -> dict[int, int]:
    """Per block, the bytes of the weights its nodes read (each tensor once), from the run's last graph."""
    graph = int(head.graphs["graph_id"].max())
    edges = head.edges_of(graph)
    weights = edges[edges["src_buffer_kind"] == "weights"]
    nodes = head.nodes_of(graph, times=False)
    block = block_of_nodes(nodes).set_axis(nodes["node_index"].to_numpy())
    weights = weights.assign(block=block.reindex(weights["node_index"].to_numpy()).to_numpy())
    unique = weights.drop_duplicates("src_tensor_id")
    return {int(b): int(n) for b, n in unique.groupby("block")["src_nbytes"].sum().items()}


def _kv_per_layer(head: Run, n_layer: int) -> float:
    buffers = head.buffers
    kv = buffers[buffers["kind"] == "kv_cache"]
    return float(kv["size"].sum()) / n_layer if n_layer else 0.0


def _compute_bytes(head: Run) -> dict[str, int]:
    buffers = head.buffers
    compute = buffers[buffers["kind"] == "compute"]
    device = compute["name"].map(device_of_buffer)
    return {str(d): int(size) for d, size in compute.groupby(device)["size"].sum().items()}
