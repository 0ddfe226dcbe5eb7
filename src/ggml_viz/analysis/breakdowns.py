"""Where the time goes and where the bytes live: pure functions over a run's tables.

Each takes a `Run` and returns a DataFrame or a plain dict: time by phase, op, layer, component
and tensor, the waits at node boundaries, buffers, weight reads, the computations and requests
a run holds. Only nodes that carry their own time (`timed`) count in per-node times.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..runformat.memory_sources import VIEW_OPS
from ..runformat.reader import Run
from .components import structure_components
from .memory import peak_bytes


def graph_times(run: Run) -> pd.DataFrame:
    graphs = run.graphs.copy()
    graphs["duration_ns"] = graphs["end_ns"] - graphs["start_ns"]
    return graphs


# The phases whose tokens are a rate worth giving: the prompt read, the tokens generated (not
# llama.cpp's warm-up decode, nor a non-LLM program's graphs).
TOKEN_PHASES = ("prompt", "decode")


def phase_stats(run: Run) -> pd.DataFrame:
    """Per phase (prompt, decode, warmup, ...): graphs, tokens, time, and tokens per second
    for the phases whose tokens make a rate (TOKEN_PHASES; None for the others)."""
    phases = graph_times(run).groupby("phase")
    stats = pd.DataFrame(
        {"graphs": phases.size(), "tokens": phases["n_tokens"].sum(), "time_ns": phases["duration_ns"].sum()}
    )
    rate = stats["tokens"] / (stats["time_ns"] / 1e9)
    stats["tokens_per_s"] = rate.astype(object).where(stats.index.isin(TOKEN_PHASES), None)
    return stats.reset_index()


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
    members = pd.DataFrame({
        "carrier": np.repeat(carriers.index.to_numpy(), size),
        "phase": np.repeat(carriers["phase"].to_numpy(), size),
        "structure_id": np.repeat(carriers["structure_id"].to_numpy(), size),
        "node_index": np.repeat(carriers["node_index"].to_numpy(np.int64), size) + offset,
    })  # fmt: skip
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


def node_waits(run: Run) -> dict[str, Any]:
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
    per_graph[routed] = (per_graph[routed] - reading.loc[routed, "structure_id"].map(every).fillna(0)
                         + exact_per_graph.reindex(per_graph.index[routed])).astype("int64")  # fmt: skip
    return per_graph, pd.Series(np.asarray(charged_every), index=per_graph.index)


def weight_reads(run: Run) -> dict[str, Any]:
    """Bytes of weights the graphs read, and how much of them came from the file mapping."""
    graphs = run.graphs
    edges = run.structure_edges
    disk = edges[edges["memory"] == "disk"]
    per_graph, charged_every = weight_bytes_per_graph(run, disk)
    phases = graphs.set_index("graph_id")["phase"].reindex(per_graph.index)
    decode = per_graph[phases == "decode"]
    # the steps whose experts are known (a GPU reads routing in its windows only), where there are some
    routed = decode[~charged_every.reindex(decode.index, fill_value=False)]
    per_step = routed if len(routed) else decode
    weights = edges[edges["src_usage"] == "weights"]
    return {
        "weight_bytes_per_graph": int(per_graph.median()) if len(per_graph) else 0,
        "weight_bytes_per_decode_step": int(per_step.median()) if len(per_step) else 0,
        # a MUL_MAT_ID without recorded routing is charged every expert's slice
        "all_experts_counted": bool(charged_every.reindex(per_step.index, fill_value=False).any()),
        # of a mixture's decode steps, those whose routing was read, when not all were (else 0)
        "routed_decode_steps": len(routed) if len(routed) < len(decode) and charged_every.any() else 0,
        "weights_read": int(disk["src_tensor_id"].nunique()),
        "weights_from_mmap": bool(disk["mmap"].all()) if len(disk) else False,
        "weight_edges_resolved_to_file": float((weights["memory"] == "disk").mean()) if len(weights) else 0.0,
    }


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
    devices = {name for name in names if not any(other != name and re.fullmatch(re.escape(name) + r"\d+", other)
                                                 for other in names)}  # fmt: skip
    return sorted(devices)


def graphs_by_computation(run: Run) -> pd.DataFrame:
    """The run's graphs grouped by what they compute (Run.structure_labels: an encoder, a
    decoder step, ...): per label and phase, how many graphs and their time."""
    graphs = graph_times(run)
    labels = graphs["structure_id"].map(run.structure_labels).fillna("")
    table = graphs.assign(label=labels).groupby(["label", "phase"], as_index=False)
    stats = table.agg(graphs=("graph_id", "size"), time_ns=("duration_ns", "sum"))
    return stats.sort_values("time_ns", ascending=False, ignore_index=True)


# At most this many requests are listed in a summary (the first ones), with the count of all.


def requests(run: Run) -> list[dict[str, Any]]:
    """Each request the run served, per sequence, in the order they began: the prompt it fed
    and the text it generated (the tokens fed back while decoding: all but the last generated
    token, which no graph reads). Read token by token, as a server batches them: a sequence's
    tokens in one batch are prompt when there are several, or while its prompt has not ended
    (its last token asks for logits); a lone token after that is a generated one fed back. A
    request begins with a sequence's first tokens, where its positions go back (a slot's next
    request, whose prompt may start past a cached prefix), and with a prompt after generating.
    The warm-up is no request, nor are tokens of no sequence (a plain program's, read from its
    graphs' inputs: whisper.cpp's decoder steps)."""
    tokens = run.tokens.merge(run.graphs[["graph_id", "phase", "start_ns"]], on="graph_id")
    tokens = tokens[tokens["phase"].isin(TOKEN_PHASES) & (tokens["seq_id"] >= 0)]
    tokens = tokens.sort_values(["start_ns", "batch_index"], kind="stable")
    if tokens.empty:
        return []
    in_batch = tokens.groupby(["graph_id", "seq_id"])["pos"].transform("size").to_numpy()
    found: list[dict[str, Any]] = []
    current: dict[int, dict[str, Any]] = {}  # per sequence: its request in progress
    columns = (tokens[c].to_numpy() for c in ("seq_id", "pos", "output", "start_ns", "text"))
    for several, seq_id, pos, output, start_ns, text in zip(in_batch > 1, *columns, strict=True):
        request = current.get(int(seq_id))
        if request is None or pos <= request["last_pos"] or (several and request["generated_tokens"]):
            request = current[int(seq_id)] = {"seq_id": int(seq_id), "start_ns": int(start_ns), "prompt": [],
                                              "prompt_tokens": 0, "generated": [], "generated_tokens": 0,
                                              "last_pos": -1, "prompt_ended": False}  # fmt: skip
            found.append(request)
        side = "generated" if request["prompt_ended"] and not several else "prompt"
        request[side].append(text)
        request[f"{side}_tokens"] += 1
        request["last_pos"] = int(pos)
        request["prompt_ended"] = request["prompt_ended"] or bool(output)
    origin = int(run.graphs["start_ns"].min())
    return [{"seq_id": r["seq_id"], "start_ns": r["start_ns"] - origin, "prompt": "".join(r["prompt"]),
             "prompt_tokens": r["prompt_tokens"], "generated": "".join(r["generated"]),
             "generated_tokens": r["generated_tokens"]} for r in found]  # fmt: skip
