"""What to record and how: one settings object for the API, the CLI and the environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .._errors import CaptureError

RECORDERS = ("native", "python")
DETAILS = ("op", "graph")
TIMINGS = ("inline", "sync")
POLICIES = ("keep-first", "keep-last")
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class NodeSelection:
    """Which nodes are timed on their own (the rest are recorded as structure).

    Filters combine: a node must match every filter given. An empty selection is all nodes.
    """

    ops: tuple[str, ...] = ()  # op names, specific (SWIGLU) or base (GLU)
    layers: tuple[tuple[int, int], ...] = ()  # inclusive layer ranges
    no_layer: bool = False  # also nodes outside any layer (the "none" in --layers)
    names: tuple[str, ...] = ()  # glob patterns on tensor names

    @property
    def is_everything(self) -> bool:
        return not (self.ops or self.layers or self.no_layer or self.names)


DEFAULT_CAPTURE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ValueSettings:
    """Reading node outputs after they are computed (each such node is computed alone)."""

    stats: bool = False  # --values stats: min, max, mean, std, mean |x|, NaN and Inf counts per node
    captures: tuple[str, ...] = ()  # --capture: name globs of nodes whose whole output is stored
    capture_bytes: int = DEFAULT_CAPTURE_BYTES  # at most this many bytes of captures per run

    @property
    def wanted(self) -> bool:
        return self.stats or bool(self.captures)


@dataclass(frozen=True)
class CaptureSettings:
    recorder: str = "native"  # native (C extension) or python (fallback, test oracle)
    detail: str = "op"  # op: time every node; graph: structure and graph times only
    # inline: graphs run in one piece, node times from the CPU backend's per-node callback;
    # sync: each timed node is computed alone and synchronized (exact, any backend, slower)
    timing: str = "inline"
    sample: int | None = None  # time nodes on every N-th decode graph and the first prompt graph
    selection: NodeSelection = field(default_factory=NodeSelection)
    max_events: int | None = None
    policy: str = "keep-first"
    values: ValueSettings = field(default_factory=ValueSettings)

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.recorder, RECORDERS, "recorder"),
            (self.detail, DETAILS, "detail"),
            (self.timing, TIMINGS, "timing"),
            (self.policy, POLICIES, "policy"),
        ):
            if value not in allowed:
                raise CaptureError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if self.sample is not None and self.sample < 1:
            raise CaptureError("sample must be 1 or more (time every N-th decode graph)")
        if self.max_events is not None and self.max_events < 1:
            raise CaptureError("max_events must be a positive number of node events")
        if self.values.capture_bytes < 0:
            raise CaptureError("capture_bytes must be 0 or more")
        if len(self.values.captures) > 16 or any(len(p.encode()) > 63 for p in self.values.captures):
            raise CaptureError("capture: at most 16 name patterns of at most 63 bytes")

    def describe(self) -> dict[str, Any]:
        described = asdict(self)
        described["selection"] = {k: list(v) if isinstance(v, tuple) else v for k, v in described["selection"].items()}
        described["values"] = {k: list(v) if isinstance(v, tuple) else v for k, v in described["values"].items()}
        return described


def parse_ops(text: str | None) -> tuple[str, ...]:
    return tuple(op.strip().upper() for op in (text or "").split(",") if op.strip())


def parse_names(values: list[str] | str | None) -> tuple[str, ...]:
    if values is None:
        return ()
    items = values.split(",") if isinstance(values, str) else values
    return tuple(item.strip() for item in items if item.strip())


def parse_layers(text: str | None) -> tuple[tuple[tuple[int, int], ...], bool]:
    """'0-3,29,none' -> (((0, 3), (29, 29)), True)."""
    ranges: list[tuple[int, int]] = []
    no_layer = False
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if part.strip().lower() == "none":
            no_layer = True
            continue
        match = _RANGE.match(part)
        if not match:
            raise CaptureError(f"layers: {part.strip()!r} is not a layer, a range like 0-3, or 'none'")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low:
            raise CaptureError(f"layers: the range {part.strip()!r} runs backwards")
        ranges.append((low, high))
    return tuple(ranges), no_layer


def selection_from(ops: str | None, layers: str | None, names: list[str] | str | None) -> NodeSelection:
    layer_ranges, no_layer = parse_layers(layers)
    return NodeSelection(ops=parse_ops(ops), layers=layer_ranges, no_layer=no_layer, names=parse_names(names))


def settings_from_environment(env: Mapping[str, str] | None = None) -> CaptureSettings:
    """GGML_VIZ_RECORDER, _DETAIL, _TIMING, _SAMPLE, _OPS, _LAYERS, _NAMES, _MAX_EVENTS, _POLICY, _VALUES,
    _CAPTURE, _CAPTURE_BYTES."""
    env = os.environ if env is None else env

    def number(name: str) -> int | None:
        text = env.get(name, "").strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise CaptureError(f"{name}={text!r} is not a whole number") from None

    return CaptureSettings(
        recorder=env.get("GGML_VIZ_RECORDER", "native").strip() or "native",
        detail=env.get("GGML_VIZ_DETAIL", "op").strip() or "op",
        timing=env.get("GGML_VIZ_TIMING", "inline").strip() or "inline",
        sample=number("GGML_VIZ_SAMPLE"),
        selection=selection_from(env.get("GGML_VIZ_OPS"), env.get("GGML_VIZ_LAYERS"), env.get("GGML_VIZ_NAMES")),
        max_events=number("GGML_VIZ_MAX_EVENTS"),
        policy=env.get("GGML_VIZ_POLICY", "keep-first").strip() or "keep-first",
        values=values_from(env.get("GGML_VIZ_VALUES"), env.get("GGML_VIZ_CAPTURE"), number("GGML_VIZ_CAPTURE_BYTES")),
    )


def values_from(values: str | None, captures: list[str] | str | None, capture_bytes: int | None) -> ValueSettings:
    mode = (values or "off").strip() or "off"
    if mode not in ("off", "stats"):
        raise CaptureError(f"unknown values {mode!r}; choose one of off, stats")
    return ValueSettings(
        stats=mode == "stats",
        captures=parse_names(captures),
        capture_bytes=DEFAULT_CAPTURE_BYTES if capture_bytes is None else capture_bytes,
    )
