"""Per-node times from the CPU backend's abort-callback ticks (`--timing inline`).

With inline timing the recorder answers `false` to every question of the scheduler, so
each graph (each split) runs as one compute call, exactly as untraced. ggml's CPU
backend walks the graph's nodes in order on every thread, and its thread 0 calls the
abort callback after each node it computes, before the barrier that ends the node. Each
call is a tick: the time, and how many of the graph's nodes the scheduler had asked
about by then (which tells the split: the scheduler asks about a split's nodes just
before computing it).

Ticks map to nodes by the CPU backend's walk: it skips ops that do no work (views,
reshapes, permutes, transposes) and runs an RMS_NORM followed by the MUL of its result
as one fused node (one tick). After its tick thread 0
waits at ggml's barrier for the other threads to finish the node; the recorder routes
ggml_barrier through itself (recorder_hook_barriers) and notes when thread 0 leaves the
first barrier after each tick. A node's interval runs from the end of the node before it
in its split (or from when its split started computing) to that barrier: its work and
the wait for its own stragglers, the wait (`wait_ns`) noted apart. Where the barrier was
not seen (the pure-Python recorder, a ggml whose barrier cannot be reached), a node ends
at its tick, its wait is unknown (-1), and the next node's interval holds it. Nodes
without work, and the second node of a fused pair, get a zero-length interval where the
work before them ended, and no wait.

A graph read whole at its compute call whose splits ran on several backends (a CPU and an RPC
server) has the nodes of the other backends' splits marked (NODE_ELSEWHERE): the walk leaves them
out, and each CPU split's ticks say where it ends. If the ticks do not match the walk (another
backend computed a split unmarked, or ggml changed its walk), the graph keeps its graph-level time
and no node times: never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..contract.constants import NODE_ELSEWHERE, NODE_SELECTED, NODE_TIMED
from .ggml_api import CpuWalkOps, cpu_walk_ops
from .raw_graph import RawGraph

_F32 = 0
_OUTPUT_FLAG = 2  # GGML_TENSOR_FLAG_OUTPUT: ggml never fuses away a graph output


@dataclass(frozen=True)
class NodeWalk:
    """Which nodes of a graph tick, for both readings of fusion."""

    works: np.ndarray  # bool per node: the backend computes it (not a view)
    fused_second: np.ndarray  # bool per node: the MUL of an RMS_NORM+MUL pair that may run fused


def node_walk(nodes: np.ndarray, node_ptrs: np.ndarray, leaves: np.ndarray, leaf_ptrs: np.ndarray) -> NodeWalk:
    """How ggml's CPU backend walks these nodes (structs as TENSOR_DTYPE, in graph order)."""
    numbers: CpuWalkOps = cpu_walk_ops()
    op = nodes["op"]
    works = ~np.isin(op, numbers.empty)
    fused = np.zeros(len(nodes), dtype=bool)
    if len(nodes) > 1:
        sources = nodes["src"]
        norm, mul = nodes[:-1], nodes[1:]
        norm_ptr = node_ptrs[:-1]
        uses = np.bincount(_positions(node_ptrs, sources.ravel()), minlength=len(nodes) + 1)[:-1]
        # Everything the graph names, to read the operands' type and first dimension.
        every = np.concatenate((nodes, leaves))
        every_ptrs = np.concatenate((node_ptrs, leaf_ptrs))
        padded = np.concatenate((every, np.zeros(1, dtype=every.dtype)))
        padded["type"][-1] = -1  # "unknown" for an address the graph does not name
        weight_ptr = np.where(sources[1:, 0] == norm_ptr, sources[1:, 1], sources[1:, 0])
        weight = padded[_positions(every_ptrs, weight_ptr)]
        norm_input = padded[_positions(every_ptrs, sources[:-1, 0])]
        fused[1:] = (
            (norm["op"] == numbers.rms_norm)
            & (mul["op"] == numbers.mul)
            & ((sources[1:, 0] == norm_ptr) | (sources[1:, 1] == norm_ptr))
            & (uses[:-1] == 1)  # the MUL is the norm's only consumer
            & ((norm["flags"] & _OUTPUT_FLAG) == 0)
            & (norm_input["type"] == _F32)
            & (mul["type"] == _F32)
            & (weight["type"] == _F32)
            & (weight["ne"][:, 0] == norm["ne"][:, 0])
            & (weight["nb"][:, 0] == 4)
        )
    return NodeWalk(works=works, fused_second=fused)


