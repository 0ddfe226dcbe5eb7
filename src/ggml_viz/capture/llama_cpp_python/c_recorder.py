"""The C recorder behind the same interface as PythonGraphRecorder: the extension's hot path
as the eval callback of a llama-cpp-python context. It is the default; where the extension
cannot load, ggml-viz says so once and records with the Python recorder instead.
"""

from __future__ import annotations

from typing import Any

from ..core.extension import IMPORT_ERROR, extension
from ..core.ggml_api import TENSOR_DTYPE, address_of, field_bytes, libggml, routing_ops
from ..core.graph_records import GraphRecordReader
from ..core.raw_graph import Mode, RawGraph, RepeatedGraph
from ..settings import NodeSelection, ValueSettings


def _layout() -> tuple[int, ...]:
    return (
        TENSOR_DTYPE.itemsize,
        field_bytes("buffer").start,
        field_bytes("op").start,
        field_bytes("src").start,
        TENSOR_DTYPE.fields["src"][0].shape[0],  # type: ignore[index]
        field_bytes("view_src").start,
        field_bytes("name").start,
        field_bytes("type").start,
        field_bytes("ne").start,
        field_bytes("nb").start,
        field_bytes("data").start,
    )


def _addresses(*names: str) -> tuple[int, ...]:
    """The addresses of these libggml-base functions, for the C recorder to call."""
    lib = libggml()
    return tuple(address_of(getattr(lib, name)) for name in names)


def _functions() -> tuple[int, ...]:
    return _addresses(
        "ggml_backend_buffer_name",
        "ggml_backend_buffer_get_usage",
        "ggml_backend_buffer_get_size",
        "ggml_backend_buffer_get_base",
        "ggml_backend_buffer_get_type",
        "ggml_backend_buft_name",
        "ggml_op_desc",
        "ggml_op_name",
    )


class CGraphRecorder:
    """Records the graphs of one llama context with the C extension."""

    def __init__(
        self,
        selection: NodeSelection | None = None,
        inline_timing: bool = True,
        values: ValueSettings | None = None,
        routing: bool = True,
    ) -> None:
        import llama_cpp.llama_cpp as llama_cpp

        if extension is None:
            raise ImportError(IMPORT_ERROR or "ggml_viz.capture.core._recorder is missing")
        self._recorder = extension.Recorder(_layout(), _functions())
        selection = selection or NodeSelection()
        self._recorder.set_filters(selection.ops, selection.layers, selection.no_layer, selection.names)
        self.user_data: int | None = self._recorder.address
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(extension.CALLBACK_ADDRESS)
        self._recorder.inline_timing = int(inline_timing)
        self.inline_timing = inline_timing
        self.abort_callback = llama_cpp.ggml_abort_callback(extension.ABORT_CALLBACK_ADDRESS)
        self._chained: Any = None  # the program's abort callback, kept alive while chained
        self.reader = GraphRecordReader(inline_timing)
        self.clock = self.reader.clock
        values = values or ValueSettings()
        self.values = values
        if values.wanted:
            self._recorder.set_values(values.stats, values.captures, values.capture_bytes, value_functions())
        self._recorder.set_input_reads(*_addresses("ggml_backend_buffer_is_host"))
        self.routing = routing
        if routing:
            ops = routing_ops()
            self._recorder.set_routing(True, ops.mul_mat_id, ops.get_rows, routing_functions())

    @property
    def c_recorder(self) -> Any:
        """The recorder in C, for the decode bracket (CContextTracer)."""
        return self._recorder

    @property
    def mode(self) -> Mode:
        return Mode(self._recorder.mode)

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self._recorder.mode = int(mode)

    @property
    def time_nodes(self) -> bool:
        return bool(self._recorder.time_nodes)

    @time_nodes.setter
    def time_nodes(self, on: bool) -> None:
        self._recorder.time_nodes = int(on)

    @property
    def failure(self) -> str | None:
        return "the C recorder ran out of memory" if self._recorder.out_of_memory else None

    @property
    def tick_reads(self) -> bool:
        """Whether the graphs read at their compute call are timed by ticks too (their CPU splits)."""
        return bool(self._recorder.tick_reads)

    @tick_reads.setter
    def tick_reads(self, on: bool) -> None:
        self._recorder.tick_reads = int(on)

    def chain_abort(self, callback: Any, data: Any) -> None:
        """Call the program's abort callback from ours (None: no longer)."""
        self._chained = callback
        self._recorder.chain_abort(address_of(callback) if callback else 0, address_of(data) if data else 0)

    def hook_barriers(self) -> None:
        """See each node's end: ggml's barrier after it, routed through the recorder."""
        extension.hook_barriers()

    def take_graphs(self, boundary_ns: int) -> list[RawGraph | RepeatedGraph]:
        return self.reader.graphs(self._recorder.take(boundary_ns))

    @property
    def open_nodes(self) -> int:
        return int(self._recorder.open_nodes)

    @property
    def routing_reads(self) -> tuple[int, int, int]:
        """MoE layers whose routing was read at an answered node, at a tick; reads at a tick dropped."""
        c = self._recorder
        return int(c.routing_answered), int(c.routing_at_ticks), int(c.routing_dropped)

    @property
    def captures_skipped(self) -> tuple[int, int]:
        """Captures left out for the byte budget: how many, and their bytes."""
        return int(self._recorder.captures_skipped), int(self._recorder.capture_bytes_skipped)

    def close_graph(self, boundary_ns: int) -> int:
        """End the graph in flight; returns how many graphs wait to be taken (-1 once failed)."""
        return int(self._recorder.close(boundary_ns))

    def drop_open(self) -> None:
        """Forget the graph in flight (recording failed inside it)."""
        self._recorder.drop_open()

    def take_counted(self) -> int:
        return int(self._recorder.take_counted())

    def discard(self) -> None:
        self._recorder.discard()


def routing_functions() -> tuple[int, int, int]:
    return _addresses("ggml_backend_buffer_is_host", "ggml_backend_tensor_get", "ggml_fp16_to_fp32")  # type: ignore[return-value]


def value_functions() -> tuple[int, int, int, int]:
    return _addresses(  # type: ignore[return-value]
        "ggml_backend_buffer_is_host", "ggml_is_contiguous", "ggml_nbytes", "ggml_fp16_to_fp32"
    )
