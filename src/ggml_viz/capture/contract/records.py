"""Every record the C writes and the Python reads, declared once: fields, types and offsets.

A record is a packed little-endian struct. The C side's structs (ggml_viz_contract.h) are
written from these declarations at build time, each field's offset checked by the compiler;
the Python side reads them with the numpy dtypes made from the same declarations. Change a
record here, and only here; give it a new field at the end or a `reserved` one, never a
different meaning for old bytes (a spool of an earlier version must stay readable: see
SPOOL_MAGIC).

Plain Python only (no numpy at import): the build reads this module before anything is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, NamedTuple

if TYPE_CHECKING:
    import numpy as np

# A field's type: its numpy code (little-endian) and the C type that holds it.
C_TYPES = {
    "i8": "int64_t", "u8": "uint64_t", "i4": "int32_t", "u4": "uint32_t", "u1": "uint8_t", "f8": "double",
    "S": "char",
}  # fmt: skip
SIZES = {"i8": 8, "u8": 8, "i4": 4, "u4": 4, "u1": 1, "f8": 8, "S": 1}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # a key of C_TYPES
    count: int = 1  # an array of this many (text: "S" of this many bytes, NUL-padded)
    doc: str = ""

    @property
    def size(self) -> int:
        return SIZES[self.kind] * self.count

    @property
    def numpy(self) -> tuple:
        if self.kind == "S":
            return (self.name, f"S{self.count}")
        code = self.kind if self.kind == "u1" else "<" + self.kind
        return (self.name, code) if self.count == 1 else (self.name, code, (self.count,))


@dataclass(frozen=True)
class Record:
    """A C struct (`c_name`) and the numpy dtype reading it."""

    c_name: str
    doc: str
    fields: tuple[Field, ...]

    @property
    def size(self) -> int:
        return sum(field.size for field in self.fields)

    def offsets(self) -> dict[str, int]:
        offsets, position = {}, 0
        for field in self.fields:
            offsets[field.name] = position
            position += field.size
        return offsets

    @cached_property
    def dtype(self) -> np.dtype:
        import numpy as np

        return np.dtype([field.numpy for field in self.fields])


def _fields(kind: str, names: str, doc: str = "") -> tuple[Field, ...]:
    """Several fields of one type: _fields("i8", "start_ns end_ns")."""
    return tuple(Field(name, kind, doc=doc) for name in names.split())


# ---- what the recorder hands over per graph (core/recorder.c) ---------------------------------

STATS = Record("StatsRecord", "--values stats: one per node whose output was read after it was computed.", (
    Field("node", "u4", doc="index in its graph"),
    Field("readable", "u4", doc="0: not read (not f32/f16, or not in host memory)"),
    *_fields("i8", "n nan inf"),
    *_fields("f8", "min max sum sum_squares sum_abs"),
))  # fmt: skip
CAPTURE = Record("CaptureRecord", "--capture: a node's output copied whole.", (
    Field("node", "u4"), Field("type", "i4"), Field("ne", "i8", 4),
    Field("offset", "u8", doc="in the graph's capture bytes"), Field("nbytes", "u8"), Field("name", "S", 64),
))  # fmt: skip
ROUTING = Record(
    "RoutingRecord",
    "A mixture of experts' routing, read once per MoE layer and graph: the experts each token of the graph's batch"
    " chose (the I32 ids a MUL_MAT_ID selects its experts by) and the weight of each (the last tensor computed from"
    " GET_ROWS(probabilities, ids) before that MUL_MAT_ID, of as many elements). In the graph's routing bytes, at"
    " `offset`: n_used * n_tokens int32 ids, then as many float32 weights (NaN where status says there are none),"
    " slot fastest.",
    (
        Field("node", "u4", doc="the MUL_MAT_ID it was read at, by index in its graph"),
        Field("n_used", "i4", doc="experts per token: the ids' ne0"),
        Field("n_tokens", "i4", doc="the ids' other dimensions"),
        Field("n_expert", "i4", doc="experts chosen among: the MUL_MAT_ID's weight's ne2"),
        Field("status", "i4", doc="ROUTING_*"),
        Field("reserved", "u4"),
        Field("offset", "u8"),
    ),
)
BUFFER = Record("BufferRecord", "A backend buffer a graph used, described the first time it did.", (
    Field("address", "u8"), Field("usage", "i8"), Field("size", "u8"), Field("base", "u8"),
    Field("name", "S", 64), Field("buffer_type", "S", 64),
))  # fmt: skip
DECODE = Record("DecodeRecord", "One llama_decode call (index -1: graphs outside any), as the decode bracket saw it.", (
    *_fields("i8", "index start_ns end_ns"),
    *_fields("i4", "return_code n_tokens lowest_position"),
    Field("graphs_closed", "u4", doc="graphs waiting to be taken once this call's graphs were closed"),
    Field("first_token", "u8", doc="where its tokens begin in the batch columns"),
))  # fmt: skip
WEIGHT_PRINT = Record(
    "WeightPrint",
    "A weight the program left unnamed (whisper.cpp's are `leaf_N`), and the fingerprint of its bytes: a hash of"
    " three samples (weight_fingerprint), which the collector looks for in the model file's tensors to give the"
    " weight its file name.",
    _fields("u8", "data nbytes fingerprint"),
)

# ---- what the GPU timer hands over per closed window (gpu/gpu_timer.c) -----------------------

GPU_COMPUTE = Record("GpuComputeRecord", "A traced compute.", (
    Field("start_ns", "i8", doc="the scheduler's compute call: entered (host)"),
    Field("end_ns", "i8", doc="... returned (host)"),
    Field("call_end_ns", "i8", doc="the call that ran it (a llama call) returned: later work is not its"),
    Field("compute", "u4", doc="the process's compute count, from 0"),
    *_fields("u4", "context_id thread n_nodes"),
    Field("flags", "u4", doc="COMPUTE_*"),
    Field("reserved", "u4"),
))  # fmt: skip
GPU_NODE_CALL = Record(
    "GpuNodeCall",
    "ggml-cuda reached a node of a traced compute, or the scheduler began a split of it there (flags"
    " NODE_CALL_SPLIT, with NODE_CALL_CPU if a CPU backend computes it; return_address 0), or the split's"
    " compute call returned (NODE_CALL_SPLIT | NODE_CALL_SPLIT_END; node_index: the split's first node).",
    (
        Field("ns", "i8"),
        Field("return_address", "u8", doc="tells ggml-cuda's compute loop from its other callers"),
        *_fields("u4", "compute node_index thread flags"),
    ),
)
GPU_API = Record("GpuApiRecord", "One CUDA runtime or driver API call, or a Vulkan command the layer timed.", (
    *_fields("i8", "start_ns end_ns"),
    Field("correlation_id", "u4"),
    Field("cbid", "u4", doc="numbered per domain (the domains' numbers overlap)"),
    Field("thread", "u4", doc="pthread_self(), as CUPTI gives it: its low 32 bits"),
    Field("domain", "u4", doc="API_*"),
))  # fmt: skip
GPU_ACTIVITY = Record("GpuActivityRecord", "One kernel, copy or memset the GPU ran.", (
    *_fields("i8", "start_ns end_ns"),
    Field("bytes", "u8", doc="copies and memsets"),
    Field("graph_node_id", "u8", doc="the CUDA graph node that launched it (replays)"),
    Field("correlation_id", "u4", doc="the API call that launched it"),
    Field("graph_id", "u4", doc="the CUDA graph (0: launched on its own)"),
    *_fields("u4", "device stream"),
    Field("name_id", "u4", doc="kernels (their names' ids), else 0"),
    Field("kind", "u1", doc="GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET"),
    Field("copy_kind", "u1"),
    Field("reserved", "u1", 2),
))  # fmt: skip
GPU_WINDOW_HEAD = Record("GpuWindowHead", "A SPOOL_GPU frame's (and the extension's GPU take's) first bytes.", (
    *_fields("u8", "n_computes n_node_calls n_api_calls n_activities n_names name_bytes"),
    Field("clock_offset_ns", "i8", doc="CUPTI's clock minus the recorder's, already taken off"),
    Field("clock_uncertainty_ns", "i8"),
    Field("first_name_id", "u8"),
    Field("dropped", "u8", doc="records CUPTI could not keep"),
    Field("invalid", "u8", doc="records without times"),
    Field("overhead_ns", "u8", doc="host time attaching, flushing and detaching CUPTI"),
    Field("reason", "u8", doc="WINDOW_*"),
))  # fmt: skip

# ---- the spool's frames (preload/spool.h) ------------------------------------------------------

FRAME_HEADER = Record("SpoolFrameHeader", "Before each frame's payload; its CRC-32 (uint32, zlib's) follows it.", (
    Field("kind", "u4", doc="SPOOL_*"), Field("context_id", "u4"), Field("size", "u8", doc="payload bytes"),
))  # fmt: skip
TAKE_HEAD = Record(
    "SpoolTakeHead", "A SPOOL_TAKE frame's first bytes.", _fields("u8", "n_calls n_tokens n_graphs text_bytes")
)


class GraphRecord(NamedTuple):
    """One graph taken from the recorder: its parts' bytes, in this order, then what it was."""

    nodes: Annotated[bytes, "node structs copied (none when same)"]
    node_ptrs: Annotated[bytes, "their addresses, uint64"]
    starts: Annotated[bytes, "each node's start, int64 ns"]
    ends: Annotated[bytes, "each node's end, int64 ns"]
    flags: Annotated[bytes, "NODE_* flags per node, uint8"]
    leaves: Annotated[bytes, "structs of the sources that are not nodes"]
    leaf_ptrs: Annotated[bytes, "their addresses, uint64"]
    buffers: Annotated[bytes, "BufferRecord per buffer the graph used"]
    tick_ns: Annotated[bytes, "inline timing: when thread 0 finished a node, int64 ns"]
    tick_asked: Annotated[bytes, "nodes asked by then, uint32"]
    tick_barrier_ns: Annotated[bytes, "when thread 0 left the barrier after the node, int64 ns (0: not seen)"]
    stats: Annotated[bytes, "StatsRecord per node read (--values stats)"]
    capture_records: Annotated[bytes, "CaptureRecord per node copied (--capture)"]
    capture_bytes: Annotated[bytes, "the copies"]
    routing_records: Annotated[bytes, "RoutingRecord per MoE layer read (its experts' choice)"]
    routing_bytes: Annotated[bytes, "their ids and weights"]
    input_ids: Annotated[bytes, "the ids its token lookup read (in a call of several tokens: its ubatch's), int32"]
    boundary_ns: Annotated[int, "when the graph was closed"]
    same: Annotated[bool, "the graph repeats the one before it struct for struct"]
    n_timed: Annotated[int, "nodes timed on their own"]
    end_ns: Annotated[int, "when the graph ended"]


