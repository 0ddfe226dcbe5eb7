"""The What-if view (GET .../whatif): the recorded placement and the fastest others found, each
predicted from the run (analysis/devices/advise.py), with where a decode step's time goes on each
device and the memory each needs."""

from __future__ import annotations

from typing import Any

from ..._errors import GgmlVizError
from ...analysis.devices import run_devices
from ...analysis.devices.activity import run_activity
from ...analysis.devices.advise import advise
from ...analysis.devices.placement import placement_model, predicting_graphs
from ...analysis.devices.prediction import LEFT_OUT
from ...analysis.devices.steps import device_parts, step_windows
from ...analysis.roofline import run_limits
from ..context import RunContext
from ..payloads import WhatifPayload, WhatifRow

SHOWN = 8  # placements besides the recorded one
NOTHING = ("nothing to predict: the run computed on one device and its limits were not measured at several thread "
           "counts (`ggml-viz limits --for RUN` measures them)")  # fmt: skip


def whatif(context: RunContext) -> WhatifPayload:
    run = context.run
    empty: WhatifPayload = {"reason": NOTHING, "devices": [], "rows": [], "check": {}, "prompt_tokens": None,
                            "limit_doubts": [], "left_out": LEFT_OUT}  # fmt: skip
    activity = run_devices(run)
    if activity is None:
        limits = run_limits(run)
        if limits is None or len(limits.threads_measured()) < 2:
            return empty
        activity = run_activity(run, predicting_graphs(run.graphs))
    try:
        model = placement_model(run, activity, device_parts(step_windows(run.graphs), activity))
        advice = advise(model, {}, top=SHOWN)
    except GgmlVizError as error:
        return {**empty, "reason": str(error)}
    rows = [_row(advice["recorded"]), *(_row(row) for row in advice["best"])]
    return {"reason": None, "devices": model.devices, "rows": rows,
            "check": advice["check"], "prompt_tokens": advice["recorded"].get("prompt_tokens"),
            "limit_doubts": list(model.limit_doubts),
            "left_out": LEFT_OUT}  # fmt: skip


def _row(row: dict[str, Any]) -> WhatifRow:
    def rate(key: str) -> float | None:
        value = row.get(key)
        return float(value) if value else None

    return {"flags": row["flags"], "recorded": bool(row["recorded"]),
            "decode_tokens_per_s": rate("decode_tokens_per_s"), "prompt_tokens_per_s": rate("prompt_tokens_per_s"),
            "decode_parts": {name: float(ns) for name, ns in (row.get("decode_parts") or {}).items()},
            "memory": {device: {"weights": int(m["weights"]), "kv_cache": int(m["kv_cache"]),
                                "compute": int(m["compute"]), "total": int(m["total"])}
                       for device, m in row["memory"].items()}}  # fmt: skip