def _positions(addresses: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each wanted address is in `addresses`; len(addresses) where it is not."""
    order = np.argsort(addresses, kind="stable")
    ordered = addresses[order]
    found = np.minimum(np.searchsorted(ordered, wanted), max(len(ordered) - 1, 0))
    hit = (ordered[found] == wanted) & (wanted != 0) if len(ordered) else np.zeros(len(wanted), dtype=bool)
    return np.where(hit, order[found] if len(ordered) else 0, len(addresses))


@dataclass(frozen=True)
class TickPlan:
    """Where each node's start and end come from, for one walk and one split pattern:
    indexes into [the splits' start times..., the ticks...]."""

    start_from: np.ndarray
    end_from: np.ndarray
    split_last_asked: np.ndarray  # per split, the node asked last before it computed
    ticked: np.ndarray  # bool per node: it has a tick of its own


def plan_ticks(walk: NodeWalk, tick_asked: np.ndarray) -> TickPlan | None:
    """How ticks taken with this split pattern map to nodes; None if they cannot fit the walk."""
    n = len(walk.works)
    tick_asked = tick_asked.astype(np.int64)
    if n == 0 or len(tick_asked) == 0 or tick_asked.max() > n:
        return None
    split_ends = np.unique(tick_asked)  # a split's nodes end where the scheduler stopped asking
    for fused in (walk.fused_second, np.zeros(n, dtype=bool)):
        ticking = np.flatnonzero(walk.works & ~fused)
        if len(ticking) != len(tick_asked):
            continue
        # Tick k belongs to the k-th ticking node, which must lie in the split it was taken in.
        split_starts = np.concatenate(([0], split_ends[:-1]))[np.searchsorted(split_ends, tick_asked)]
        if not np.all((ticking < tick_asked) & (ticking >= split_starts)):
            continue
        nodes = np.arange(n)
        split_of = np.minimum(np.searchsorted(split_ends, nodes, side="right"), len(split_ends) - 1)
        # A ticking node runs from the previous tick of its split, or from its split's
        # start; a node without a tick sits where the work before it in its split ended.
        previous = np.searchsorted(ticking, nodes, side="left") - 1  # the last ticking node before each node
        after_work = (previous >= 0) & (split_of[ticking[np.maximum(previous, 0)]] == split_of)
        n_splits = len(split_ends)
        start_from = np.where(after_work, n_splits + np.maximum(previous, 0), split_of)
        end_from = start_from.copy()
        end_from[ticking] = n_splits + np.arange(len(ticking))
        ticked = np.zeros(n, dtype=bool)
        ticked[ticking] = True
        return TickPlan(start_from, end_from, split_ends - 1, ticked)
    return None


class InlineClock:
    """Gives one recorder's graphs their node times from their ticks. Decode graphs
    repeat: the walk and the plan are worked out once and reused while they fit."""

    def __init__(self) -> None:
        self._walk: NodeWalk | None = None
        self._fingerprint: tuple[bytes, ...] = ()
        self._plan: TickPlan | None = None
        self._plan_key: bytes | None = None
        self._elsewhere = np.zeros(0, dtype=bool)
        self.mismatches = 0  # graphs that were to be timed but whose ticks did not fit

    def apply(
        self, raw: RawGraph, tick_ns: np.ndarray, tick_asked: np.ndarray, tick_barrier_ns: np.ndarray | None = None
    ) -> RawGraph:
        selected = (raw.flags & NODE_SELECTED) != 0
        if not selected.any():  # not to be timed (graph detail, or sampled out)
            if not (raw.same_as_previous or raw.fingerprint == self._fingerprint):
                self._walk = None  # a graph that repeats this one must not take the older walk
            return raw
        elsewhere = (raw.flags & NODE_ELSEWHERE) != 0  # splits another backend computed: no ticks of ours
        same_walk = (raw.same_as_previous or raw.fingerprint == self._fingerprint) and np.array_equal(
            elsewhere, self._elsewhere
        )
        if self._walk is None or not same_walk:
            walk = node_walk(raw.nodes, raw.node_ptrs, raw.leaves, raw.leaf_ptrs)
            self._walk = replace(walk, works=walk.works & ~elsewhere)
            self._fingerprint = raw.fingerprint
            self._elsewhere = elsewhere
            self._plan_key = None
        key = tick_asked.tobytes()
        if key != self._plan_key:
            self._plan = plan_ticks(self._walk, tick_asked)
            self._plan_key = key
        plan = self._plan
        if plan is None:
            self.mismatches += 1
            return replace(raw, flags=raw.flags & ~np.uint8(NODE_SELECTED), n_timed=0, end_of_graph_ns=raw.boundary_ns)
        # A node ends when its barrier let thread 0 go (every thread had finished it); where
        # that barrier was not seen, at its tick (the wait for its stragglers then falls
        # into the next node's interval).
        seen = tick_barrier_ns > 0 if tick_barrier_ns is not None else np.zeros(len(tick_ns), dtype=bool)
        node_end = np.where(seen, tick_barrier_ns, tick_ns) if tick_barrier_ns is not None else tick_ns
        n_splits = len(plan.split_last_asked)
        times = np.concatenate((raw.start_ns[plan.split_last_asked], node_end))
        # Per node, thread 0's wait for the others after its tick: 0 for nodes without a
        # tick (no work, or fused into the one before), -1 where the barrier was not seen.
        waits = np.concatenate((np.zeros(n_splits, dtype=np.int64), np.where(seen, node_end - tick_ns, -1)))
        return replace(
            raw,
            start_ns=times[plan.start_from],
            end_ns=times[plan.end_from],
            wait_ns=np.where(plan.ticked, waits[plan.end_from], 0),
            flags=raw.flags | (selected * np.uint8(NODE_TIMED)).astype(np.uint8),
            n_timed=int(selected.sum()),
            # splits computed elsewhere after the last tick: the graph ends at its boundary
            end_of_graph_ns=max(int(node_end[-1]), raw.boundary_ns) if elsewhere.any() else int(node_end[-1]),
        )