class RepeatRecord(NamedTuple):
    """A graph that repeats the one before it, with its buffers, nothing timed or read."""

    n_nodes: Annotated[int, "nodes of the graph"]
    start_ns: Annotated[int, "when it began"]
    end_ns: Annotated[int, "when it ended"]


class DecodesRecord(NamedTuple):
    """The llama_decode calls closed since the last take, and their tokens."""

    calls: Annotated[bytes, "DecodeRecord per llama_decode call closed"]
    token_ids: Annotated[bytes, "the calls' tokens, int32"]
    positions: Annotated[bytes, "int32"]
    seq_ids: Annotated[bytes, "each token's first sequence, int32"]
    outputs: Annotated[bytes, "whether llama.cpp computes its logits, uint8"]


# The parts of a graph, in the order the recorder, the extension and the spool give them.
GRAPH_PARTS: tuple[str, ...] = GraphRecord._fields[:17]
GRAPH_HEAD = Record("SpoolGraphHeader", "Before each graph's parts in a SPOOL_TAKE frame.", (
    *_fields("u4", "plain_repeat same"),
    Field("n_nodes", "u8"),
    *_fields("i8", "start_ns end_ns boundary_ns n_timed"),
    Field("part_sizes", "u8", len(GRAPH_PARTS), doc="in GRAPH_PARTS' order"),
))  # fmt: skip
WIRE = Record("WireRecord", "One message of ggml's RPC protocol, as it passed this process (preload_wire.c).", (
    Field("start_ns", "i8", doc="its first byte left (was sent) / arrived"),
    Field("end_ns", "i8", doc="its last byte passed"),
    Field("sequence", "u8", doc="the request's number on its connection (a response: its request's)"),
    Field("bytes", "u8", doc="on the wire, framing included"),
    Field("data_bytes", "u8", doc="tensor bytes it carries (SET_TENSOR, GET_TENSOR's response)"),
    Field("tensor_id", "u8", doc="the tensor it names: the head's address of it (0: none)"),
    Field("connection", "u4", doc="SPOOL_CONNECTION's number"),
    *_fields("u1", "command is_response sent unused"),
    Field("name", "S", 64, doc="the tensor's name"),
))  # fmt: skip

