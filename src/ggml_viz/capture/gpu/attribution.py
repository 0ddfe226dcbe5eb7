"""Which ggml node each kernel belongs to, and what share of the GPU's time it had.

Pure functions over a trace window's records (records.GpuWindow), tested on the records of
an H200 run (../shared/gpu/h200-q4_0 in the project's history: tests/unit/test_gpu_attribution.py).
Nothing here depends on a model's or a kernel's name: kernels map to nodes by the order and
the correlation of the calls that launched them.

- A kernel's runtime API call (its `correlation_id`) tells the compute that launched it:
  the one running on the calling thread when the call was made.
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
- ggml-cuda fuses nodes (an RMS_NORM with the MUL after it): the loop skips the nodes it
  fused, so a node's kernels run the group from it up to the next node reached (group_end).
- Overlap: on Hopper a kernel launched with programmatic dependent launch starts while the
  one before it still runs, and waits for it. A device's busy time is counted once, and each
  moment of it goes to the activity that was running first (`busy_ns`): a kernel's share
  starts where the device's earlier work ended.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .records import GRAPH_LAUNCH_CBID, KERNEL, LAUNCH_CBIDS, GpuWindow

NO_NODE = -1


@dataclass(frozen=True)
class Template:
    """A known pass of one graph structure: its kernels in launch order, each with its node
    and the last node of that node's fused group."""

    name_ids: np.ndarray
    nodes: np.ndarray
    group_ends: np.ndarray


@dataclass
class AttributionState:
    """What one recording learns across windows: ggml-cuda's loop call site, and a pass of
    each graph structure seen launched kernel by kernel."""

    loop_sites: Counter[int] = field(default_factory=Counter)
    templates: dict[int, Template] = field(default_factory=dict)


@dataclass(frozen=True)
class Attribution:
    """A window's activities with their compute, node and share of the device's time."""

    compute: np.ndarray  # per activity: index into window.computes (-1: none)
    node: np.ndarray  # per activity: node index in its compute's graph (-1: none)
    group_end: np.ndarray  # per activity: last node of its node's fused group (-1: none)
    busy_ns: np.ndarray  # per activity: its share of its device's busy time
    mapping: np.ndarray  # per compute: "eager", "capture", "replay", "unattributed" or "none" (no kernels)


def attribute(window: GpuWindow, structures: np.ndarray, state: AttributionState) -> Attribution:
    """Map a window's kernels to nodes. `structures`: per compute, its graph structure (a key
    that graphs of the same structure share; -1: unknown)."""
    computes, activities = window.computes, window.activities
    api_compute = _api_computes(window)
    activity_api = _index_of(window.api_calls["correlation_id"], activities["correlation_id"])
    compute = np.where(activity_api >= 0, api_compute[np.maximum(activity_api, 0)], -1)
    api_node, node_calls = _launch_nodes(window, api_compute, state)
    node = np.full(len(activities), NO_NODE, dtype=np.int64)
    group_end = np.full(len(activities), NO_NODE, dtype=np.int64)
    kernel = activities["kind"] == KERNEL
    mapping = np.full(len(computes), "none", dtype=object)
    for c in range(len(computes)):
        mine = np.flatnonzero(kernel & (compute == c))
        if not len(mine):
            continue
        ends = _group_ends(node_calls[node_calls["compute"] == computes["compute"][c]], int(computes["n_nodes"][c]))
        how, nodes, groups = _map_compute(window, c, mine, activity_api, api_compute, api_node, structures[c], state)
        mapping[c] = how
        if nodes is None:
            continue
        node[mine] = nodes
        group_end[mine] = ends[np.minimum(nodes, len(ends) - 1)] if groups is None else groups
        if how in ("eager", "capture") and structures[c] >= 0:
            order = _launch_order(window, mine, activity_api)
            state.templates[int(structures[c])] = Template(
                activities["name_id"][mine][order], node[mine][order], group_end[mine][order]
            )
    return Attribution(compute, node, group_end, busy_shares(activities), mapping)


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
    """Per runtime API call, the compute running on its thread when it was made (the latest
    begun by then: calls after a compute returned, reading its outputs, belong to it too)."""
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
        result[rows] = np.where(at >= 0, mine[np.maximum(at, 0)], -1)
    return result


