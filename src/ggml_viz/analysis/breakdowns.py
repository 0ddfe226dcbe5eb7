"""Where the time goes and where the bytes live: pure functions over a run's tables.

Each takes a `Run` and returns a DataFrame or a plain dict: time by phase, op, layer, component
and tensor, the waits at node boundaries, buffers, weight reads, the computations a run holds
(the requests it served: requests.py). Only nodes that carry their own time (`timed`) count in per-node times.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..runformat.memory_sources import VIEW_OPS
from ..runformat.reader import Run
from .components import structure_components
from .memory import peak_bytes

# the requests a run served: their home is requests.py (these names stay here for their callers)
from .requests import TOKEN_PHASES as TOKEN_PHASES
from .requests import RequestText as RequestText
from .requests import requests as requests
from .requests import requests_and_count as requests_and_count


class NodeWaits(TypedDict):
    """The timed host nodes' waits at the barrier after them (node_waits)."""

    seen: int
    not_seen: int
    wait_ns: int
    time_ns: int


class WeightReads(TypedDict):
    """The weight bytes a graph and a decode step read (weight_reads)."""

    weight_bytes_per_graph: int
    weight_bytes_per_decode_step: int
    all_experts_counted: bool
    routed_decode_steps: int  # of a mixture's decode steps, those whose routing was read, when not all were
    weights_read: int
    weights_from_mmap: bool
    weight_edges_resolved_to_file: float | None


def phase_stats(run: Run) -> pd.DataFrame:
    """Per phase (prompt, decode, warmup, ...): graphs, tokens, time, and tokens per second
    for the phases whose tokens make a rate (TOKEN_PHASES; None for the others)."""
    stats = _graph_sums(run, ["phase"]).set_index("phase")
    stats = stats.rename(columns={"n_tokens": "tokens", "duration_ns": "time_ns"})[["graphs", "tokens", "time_ns"]]
    rate = stats["tokens"] / (stats["time_ns"] / 1e9)
    stats["tokens_per_s"] = rate.astype(object).where(stats.index.isin(TOKEN_PHASES), None)
    return stats.reset_index()


def _graph_sums(run: Run, keys: list[str], missing: bool = False) -> pd.DataFrame:
    """Per value of `keys` (columns of the graphs table), sorted by them: the graphs, their
    tokens (n_tokens) and time (duration_ns), summed by Arrow over the graphs as stored (a row
    per graph: a million for a billion node events), not a pandas frame of them all. Graphs
    whose key is missing are left out, as pandas' groupby leaves them (missing: a group of their own)."""
    graphs = run.arrow("graphs")
    duration = pc.subtract(graphs.column("end_ns"), graphs.column("start_ns"))
    table = pa.table(
        {**{key: graphs.column(key) for key in keys}, "n_tokens": graphs.column("n_tokens"), "duration_ns": duration}
    )
    for key in [] if missing else keys:
        table = table.filter(pc.is_valid(table.column(key)))
    every = pc.ScalarAggregateOptions(min_count=0)  # (a sum of nothing: 0)
    sums = table.group_by(keys).aggregate(
        [([], "count_all"), ("n_tokens", "sum", every), ("duration_ns", "sum", every)]
    )
    sums = sums.rename_columns(
        [
            {"count_all": "graphs", "n_tokens_sum": "n_tokens", "duration_ns_sum": "duration_ns"}.get(name, name)
            for name in sums.column_names
        ]
    )
    frame = sums.to_pandas().astype({"graphs": "int64", "n_tokens": "int64", "duration_ns": "int64"})
    return frame.sort_values(keys, ignore_index=True)


def timed_totals(run: Run) -> pd.DataFrame:
    """run.node_totals where something was timed: per (phase, structure, node), `timed`
    events of `time_ns` in all, `wait_ns` of it waiting, with the node's description."""
    totals = run.node_totals
    return totals[totals["timed"] > 0]


def time_by_op(run: Run) -> pd.DataFrame:
    """Node time by op; a node whose kernels computed a fused group, by the group's ops
    (fused_op_labels): the nodes fused into it have no time, nor a row, of their own."""
    totals = run.node_totals
    timed = totals["timed"] > 0
    return _time_by(totals[timed].assign(op=fused_op_labels(totals)[timed]), "op")


