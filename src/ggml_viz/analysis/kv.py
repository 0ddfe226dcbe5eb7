"""A served run's KV cache over time, per sequence (a server's slot): pure functions over a run's
tables, read per llama_decode call (the graphs of one call together: a call's ubatches are one
step of every sequence it fed).

- `kv_capacity(run)`: the cache's cells, in all and per sequence, from its tensors' shape.
- `cells_by_call(run)`, `cells_over_time(run)`: per call and sequence, the cells the sequence
  holds after it (a column per sequence, or a row per call and sequence).
- `kv_events(run)`: context shifts and prompt-cache reuse, with the cells before and after.
- `kv_reads(run)`: per call, the bytes its attention read from the cache, against its context.
- `kv_use(run)`: what the summary says of them, for the first context that fed sequences
  (`served_context(run)`: a server's model, before a draft model's).

A sequence holds positions 0..the largest it has fed: a new request on a slot that starts at
position p kept p cells of its cache (the cached prefix of its prompt), one that starts at 0
cleared it. Positions going back while the sequence generates, one token a call, are a context
shift: the slot was full, the server discarded cells and moved the rest back. The calls that
shift write into the cache other than by a row store (a RoPE over the cached keys, in place):
that marks a shift, and so does a slot full but one that goes on generating from an earlier
position (a model whose keys are not moved).
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..runformat.memory_sources import STATE_WRITES, VIEW_OPS, bytes_read
from ..runformat.reader import Run
from .rows import records_as

CONTEXT_SHIFT = "context_shift"
CACHE_REUSE = "cache_reuse"


class KvCapacity(TypedDict):
    """The KV cache's cells (kv_capacity): its tensors are [row, cells, streams], one stream per
    sequence unless the sequences share one (then `per_sequence` is None: any may fill it all)."""

    cells: int  # in all: cells × streams
    per_sequence: int | None
    streams: int


class KvEvent(TypedDict):
    """A context shift or a prompt-cache reuse (kv_events)."""

    context_id: int
    decode_index: int
    time_ns: int  # the call's end, from the run's first graph
    seq_id: int
    kind: str  # "context_shift" or "cache_reuse"
    cells_before: int
    cells_after: int  # kept: the position the sequence went on from


class KvUse(TypedDict):
    """The summary's `kv` part (kv_use): cells and cache reads of a run with sequences."""

    peak_cells: int  # the most cells all sequences held at once
    capacity: int | None  # the cache's cells in all (None: not in the run)
    per_sequence_capacity: int | None
    peak_cells_by_sequence: dict[str, int]  # sequence id (as JSON keys are) -> its most cells
    context_shifts: int
    cache_reuses: int
    decode_kv_bytes_per_token: int | None  # at the largest context a decode call reached
    decode_context_cells: int | None  # that context


def kv_capacity(run: Run, context_id: int | None = None) -> KvCapacity | None:
    """The KV cache's cells from its tensors (the tensors of the KV cache's buffers that own their
    bytes: [row, cells, streams]); the largest layer's (a sliding-window layer's cache is smaller),
    of one context's buffers where `context_id` is given. None where the run has none."""
    tensors = run.tensors
    cache = tensors[(tensors["buffer_kind"] == "kv_cache") & tensors["view_src_id"].isna() & (tensors["op"] == "NONE")]
    if context_id is not None:
        owner = run.buffers.set_index("buffer")["context_id"]
        cache = cache[cache["buffer"].map(owner) == context_id]
    if cache.empty:
        return None
    largest = cache.loc[(cache["ne1"] * cache["ne2"]).idxmax()]
    cells, streams = int(largest["ne1"]), int(largest["ne2"])
    return {"cells": cells * streams, "per_sequence": cells if streams > 1 else None, "streams": streams}


def served_context(run: Run) -> int | None:
    """The first llama context that fed tokens of a sequence (a server's model: a draft model's
    context comes after it); None where none did."""
    fed = _fed(run)
    return int(fed["context_id"].min()) if len(fed) else None


def _calls(run: Run) -> pd.DataFrame:
    """Per llama_decode call (context_id, decode_index) of a llama context: its end (from the run's
    first graph), its tokens and phase (its first graph's), beside warm-ups left out."""
    graphs = run.graphs
    graphs = graphs[graphs["context_id"].notna() & graphs["decode_index"].notna() & (graphs["phase"] != "warmup")]
    origin = int(run.graphs["start_ns"].min()) if len(run.graphs) else 0
    ends = graphs["decode_end_ns"].fillna(graphs["end_ns"]) if "decode_end_ns" in graphs else graphs["end_ns"]
    by_call = graphs.assign(call_end=ends).groupby(["context_id", "decode_index"], sort=True)
    calls = by_call.agg(time_ns=("call_end", "max"), n_tokens=("n_tokens", "sum"), phase=("phase", "first"))
    calls["time_ns"] = calls["time_ns"].astype(np.int64) - origin
    return calls.reset_index()


