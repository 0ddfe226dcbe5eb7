"""Which ggml node each kernel belongs to, and what share of the GPU's time it had.

Pure functions over a trace window's records (records.GpuWindow), tested on the records of
an H200 run (../shared/gpu/h200-q4_0 in the project's history: tests/unit/test_gpu_attribution.py).
Nothing here depends on a model's or a kernel's name: kernels map to nodes by the order and
the correlation of the calls that launched them.

- A kernel's runtime API call (its `correlation_id`) tells the compute that launched it:
  the one running on the calling thread when the call was made. On Vulkan the "call" is the
  command ggml-vulkan recorded (a dispatch, a buffer copy or fill, as ggml-viz's layer numbers
  them): recorded while the node was being built, it maps as an eager launch does.
- Eager passes (a compute's first runs, before ggml-cuda captures a CUDA graph): each kernel
  was launched by a runtime API call, and ggml-cuda reached the kernel's node just before
  (its per-node ggml_is_empty call): the node is the last one reached before the launch.
  ggml-cuda calls ggml_is_empty from other places too (its CUDA-graph check, for every
  node, first): only calls from the site that is last before launches count (`loop_site`).
- CUDA-graph captures: the launches are recorded, not run; the graph launched at the end of
  the compute runs their kernels in launch order, so the i-th launch's node is the i-th kernel's.
- CUDA-graph replays run the kernels of a known pass of the same graph structure in the
  same order: they map by position, once the count and every kernel's name agree (else the
  compute keeps its graph time, and counts as unattributed).
- A node may copy or set memory rather than launch a kernel (a CPY as cudaMemcpyAsync): the
  copy is part of the node's work like a kernel, and in a CUDA graph the driver may run it
  as a kernel of its own (`memcpy32_post`): a copy matches a copy or such a kernel.
- ggml-cuda fuses nodes (an RMS_NORM with the MUL after it): the loop skips the nodes it
  fused, so a node's kernels run the group from it up to the next node reached (group_end).
- Splits: the scheduler computes a graph split by split, each on its backend, and marks where
  each split's compute call began and returned (records.split_spans). A split on the GPU maps on
  its own, as a compute would (eager, captured or replayed: ggml-cuda captures and launches a
  CUDA graph per split), its template known by the graph structure and the split's first node.
  What a compute copies outside every split is the scheduler's: the inputs of the split that
  follows (from the CPU's split before, or to it), or a routing read. Those copies are transfers,
  no node's work, each with the split it feeds. Windows recorded before split ends were marked
  map each compute whole, as before.
- Overlap: on Hopper a kernel launched with programmatic dependent launch starts while the
  one before it still runs, and waits for it. A device's busy time is counted once, and each
  moment of it goes to the activity that was running first (`busy_ns`): a kernel's share
  starts where the device's earlier work ended.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .records import KERNEL, GpuWindow, is_copy, is_graph_launch, is_launch, split_spans, without_split_markers

NO_NODE = -1


COPY = -1  # a work item's signature when it copies or sets memory (a kernel's: its name id)


@dataclass(frozen=True)
class Template:
    """A known pass of one graph structure: its work items (kernels, copies) in launch order,
    each with its signature, its node and the last node of that node's fused group."""

    signatures: np.ndarray
    nodes: np.ndarray
    group_ends: np.ndarray


@dataclass
class AttributionState:
    """What one recording learns across windows: ggml-cuda's loop call site, a pass of each
    graph structure's split seen launched item by item (by structure and the split's first
    node: -1 for a compute mapped whole), and the kernel names seen."""

    loop_sites: Counter[int] = field(default_factory=Counter)
    templates: dict[tuple[int, int], Template] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Attribution:
    """A window's activities with their compute, node and share of the device's time."""

    compute: np.ndarray  # per activity: index into window.computes (-1: none)
    node: np.ndarray  # per activity: node index in its compute's graph (-1: none)
    group_end: np.ndarray  # per activity: last node of its node's fused group (-1: none)
    busy_ns: np.ndarray  # per activity: its share of its device's busy time
    # per compute: "eager", "capture", "replay" (each split's the same way, or several ways joined
    # by "+"), "unattributed" (no split's work mapped) or "none" (no kernels)
    mapping: np.ndarray
    split: np.ndarray  # per activity: first node of the split it ran in, or (a transfer) fed (-1: unknown)
    transfer: np.ndarray  # per activity: a copy of the scheduler's, between splits (no node's work)


