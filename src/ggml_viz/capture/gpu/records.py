"""What the GPU timer's C side hands over for one closed trace window (gpu_tracer.h beside it),
as numpy records: the spool's SPOOL_GPU frame, or the Python extension's bytes, read alike.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ..._errors import RunFormatError

# gpu_tracer.h and cupti_activity.h lay these out; their sizes are
# checked against the C side's (tests/unit/test_gpu_timer.py).
COMPUTE_DTYPE = np.dtype(
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("call_end_ns", "<i8"), ("compute", "<u4"), ("context_id", "<u4"),
     ("thread", "<u4"), ("n_nodes", "<u4"), ("flags", "<u4"), ("reserved", "<u4")]
)  # fmt: skip
NODE_CALL_DTYPE = np.dtype(
    [("ns", "<i8"), ("return_address", "<u8"), ("compute", "<u4"), ("node_index", "<u4"), ("thread", "<u4"),
     ("flags", "<u4")]
)  # fmt: skip
API_DTYPE = np.dtype(
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("correlation_id", "<u4"), ("cbid", "<u4"), ("thread", "<u4"),
     ("domain", "<u4")]
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
# NodeCall.flags: 0 ggml-cuda reached the node; else the scheduler began a split there (on a CPU backend)
NODE_CALL_SPLIT, NODE_CALL_CPU = 1, 2
# Why a window was opened (the frame's reason).
WINDOW_REASONS = {1: "new structure", 2: "periodic", 3: "every graph", 4: "end"}

# ApiRecord.domain: whose callback ids `cbid` are. The runtime's and the driver's are numbered apart
# and overlap (runtime 311 is cudaGraphLaunch, driver 311 is not): a call is known by the pair.
# VULKAN: the commands ggml-viz's Vulkan layer timed, as it numbers them (vulkan_layer.h), each
# recorded into a command buffer at its `start_ns`.
RUNTIME, DRIVER, VULKAN = 0, 1, 2
# CUPTI's callback ids by domain and name (cupti_runtime_cbid.h, cupti_driver_cbid.h; checked
# against the CUDA toolkit's headers in tests/unit/test_gpu_timer.py).
# Calls that launch a kernel one at a time (cuBLAS launches its own with cuLaunchKernelEx).
LAUNCH_CBIDS: dict[int, dict[str, int]] = {
    RUNTIME: {"cudaLaunchKernel_v7000": 211, "cudaLaunchKernel_ptsz_v7000": 214,
              "cudaLaunchCooperativeKernel_v9000": 269, "cudaLaunchCooperativeKernel_ptsz_v9000": 270,
              "cudaLaunchKernelExC_v11060": 430, "cudaLaunchKernelExC_ptsz_v11060": 431},
    DRIVER: {"cuLaunchKernel": 307, "cuLaunchKernel_ptsz": 442, "cuLaunchCooperativeKernel": 477,
             "cuLaunchCooperativeKernel_ptsz": 478, "cuLaunchKernelEx": 652, "cuLaunchKernelEx_ptsz": 653},
    VULKAN: {"vkCmdDispatch": 1, "vkCmdDispatchBase": 2, "vkCmdDispatchIndirect": 3},
}  # fmt: skip
# Asynchronous copies and memsets, with their _ptsz variants (copies a node may make).
COPY_CBIDS: dict[int, dict[str, int]] = {
    RUNTIME: {"cudaMemcpyAsync_v3020": 41, "cudaMemcpy2DAsync_v3020": 44, "cudaMemcpyToSymbolAsync_v3020": 47,
              "cudaMemcpyFromSymbolAsync_v3020": 48, "cudaMemcpy3DAsync_v3020": 145,
              "cudaMemcpyPeerAsync_v4000": 161, "cudaMemcpyAsync_ptsz_v7000": 225,
              "cudaMemcpy2DAsync_ptsz_v7000": 228, "cudaMemcpyToSymbolAsync_ptsz_v7000": 231,
              "cudaMemcpyFromSymbolAsync_ptsz_v7000": 232, "cudaMemcpy3DAsync_ptsz_v7000": 246,
              "cudaMemsetAsync_v3020": 51, "cudaMemset2DAsync_v3020": 52, "cudaMemsetAsync_ptsz_v7000": 235,
              "cudaMemset2DAsync_ptsz_v7000": 236},
    DRIVER: {"cuMemcpyAsync": 306, "cuMemcpyAsync_ptsz": 418, "cuMemcpyHtoDAsync_v2": 277,
             "cuMemcpyHtoDAsync_v2_ptsz": 421, "cuMemcpyDtoHAsync_v2": 279, "cuMemcpyDtoHAsync_v2_ptsz": 422,
             "cuMemcpyDtoDAsync_v2": 281, "cuMemcpyDtoDAsync_v2_ptsz": 423, "cuMemcpy2DAsync_v2": 289,
             "cuMemcpy2DAsync_v2_ptsz": 424, "cuMemcpy3DAsync_v2": 291, "cuMemcpy3DAsync_v2_ptsz": 425,
             "cuMemcpyPeerAsync": 319, "cuMemcpyPeerAsync_ptsz": 426, "cuMemcpy3DPeerAsync": 321,
             "cuMemcpy3DPeerAsync_ptsz": 427, "cuMemsetD8Async": 216, "cuMemsetD8Async_ptsz": 428,
             "cuMemsetD16Async": 218, "cuMemsetD16Async_ptsz": 429, "cuMemsetD32Async": 220,
             "cuMemsetD32Async_ptsz": 430, "cuMemsetD2D8Async": 222, "cuMemsetD2D8Async_ptsz": 431,
             "cuMemsetD2D16Async": 224, "cuMemsetD2D16Async_ptsz": 432, "cuMemsetD2D32Async": 226,
             "cuMemsetD2D32Async_ptsz": 433},
    VULKAN: {"vkCmdCopyBuffer": 10, "vkCmdFillBuffer": 11, "vkCmdUpdateBuffer": 12},
}  # fmt: skip
# Calls that launch a whole CUDA graph.
GRAPH_LAUNCH_CBIDS: dict[int, dict[str, int]] = {
    RUNTIME: {"cudaGraphLaunch_v10000": 311, "cudaGraphLaunch_ptsz_v10000": 312},
    DRIVER: {"cuGraphLaunch": 514, "cuGraphLaunch_ptsz": 515},
}


def _calls_among(api_calls: np.ndarray, cbids: dict[int, dict[str, int]]) -> np.ndarray:
    found = np.zeros(len(api_calls), dtype=bool)
    for domain, named in cbids.items():
        found |= (api_calls["domain"] == domain) & np.isin(api_calls["cbid"], list(named.values()))
    return found


def is_launch(api_calls: np.ndarray) -> np.ndarray:
    """Per API call, whether it launched a kernel on its own."""
    return _calls_among(api_calls, LAUNCH_CBIDS)


def is_copy(api_calls: np.ndarray) -> np.ndarray:
    """Per API call, whether it copied or set memory asynchronously."""
    return _calls_among(api_calls, COPY_CBIDS)


def is_graph_launch(api_calls: np.ndarray) -> np.ndarray:
    """Per API call, whether it launched a CUDA graph."""
    return _calls_among(api_calls, GRAPH_LAUNCH_CBIDS)


def without_split_markers(node_calls: np.ndarray) -> np.ndarray:
    """The node calls of ggml-cuda alone (not the scheduler's split markers)."""
    return node_calls[(node_calls["flags"] & NODE_CALL_SPLIT) == 0]


def without_nested_driver_calls(api_calls: np.ndarray) -> np.ndarray:
    """The calls but the driver calls a runtime call made itself: CUPTI gives those the runtime
    call's correlation id, and the runtime call is the one kept (its callback ids are the ones the
    mapping reads, and a launch counts once)."""
    runtime = api_calls["correlation_id"][api_calls["domain"] == RUNTIME]
    nested = (api_calls["domain"] == DRIVER) & np.isin(api_calls["correlation_id"], runtime)
    return api_calls[~nested]


_HEAD = struct.Struct("<6Q2q5Q")


@dataclass
class GpuWindow:
    """One closed trace window: the computes traced, where ggml-cuda reached their nodes (and
    where their splits began), the runtime and driver API calls made, and what the GPU ran (all
    on the recorder's clock)."""

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
        computes=arrays[0], node_calls=arrays[1], api_calls=without_nested_driver_calls(arrays[2]),
        activities=arrays[3], names=names,
        clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns, dropped=dropped, invalid=invalid,
        overhead_ns=overhead_ns, reason=WINDOW_REASONS.get(reason, "?"),
    )  # fmt: skip
