"""The What-if view's JSON (GET .../whatif): other flags predicted from the run."""

from __future__ import annotations

from typing import TypedDict

from ...analysis.devices.prediction import PlacementCheck


class WhatifMemory(TypedDict):
    """One device's memory under a placement, in bytes."""

    weights: int
    kv_cache: int
    compute: int
    total: int


class WhatifRow(TypedDict):
    """One placement: its flags, its predicted rates, where a decode step's time goes."""

    flags: str  # as llama.cpp spells them (a flag left out: as recorded)
    recorded: bool
    decode_tokens_per_s: float | None
    prompt_tokens_per_s: float | None
    decode_parts: dict[str, float]  # ns of a decode step: each device's compute, "crossings", "fixed"
    memory: dict[str, WhatifMemory]  # per device


class WhatifPayload(TypedDict):
    """GET /api/runs/{id}/whatif (no rows: `reason` says why nothing is predicted)"""

    reason: str | None
    devices: list[str]
    rows: list[WhatifRow]  # the recorded placement first, then the fastest decode found
    check: dict[str, PlacementCheck]  # per phase: the recorded placement against its own steps
    prompt_tokens: int | None  # the prompt the prompt rates are for
    limit_doubts: list[str]  # the run's limits slower at more threads (other work had the cores?)
    left_out: str
