"""What a recorder hands over per graph: raw copies of ggml_tensor structs and times.

Both recorders (in C and in pure Python) produce `RawGraph`s; everything after that is
shared, in bulk, with numpy: see graph_decoder.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import NamedTuple

import numpy as np

from ..contract.constants import (
    MODE_COUNT,
    MODE_OFF,
    MODE_RECORD,
    NODE_ANSWERED,
    NODE_TIMED,
    ROUTING_NO_WEIGHTS,
    ROUTING_READ,
)
from ..contract.records import ROUTING
from .ggml_api import BufferInfo

ROUTING_KEPT = (ROUTING_READ, ROUTING_NO_WEIGHTS)  # the routing statuses whose rows are written


@dataclass(frozen=True)
class Routing:
    """One MoE layer's choice in one graph: for each token of the graph's batch (rows), the
    experts it was sent to (columns: slots, in the router's order) and their weights."""

    node: int  # the MUL_MAT_ID it was read at, by index in the graph
    n_expert: int  # experts chosen among
    experts: np.ndarray  # int32 [n_tokens, n_used]
    weights: np.ndarray  # float32 [n_tokens, n_used]; NaN where the weights were not found
    status: int  # ROUTING_*


def routings(records: bytes, data: bytes) -> list[Routing]:
    """The routing a recorder read in one graph, from its records and bytes."""
    found = []
    for record in np.frombuffer(records, ROUTING.dtype):
        n_used, n_tokens, offset = int(record["n_used"]), int(record["n_tokens"]), int(record["offset"])
        count = n_used * n_tokens
        experts = np.frombuffer(data, np.int32, count, offset).reshape(n_tokens, n_used)
        weights = np.frombuffer(data, np.float32, count, offset + 4 * count).reshape(n_tokens, n_used)
        found.append(Routing(int(record["node"]), int(record["n_expert"]), experts, weights, int(record["status"])))
    return found


@dataclass(frozen=True)
class Capture:
    node: int  # index in the graph
    name: str
    ggml_type: int
    ne: tuple[int, int, int, int]
    data: bytes


class Mode(IntEnum):
    """What a recorder does with the callbacks it gets (the contract's numbers, the C recorder's too)."""

    OFF = MODE_OFF  # recording stopped: answer as if untraced
    RECORD = MODE_RECORD  # copy and time
    COUNT = MODE_COUNT  # over the event bound: only count the nodes that are dropped


@dataclass
class RawGraph:
    """One executed graph, as the eval callback saw it."""

    node_ptrs: np.ndarray  # uint64, address of each node, in execution order
    nodes: np.ndarray  # TENSOR_DTYPE, each node's struct, copied when it was asked about
    start_ns: np.ndarray  # int64, when each node started (recorders: when it was asked about)
    end_ns: np.ndarray  # int64, when it ended (sync: its slice; == start_ns if it ended no slice)
    flags: np.ndarray  # uint8, NODE_* flags
    leaf_ptrs: np.ndarray  # uint64, sources that are not nodes: weights, inputs, KV cache
    leaves: np.ndarray  # TENSOR_DTYPE
    buffers: dict[int, BufferInfo] = field(default_factory=dict)  # every buffer it used, by address
    boundary_ns: int = 0  # when the graph was over: the next graph began or llama_decode returned
    fingerprint: tuple[bytes, ...] = ()  # the copied structs and addresses, byte for byte
    # The recorder found this graph identical to its previous one, struct for struct, and
    # left out the structs (nodes, leaves and their addresses are empty).
    same_as_previous: bool = False
    n_timed: int = -1  # nodes timed alone (-1: count them from the flags)
    end_of_graph_ns: int = -1  # its last node's end, or boundary_ns if that node ended no slice (-1: work it out)
    graph_start_ns: int = -1  # when the scheduler began it: asked about its first node (-1: work it out)
    # int64 per node, inline timing: how long of its interval thread 0 waited for the other
    # threads to finish it (-1: not seen); None where not measured (sync timing).
    wait_ns: np.ndarray | None = None
    values: np.ndarray | None = None  # contract STATS records, --values stats: one row per node read
    captures: list[Capture] = field(default_factory=list)  # --capture: whole outputs
    routing: list[Routing] = field(default_factory=list)  # each MoE layer's choice of experts
    # int32: the ids its token lookup read, in a llama_decode call of several tokens (its ubatch's
    # tokens, in llama.cpp's order); None where not read
    input_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.graph_start_ns < 0:
            self.graph_start_ns = int(self.start_ns[0]) if self.n_nodes else 0
        if self.n_timed < 0:
            self.n_timed = int(((self.flags & NODE_TIMED) != 0).sum())
        if self.end_of_graph_ns < 0:
            last_answered = self.n_nodes > 0 and bool(self.flags[-1] & NODE_ANSWERED)
            self.end_of_graph_ns = int(self.end_ns[-1]) if last_answered else self.boundary_ns
        if not self.fingerprint:
            self.fingerprint = tuple(a.tobytes() for a in (self.nodes, self.leaves, self.node_ptrs, self.leaf_ptrs))

    @property
    def n_nodes(self) -> int:
        return len(self.start_ns)

    @cached_property
    def timed(self) -> np.ndarray:
        return (self.flags & NODE_TIMED) != 0

    @property
    def detail(self) -> str:
        """op: every node timed alone; graph: none; selected: some (filters)."""
        if self.n_timed == self.n_nodes and self.n_nodes:
            return "op"
        return "selected" if self.n_timed else "graph"


class RepeatedGraph(NamedTuple):
    """A graph its recorder found identical to the one before it, struct for struct and
    buffer for buffer, with no node timed alone and no output read (graph detail, or a
    decode graph sampled out): all that is new about it is when it ran. Such graphs are
    most of a generation's, and are written in bulk (Recording.write_repeats)."""

    n_nodes: int
    graph_start_ns: int  # asked about its first node
    end_of_graph_ns: int  # its boundary (no node ended a slice of its own making)

    @property
    def detail(self) -> str:
        """As RawGraph.detail: no node timed alone."""
        return "graph"