def _tokens(run: Run) -> pd.DataFrame:
    """Each token of a sequence a llama context's call fed (warm-ups left out), in the order read:
    context_id, seq_id, decode_index, pos. From the graphs' token lists as stored (Arrow, numpy: no
    Python object per token, nor the tokens' texts)."""
    columns = ["graph_id", "context_id", "decode_index", "phase", "token_positions", "token_seq_ids"]
    graphs = run.arrow("graphs").select(columns)
    lists = graphs.column("token_positions").combine_chunks()
    row = pc.list_parent_indices(lists).to_numpy()

    def flat(column: str) -> np.ndarray:
        values = pc.list_flatten(graphs.column(column).combine_chunks())
        return pc.fill_null(values, -1).to_numpy(zero_copy_only=False).astype(np.int64)

    def per_graph(column: str) -> np.ndarray:
        return pc.fill_null(graphs.column(column), -1).to_numpy(zero_copy_only=False).astype(np.int64)

    served = pc.fill_null(pc.not_equal(graphs.column("phase"), "warmup"), True).to_numpy(zero_copy_only=False)
    context, call = per_graph("context_id")[row], per_graph("decode_index")[row]
    seq, pos = flat("token_seq_ids"), flat("token_positions")
    keep = np.flatnonzero(served[row] & (context >= 0) & (call >= 0) & (seq >= 0))
    # by context, sequence and call; within a call, as read (graph, then place: as stored)
    order = keep[np.lexsort((per_graph("graph_id")[row][keep], call[keep], seq[keep], context[keep]))]
    return pd.DataFrame(
        {"context_id": context[order], "seq_id": seq[order], "decode_index": call[order], "pos": pos[order]}
    )


def _fed(run: Run) -> pd.DataFrame:
    """Per call and sequence it fed, in order: its first and largest position, its tokens, and the
    cells the sequence holds after it (`cells`), with `start` where the sequence began again
    (positions going back: a new request, or a shift) and `lone` where it fed one token."""
    tokens = _tokens(run)
    columns = ["context_id", "seq_id", "decode_index"]
    if tokens.empty:
        return pd.DataFrame(columns=[*columns, "first_pos", "last_pos", "n", "first_of_seq", "start", "lone", "cells"])
    by_call = tokens.groupby(columns, sort=False)["pos"]  # sorted already
    fed = pd.DataFrame({"first_pos": by_call.first(), "last_pos": by_call.max(), "n": by_call.size()})
    fed = fed.astype(np.int64).reset_index()
    same = (fed["context_id"].to_numpy()[1:] == fed["context_id"].to_numpy()[:-1]) & (
        fed["seq_id"].to_numpy()[1:] == fed["seq_id"].to_numpy()[:-1]
    )
    first_of_seq = np.concatenate(([True], ~same))
    back = np.concatenate(([False], fed["first_pos"].to_numpy()[1:] <= fed["last_pos"].to_numpy()[:-1]))
    fed["first_of_seq"] = first_of_seq
    fed["start"] = first_of_seq | back
    fed["lone"] = fed["n"] == 1
    run_of_positions = np.cumsum(fed["start"].to_numpy())
    fed["cells"] = fed.groupby(run_of_positions)["last_pos"].cummax() + 1
    return fed


def cells_by_call(run: Run) -> pd.DataFrame:
    """Per llama_decode call (index: context_id, decode_index), the KV cells each sequence (a column
    per seq_id) holds after it: carried from its last call where the call did not feed it, NaN
    before its first; and the call's end (`time_ns`, from the run's first graph)."""
    fed = _fed(run)
    calls = _calls(run)[["context_id", "decode_index", "time_ns"]].set_index(["context_id", "decode_index"])
    if fed.empty:
        return calls.iloc[:0]
    wide = fed.pivot_table(index=["context_id", "decode_index"], columns="seq_id", values="cells", aggfunc="max")
    wide = calls.join(wide, how="left")
    sequences = [c for c in wide.columns if c != "time_ns"]
    wide[sequences] = wide.groupby(level="context_id")[sequences].ffill()
    return wide


