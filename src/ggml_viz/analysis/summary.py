"""The summary of a run: every breakdown, the findings, throughput and the GPU's story, gathered
into the object `ggml-viz summary --json` prints (and the viewer and the report show)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from ..runformat.reader import Run
from .breakdowns import (
    backends,
    graphs_by_computation,
    memory_by_buffer,
    node_waits,
    phase_stats,
    requests_and_count,
    time_by_component,
    time_by_layer,
    time_by_op,
    time_by_tensor,
    untimed_reason,
    weight_reads,
)
from .components import structure_components
from .devices import device_summary, placement_advice, run_devices
from .findings import FindingContext, find_all
from .flops import throughput_by_op
from .gpu import gpu_summary
from .memory import kv_cache_extremes
from .moe import moe_summary
from .roofline import roofline_summary

TIMING_LABELS = {
    "inline": "inline (host clock, each graph run whole)",
    "sync": "sync (host clock, each node computed alone: on a GPU without fusion or CUDA graphs, and "
    "synchronized after every node)",
}


def timing_label(timing: str | None) -> str:
    """What a --timing setting measures, in words (wherever node times are shown)."""
    return TIMING_LABELS.get(timing or "", timing or "?")


LISTED_REQUESTS = 50


def summarize(run: Run, top: int = 10) -> dict[str, Any]:
    """Everything `ggml-viz summary` shows, as plain data."""
    manifest = run.manifest
    served, n_requests = requests_and_count(run, LISTED_REQUESTS)
    generation = manifest.get("generation") or {}
    # one request: its prompt and text are the run's (a server's requests are listed apart)
    only = served[0] if n_requests == 1 else {"prompt": "", "generated": None}
    totals = run.node_totals
    phases, reads, components = phase_stats(run), weight_reads(run), structure_components(run)  # findings use them too
    gpu = gpu_summary(run, top)
    roofline = roofline_summary(run, reads, top)
    said, sections = find_all(
        run, FindingContext(phases=phases, reads=reads, components=components, gpu=gpu, roofline=roofline)
    )
    activity = run_devices(run)
    devices = device_summary(run, activity) if activity is not None else None
    if devices and devices["finding"]:
        said.append(devices["finding"])
    placement = placement_advice(run, activity)
    if placement and placement["finding"]:
        said.append(placement["finding"])
    return {
        "run": str(run.path),
        "experiment_id": run.experiment_id,
        "status": run.status,
        "incomplete_reason": manifest.get("incomplete_reason"),
        "created": manifest.get("created"),
        "model": manifest.get("model"),
        "contexts": manifest.get("contexts"),
        "prompt": generation.get("prompt", only["prompt"]),
        "generated_text": generation.get("generated_text", only["generated"]),
        "requests": served,
        "n_requests": n_requests,
        "backends": backends(run),
        "graphs": int(len(run.graphs)),
        "node_events": int(totals["graphs"].sum()),  # each graph runs each node of its structure once
        "timed_node_events": int(totals["timed"].sum()),
        "dropped_graphs": int((manifest.get("counts") or {}).get("dropped_graphs", 0)),
        "dropped_events": int((manifest.get("counts") or {}).get("dropped_events", 0)),
        "untimed_graphs": int((manifest.get("counts") or {}).get("untimed_graphs", 0)),
        "timing": (manifest.get("capture") or {}).get("timing", "sync"),
        "timing_label": timing_label((manifest.get("capture") or {}).get("timing", "sync")),
        "untimed_reason": untimed_reason(manifest),
        "clocks": {str(k): int(v) for k, v in totals.groupby("clock")["timed"].sum().items()},
        "gpu": gpu,
        "devices": devices,
        "placement": placement,  # other flags, predicted from this run (analysis/devices/advise.py)
        "node_waits": node_waits(run),
        "phases": records(phases),
        "computations": records(graphs_by_computation(run).head(top)),
        "time_by_op": records(time_by_op(run).head(top)),
        "top_layers": records(time_by_layer(run).head(top)),
        "top_tensors": records(time_by_tensor(run).head(top)),
        "time_by_component": records(time_by_component(run, components)),
        "memory_by_buffer": records(memory_by_buffer(run)),
        "weight_reads": reads,
        "kv_cache": _kv_summary(run),
        "moe": moe_summary(run),
        "throughput_by_op": roofline["by_op"] if roofline["limits"] else records(throughput_by_op(run).head(top)),
        "roofline": roofline,  # against this machine's limits (analysis/roofline.py); limits None: none measured
        "findings": said,
        "sections": [asdict(section) for section in sections],  # titled findings (plugins'), each shown apart
    }


def _kv_summary(run: Run) -> dict[str, Any]:
    """The KV cache's layers, and the last graph's cells in use, capacity and fill (memory.kv_cache_fill's,
    from each graph's last position: kv_cache_extremes)."""
    kv = kv_cache_extremes(run)
    if kv is None:
        return {"layers": 0}
    return {key: kv[key] for key in ("layers", "used", "capacity", "fill")}


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as dicts of plain Python values (JSON and rich take them as they are)."""
    return [{k: plain(v) for k, v in row.items()} for row in table.to_dict(orient="records")]


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else as it is."""
    if hasattr(value, "item"):
        return value.item()
    return value
