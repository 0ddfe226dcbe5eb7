"""What the GPU timer's C side hands over for one closed trace window (gpu_timer.h beside it),
as numpy records: the spool's SPOOL_GPU frame, or the Python extension's bytes, read alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..._errors import RunFormatError
from ..contract.constants import (
    GPU_API_DRIVER,
    GPU_API_RUNTIME,
    GPU_API_VULKAN,
    GPU_KERNEL,
    GPU_MEMCPY,
    GPU_MEMSET,
    NODE_CALL_CPU,
    NODE_CALL_SPLIT,
    NODE_CALL_SPLIT_END,
    VULKAN_COPY_BUFFER,
    VULKAN_DISPATCH,
    VULKAN_DISPATCH_BASE,
    VULKAN_DISPATCH_INDIRECT,
    VULKAN_FILL_BUFFER,
    VULKAN_UPDATE_BUFFER,
    WINDOW_END,
    WINDOW_EVERY,
    WINDOW_NEW_STRUCTURE,
    WINDOW_PERIODIC,
)
from ..contract.records import GPU_ACTIVITY, GPU_API, GPU_COMPUTE, GPU_NODE_CALL, GPU_WINDOW_HEAD

# The records' layouts and numbers: the contract's (capture/contract/), the C's too.
COMPUTE_DTYPE = GPU_COMPUTE.dtype
NODE_CALL_DTYPE = GPU_NODE_CALL.dtype
API_DTYPE = GPU_API.dtype
ACTIVITY_DTYPE = GPU_ACTIVITY.dtype
# ActivityRecord.kind
KERNEL, MEMCPY, MEMSET = GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}
# Why a window was opened (the frame's reason).
WINDOW_REASONS = {WINDOW_NEW_STRUCTURE: "new structure", WINDOW_PERIODIC: "periodic", WINDOW_EVERY: "every graph",
                  WINDOW_END: "end"}  # fmt: skip
# ApiRecord.domain (the contract's GPU_API_*): whose callback ids `cbid` are.
RUNTIME, DRIVER, VULKAN = GPU_API_RUNTIME, GPU_API_DRIVER, GPU_API_VULKAN
# CUPTI's callback ids by domain and name (cupti_runtime_cbid.h, cupti_driver_cbid.h; checked
# against the CUDA toolkit's headers in tests/unit/test_gpu_timer.py).
# Calls that launch a kernel one at a time (cuBLAS launches its own with cuLaunchKernelEx).
LAUNCH_CBIDS: dict[int, dict[str, int]] = {
    RUNTIME: {"cudaLaunchKernel_v7000": 211, "cudaLaunchKernel_ptsz_v7000": 214,
              "cudaLaunchCooperativeKernel_v9000": 269, "cudaLaunchCooperativeKernel_ptsz_v9000": 270,
              "cudaLaunchKernelExC_v11060": 430, "cudaLaunchKernelExC_ptsz_v11060": 431},
    DRIVER: {"cuLaunchKernel": 307, "cuLaunchKernel_ptsz": 442, "cuLaunchCooperativeKernel": 477,
             "cuLaunchCooperativeKernel_ptsz": 478, "cuLaunchKernelEx": 652, "cuLaunchKernelEx_ptsz": 653},
    VULKAN: {"vkCmdDispatch": VULKAN_DISPATCH, "vkCmdDispatchBase": VULKAN_DISPATCH_BASE,
             "vkCmdDispatchIndirect": VULKAN_DISPATCH_INDIRECT},
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
    VULKAN: {"vkCmdCopyBuffer": VULKAN_COPY_BUFFER, "vkCmdFillBuffer": VULKAN_FILL_BUFFER,
             "vkCmdUpdateBuffer": VULKAN_UPDATE_BUFFER},
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


SPLIT_DTYPE = np.dtype(
    [("compute", "<i8"), ("first_node", "<i8"), ("on_cpu", "?"), ("start_ns", "<i8"), ("end_ns", "<i8")]
)


def split_spans(node_calls: np.ndarray) -> np.ndarray:
    """The splits of the traced computes, from the scheduler's markers: per split its compute, its
    first node, whether a CPU backend computed it, and when its compute call began and returned
    (end_ns -1: not marked, as in windows of an older ggml-viz). In order of compute and start."""
    markers = node_calls[(node_calls["flags"] & NODE_CALL_SPLIT) != 0]
    markers = markers[np.lexsort((markers["ns"], markers["compute"]))]
    ended = (markers["flags"] & NODE_CALL_SPLIT_END) != 0
    begins = markers[~ended]
    spans = np.zeros(len(begins), SPLIT_DTYPE)
    spans["compute"] = begins["compute"]
    spans["first_node"] = begins["node_index"]
    spans["on_cpu"] = (begins["flags"] & NODE_CALL_CPU) != 0
    spans["start_ns"] = begins["ns"]
    # a split's end: the next marker of its compute and first node, where that is an end (a
    # compute may run the same split twice; the scheduler never nests two)
    order = np.lexsort((markers["ns"], markers["node_index"], markers["compute"]))
    ordered, is_end = markers[order], ended[order]
    same = (ordered["compute"][1:] == ordered["compute"][:-1]) & (
        ordered["node_index"][1:] == ordered["node_index"][:-1]
    )
    paired = np.flatnonzero(~is_end[:-1] & is_end[1:] & same)  # (positions in `ordered` of begins with an end)
    end_of = np.full(len(markers), -1, dtype=np.int64)
    end_of[order[paired]] = ordered["ns"][paired + 1]
    spans["end_ns"] = end_of[~ended]
    return spans


def without_nested_driver_calls(api_calls: np.ndarray) -> np.ndarray:
    """The calls but the driver calls a runtime call made itself: CUPTI gives those the runtime
    call's correlation id, and the runtime call is the one kept (its callback ids are the ones the
    mapping reads, and a launch counts once)."""
    runtime = api_calls["correlation_id"][api_calls["domain"] == RUNTIME]
    nested = (api_calls["domain"] == DRIVER) & np.isin(api_calls["correlation_id"], runtime)
    return api_calls[~nested]


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
    if len(payload) < GPU_WINDOW_HEAD.size:
        raise RunFormatError("a damaged GPU frame: shorter than its header")
    head = np.frombuffer(payload, GPU_WINDOW_HEAD.dtype, 1)[0]
    n_computes, n_calls, n_api, n_activities, n_names, name_bytes = (
        int(head[name])
        for name in ("n_computes", "n_node_calls", "n_api_calls", "n_activities", "n_names", "name_bytes")
    )
    first_name = int(head["first_name_id"])
    position = GPU_WINDOW_HEAD.size
    arrays = []
    for dtype, count in (
        (COMPUTE_DTYPE, n_computes),
        (NODE_CALL_DTYPE, n_calls),
        (API_DTYPE, n_api),
        (ACTIVITY_DTYPE, n_activities),
        (np.dtype("<u4"), n_names),
    ):
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
        computes=arrays[0],
        node_calls=arrays[1],
        api_calls=without_nested_driver_calls(arrays[2]),
        activities=arrays[3],
        names=names,
        clock_offset_ns=int(head["clock_offset_ns"]),
        clock_uncertainty_ns=int(head["clock_uncertainty_ns"]),
        dropped=int(head["dropped"]),
        invalid=int(head["invalid"]),
        overhead_ns=int(head["overhead_ns"]),
        reason=WINDOW_REASONS.get(int(head["reason"]), "?"),
    )
