from typing import Final

CALLBACK_ADDRESS: Final[int]
ABORT_CALLBACK_ADDRESS: Final[int]
TIMING_FLOOR_CALLBACK_ADDRESS: Final[int]
GRAPH_FLOOR_CALLBACK_ADDRESS: Final[int]
MODE_OFF: Final[int]
MODE_RECORD: Final[int]
MODE_COUNT: Final[int]
NODE_TIMED: Final[int]
BUFFER_RECORD_SIZE: Final[int]
DECODE_RECORD_SIZE: Final[int]
STATS_RECORD_SIZE: Final[int]
CAPTURE_RECORD_SIZE: Final[int]
ROUTING_RECORD_SIZE: Final[int]

class GraphRecord(tuple[object, ...]):
    """One graph taken from the recorder (parts as bytes; see recorder.h)."""

    nodes: bytes
    node_ptrs: bytes
    starts: bytes
    ends: bytes
    flags: bytes
    leaves: bytes
    leaf_ptrs: bytes
    buffers: bytes
    tick_ns: bytes
    tick_asked: bytes
    tick_barrier_ns: bytes
    stats: bytes
    capture_records: bytes
    capture_bytes: bytes
    routing_records: bytes
    routing_bytes: bytes
    boundary_ns: int
    same: bool
    n_timed: int
    end_ns: int

class RepeatRecord(tuple[int, int, int]):
    """A graph that repeats the one before it, with its buffers, nothing timed or read."""

    n_nodes: int
    start_ns: int
    end_ns: int

class DecodesRecord(tuple[bytes, bytes, bytes, bytes, bytes]):
    """The llama_decode calls closed since the last take (DecodeRecord bytes) and their tokens."""

    calls: bytes
    token_ids: bytes
    positions: bytes
    seq_ids: bytes
    outputs: bytes

class Recorder:
    mode: int
    time_nodes: int
    inline_timing: int
    out_of_memory: int
    fail_after_nodes: int
    address: int
    open_nodes: int
    captures_skipped: int
    capture_bytes_skipped: int
    capture_budget: int
    routing_answered: int
    routing_at_ticks: int
    routing_dropped: int
    def __init__(self, layout: tuple[int, ...], functions: tuple[int, ...]) -> None: ...
    def take(self, boundary_ns: int, /) -> list[GraphRecord | RepeatRecord]: ...
    def set_filters(
        self, ops: tuple[str, ...], layers: tuple[tuple[int, int], ...], no_layer: bool, names: tuple[str, ...], /
    ) -> None: ...
    def take_counted(self) -> int: ...
    def close(self, boundary_ns: int, /) -> int: ...
    def drop_open(self) -> None: ...
    def set_values(
        self, stats: bool, captures: tuple[str, ...], capture_budget: int, functions: tuple[int, int, int, int], /
    ) -> None: ...
    def set_routing(
        self, on: bool, op_mul_mat_id: int, op_get_rows: int, functions: tuple[int, int, int], /
    ) -> None: ...
    def discard(self) -> None: ...
    def chain_abort(self, function: int, data: int, /) -> None: ...
    def set_decode_rules(
        self,
        detail_graph: bool,
        sample: int,
        graphs_per_write: int,
        write_interval_ns: int,
        batch_offsets: tuple[int, int, int, int, int],
        /,
    ) -> None: ...
    def begin_decode(self, batch_address: int, /) -> None: ...
    def end_decode(self, return_code: int, /) -> int: ...
    def take_decodes(self) -> DecodesRecord: ...

class DescriptionIds:
    def __init__(self, struct_size: int, /) -> None: ...
    def __len__(self) -> int: ...
    def assign(self, structs: object, view_rows: object, next_id: int, /) -> tuple[bytes, bytes, bytes, int]: ...
    def clear(self) -> None: ...

def layer_of(name: str, /) -> int: ...
def hook_barriers() -> int: ...
def layers_of(names: object, /) -> bytes: ...
def weight_fingerprint(data: bytes, /) -> int: ...
def read_batch(
    address: int, offsets: tuple[int, int, int, int, int], /
) -> tuple[int, int, bytes, bytes, bytes, bytes]: ...

# the GPU timer (_recorder_gpu.c; its C side is capture/gpu/)
GPU_COMPUTE_RECORD_SIZE: int
GPU_NODE_CALL_SIZE: int
GPU_API_RECORD_SIZE: int
GPU_ACTIVITY_RECORD_SIZE: int
GPU_TRACE_OFF: int
GPU_TRACE_WINDOWS: int
GPU_TRACE_EVERY: int

def hook_graph_compute(
    graph_n_nodes: int,
    graph_node: int,
    buffer_offset: int,
    data_offset: int,
    sched_synchronize: int,
    sched_set_eval_callback: int,
    /,
) -> int: ...
def configure_gpu(mode: int, window: int, period: int, detach: bool, cupti_paths: str | None = None, /) -> None: ...
def gpu_begin_call(recorder_address: int, context_id: int, device: int, /) -> None: ...
def gpu_end_call() -> bool: ...
def gpu_finish() -> bool: ...
def gpu_take() -> bytes | None: ...
def gpu_state() -> tuple[str, int, bool, str | None, str, str]: ...
def convert_cupti_records(records: list[bytes], clock_offset_ns: int, /) -> tuple[bytes, bytes, bytes, bytes, int]: ...
