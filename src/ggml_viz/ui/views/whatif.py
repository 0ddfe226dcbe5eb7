"""The What-if view (GET .../whatif): the recorded placement and the fastest others found, each
predicted from the run (analysis/devices/advise.py), with where a decode step's time goes on each
device and the memory each needs."""

from __future__ import annotations

from ..._errors import GgmlVizError
from ...analysis.devices import run_advice, run_devices
from ...analysis.devices.advise import shown
from ...analysis.devices.prediction import LEFT_OUT, PlacementPrediction
from ..context import RunContext
from ..payloads import WhatifPayload, WhatifRow

SHOWN = 8  # placements besides the recorded one


def whatif(context: RunContext) -> WhatifPayload:
    run = context.run
    empty: WhatifPayload = {
        "reason": None,
        "devices": [],
        "rows": [],
        "check": {},
        "prompt_tokens": None,
        "limit_doubts": [],
        "left_out": LEFT_OUT,
    }
    try:
        model, advice = run_advice(run, run_devices(run), top=SHOWN + 1)
    except GgmlVizError as error:
        return {**empty, "reason": str(error)}
    rows = [_row(row) for row in shown(advice, SHOWN)]
    return {
        "reason": None,
        "devices": model.devices,
        "rows": rows,
        "check": advice["check"],
        "prompt_tokens": advice["recorded"].get("prompt_tokens"),
        "limit_doubts": list(model.limit_doubts),
        "left_out": LEFT_OUT,
    }


def _row(row: PlacementPrediction) -> WhatifRow:
    def rate(value: float | None) -> float | None:
        return float(value) if value else None

    return {
        "flags": row["flags"],
        "recorded": bool(row["recorded"]),
        "decode_tokens_per_s": rate(row.get("decode_tokens_per_s")),
        "prompt_tokens_per_s": rate(row.get("prompt_tokens_per_s")),
        "decode_parts": {name: float(ns) for name, ns in (row.get("decode_parts") or {}).items()},
        "memory": {
            device: {
                "weights": int(m["weights"]),
                "kv_cache": int(m["kv_cache"]),
                "compute": int(m["compute"]),
                "total": int(m["total"]),
            }
            for device, m in row["memory"].items()
        },
    }