def _index_of(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each wanted key is in `keys` (-1: not there)."""
    if not len(keys):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
    return np.where(keys[order][at] == wanted, order[at], -1)


def _launch_nodes(window: GpuWindow, api_compute: np.ndarray, state: AttributionState) -> tuple[np.ndarray, np.ndarray]:
    """Per runtime API call that launched a kernel, the node ggml-cuda's loop reached last
    before it, in the same compute (-1 for other calls); and the loop's node calls."""
    calls, node_calls = window.api_calls, window.node_calls
    launches = np.flatnonzero(np.isin(calls["cbid"], LAUNCH_CBIDS))
    nodes = np.full(len(calls), NO_NODE, dtype=np.int64)
    if not len(launches) or not len(node_calls):
        return nodes, node_calls[:0]
    order = np.argsort(node_calls["ns"], kind="stable")
    ordered = node_calls[order]
    last = np.searchsorted(ordered["ns"], calls["start_ns"][launches], side="right") - 1
    state.loop_sites.update(ordered["return_address"][last[last >= 0]].tolist())
    loop_site = state.loop_sites.most_common(1)[0][0]
    loop = ordered[ordered["return_address"] == loop_site]
    for thread in np.unique(calls["thread"][launches]):
        mine = launches[calls["thread"][launches] == thread]
        theirs = loop[loop["thread"] == thread] if (loop["thread"] == thread).any() else loop
        at = np.searchsorted(theirs["ns"], calls["start_ns"][mine], side="right") - 1
        ok = at >= 0
        same_compute = np.zeros(len(mine), dtype=bool)
        compute_ids = window.computes["compute"].astype(np.int64)
        launch_compute = np.where(api_compute[mine] >= 0, compute_ids[np.maximum(api_compute[mine], 0)], -1)
        same_compute[ok] = theirs["compute"][at[ok]] == launch_compute[ok]
        nodes[mine[same_compute]] = theirs["node_index"][at[same_compute]]
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


def _map_compute(
    window: GpuWindow,
    c: int,
    kernels: np.ndarray,
    activity_api: np.ndarray,
    api_compute: np.ndarray,
    api_node: np.ndarray,
    structure: int,
    state: AttributionState,
) -> tuple[str, np.ndarray | None, np.ndarray | None]:
    """How one compute's kernels map to nodes: the way, their nodes (None: they could not be),
    and, where a template gave them, their groups' last nodes."""
    activities = window.activities[kernels]
    in_graph = activities["graph_id"] > 0
    if not in_graph.any():  # eager: each kernel's own launch
        nodes = api_node[activity_api[kernels]]
        return ("eager", nodes, None) if (nodes >= 0).all() else ("unattributed", None, None)
    if in_graph.all():
        order = _launch_order(window, kernels, activity_api)
        calls = window.api_calls
        launches = np.flatnonzero((api_compute == c) & np.isin(calls["cbid"], LAUNCH_CBIDS))
        launches = launches[np.argsort(calls["start_ns"][launches], kind="stable")]
        launched = np.isin(calls["correlation_id"][launches], window.activities["correlation_id"])
        nodes = np.empty(len(kernels), dtype=np.int64)
        if len(launches) and not launched.any() and len(launches) == len(kernels):  # captured, then launched
            nodes[order] = api_node[launches]
            return ("capture", nodes, None) if (nodes >= 0).all() else ("unattributed", None, None)
        template = state.templates.get(structure) if structure >= 0 else None
        graph_launches = calls["cbid"][activity_api[kernels]] == GRAPH_LAUNCH_CBID
        if (
            template is not None
            and graph_launches.all()
            and len(template.nodes) == len(kernels)
            and np.array_equal(activities["name_id"][order], template.name_ids)
        ):
            groups = np.empty(len(kernels), dtype=np.int64)
            nodes[order], groups[order] = template.nodes, template.group_ends
            return "replay", nodes, groups
    return "unattributed", None, None