def fused_op_labels(totals: pd.DataFrame) -> pd.Series:
    """Each node's op (over node totals), named with the ops ggml-cuda fused into it where its
    kernels computed nodes up to `group_end` ("RMS_NORM +MUL", "MUL_MAT +ADD"): the group's time
    is all the first node's, and a SWIGLU or a residual ADD fused into a MUL_MAT would otherwise
    read as free. Views inside the group (no work of their own) are not named."""
    labels = totals["op"].astype(object)
    carriers = totals[totals["group_end"] > totals["node_index"]]
    if carriers.empty:
        return labels
    size = (carriers["group_end"] - carriers["node_index"]).to_numpy(np.int64)
    offset = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size) + 1
    members = pd.DataFrame(
        {
            "carrier": np.repeat(carriers.index.to_numpy(), size),
            "phase": np.repeat(carriers["phase"].to_numpy(), size),
            "structure_id": np.repeat(carriers["structure_id"].to_numpy(), size),
            "node_index": np.repeat(carriers["node_index"].to_numpy(np.int64), size) + offset,
        }
    )
    ops = totals[["phase", "structure_id", "node_index", "op", "op_base"]].astype({"node_index": "int64"})
    members = members.merge(ops, on=["phase", "structure_id", "node_index"], how="left")  # (in node order)
    members = members[members["op"].notna() & ~members["op_base"].isin(VIEW_OPS)]
    fused = members.groupby("carrier", sort=False)["op"].agg(lambda group: "".join(f" +{op}" for op in group))
    return labels.add(fused.reindex(labels.index, fill_value=""))


def time_by_layer(run: Run) -> pd.DataFrame:
    totals = timed_totals(run).copy()
    totals["layer"] = totals["layer"].astype("object").where(totals["layer"].notna(), "none")
    return _time_by(totals, "layer")


def time_by_component(run: Run, components: pd.DataFrame | None = None) -> pd.DataFrame:
    """Node time by transformer component: input, norm, attention, ffn, output, other.
    components: structure_components(run), where the caller has it already."""
    if components is None:
        components = structure_components(run)
    totals = timed_totals(run).merge(components, on=["structure_id", "node_index"], how="left")
    return _time_by(totals.fillna({"component": "other"}), "component")


def time_by_tensor(run: Run) -> pd.DataFrame:
    """Node time by node: by name, or for the nodes a program left unnamed, by what they
    compute (runformat/node_labels.py)."""
    totals = timed_totals(run)
    return _time_by(totals.assign(name=totals["label"]), "name")