def attribute(window: GpuWindow, structures: np.ndarray, state: AttributionState) -> Attribution:
    """Map a window's kernels to nodes. `structures`: per compute, its graph structure (a key
    that graphs of the same structure share; -1: unknown)."""
    computes, activities = window.computes, window.activities
    state.names.update(window.names)
    api_compute = _api_computes(window)
    activity_api = _index_of(window.api_calls["correlation_id"], activities["correlation_id"])
    compute = np.where(activity_api >= 0, api_compute[np.maximum(activity_api, 0)], -1)
    spans = split_spans(window.node_calls)
    marked = _ends_marked(spans)
    api_span, api_feeds = _api_splits(window, api_compute, spans, marked)
    api_node, node_calls = _work_nodes(window, api_compute, api_span, spans, marked, state)
    node = np.full(len(activities), NO_NODE, dtype=np.int64)
    group_end = np.full(len(activities), NO_NODE, dtype=np.int64)
    span = _take(api_span, activity_api, -1)
    feeds = _take(api_feeds, activity_api, NO_SPLIT)
    transfer = (activities["kind"] != KERNEL) & (feeds != NO_SPLIT)
    split = np.where(transfer, feeds, _take(spans["first_node"], span, -1))
    # A compute's work items: its kernels, and the copies and memsets of its nodes (not the
    # scheduler's copies of a split's inputs, nor the reading of its outputs)
    reached = _take(api_node, activity_api, NO_NODE) >= 0
    item = ((activities["kind"] == KERNEL) | (activities["graph_id"] > 0) | reached) & ~transfer
    signature = _signatures(activities, state.names)
    facts = _CallFacts(
        api_compute,
        api_node,
        is_graph_launch(window.api_calls),
        np.isin(window.api_calls["correlation_id"], activities["correlation_id"]),  # ran: not captured
    )
    mapping = np.full(len(computes), "none", dtype=object)
    for c in range(len(computes)):
        compute_id = computes["compute"][c]
        ends = _group_ends(node_calls[node_calls["compute"] == compute_id], int(computes["n_nodes"][c]))
        ways = []
        for segment in _segments(spans, compute_id, marked):
            mine = np.flatnonzero(item & (compute == c) & ((span == segment) if segment >= 0 else True))
            if not (activities["kind"][mine] == KERNEL).any():
                continue
            first_node = int(spans["first_node"][segment]) if segment >= 0 else -1
            key = (int(structures[c]), first_node)
            here = (api_span == segment) if segment >= 0 else True
            how, nodes, groups = _map_items(window, c, mine, signature, activity_api, facts, here, key, state)
            ways.append(how)
            if nodes is None:
                continue
            node[mine] = nodes
            group_end[mine] = ends[np.minimum(nodes, len(ends) - 1)] if groups is None else groups
            if how in ("eager", "capture") and structures[c] >= 0:
                order = _launch_order(window, mine, activity_api)
                state.templates[key] = Template(signature[mine][order], node[mine][order], group_end[mine][order])
        mapping[c] = _compute_mapping(ways)
    return Attribution(compute, node, group_end, busy_shares(activities), mapping, split, transfer)


def _take(values: np.ndarray, at: np.ndarray, missing: int) -> np.ndarray:
    """values[at], `missing` where `at` is negative."""
    if not len(values):
        return np.full(len(at), missing, dtype=np.int64)
    return np.where(at >= 0, values[np.maximum(at, 0)], missing)


NO_SPLIT = -2  # a call's `feeds` where it is not a transfer (-1: a transfer feeding no later split)


def _ends_marked(spans: np.ndarray) -> np.ndarray:
    """The computes (their ids) whose every split has its end marked: only there is a call known
    to be outside every split, and each split mapped on its own."""
    computes = np.unique(spans["compute"])
    unmarked = np.unique(spans["compute"][spans["end_ns"] < 0])
    return computes[~np.isin(computes, unmarked)]


def _segments(spans: np.ndarray, compute: int, marked: np.ndarray) -> list[int]:
    """What of a compute maps on its own: each split on a device (its index in `spans`), or the
    whole compute (-1) where its splits' ends were not marked (not in `marked`)."""
    mine = np.flatnonzero(spans["compute"] == compute)
    if not np.isin(compute, marked):
        return [-1]
    return [int(s) for s in mine if not spans["on_cpu"][s]]


def _compute_mapping(ways: list[str]) -> str:
    """A compute's mapping from its splits': the one way they share, the ways joined where they
    differ ("eager+replay"), "unattributed" where none mapped, "none" without kernels."""
    if not ways:
        return "none"
    mapped = [way for way in ways if way != "unattributed"]
    if not mapped:
        return "unattributed"
    distinct = list(dict.fromkeys(ways))
    return distinct[0] if len(distinct) == 1 else "+".join(sorted(distinct))