def cells_over_time(run: Run) -> pd.DataFrame:
    """Per llama_decode call and each sequence seen by then in its context: the KV cells the
    sequence holds after the call (cells_by_call, a row per call and sequence). Columns:
    context_id, decode_index, time_ns (the call's end, from the run's first graph), seq_id, cells."""
    columns = ["context_id", "decode_index", "time_ns", "seq_id", "cells"]
    wide = cells_by_call(run)
    if wide.empty:
        return pd.DataFrame(columns=columns)
    sequences = [c for c in wide.columns if c != "time_ns"]
    long = wide.reset_index().melt(
        id_vars=["context_id", "decode_index", "time_ns"], value_vars=sequences, var_name="seq_id", value_name="cells"
    )
    long = long[long["cells"].notna()]
    long = long.astype({"context_id": np.int64, "decode_index": np.int64, "seq_id": np.int64, "cells": np.int64})
    return long[columns].sort_values(["context_id", "decode_index", "seq_id"], ignore_index=True)


def shifting_calls(run: Run) -> set[tuple[int, int]]:
    """The calls (context_id, decode_index) that shifted a sequence's cached positions (see _shift_calls)."""
    calls = _shift_calls(run)
    return set(zip(calls["context_id"].tolist(), calls["decode_index"].tolist(), strict=True))


def _shift_calls(run: Run) -> pd.DataFrame:
    """The calls (context_id, decode_index; `shifted` True) whose graphs write into the KV cache other than by a
    row store or copy: llama.cpp's shift of the cached keys' positions (a RoPE in place)."""
    nodes = run.raw("structure_nodes")[["structure_id", "tensor_id"]]
    tensors = run.tensors.set_index("tensor_id")
    kind = nodes["tensor_id"].map(tensors["buffer_kind"])
    op = nodes["tensor_id"].map(tensors["op_base"])
    writes = (kind == "kv_cache") & ~op.isin((*STATE_WRITES, *VIEW_OPS))
    shifting = set(nodes.loc[writes, "structure_id"])
    if not shifting:  # (a run whose graphs never write into a KV cache: no graph to look through)
        return pd.DataFrame({"context_id": [], "decode_index": [], "shifted": []}, dtype=np.int64).astype(
            {"shifted": bool}
        )
    graphs = run.graphs[run.graphs["structure_id"].isin(shifting) & run.graphs["decode_index"].notna()]
    calls = graphs[["context_id", "decode_index"]].drop_duplicates().astype(np.int64)
    return calls.assign(shifted=True)


def kv_event_table(run: Run) -> pd.DataFrame:
    """kv_events as a table (its columns, KvEvent's keys)."""
    fed = _fed(run)
    columns = list(KvEvent.__annotations__)
    if fed.empty:
        return pd.DataFrame(columns=columns)
    before = fed["cells"].shift(1)
    was_lone = fed["lone"].shift(1, fill_value=False)
    again = fed["start"] & ~fed["first_of_seq"] & (fed["first_pos"] > 0)
    shifted = fed.merge(_shift_calls(run), on=["context_id", "decode_index"], how="left")["shifted"]
    shifted = shifted.fillna(False).to_numpy(dtype=bool)
    # without the cache's positions moved (a model without RoPE): a slot full but one, generating
    slot_cells = np.zeros(len(fed), np.int64)  # 0: not known
    for context in fed["context_id"].unique():
        capacity = kv_capacity(run, int(context))
        if capacity:
            slot_cells[(fed["context_id"] == context).to_numpy()] = capacity["per_sequence"] or capacity["cells"]
    full = (slot_cells == 0) | (before.to_numpy() >= slot_cells - 1)
    is_shift = shifted | (fed["lone"].to_numpy() & was_lone.to_numpy() & full)
    events = fed.assign(
        kind=np.where(is_shift, CONTEXT_SHIFT, CACHE_REUSE), cells_before=before, cells_after=fed["first_pos"]
    )[again]
    times = _calls(run).set_index(["context_id", "decode_index"])["time_ns"]
    keys = pd.MultiIndex.from_frame(events[["context_id", "decode_index"]])
    events = events.assign(time_ns=times.reindex(keys).to_numpy())
    events = events.astype({"cells_before": np.int64, "time_ns": np.int64})
    return events[columns].sort_values(["time_ns", "seq_id"], ignore_index=True)


def kv_events(run: Run) -> list[KvEvent]:
    """Each context shift and prompt-cache reuse of the run, in time order: when a sequence went on
    from a position past 0 but not past its last one. A shift where the call moved the cache's
    positions, or the sequence was generating (one token a call, before and after) with its slot's
    cells full but one; a reuse otherwise (a new request whose prompt's first `cells_after` tokens were cached)."""
    return records_as(kv_event_table(run), KvEvent)


