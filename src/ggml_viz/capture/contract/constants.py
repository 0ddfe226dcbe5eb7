"""Every number the C and the Python agree on, declared once, by the name both sides use.

Each module-level integer whose name begins with one of C_PREFIXES is written into the
generated C header as it is here (ggml_viz_contract.h, by c_header.py); the Python imports it
from here. Plain Python only: the build reads this module before anything is installed.
"""

from __future__ import annotations

# ---- recording ---------------------------------------------------------------------------------

# What a recorder does with a graph: nothing, record it, or count its nodes only.
MODE_OFF, MODE_RECORD, MODE_COUNT = 0, 1, 2

# Per-node flags (GraphRecord.flags, uint8 each).
NODE_ANSWERED = 1  # the scheduler was asked to compute the node in a slice ending with it
NODE_TIMED = 2  # its start/end are its own compute interval (sync: its slice held it alone; inline: its ticks fit)
NODE_SELECTED = 4  # the node matched the selection (filters)
NODE_VALUES = 8  # its output's statistics are read after it is computed (--values stats)
NODE_CAPTURE = 16  # its output is copied whole after it is computed (--capture)
NODE_ELSEWHERE = 32  # read at the compute call, its split ran on a backend that does not tick (an RPC server)
NODE_ROUTING = 64  # a mixture of experts' choice was read after it ran (the first MUL_MAT_ID of its ids)

# RoutingRecord.status; the rows of the last two are not written.
ROUTING_READ, ROUTING_NO_WEIGHTS, ROUTING_UNREADABLE = 0, 1, 2
ROUTING_DROPPED = 3  # read at a tick that did not hold: not the layer's ids for sure

# DecodeRecord.lowest_position of a call without a llama_batch (a plain ggml program's compute):
# its tokens, if any, are the ids its graph looks up.
NO_BATCH = -2

# The bounds of the settings the recorder holds in fixed arrays (text: NAME_LEN bytes with its NUL).
MAX_OPS, MAX_NAMES, MAX_LAYER_RANGES, MAX_CAPTURES, NAME_LEN = 32, 32, 64, 16, 64

# ---- the GPU timer -----------------------------------------------------------------------------

# When GPU computes are traced: never, in windows of graphs, every graph.
GPU_TRACE_OFF, GPU_TRACE_WINDOWS, GPU_TRACE_EVERY = 0, 1, 2
# GpuActivityRecord.kind
GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET = 1, 2, 3
# GpuApiRecord.domain: whose callback ids `cbid` are. The runtime's and the driver's are numbered
# apart and overlap (runtime 311 is cudaGraphLaunch, driver 311 is not): a call is known by the
# pair. VULKAN: the commands the Vulkan layer timed, numbered as VULKAN_* below.
GPU_API_RUNTIME, GPU_API_DRIVER, GPU_API_VULKAN = 0, 1, 2
# GpuComputeRecord.flags
COMPUTE_NEW_STRUCTURE = 1
# GpuNodeCall.flags: 0 ggml-cuda reached the node; else the scheduler began a split there (on a CPU
# backend), or the split's compute call returned (NODE_CALL_SPLIT_END: the device's work of the split
# is all launched; what the scheduler does until the next split begins is its own, such as copies)
NODE_CALL_SPLIT, NODE_CALL_CPU, NODE_CALL_SPLIT_END = 1, 2, 4
# Why a window was opened (GpuWindowHead.reason).
WINDOW_NEW_STRUCTURE, WINDOW_PERIODIC, WINDOW_EVERY, WINDOW_END = 1, 2, 3, 4
# The Vulkan commands the layer times (GpuApiRecord.cbid in the Vulkan domain).
VULKAN_DISPATCH, VULKAN_DISPATCH_BASE, VULKAN_DISPATCH_INDIRECT = 1, 2, 3
VULKAN_COPY_BUFFER, VULKAN_FILL_BUFFER, VULKAN_UPDATE_BUFFER = 10, 11, 12

# ---- ggml's RPC protocol (ggml-rpc.cpp, protocol 7), as the preload library follows it ----------

# Its commands, by number (RPC_<name> in the C; RPC_COMMANDS: a command byte at or past it is not
# ggml's RPC).
RPC_COMMAND_NAMES = (
    "ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE", "FREE_BUFFER", "BUFFER_CLEAR",
    "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR", "GRAPH_COMPUTE", "GET_DEVICE_MEMORY",
    "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO", "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR",
)  # fmt: skip

# ---- the spool (preload/spool.h) ---------------------------------------------------------------

SPOOL_START = 1  # JSON: the process (pid, argv), the libraries it loaded, ggml's version, settings
SPOOL_CONTEXT = 2  # JSON: a context (llama's, or a ggml scheduler's) and its model
SPOOL_TAKE = 3  # binary: what one take of a context's recorder gave
SPOOL_FAILED = 4  # text: why recording stopped (inference went on untraced)
SPOOL_END = 5  # JSON: the process is exiting; counts; the GPU timer's state
SPOOL_GPU = 6  # binary: a closed GPU trace window
SPOOL_WEIGHTS = 7  # binary: WeightPrint[], weights first read by the graphs of the SPOOL_TAKE that follows
SPOOL_UNTRACED = 8  # JSON: the process ran untraced, and why; the only frame of its spool
SPOOL_CONNECTION = 9  # JSON: a connection of ggml's RPC protocol
SPOOL_WIRE = 10  # binary: WireRecord[], the RPC messages that passed, whole, in order

# A spool begins with its magic, which says its version: this one, and the older ones still
# read, with the graph parts each had (version 2 had no routing).
SPOOL_MAGIC = b"GGVZSPL4"
SPOOL_VERSIONS_PARTS = {SPOOL_MAGIC: 17, b"GGVZSPL3": 16, b"GGVZSPL2": 14}

C_PREFIXES = (
    "MODE_", "NODE_", "ROUTING_", "NO_BATCH", "MAX_", "NAME_LEN", "GPU_TRACE_", "GPU_KERNEL", "GPU_MEMCPY",
    "GPU_MEMSET", "GPU_API_", "COMPUTE_", "WINDOW_", "VULKAN_", "SPOOL_",
)  # fmt: skip


def c_constants() -> dict[str, int]:
    """The integers the C header gets, by name, in the order declared."""
    found = {name: value for name, value in globals().items() if isinstance(value, int) and name.startswith(C_PREFIXES)}
    found.update({f"RPC_{name}": number for number, name in enumerate(RPC_COMMAND_NAMES)})
    found["RPC_COMMANDS"] = 20  # a command byte at or past this is not ggml's RPC (room for commands to come)
    return found