def _api_splits(
    window: GpuWindow, api_compute: np.ndarray, spans: np.ndarray, marked: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per API call: the split whose compute call it was made in (index into `spans`; -1: none),
    and, for a call of a compute whose split ends were marked made outside every split (the
    scheduler's own), the first node of the split that follows it (-1: none follows), else NO_SPLIT."""
    calls = window.api_calls
    span = np.full(len(calls), -1, dtype=np.int64)
    feeds = np.full(len(calls), NO_SPLIT, dtype=np.int64)
    for compute in np.unique(spans["compute"]):
        mine = np.flatnonzero(spans["compute"] == compute)  # (in order of start: they do not overlap)
        c = np.flatnonzero(window.computes["compute"] == compute)
        if not len(c):
            continue
        rows = np.flatnonzero(api_compute == c[0])
        start = calls["start_ns"][rows]
        unmarked = not np.isin(compute, marked)
        ends = np.where(spans["end_ns"][mine] >= 0, spans["end_ns"][mine], np.iinfo(np.int64).max)
        at = np.searchsorted(spans["start_ns"][mine], start, side="right") - 1  # the split begun last
        inside = (at >= 0) & (start <= ends[np.maximum(at, 0)])
        span[rows[inside]] = mine[at[inside]]
        if unmarked:
            continue  # ends not marked: no call is known to be outside every split
        outside = ~inside
        follows = at[outside] + 1
        feeds[rows[outside]] = np.where(
            follows < len(mine), spans["first_node"][mine[np.minimum(follows, len(mine) - 1)]], -1
        )
    return span, feeds


def _signatures(activities: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """Per activity, what a replay must match: a kernel's name, or COPY for a copy or memset,
    and for a kernel of CUDA's own copying one (a copy node of a CUDA graph run as a kernel)."""
    copies = {i for i, name in names.items() if name.startswith(("memcpy", "memset"))}
    signature = np.where(activities["kind"] == KERNEL, activities["name_id"].astype(np.int64), COPY)
    if copies:
        signature[np.isin(activities["name_id"], list(copies)) & (activities["kind"] == KERNEL)] = COPY
    return signature


def busy_shares(activities: np.ndarray) -> np.ndarray:
    """Each activity's share of its device's busy time: the part of it after everything that
    started before it on the device had ended (overlapped time counted once, to the earlier)."""
    busy = np.zeros(len(activities), dtype=np.int64)
    for device in np.unique(activities["device"]):
        rows = np.flatnonzero(activities["device"] == device)
        rows = rows[np.lexsort((activities["end_ns"][rows], activities["start_ns"][rows]))]
        start, end = activities["start_ns"][rows], activities["end_ns"][rows]
        covered = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]))
        busy[rows] = np.maximum(end - np.maximum(start, covered), 0)
    return busy


def _api_computes(window: GpuWindow) -> np.ndarray:
    """Per runtime API call, the compute running on its thread when it was made: the latest
    begun by then, while the call that ran it had not returned (a llama call reads its
    outputs after its compute: that is the compute's too; what the program does after the
    call, such as clearing its cache, is no compute's)."""
    computes, calls = window.computes, window.api_calls
    result = np.full(len(calls), -1, dtype=np.int64)
    if not len(computes):
        return result
    # CUPTI names threads as pthread_self() does; where none of its threads is a compute's
    # (another threading library), the calls are taken as one thread's.
    same_threads = np.isin(calls["thread"], computes["thread"]).any()
    threads = np.unique(computes["thread"]) if same_threads else [None]
    for thread in threads:
        mine = np.flatnonzero(computes["thread"] == thread) if thread is not None else np.arange(len(computes))
        mine = mine[np.argsort(computes["start_ns"][mine], kind="stable")]
        rows = np.flatnonzero(calls["thread"] == thread) if thread is not None else np.arange(len(calls))
        at = np.searchsorted(computes["start_ns"][mine], calls["start_ns"][rows], side="right") - 1
        found = mine[np.maximum(at, 0)]
        call_end = computes["call_end_ns"][found]
        during = (at >= 0) & ((call_end == 0) | (calls["start_ns"][rows] <= call_end))
        result[rows] = np.where(during, found, -1)
    return result