def kv_bytes_by_structure(run: Run) -> pd.Series:
    """Per graph structure, the bytes its nodes read from the KV cache: the sources in a KV cache
    buffer (views of the cache) of the nodes that compute into another buffer (attention: the
    cache's own writes and shifts are left out), as memory_sources.bytes_read counts them."""
    edges = run.raw("edges")
    if edges.empty:
        return pd.Series(dtype=np.int64)
    tensors = run.tensors.set_index("tensor_id")
    nodes = run.raw("structure_nodes").set_index(["structure_id", "node_index"])["tensor_id"]
    keys = pd.MultiIndex.from_frame(edges[["structure_id", "node_index"]])
    reader_kind = nodes.reindex(keys).map(tensors["buffer_kind"]).to_numpy()
    source_kind = edges["src_tensor_id"].map(tensors["buffer_kind"]).to_numpy()
    reads = (source_kind == "kv_cache") & (reader_kind != "kv_cache")
    read = bytes_read(edges, run.raw("structure_nodes"), run.raw("tensors")).astype(np.float64)
    # a view of the cache reads its elements, at the cache's bytes per element: not the span from
    # its first byte to its last (a view of several slots' streams spans the cells between their windows)
    source = tensors.reindex(edges["src_tensor_id"].to_numpy())
    root = tensors.reindex(source["view_src_id"].fillna(-1).astype(np.int64).to_numpy())
    elements = lambda t: (t["ne0"] * t["ne1"] * t["ne2"] * t["ne3"]).to_numpy(dtype=np.float64)  # noqa: E731
    root_elements = elements(root)
    viewed = reads & source["view_src_id"].notna().to_numpy() & (root_elements > 0)
    per_element = np.divide(
        root["nbytes"].to_numpy(dtype=np.float64), root_elements, where=viewed, out=np.zeros(len(edges))
    )
    read[viewed] = (elements(source) * per_element)[viewed]
    return read[reads].groupby(edges.loc[reads, "structure_id"]).sum().round().astype(np.int64)


def kv_reads(run: Run) -> pd.DataFrame:
    """Per llama_decode call: the bytes its graphs read from the KV cache, beside its context (the
    most cells a sequence it fed holds after it). Columns: context_id, decode_index, time_ns,
    phase, n_tokens, context_cells, kv_bytes."""
    columns = ["context_id", "decode_index", "time_ns", "phase", "n_tokens", "context_cells", "kv_bytes"]
    fed = _fed(run)
    if fed.empty:
        return pd.DataFrame(columns=columns)
    per_structure = kv_bytes_by_structure(run)
    graphs = run.graphs[run.graphs["decode_index"].notna() & run.graphs["context_id"].notna()]
    graphs = graphs.assign(kv_bytes=graphs["structure_id"].map(per_structure).fillna(0).astype(np.int64))
    per_call = graphs.groupby(["context_id", "decode_index"])["kv_bytes"].sum()
    context = fed.groupby(["context_id", "decode_index"])["cells"].max().rename("context_cells")
    calls = (
        _calls(run)
        .join(per_call, on=["context_id", "decode_index"])
        .join(context, on=["context_id", "decode_index"], how="inner")
    )
    calls = calls.astype({"context_id": np.int64, "decode_index": np.int64, "context_cells": np.int64})
    return calls[columns].reset_index(drop=True)


def kv_use(run: Run) -> KvUse | None:
    """The summary's KV cache of a run with sequences: the most cells held at once and by each
    sequence, the shifts and reuses, and the KV bytes a decode call read per token at the largest
    context a decode call reached; of the first context that fed sequences (served_context); None
    for a run without sequences."""
    wide = cells_by_call(run)
    if wide.empty:
        return None
    context = int(wide.drop(columns="time_ns").dropna(how="all").index.get_level_values("context_id").min())
    sequences = wide.loc[context].drop(columns="time_ns").dropna(axis="columns", how="all")
    capacity = kv_capacity(run, context)
    events = kv_event_table(run)
    events = events[events["context_id"] == context]
    reads = kv_reads(run)
    decode = reads[(reads["context_id"] == context) & (reads["phase"] == "decode") & (reads["n_tokens"] > 0)]
    per_token = context_cells = None
    if len(decode) and capacity is not None:
        largest = decode.loc[decode["context_cells"].idxmax()]
        per_token = int(round(largest["kv_bytes"] / largest["n_tokens"]))
        context_cells = int(largest["context_cells"])
    by_sequence = sequences.max()
    return {
        "peak_cells": int(sequences.fillna(0).sum(axis=1).max()),
        "capacity": capacity["cells"] if capacity else None,
        "per_sequence_capacity": capacity["per_sequence"] if capacity else None,
        "peak_cells_by_sequence": {str(seq): int(value) for seq, value in by_sequence.items()},
        "context_shifts": int((events["kind"] == CONTEXT_SHIFT).sum()),
        "cache_reuses": int((events["kind"] == CACHE_REUSE).sum()),
        "decode_kv_bytes_per_token": per_token,
        "decode_context_cells": context_cells,
    }
