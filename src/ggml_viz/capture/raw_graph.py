"""What a recorder hands over per graph: raw copies of ggml_tensor structs and times.

Both recorders (native and pure Python) fill a `RawGraph`; everything after that is
shared, in bulk, with numpy: see graph_decoder.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .ggml_api import TENSOR_DTYPE, BufferInfo


@dataclass
class RawGraph:
    """One executed graph, as the eval callback saw it."""

    node_ptrs: np.ndarray  # uint64, address of each node, in execution order
    nodes: np.ndarray  # TENSOR_DTYPE, each node's struct copied when it was asked about
    start_ns: np.ndarray  # int64, when each node started (its `ask` call returned)
    end_ns: np.ndarray  # int64, when it ended (its result callback); == start_ns if untimed
    timed: np.ndarray  # bool, whether the node was computed and timed on its own
    leaf_ptrs: np.ndarray  # uint64, sources that are not nodes: weights, inputs, KV cache
    leaves: np.ndarray  # TENSOR_DTYPE
    buffers: dict[int, BufferInfo] = field(default_factory=dict)  # every buffer seen, by address

    @property
    def n_nodes(self) -> int:
        return len(self.node_ptrs)

    @classmethod
    def empty(cls) -> RawGraph:
        no_tensors = np.zeros(0, dtype=TENSOR_DTYPE)
        no_ptrs = np.zeros(0, dtype=np.uint64)
        no_times = np.zeros(0, dtype=np.int64)
        return cls(no_ptrs, no_tensors, no_times, no_times, np.zeros(0, dtype=bool), no_ptrs, no_tensors)
