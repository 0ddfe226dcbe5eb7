"""What the GPU timer's C side hands over for one closed trace window (gpu_tracer.h beside it),
as numpy records: the spool's SPOOL_GPU frame, or the Python extension's bytes, read alike.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ..._errors import RunFormatError

# gpu_tracer.h and cupti_activity.h lay these out; their sizes are
# checked against the C side's (tests/unit/test_gpu_records.py).
COMPUTE_DTYPE = np.dtype(
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("call_end_ns", "<i8"), ("compute", "<u4"), ("context_id", "<u4"),
     ("thread", "<u4"), ("n_nodes", "<u4"), ("flags", "<u4"), ("reserved", "<u4")]
)  # fmt: skip
NODE_CALL_DTYPE = np.dtype(
    [("ns", "<i8"), ("return_address", "<u8"), ("compute", "<u4"), ("node_index", "<u4"), ("thread", "<u4"),
     ("reserved", "<u4")]
)  # fmt: skip
API_DTYPE = np.dtype(
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("correlation_id", "<u4"), ("cbid", "<u4"), ("thread", "<u4"),
     ("reserved", "<u4")]
)  # fmt: skip
ACTIVITY_DTYPE = np.dtype(
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("bytes", "<u8"), ("graph_node_id", "<u8"), ("correlation_id", "<u4"),
     ("graph_id", "<u4"), ("device", "<u4"), ("stream", "<u4"), ("name_id", "<u4"), ("kind", "u1"),
     ("copy_kind", "u1"), ("reserved", "u1", (2,))]
)  # fmt: skip

# ActivityRecord.kind
KERNEL, MEMCPY, MEMSET = 1, 2, 3
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}
# ComputeRecord.flags
COMPUTE_NEW_STRUCTURE = 1
# Why a window was opened (the frame's reason).
WINDOW_REASONS = {1: "new structure", 2: "periodic", 3: "every graph", 4: "end"}
# CUDA runtime API calls (CUPTI's callback ids) that launch kernels one by one, and a whole CUDA graph.
# cudaLaunchKernel, its _ptsz, cudaLaunchCooperativeKernel, its _ptsz, cudaLaunchKernelExC, its _ptsz
LAUNCH_CBIDS = (211, 214, 269, 270, 430, 431)
# cudaMemcpy*Async and cudaMemset*Async, with their _ptsz variants (copies a node may make)
COPY_CBIDS = (41, 44, 47, 48, 145, 161, 225, 228, 231, 232, 246, 51, 52, 235, 236)
GRAPH_LAUNCH_CBID = 311  # cudaGraphLaunch

_HEAD = struct.Struct("<6Q2q5Q")


@dataclass
class GpuWindow:
    """One closed trace window: the computes traced, where ggml-cuda reached their nodes, the
    runtime API calls made, and what the GPU ran (all on the recorder's clock)."""

    computes: np.ndarray = field(default_factory=lambda: np.empty(0, COMPUTE_DTYPE))
    node_calls: np.ndarray = field(default_factory=lambda: np.empty(0, NODE_CALL_DTYPE))
    api_calls: np.ndarray = field(default_factory=lambda: np.empty(0, API_DTYPE))
    activities: np.ndarray = field(default_factory=lambda: np.empty(0, ACTIVITY_DTYPE))
    names: dict[int, str] = field(default_factory=dict)  # kernel names seen first in this window, by id
    clock_offset_ns: int = 0  # CUPTI's clock minus the recorder's, already taken off (0: CUPTI read ours)
    clock_uncertainty_ns: int = 0
    dropped: int = 0  # records CUPTI could not keep (its buffers were full)
    invalid: int = 0  # records without times (CUPTI could not complete them)
    overhead_ns: int = 0  # host time attaching, flushing and detaching CUPTI for this window
    reason: str = ""


def parse_window(payload: bytes) -> GpuWindow:
    """A SPOOL_GPU frame's payload (preload/spool.h), checked against its own sizes."""
    try:
        head = _HEAD.unpack_from(payload, 0)
    except struct.error:
        raise RunFormatError("a damaged GPU frame: shorter than its header") from None
    n_computes, n_calls, n_api, n_activities, n_names, name_bytes = head[:6]
    offset_ns, uncertainty_ns = head[6:8]
    first_name, dropped, invalid, overhead_ns, reason = head[8:]
    position = _HEAD.size
    arrays = []
    for dtype, count in ((COMPUTE_DTYPE, n_computes), (NODE_CALL_DTYPE, n_calls), (API_DTYPE, n_api),
                         (ACTIVITY_DTYPE, n_activities), (np.dtype("<u4"), n_names)):  # fmt: skip
        size = dtype.itemsize * count
        if position + size > len(payload):
            raise RunFormatError("a GPU frame is shorter than its sizes say")
        arrays.append(np.frombuffer(payload, dtype, count, position).copy())
        position += size
    if position + name_bytes != len(payload):
        raise RunFormatError("a GPU frame's names do not fill it as its sizes say")
    text = payload[position:]
    ends = np.cumsum(arrays[4], dtype=np.int64)
    names = {
        first_name + i: text[end - length : end].decode("utf-8", "replace")
        for i, (end, length) in enumerate(zip(ends.tolist(), arrays[4].tolist(), strict=True))
    }
    return GpuWindow(
        computes=arrays[0], node_calls=arrays[1], api_calls=arrays[2], activities=arrays[3], names=names,
        clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns, dropped=dropped, invalid=invalid,
        overhead_ns=overhead_ns, reason=WINDOW_REASONS.get(reason, "?"),
    )  # fmt: skip