RECORDS: tuple[Record, ...] = (
    STATS, CAPTURE, ROUTING, BUFFER, DECODE, WEIGHT_PRINT, GPU_COMPUTE, GPU_NODE_CALL, GPU_API, GPU_ACTIVITY,
    GPU_WINDOW_HEAD, FRAME_HEADER, TAKE_HEAD, GRAPH_HEAD, WIRE,
)  # fmt: skip
NamedRecord = type[GraphRecord] | type[RepeatRecord] | type[DecodesRecord]
NAMED_RECORDS: tuple[NamedRecord, ...] = (GraphRecord, RepeatRecord, DecodesRecord)


# ---- ggml's own struct ggml_tensor, as both recorders read it -----------------------------------

# Not ours to lay out: ggml.h's (ggml 0.9 and later, LP64), with ggml's padding. The C recorder
# reads it by the offsets of RECORDER_TENSOR_LAYOUT (written from this), the Python by its dtype
# (core/ggml_api.py); the preload library knows older ggmls' layouts besides (preload_setup.c).
GGML_TENSOR_SIZE = 336
GGML_TENSOR_FIELDS: tuple[tuple[str, str, int, int], ...] = (  # name, numpy type, count, offset
    ("type", "<i4", 1, 0), ("buffer", "<u8", 1, 8), ("ne", "<i8", 4, 16), ("nb", "<u8", 4, 48),
    ("op", "<i4", 1, 80), ("op_params", "<i4", 16, 84), ("flags", "<i4", 1, 148), ("src", "<u8", 10, 152),
    ("view_src", "<u8", 1, 232), ("view_offs", "<u8", 1, 240), ("data", "<u8", 1, 248), ("name", "S64", 1, 256),
)  # fmt: skip


def ggml_tensor_layout() -> tuple[int, ...]:
    """RECORDER_TENSOR_LAYOUT: the C's TensorLayout (recorder.h) of ggml_tensor, field for field."""
    at = {name: offset for name, _, _, offset in GGML_TENSOR_FIELDS}
    n_src = next(count for name, _, count, _ in GGML_TENSOR_FIELDS if name == "src")
    return (
        GGML_TENSOR_SIZE,
        at["buffer"],
        at["op"],
        at["src"],
        n_src,
        at["view_src"],
        at["name"],
        at["type"],
        at["ne"],
        at["nb"],
        at["data"],
    )