def _time_by(totals: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per key, over node totals: timed events (`count`), their time over the run and its
    share, the mean of a timed event, and the wait (of the time, waiting for other threads,
    where seen). A GPU node's time over the run is estimated from the graphs the GPU timer
    traced, each structure counted as often as it ran (`est_ns`); its mean is as measured."""
    columns = ["timed", "time_ns", "est_ns", "wait_ns"]
    table = totals.groupby(key, dropna=False)[columns].sum().rename(columns={"timed": "count"})
    table["mean_ns"] = table["time_ns"] / table["count"]
    table["time_ns"] = table["est_ns"]
    total = table["time_ns"].sum()
    table["share"] = table["time_ns"] / total if total else 0.0
    table = table[["count", "time_ns", "mean_ns", "wait_ns", "share"]]
    return table.sort_values("time_ns", ascending=False).reset_index()


def node_waits(run: Run) -> NodeWaits:
    """How much of the timed nodes' time was thread 0 waiting at the barrier after them for
    the other threads, and for how many nodes that barrier was seen (inline timing)."""
    totals = run.node_totals
    totals = totals[totals["clock"] == "host"]  # a GPU's nodes wait for no thread
    seen = int(totals["waits_seen"].sum())
    return {
        "seen": seen,
        "not_seen": int(totals["timed"].sum()) - seen,
        "wait_ns": int(totals["wait_ns"].sum()),
        "time_ns": int(totals["time_ns"].sum()),
    }


def memory_by_buffer(run: Run) -> pd.DataFrame:
    """Per buffer kind (weights, kv_cache, compute, ...): buffers, their bytes, the most
    in use at once, and the buffers' names."""
    kinds = run.buffers.groupby("kind")
    names = {kind: ", ".join(sorted(set(group))) for kind, group in kinds["name"]}
    table = pd.DataFrame({"buffers": kinds.size(), "bytes": kinds["size"].sum()})
    table["names"] = table.index.map(names)
    peaks = peak_bytes(run).set_index("kind")["peak_bytes"]
    table["peak_bytes"] = peaks.reindex(table.index).fillna(table["bytes"]).astype("int64")
    return table.sort_values("bytes", ascending=False).reset_index()


def weight_bytes_per_graph(run: Run, disk: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The bytes of the model file's weights each graph read (indexed by graph_id; graphs that read
    none left out), from `disk` (structure_edges whose memory is disk), and, per graph, whether it
    was charged every expert of a mixture (a MUL_MAT_ID whose routing was not recorded). Graphs of one
    structure read the same weights, except a node reading experts by ids (MUL_MAT_ID, ADD_ID):
    the slices of the experts its batch chose (run.expert_reads), which replace its edge's
    every-expert bytes."""
    graphs = run.graphs
    per_structure = disk.groupby("structure_id")["src_bytes_read"].sum()  # GET_ROWS: its rows
    reading = graphs[graphs["structure_id"].isin(per_structure.index)].set_index("graph_id")
    per_graph = reading["structure_id"].map(per_structure).astype("int64")
    by_ids = run.expert_nodes.rename(columns={"experts_tensor_id": "src_tensor_id"})
    keys = ["structure_id", "node_index", "src_tensor_id"]
    experts = disk.merge(by_ids[keys], on=keys)  # the edges that read experts by ids
    if experts.empty:
        return per_graph, pd.Series(False, index=per_graph.index)
    every = experts.groupby("structure_id")["src_bytes_read"].sum()  # each graph charged every expert
    exact = run.expert_reads.merge(experts[["structure_id", "node_index"]], on=["structure_id", "node_index"])
    exact_per_graph = exact.groupby("graph_id")["bytes_read"].sum()
    routed = per_graph.index.isin(exact_per_graph.index)
    charged_every = reading["structure_id"].isin(every.index) & ~routed
    per_graph[routed] = (
        per_graph[routed]
        - reading.loc[routed, "structure_id"].map(every).fillna(0)
        + exact_per_graph.reindex(per_graph.index[routed])
    ).astype("int64")
    return per_graph, pd.Series(np.asarray(charged_every), index=per_graph.index)


def weight_reads(run: Run) -> WeightReads:
    """Bytes of weights the graphs read, and how much of them came from the file mapping."""
    edges = run.structure_edges
    disk = edges[edges["memory"] == "disk"]
    by_ids = run.expert_nodes.rename(columns={"experts_tensor_id": "src_tensor_id"})
    keys = ["structure_id", "node_index", "src_tensor_id"]
    if disk.merge(by_ids[keys], on=keys).empty:  # no expert read by ids: a graph reads its structure's weights
        median_graph, median_step = _structure_medians(run, disk.groupby("structure_id")["src_bytes_read"].sum())
        all_experts_counted, routed_steps = False, 0
    else:
        per_graph_bytes, charged_every = weight_bytes_per_graph(run, disk)
        graphs = run.graphs
        phases = graphs.set_index("graph_id")["phase"].reindex(per_graph_bytes.index)
        decode_bytes = per_graph_bytes[phases == "decode"]
        # the steps whose experts are known (a GPU reads routing in its windows only), where there are some
        routed = decode_bytes[~charged_every.reindex(decode_bytes.index, fill_value=False)]
        per_step = routed if len(routed) else decode_bytes
        median_graph = int(per_graph_bytes.median()) if len(per_graph_bytes) else 0
        median_step = int(per_step.median()) if len(per_step) else 0
        # a MUL_MAT_ID without recorded routing is charged every expert's slice
        all_experts_counted = bool(charged_every.reindex(per_step.index, fill_value=False).any())
        # of a mixture's decode steps, those whose routing was read, when not all were (else 0)
        routed_steps = len(routed) if len(routed) < len(decode_bytes) and charged_every.any() else 0
    weights = edges[edges["src_usage"] == "weights"]
    return {
        "weight_bytes_per_graph": median_graph,
        "weight_bytes_per_decode_step": median_step,
        "all_experts_counted": all_experts_counted,
        "routed_decode_steps": routed_steps,
        "weights_read": int(disk["src_tensor_id"].nunique()),
        "weights_from_mmap": bool(disk["mmap"].all()) if len(disk) else False,
        "weight_edges_resolved_to_file": float((weights["memory"] == "disk").mean()) if len(weights) else 0.0,
    }


def _structure_medians(run: Run, per_structure: pd.Series) -> tuple[int, int]:
    """Where every graph of a structure reads the same bytes (`per_structure`, by structure_id):
    the median of those bytes over the graphs that read some, and over the decode steps among
    them, as int (0: none), from each structure's count of graphs (not a row per graph)."""
    counts = _graph_sums(run, ["structure_id", "phase"], missing=True)
    counts = counts[counts["structure_id"].isin(per_structure.index)]
    values = counts["structure_id"].map(per_structure).astype("int64").to_numpy()
    decode = (counts["phase"] == "decode").to_numpy()
    every = _median_of_counts(values, counts["graphs"].to_numpy())
    return every, _median_of_counts(values[decode], counts["graphs"].to_numpy()[decode])


def _median_of_counts(values: np.ndarray, counts: np.ndarray) -> int:
    """int(the median) of `values`, each repeated `counts` times (as pandas' median of them all
    gives it: the middle one, or the mean of the middle two), 0 when there are none."""
    total = int(counts.sum())
    if not total:
        return 0
    order = np.argsort(values, kind="stable")
    values, ends = values[order], np.cumsum(counts[order])
    middle = [(total - 1) // 2, total // 2]  # the middle one twice, or the middle two
    picked = values[np.searchsorted(ends, middle, side="right")].astype(np.float64)
    return int(np.median(picked))


def untimed_reason(manifest: dict[str, Any]) -> str:
    """Why no node of a run was timed on its own, in words: what the recorder said (a ggml whose CPU
    threads give no node boundaries), or graph detail."""
    return (manifest.get("capture") or {}).get("untimed_reason") or "graph detail"


def backends(run: Run) -> list[str]:
    """Backends named by the buffers of computed nodes (CPU, CUDA0, Metal, ...), and by the contexts
    whose graphs computed in a ggml context's own memory, without buffers (ggml_graph_compute: CPU)."""
    contexts = run.manifest.get("contexts") or []
    in_context_memory = [c["backend"] for c in contexts if c.get("compute") and c.get("backend")]
    return backend_names([*run.buffers["buffer_type"], *in_context_memory])


def backend_names(buffer_types: Iterable[str]) -> list[str]:
    """Each device once, by its backend's name, from the types of the buffers it used: a
    buffer type is the backend's name with its kind after an underscore (CPU_Mapped,
    CPU_REPACK, CUDA_Host, CUDA_Split), and a kind shared by a backend's devices is named
    without the device's number (CUDA_Host beside CUDA0): such a name counts only where no
    device of it is named."""
    names = {str(name).split("_", 1)[0] for name in buffer_types if name}
    devices = {
        name
        for name in names
        if not any(other != name and re.fullmatch(re.escape(name) + r"\d+", other) for other in names)
    }
    return sorted(devices)


def graphs_by_computation(run: Run) -> pd.DataFrame:
    """The run's graphs grouped by what they compute (Run.structure_labels: an encoder, a
    decoder step, ...): per label and phase, how many graphs and their time."""
    sums = _graph_sums(run, ["structure_id", "phase"])
    labels = sums["structure_id"].map(run.structure_labels).fillna("")
    table = sums.assign(label=labels).groupby(["label", "phase"], as_index=False)
    stats = table.agg(graphs=("graphs", "sum"), time_ns=("duration_ns", "sum"))
    return stats.sort_values("time_ns", ascending=False, ignore_index=True)
