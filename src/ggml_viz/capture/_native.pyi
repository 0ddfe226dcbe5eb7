from typing import Final

CALLBACK_ADDRESS: Final[int]
TIMING_FLOOR_CALLBACK_ADDRESS: Final[int]
MODE_OFF: Final[int]
MODE_RECORD: Final[int]
MODE_COUNT: Final[int]
NODE_TIMED: Final[int]

class Recorder:
    mode: int
    time_nodes: int
    out_of_memory: int
    fail_after_nodes: int
    address: int
    pending_nodes: int
    def __init__(self, layout: tuple[int, ...], functions: tuple[int, ...]) -> None: ...
    def take(
        self, boundary_ns: int, /
    ) -> list[
        tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes, list[tuple[int, int, int, int, str, str]], int]
    ]: ...
    def set_filters(
        self, ops: tuple[str, ...], layers: tuple[tuple[int, int], ...], no_layer: bool, names: tuple[str, ...], /
    ) -> None: ...
    def take_counted(self) -> int: ...
    def discard(self) -> None: ...

def layer_of(name: str, /) -> int: ...
