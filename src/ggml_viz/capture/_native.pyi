from typing import Final

CALLBACK_ADDRESS: Final[int]
ABORT_CALLBACK_ADDRESS: Final[int]
TIMING_FLOOR_CALLBACK_ADDRESS: Final[int]
GRAPH_FLOOR_CALLBACK_ADDRESS: Final[int]
MODE_OFF: Final[int]
MODE_RECORD: Final[int]
MODE_COUNT: Final[int]
NODE_TIMED: Final[int]

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
    def __init__(self, layout: tuple[int, ...], functions: tuple[int, ...]) -> None: ...
    def take(
        self, boundary_ns: int, /
    ) -> list[
        tuple[
            bytes,
            bytes,
            bytes,
            bytes,
            bytes,
            bytes,
            bytes,
            list[tuple[int, int, int, int, str, str]],
            int,
            bool,
            int,
            int,
            bytes,
            bytes,
            bytes,
            bytes,
            bytes,
        ]
        | tuple[int, int, int]
    ]: ...
    def set_filters(
        self, ops: tuple[str, ...], layers: tuple[tuple[int, int], ...], no_layer: bool, names: tuple[str, ...], /
    ) -> None: ...
    def take_counted(self) -> int: ...
    def close(self, boundary_ns: int, /) -> int: ...
    def drop_open(self) -> None: ...
    def set_values(
        self, stats: bool, captures: tuple[str, ...], capture_budget: int, functions: tuple[int, int, int, int], /
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
    def take_decodes(
        self,
    ) -> tuple[list[tuple[int, int, int, int, int, int, int, int]], bytes, bytes, bytes, bytes]: ...

class DescriptionIds:
    def __init__(self, struct_size: int, /) -> None: ...
    def __len__(self) -> int: ...
    def assign(self, structs: object, view_rows: object, next_id: int, /) -> tuple[bytes, bytes, bytes, int]: ...
    def clear(self) -> None: ...

def layer_of(name: str, /) -> int: ...
def layers_of(names: object, /) -> bytes: ...
def read_batch(
    address: int, offsets: tuple[int, int, int, int, int], /
) -> tuple[int, int, bytes, bytes, bytes, bytes]: ...
