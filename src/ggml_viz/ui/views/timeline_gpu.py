"""The timeline's GPU lanes (part of GET .../timeline): per context and device, a window's kernels as bars,
or summed per pixel column, with the traced graphs' spans."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gpu import OTHER_CODES, GpuRun
from ..payloads import GpuLane, KernelBars, PixelColumns, TracedSpans

DETAIL_LIMIT = 4000  # as the host lane: a window with more kernels sums the narrow ones per pixel column
WINDOW_KERNEL_LIMIT = 400_000  # a window over more kernels is drawn from the pieces, without reading them
OVERVIEW_BINS = 16_384  # time bins of a lane's whole-run view (see _bins)


def gpu_lanes(gpu: GpuRun, t0: int, t1: int, width: int) -> dict[int, list[GpuLane]]:
    """Per context, its GPU lanes for the window [t0, t1) at `width` pixels: each kernel
    (DETAIL_LIMIT at most, the widest), or the narrow ones summed per pixel column, or
    for a window over more than WINDOW_KERNEL_LIMIT kernels the pieces summed so."""
    ns_per_px = (t1 - t0) / width
    in_window = []
    for lane in gpu.lanes:
        first = int(np.searchsorted(lane["end_max"], t0, side="right"))
        last = int(np.searchsorted(lane["start"], t1, side="left"))
        in_window.append(slice(first, max(first, last)))
    many = [
        int(lane["kernels"][graphs].sum()) > WINDOW_KERNEL_LIMIT
        for lane, graphs in zip(gpu.lanes, in_window, strict=True)
    ]
    kernels = gpu.kernels_in(t0, t1) if not all(many) else None
    found: dict[int, list[GpuLane]] = {}
    for lane, graphs, wide_window in zip(gpu.lanes, in_window, many, strict=True):
        if wide_window or kernels is None:
            bars, columns = _no_kernels(), _columns_of_pieces(gpu, lane, t0, t1, width, ns_per_px)
            names: list[int] = []
        else:
            mine = (kernels["context"] == lane["context_id"]) & (kernels["device"] == lane["device"])
            bars, columns, names = _kernel_bars({k: v[mine] for k, v in kernels.items()}, t0, t1, width, ns_per_px)
        # the traced graphs met: where the GPU was watched (elsewhere nothing was recorded)
        spans = lane["end"][graphs] > t0
        traced: TracedSpans = {
            "start": lane["start"][graphs][spans].tolist(),
            "end": lane["end"][graphs][spans].tolist(),
            "graph_id": lane["graph_id"][graphs][spans].tolist(),
        }
        found.setdefault(lane["context_id"], []).append(
            {
                "label": lane["label"],
                "device": lane["device"],
                "device_name": gpu.device_name(lane["device"]),
                "kernels": [gpu.short_names[i] for i in names],
                "names": [gpu.full_names[i] for i in names],
                "bars": bars,
                "columns": columns,
                "traced": traced,
            }
        )
    return found


def _kernel_bars(
    kernels: dict[str, np.ndarray], t0: int, t1: int, width: int, ns_per_px: float
) -> tuple[KernelBars, PixelColumns, list[int]]:
    """A lane's kernels in the window: each its own bar, or (more than DETAIL_LIMIT) the
    widest DETAIL_LIMIT so and the rest summed per pixel column; and the names' ids the
    bars index (KernelBars.kernel)."""
    order = np.argsort(kernels["start"], kind="stable")
    kernels = {key: values[order] for key, values in kernels.items()}
    s, e = kernels["start"], kernels["end"]
    wide = np.ones(len(s), dtype=bool)
    columns = _no_columns()
    if len(s) > DETAIL_LIMIT:
        wide_index = np.sort(np.argsort(s - e, kind="stable")[:DETAIL_LIMIT])
        wide = np.zeros(len(s), dtype=bool)
        wide[wide_index[(e - s)[wide_index] >= 2 * ns_per_px]] = True
        # a column is as busy as the device was in it: the narrow kernels' busy time (overlap
        # counted once) spread over the columns each covers
        narrow = np.flatnonzero(~wide)
        column, pick, busy = spread(s[narrow], e[narrow], kernels["busy"][narrow], t0, t1, ns_per_px, width)
        columns = pixel_columns(column, kernels["op"][narrow][pick], busy, ns_per_px)
    names, name_index = np.unique(kernels["name"][wide], return_inverse=True)
    bars: KernelBars = {
        "start": s[wide].tolist(),
        "end": e[wide].tolist(),
        "busy": kernels["busy"][wide].tolist(),
        "op": kernels["op"][wide].tolist(),
        "event": kernels["event"][wide].tolist(),
        "kernel": name_index.tolist(),
        "bytes": kernels["bytes"][wide].tolist(),
    }
    return bars, columns, names.tolist()


def _columns_of_pieces(
    gpu: GpuRun, lane: dict[str, Any], t0: int, t1: int, width: int, ns_per_px: float
) -> PixelColumns:
    """A wide window's pixel columns from the pieces, each spread evenly over its span;
    a window wider than a few of the lane's OVERVIEW_BINS from those bins (computed once)."""
    bins = _bins(gpu, lane)
    bin_ns = bins["bin_ns"]
    if ns_per_px >= 4 * bin_ns:
        first, last = int(max(t0, 0) // bin_ns), int(min(np.ceil(t1 / bin_ns), OVERVIEW_BINS))
        keep = (bins["bin"] >= first) & (bins["bin"] < last)
        column = np.clip(((bins["bin"][keep] * bin_ns - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        return pixel_columns(column, bins["op"][keep], bins["busy"][keep], ns_per_px)
    pieces, rows = gpu.pieces, _pieces_of(gpu, lane)
    first = int(np.searchsorted(lane["pieces_end_max"], t0, side="right"))
    rows = rows[first : max(first, int(np.searchsorted(pieces["start"][rows], t1, side="left")))]
    column, pick, busy = spread(
        pieces["start"][rows], pieces["end"][rows], pieces["busy"][rows], t0, t1, ns_per_px, width
    )
    return pixel_columns(column, pieces["op"][rows][pick], busy, ns_per_px)


def _pieces_of(gpu: GpuRun, lane: dict[str, Any]) -> np.ndarray:
    """The rows of the pieces that are the lane's (sorted by start; the running maximum of
    their ends kept with the lane)."""
    if "pieces" not in lane:
        pieces = gpu.pieces
        rows = np.flatnonzero((pieces["context"] == lane["context_id"]) & (pieces["device"] == lane["device"]))
        lane["pieces"] = rows
        lane["pieces_end_max"] = np.maximum.accumulate(pieces["end"][rows]) if len(rows) else pieces["end"][rows]
    return lane["pieces"]


def _bins(gpu: GpuRun, lane: dict[str, Any]) -> dict[str, Any]:
    """The lane's whole run cut into OVERVIEW_BINS equal spans: each op code's busy time
    in each (sparse: only the bins with some)."""
    if "bins" not in lane:
        duration = gpu.context.duration_ns
        bin_ns = max(1.0, duration / OVERVIEW_BINS)
        pieces, rows = gpu.pieces, _pieces_of(gpu, lane)
        column, pick, busy = spread(
            pieces["start"][rows], pieces["end"][rows], pieces["busy"][rows], 0, duration, bin_ns, OVERVIEW_BINS
        )
        key = column * (1 << 16) + (pieces["op"][rows][pick] + OTHER_CODES)
        keys, index = np.unique(key, return_inverse=True)
        lane["bins"] = {
            "bin_ns": bin_ns,
            "bin": keys >> 16,
            "op": (keys & 0xFFFF) - OTHER_CODES,
            "busy": np.bincount(index, weights=busy, minlength=len(keys)),
        }
    return lane["bins"]


def spread(
    start: np.ndarray, end: np.ndarray, busy: np.ndarray, t0: float, t1: float, ns_per_px: float, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each span's busy time spread evenly over the pixel columns of [t0, t1) it covers (a
    span reaching out of the window: the part of its time inside): (column, the span's
    index, busy ns) per piece of it."""
    inside = np.flatnonzero((end > t0) & (start < t1) | ((end == start) & (start >= t0) & (start < t1)))
    length = np.maximum(end[inside] - start[inside], 1)
    start, end = np.maximum(start[inside], t0), np.minimum(end[inside], t1)
    busy = busy[inside] * (np.maximum(end - start, 1) / length)
    first = np.clip(((start - t0) / ns_per_px).astype(np.int64), 0, width - 1)
    last = np.clip(((np.maximum(end, start + 1) - 1 - t0) / ns_per_px).astype(np.int64), 0, width - 1)
    span = last - first + 1
    repeat = np.repeat(np.arange(len(start)), span)
    column = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
    return column, inside[repeat], (busy / span)[repeat]


def pixel_columns(column: np.ndarray, op: np.ndarray, busy_ns: np.ndarray, ns_per_px: float) -> PixelColumns:
    """Per pixel column with work in it: the op code that kept it busiest, and how busy it
    was (summed sparsely: a report's million-pixel window costs its kernels, not its width)."""
    if not len(column):
        return _no_columns()
    codes = 1 << 16
    keys, index = np.unique(column.astype(np.int64) * codes + (op.astype(np.int64) + OTHER_CODES), return_inverse=True)
    busy = np.bincount(index, weights=busy_ns, minlength=len(keys))
    px = keys // codes
    order = np.lexsort((busy, px))  # by column, then busy: each column's busiest last
    last = np.flatnonzero(np.append(px[order][1:] != px[order][:-1], True))
    columns, column_index = np.unique(px, return_inverse=True)
    total = np.bincount(column_index, weights=busy, minlength=len(columns))
    used = total > 0
    return {
        "px": columns[used].tolist(),
        "op": ((keys[order][last] % codes) - OTHER_CODES)[used].tolist(),
        "fill": np.minimum(total[used] / ns_per_px, 1.0).round(3).tolist(),
    }


def _no_kernels() -> KernelBars:
    return {"start": [], "end": [], "busy": [], "op": [], "event": [], "kernel": [], "bytes": []}


def _no_columns() -> PixelColumns:
    return {"px": [], "op": [], "fill": []}