def _index_of(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each wanted key is in `keys` (-1: not there)."""
    if not len(keys):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
    return np.where(keys[order][at] == wanted, order[at], -1)


def _work_nodes(
    window: GpuWindow,
    api_compute: np.ndarray,
    api_span: np.ndarray,
    spans: np.ndarray,
    marked: np.ndarray,
    state: AttributionState,
) -> tuple[np.ndarray, np.ndarray]:
    """Per runtime API call that created GPU work (a launch, a copy, a memset) while
    ggml-cuda's loop was computing a node, that node: the last one the loop reached before
    the call, in the same compute and, where the splits' ends were marked, in the same split
    on a device (-1 for other calls); and the loop's node calls."""
    calls, node_calls = window.api_calls, without_split_markers(window.node_calls)
    launches = np.flatnonzero(is_launch(calls))
    work = is_launch(calls) | is_copy(calls)
    in_marked = _take(np.isin(window.computes["compute"], marked).astype(np.int64), api_compute, 0) == 1
    on_device = _take(spans["on_cpu"].astype(np.int64), api_span, 1) == 0
    work = np.flatnonzero(work & (~in_marked | on_device))
    nodes = np.full(len(calls), NO_NODE, dtype=np.int64)
    if not len(launches) or not len(node_calls):
        return nodes, node_calls[:0]
    order = np.argsort(node_calls["ns"], kind="stable")
    ordered = node_calls[order]
    last = np.searchsorted(ordered["ns"], calls["start_ns"][launches], side="right") - 1
    state.loop_sites.update(ordered["return_address"][last[last >= 0]].tolist())
    loop_site = state.loop_sites.most_common(1)[0][0]
    loop = ordered[ordered["return_address"] == loop_site]
    compute_ids = window.computes["compute"].astype(np.int64)
    for thread in np.unique(calls["thread"][work]):
        mine = work[calls["thread"][work] == thread]
        theirs = loop[loop["thread"] == thread] if (loop["thread"] == thread).any() else loop
        at = np.searchsorted(theirs["ns"], calls["start_ns"][mine], side="right") - 1
        ok = at >= 0
        launch_compute = np.where(api_compute[mine] >= 0, compute_ids[np.maximum(api_compute[mine], 0)], -1)
        within = np.zeros(len(mine), dtype=bool)  # ... and made while that compute ran
        c = np.maximum(api_compute[mine], 0)
        within[ok] = (theirs["compute"][at[ok]] == launch_compute[ok]) & (
            calls["start_ns"][mine][ok] <= window.computes["end_ns"][c][ok]
        )
        nodes[mine[within]] = theirs["node_index"][at[within]]
    return nodes, loop


def _group_ends(loop_calls: np.ndarray, n_nodes: int) -> np.ndarray:
    """Per node index, the last node of the group it begins: the node before the next one the
    loop reached (nodes it skipped were fused into the one before them)."""
    ends = np.arange(max(n_nodes, 1), dtype=np.int64)
    reached = np.unique(loop_calls["node_index"].astype(np.int64))
    reached = reached[reached < len(ends)]
    if len(reached):
        ends[reached] = np.append(reached[1:] - 1, len(ends) - 1)
    return ends


def _launch_order(window: GpuWindow, rows: np.ndarray, activity_api: np.ndarray) -> np.ndarray:
    """The order in which kernels were launched: by their API call, then (one graph launch
    runs many) by their node in the CUDA graph."""
    activities = window.activities[rows]
    api_start = window.api_calls["start_ns"][np.maximum(activity_api[rows], 0)]
    return np.lexsort((activities["start_ns"], activities["graph_node_id"], api_start))


@dataclass(frozen=True)
class _CallFacts:
    """Per API call of a window: its compute (index), the node whose work it made (-1: none),
    whether it launched a CUDA graph, whether its work ran (a captured launch's did not)."""

    compute: np.ndarray
    node: np.ndarray
    graph_launch: np.ndarray
    ran: np.ndarray


def _map_items(
    window: GpuWindow,
    c: int,
    items: np.ndarray,
    signature: np.ndarray,
    activity_api: np.ndarray,
    facts: _CallFacts,
    api_here: np.ndarray | bool,
    key: tuple[int, int],
    state: AttributionState,
) -> tuple[str, np.ndarray | None, np.ndarray | None]:
    """How the work items of one compute's split (or of the whole compute) map to nodes: the
    way, their nodes (None: they could not be), and, where a template gave them, their groups'
    last nodes. `api_here`: per API call, whether it was made in that split (True: whole)."""
    activities = window.activities[items]
    in_graph = activities["graph_id"] > 0
    if not in_graph.any():  # eager: each item's own launch
        nodes = facts.node[activity_api[items]]
        return ("eager", nodes, None) if (nodes >= 0).all() else ("unattributed", None, None)
    if in_graph.all():
        order = _launch_order(window, items, activity_api)
        calls = window.api_calls
        launches = np.flatnonzero((facts.compute == c) & (facts.node >= 0) & api_here)  # the work the loop created
        launches = launches[np.argsort(calls["start_ns"][launches], kind="stable")]
        nodes = np.empty(len(items), dtype=np.int64)
        if len(launches) and not facts.ran[launches].any() and len(launches) == len(items):  # captured, then launched
            nodes[order] = facts.node[launches]
            return "capture", nodes, None
        template = state.templates.get(key) if key[0] >= 0 else None
        graph_launches = facts.graph_launch[activity_api[items]]
        if (
            template is not None
            and graph_launches.all()
            and len(template.nodes) == len(items)
            and np.array_equal(signature[items][order], template.signatures)
        ):
            groups = np.empty(len(items), dtype=np.int64)
            nodes[order], groups[order] = template.nodes, template.group_ends
            return "replay", nodes, groups
    return "unattributed", None, None
