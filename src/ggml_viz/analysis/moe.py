"""Mixture-of-experts models: how evenly each layer spreads its tokens, which experts are hot or
never used, and where the experts' bytes live (run.moe_experts, run.expert_reads).

Load is the tokens routed to an expert (one per token and slot). Per layer:
- imbalance: the busiest expert's load over the mean load (1.0: perfectly even);
- never used: experts no token chose in the whole run;
- entropy: of the load's distribution, in bits, and as a share of the most it can be
  (log2 of the experts): 1.0 is even, 0 all on one expert.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from .._typing import Required
from ..runformat.reader import Run
from .breakdowns import backend_names
from .rows import records_as


class MoeLayerBalance(TypedDict):
    """One MoE layer's load over its experts (layer_balance)."""

    layer: int
    n_expert: int
    tokens: int  # (token, slot) rows routed
    max_over_mean: float  # the busiest expert's load over the mean
    never_used: int
    entropy_bits: float
    entropy_share: float  # of log2(n_expert): 1.0 even
    hottest: list[list[float]]  # [expert, share of the load], busiest first
    prompt_tokens: int
    decode_tokens: int


class MoeSummary(TypedDict, total=False):
    """A mixture of experts' routing (moe_summary): only `layers` (0) for a dense model."""

    layers: Required[int]
    graphs_routed: int  # graphs whose routing was read ...
    graphs_with_experts: int  # ... of those that ran experts (a GPU reads it in its windows)
    n_expert: int
    experts_per_token: int
    balance: list[MoeLayerBalance]
    never_used: int
    worst_layer: int
    worst_max_over_mean: float
    median_max_over_mean: float
    median_entropy_share: float
    decode_expert_bytes_by_device: dict[str, int]
    token_share_by_device: dict[str, float]


HOT_EXPERTS = 3  # the hottest experts named per layer


def layer_balance(run: Run) -> pd.DataFrame:
    """Per MoE layer: n_expert, tokens routed, max_over_mean, never_used, entropy_bits,
    entropy_share, hottest (its HOT_EXPERTS busiest experts with their shares of the load), and
    the same load split by phase (prompt_tokens, decode_tokens)."""
    if run.arrow("moe_routing").num_rows == 0:  # a dense model (run.moe_experts would read every node time)
        return pd.DataFrame()
    experts = run.moe_experts
    rows = []
    for layer, group in experts.groupby("layer"):
        load = group["tokens"].to_numpy(dtype=np.float64)
        total = load.sum()
        if total <= 0:
            continue
        shares = load / total
        nonzero = shares[shares > 0]
        entropy = float(-(nonzero * np.log2(nonzero)).sum())
        n_expert = len(load)
        order = np.argsort(-load, kind="stable")[:HOT_EXPERTS]
        rows.append(
            {
                "layer": int(layer),
                "n_expert": n_expert,
                "tokens": int(total),
                "max_over_mean": float(load.max() / load.mean()),
                "never_used": int((load == 0).sum()),
                "entropy_bits": entropy,
                "entropy_share": entropy / np.log2(n_expert) if n_expert > 1 else 1.0,
                "hottest": [(int(group["expert"].iloc[i]), float(shares[i])) for i in order],
                "prompt_tokens": int(group["prompt_tokens"].sum()),
                "decode_tokens": int(group["decode_tokens"].sum()),
            }
        )
    return pd.DataFrame(rows)


def expert_devices(run: Run) -> pd.DataFrame:
    """Per MUL_MAT_ID node of each structure (run.expert_nodes' rows), the device its experts'
    weight lives on: the backend of its buffer (CPU, CUDA0, RPC[...])."""
    by_ids = run.expert_nodes
    buffers = run.tensors.set_index("tensor_id")["buffer"].reindex(by_ids["experts_tensor_id"])
    kinds = buffers.map(run.buffers.set_index("buffer")["buffer_type"]).fillna("?").to_numpy()
    return by_ids.assign(device=[(backend_names([kind]) or ["?"])[0] for kind in kinds])


def expert_bytes_by_device(run: Run) -> pd.DataFrame:
    """Per graph with routing and device holding experts: the bytes of experts' weights the graph
    read there (the experts its batch chose), and how many expert slices that was."""
    reads = run.expert_reads
    if reads.empty:
        return pd.DataFrame(columns=["graph_id", "phase", "device", "bytes_read", "experts_read"])
    keys = ["structure_id", "node_index"]
    placed = reads.merge(expert_devices(run)[[*keys, "device"]], on=keys)
    placed = placed.merge(run.graphs[["graph_id", "phase"]], on="graph_id")
    return placed.groupby(["graph_id", "phase", "device"], as_index=False).agg(
        bytes_read=("bytes_read", "sum"), experts_read=("experts_read", "sum")
    )


def moe_summary(run: Run) -> MoeSummary:
    """What `summary` says of a mixture of experts: per layer balance, the hottest experts, prompt
    against decode, and the bytes of experts a decode step reads from each device."""
    balance = layer_balance(run)
    if balance.empty:
        return {"layers": 0}
    experts = run.moe_experts
    devices = expert_bytes_by_device(run)
    decode = devices[devices["phase"] == "decode"]
    per_step = decode.groupby("device")["bytes_read"].median() if len(decode) else pd.Series(dtype="float64")
    routed = experts.groupby("layer")["tokens"].sum()
    token_share_by_device = {}
    if len(devices):  # the share of the (token, slot) rows each device's experts computed
        placement = expert_devices(run)[["layer", "device"]].drop_duplicates("layer")
        load = experts.merge(placement, on="layer", how="left")
        token_share_by_device = (load.groupby("device")["tokens"].sum() / max(int(routed.sum()), 1)).to_dict()
    structures = set(run.expert_nodes["structure_id"])
    return {
        "layers": int(len(balance)),
        # graphs whose routing was read, of those that ran MoE layers (a GPU's: its windows')
        "graphs_routed": int(run.raw("moe_routing")["graph_id"].nunique()),
        "graphs_with_experts": int(run.graphs["structure_id"].isin(structures).sum()),
        "n_expert": int(balance["n_expert"].max()),
        "experts_per_token": int(run.raw("moe_routing")["slot"].max()) + 1,
        "balance": _balance_rows(balance),
        "never_used": int(balance["never_used"].sum()),
        "worst_layer": int(balance.loc[balance["max_over_mean"].idxmax(), "layer"]),
        "worst_max_over_mean": float(balance["max_over_mean"].max()),
        "median_max_over_mean": float(balance["max_over_mean"].median()),
        "median_entropy_share": float(balance["entropy_share"].median()),
        "decode_expert_bytes_by_device": {str(k): int(v) for k, v in per_step.items()},
        "token_share_by_device": {str(k): float(v) for k, v in token_share_by_device.items()},
    }


def _balance_rows(balance: pd.DataFrame) -> list[MoeLayerBalance]:
    """layer_balance's rows, each hottest (expert, share) pair a list, as JSON gives it back."""
    rows = records_as(balance, MoeLayerBalance)
    for row in rows:
        row["hottest"] = [list(pair) for pair in row["hottest"]]
    return rows
