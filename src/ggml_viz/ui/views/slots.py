"""The slots view (GET .../slots): a served run's KV cache over time, per sequence (a server's
slot), with its capacity, context shifts and cache reuses, and the KV bytes read per decode
step against the context (analysis/kv.py)."""

from __future__ import annotations

import numpy as np

from ...analysis.kv import KvEvent, cells_by_call, kv_capacity, kv_event_table, kv_reads, served_context
from ...analysis.rows import records_as
from ..context import RunContext
from ..payloads import SlotsPayload

MAX_POINTS = 2000  # calls drawn: a longer run's calls are bucketed, each bucket its most cells
NO_CAPACITY = "no KV cache tensors in the run: its capacity is not known"


def slots(context: RunContext) -> SlotsPayload:
    """Cells per sequence over the calls of the first context that fed sequences (served_context),
    bucketed to at most MAX_POINTS points; the capacity, the events and the reads of that context."""
    run = context.run
    cells = cells_by_call(run)
    shown = served_context(run)
    capacity = kv_capacity(run, shown)
    empty: SlotsPayload = {
        "context_id": None,
        "time_ns": [],
        "decode_index": [],
        "sequences": [],
        "cells": [],
        "capacity": capacity["cells"] if capacity else None,
        "per_sequence_capacity": capacity["per_sequence"] if capacity else None,
        "capacity_note": "" if capacity else NO_CAPACITY,
        "events": [],
        "reads": {"context_cells": [], "kv_bytes_per_token": []},
    }
    if shown is None:
        return empty
    wide = cells.loc[shown].dropna(axis="columns", how="all").fillna(0)
    sequences = [int(seq) for seq in wide.columns if seq != "time_ns"]
    bucket = np.arange(len(wide)) * MAX_POINTS // max(len(wide), 1)
    grouped = wide.groupby(bucket)
    times = grouped["time_ns"].max()
    calls = wide.index.to_series().groupby(bucket).max()
    most = grouped[sequences].max()
    events = kv_event_table(run)
    reads = kv_reads(run)
    decode = reads[(reads["context_id"] == shown) & (reads["phase"] == "decode") & (reads["n_tokens"] > 0)]
    per_token = (decode["kv_bytes"] / decode["n_tokens"]).round().astype(np.int64)
    by_context = per_token.groupby(decode["context_cells"]).max().sort_index()
    return {
        **empty,
        "context_id": shown,
        "time_ns": [int(t) for t in times],
        "decode_index": [int(c) for c in calls],
        "sequences": sequences,
        "cells": [[int(v) for v in most[seq]] for seq in sequences],
        "events": records_as(events[events["context_id"] == shown], KvEvent),
        "reads": {
            "context_cells": [int(c) for c in by_context.index],
            "kv_bytes_per_token": [int(b) for b in by_context],
        },
    }
