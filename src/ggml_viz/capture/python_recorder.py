"""The pure-Python eval-callback recorder: the fallback and the test oracle.

Per node it copies the tensor struct (and those of sources it has not seen in this
graph) into a growing numpy buffer with one memmove each, and takes the times;
decoding waits for the end of the graph. ggml's scheduler calls `on_eval(t, ask=True)`
before computing a node; answering True makes it compute that node alone, synchronize
and call `on_eval(t, ask=False)`: the two calls bracket the node's own compute time.
"""

from __future__ import annotations

import ctypes
from time import perf_counter_ns

import numpy as np

from .ggml_api import TENSOR_DTYPE, TENSOR_SIZE, BufferInfo, buffer_info, tensor_structs
from .raw_graph import RawGraph

_INITIAL_CAPACITY = 2048


class _StructBuffer:
    """A growable array of copied ggml_tensor structs."""

    def __init__(self) -> None:
        self.rows = np.zeros(_INITIAL_CAPACITY, dtype=TENSOR_DTYPE)
        self.address = self.rows.ctypes.data
        self.count = 0

    def copy_in(self, tensor: int) -> int:
        if self.count == len(self.rows):
            self.rows = tensor_structs(self.rows, np.zeros(len(self.rows), dtype=TENSOR_DTYPE))
            self.address = self.rows.ctypes.data
        row = self.count
        ctypes.memmove(self.address + row * TENSOR_SIZE, tensor, TENSOR_SIZE)
        self.count += 1
        return row

    def take(self) -> np.ndarray:
        taken = self.rows[: self.count].copy()
        self.count = 0
        return taken


class PythonGraphRecorder:
    """Collects one graph at a time for one llama context."""

    def __init__(self) -> None:
        self.time_nodes = True  # answer the scheduler's `ask`: time each node on its own
        self._nodes = _StructBuffer()
        self._leaves = _StructBuffer()
        self._reset()

    def _reset(self) -> None:
        self._node_ptrs: list[int] = []
        self._leaf_ptrs: list[int] = []
        self._node_set: set[int] = set()
        self._known: set[int] = {0}
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._buffers: dict[int, BufferInfo] = {}

    @property
    def n_nodes(self) -> int:
        return len(self._node_ptrs)

    def starts_new_graph(self, tensor: int) -> bool:
        """A node seen twice means the scheduler has begun the next graph."""
        return tensor in self._node_set

    def on_ask(self, tensor: int) -> bool:
        row = self._nodes.copy_in(tensor)
        self._node_ptrs.append(tensor)
        self._node_set.add(tensor)
        self._known.add(tensor)
        copied = self._nodes.rows[row]
        self._note_buffer(int(copied["buffer"]))
        for source in copied["src"].tolist():
            if source not in self._known:
                self._copy_leaf(source)
        view_src = int(copied["view_src"])
        if view_src not in self._known:
            self._copy_leaf(view_src)
        self._starts.append(perf_counter_ns())
        return self.time_nodes

    def on_result(self, now: int) -> None:
        self._ends.append(now)

    def _copy_leaf(self, tensor: int) -> None:
        row = self._leaves.copy_in(tensor)
        self._leaf_ptrs.append(tensor)
        self._known.add(tensor)
        self._note_buffer(int(self._leaves.rows[row]["buffer"]))

    def _note_buffer(self, buffer: int) -> None:
        # Described while the graph runs, when every buffer it uses is certainly alive.
        if buffer and buffer not in self._buffers:
            self._buffers[buffer] = buffer_info(buffer)

    def take_graph(self) -> RawGraph:
        """The graph collected so far; the recorder starts empty again."""
        starts = np.array(self._starts, dtype=np.int64)
        timed = np.zeros(len(starts), dtype=bool)
        ends = starts.copy()
        n_ended = min(len(self._ends), len(starts))
        if self.time_nodes and n_ended:
            ends[:n_ended] = self._ends[:n_ended]
            timed[:n_ended] = True
        graph = RawGraph(
            node_ptrs=np.array(self._node_ptrs, dtype=np.uint64),
            nodes=self._nodes.take(),
            start_ns=starts,
            end_ns=ends,
            timed=timed,
            leaf_ptrs=np.array(self._leaf_ptrs, dtype=np.uint64),
            leaves=self._leaves.take(),
            buffers=self._buffers,
        )
        self._reset()
        return graph
