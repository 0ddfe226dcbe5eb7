"""The slots view's JSON (GET .../slots): a served run's KV cells per sequence over time, its
context shifts and prompt-cache reuses, and the KV bytes each decode step read."""

from __future__ import annotations

from typing import TypedDict

from ...analysis.kv import KvEvent


class SlotReads(TypedDict):
    """Columnar, one entry per context length a decode step reached: the KV bytes the step read
    per token there (the most of its steps)."""

    context_cells: list[int]
    kv_bytes_per_token: list[int]


class SlotsPayload(TypedDict):
    """GET /api/runs/{id}/slots (empty `sequences`: no token of a sequence in the run)"""

    context_id: int | None  # the context shown (the first one that fed sequences)
    time_ns: list[int]  # per point: a llama_decode call's end (the last of a bucket of calls)
    decode_index: list[int]  # per point: that call's number
    sequences: list[int]
    cells: list[list[int]]  # [sequence][point]: the cells it held (the most of the bucket)
    capacity: int | None  # the cache's cells in all
    per_sequence_capacity: int | None  # one sequence's (None: shared, or not known)
    capacity_note: str  # why no capacity is shown, where none is
    events: list[KvEvent]
    reads: SlotReads
