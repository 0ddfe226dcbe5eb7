"""The run directory's tables: names, columns and the format version.

A run is a directory `NAME.ggmlviz/` holding `manifest.json` and one file per table.
While recording, each table is an Arrow IPC stream (`TABLE.arrows`) appended once per
graph; when the recording closes cleanly each stream becomes `TABLE.parquet`. A table that
grows past a segment's bound while recording (a long run's node times and graphs) goes on
in a new stream, and the full one becomes a Parquet part at once (`TABLE.0.parquet`,
`TABLE.1.parquet`, ...): such a table is stored as its parts, in order.
Descriptions of tensors are stored once in `tensors` and referenced by id, so a name,
a shape or an op is not repeated per event. A graph's nodes and wiring
(`structure_nodes`, `edges`) are stored once per distinct graph structure, which the
graphs that share it reference; per graph only its row (with its tokens) and the times of its
timed nodes (`node_times`) are written. See docs/run-format.md.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

FORMAT_NAME = "ggml-viz-run"
# 2: a node's layer is structure_nodes.layer (inferred from the graph), no longer its
# tensor's (a name hint); node_times.wait_ns. Version 1 runs are read (both computed).
# 3: a table may be stored in parts (TABLE.N.parquet), rolled while recording.
FORMAT_VERSION = 3
READER_SUPPORTED_VERSIONS = (1, 2, 3)

MANIFEST_FILE = "manifest.json"
# Where a native program's preload library spools what it records, inside the run folder, until
# the collector (capture/preload/collector.py) has written it into the run.
SPOOL_DIR = "spool"
STREAM_SUFFIX = ".arrows"
PARQUET_SUFFIX = ".parquet"

# Keys of every table file's schema metadata: a file knows which recording it belongs to.
META_EXPERIMENT_ID = b"ggml_viz.experiment_id"
META_FORMAT_VERSION = b"ggml_viz.format_version"
META_TABLE = b"ggml_viz.table"

NO_ID = -1  # stands for "none" in id columns (no buffer, no view source, no layer)

TABLES: dict[str, pa.Schema] = {
    "graphs": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("context_id", pa.int32()),
            ("decode_index", pa.int32()),  # which llama_decode call of its context ran it
            ("ubatch_index", pa.int32()),  # position of the graph inside that call
            ("structure_id", pa.int32()),  # its nodes' wiring, in `edges` (shared by identical graphs)
            ("start_ns", pa.int64()),  # first node's start (monotonic clock)
            ("end_ns", pa.int64()),  # last node's end (graph detail: the graph's boundary)
            ("decode_start_ns", pa.int64()),  # the llama_decode call that ran it was entered
            ("decode_end_ns", pa.int64()),  # ... and returned
            ("return_code", pa.int32()),  # what that call returned (0 is success)
            ("n_nodes", pa.int32()),
            ("n_tokens", pa.int32()),
            # The batch this graph processed, token by token (the reader's `tokens` table):
            ("token_ids", pa.list_(pa.int32())),
            ("token_positions", pa.list_(pa.int32())),  # position in the sequence
            ("token_seq_ids", pa.list_(pa.int32())),  # (first) sequence id
            ("token_outputs", pa.list_(pa.bool_())),  # llama.cpp computes logits for it
            ("token_texts", pa.list_(pa.string())),  # the token's text piece
            ("first_batch_index", pa.int32()),  # index of its first token in the llama_decode batch
            # each token's index in that batch (llama.cpp may split a batch of several sequences
            # into ubatches of its own order); null in runs recorded before it was kept
            ("token_batch_indexes", pa.list_(pa.int32())),
            ("phase", pa.string()),  # prompt | decode
            ("detail", pa.string()),  # op: every node timed | graph: structure only
        ]
    ),
    "tensors": pa.schema(
        [
            ("tensor_id", pa.int32()),
            ("name", pa.string()),
            ("op", pa.string()),  # specific op (SWIGLU, SILU, MUL_MAT, NONE for leaves)
            ("op_base", pa.string()),  # ggml_op enum name (GLU, UNARY, MUL_MAT)
            ("type", pa.string()),
            ("ne0", pa.int64()),
            ("ne1", pa.int64()),
            ("ne2", pa.int64()),
            ("ne3", pa.int64()),
            ("nbytes", pa.int64()),
            ("flags", pa.int32()),  # ggml tensor flags (input, output, param, loss)
            ("buffer_id", pa.int32()),
            ("buffer_offset", pa.int64()),  # where its data starts inside that buffer (-1: no buffer)
            ("layer", pa.int32()),  # the name's hint (blk.N., -N, _lN); a node's own layer is in structure_nodes
            ("view_src_id", pa.int32()),
            ("view_offs", pa.int64()),
        ]
    ),
    "structure_nodes": pa.schema(
        [
            ("structure_id", pa.int32()),  # graphs with the same structure share these rows
            ("node_index", pa.int32()),  # execution order, 0 .. n_nodes-1
            ("tensor_id", pa.int32()),
            ("layer", pa.int32()),  # the node's layer, inferred from the graph (layers.node_layers)
        ]
    ),
    "node_times": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("node_index", pa.int32()),
            ("start_ns", pa.int64()),  # the node's own compute began ...
            ("end_ns", pa.int64()),  # ... and ended (only nodes computed and timed alone)
            # inline timing: of that interval, thread 0's wait at the barrier for the other
            # threads to finish the node (null: not seen, or sync timing)
            ("wait_ns", pa.int64()),
        ]
    ),
    "edges": pa.schema(
        [
            ("structure_id", pa.int32()),  # graphs with the same structure share their edges
            ("node_index", pa.int32()),
            ("src_slot", pa.int8()),
            ("src_tensor_id", pa.int32()),
        ]
    ),
    "memory_map": pa.schema(
        [
            ("model_path", pa.string()),  # the model file (a run may hold several: a draft model)
            ("kind", pa.string()),  # header | metadata | tensor_infos | padding | tensor | unexplained | trailing
            ("name", pa.string()),  # the tensor (for padding: the tensor it follows)
            ("start", pa.int64()),  # absolute file offset of the first byte
            ("end", pa.int64()),  # one past the last byte
            ("type", pa.string()),
            ("ne0", pa.int64()),
            ("ne1", pa.int64()),
            ("ne2", pa.int64()),
            ("ne3", pa.int64()),
            ("n_elements", pa.int64()),
            ("layer", pa.int32()),
            ("category", pa.string()),  # input | attention | ffn | norm | output | other
            ("padding_after", pa.int64()),
        ]
    ),
    "buffers": pa.schema(
        [
            ("buffer_id", pa.int32()),
            ("context_id", pa.int32()),
            ("name", pa.string()),  # ggml_backend_buffer_name: CPU, CPU_Mapped, CUDA0, ...
            ("buffer_type", pa.string()),  # ggml_backend_buft_name
            ("usage", pa.string()),  # any | weights | compute
            ("size", pa.int64()),
            ("base", pa.uint64()),  # address of the buffer's first byte in this process
            ("first_graph_id", pa.int32()),
        ]
    ),
    # --values stats: each node's output, read after it was computed (f32/f16 in host memory)
    "node_values": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("node_index", pa.int32()),
            ("n", pa.int64()),  # finite values
            ("nan", pa.int64()),
            ("inf", pa.int64()),
            ("min", pa.float64()),
            ("max", pa.float64()),
            ("mean", pa.float64()),
            ("std", pa.float64()),
            ("mean_abs", pa.float64()),
        ]
    ),
    # --capture: whole copies of matching nodes' outputs, their bytes in captures.bin
    "captures": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("node_index", pa.int32()),
            ("name", pa.string()),
            ("type", pa.string()),
            ("ne0", pa.int64()),
            ("ne1", pa.int64()),
            ("ne2", pa.int64()),
            ("ne3", pa.int64()),
            ("offset", pa.int64()),  # in captures.bin
            ("nbytes", pa.int64()),
        ]
    ),
    # Mixture-of-experts models: the experts each token of a graph's batch chose in each MoE layer,
    # one row per token and slot, read once per layer right after its first MUL_MAT_ID
    "moe_routing": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("node_index", pa.int32()),  # the layer's first MUL_MAT_ID (its layer: structure_nodes.layer)
            ("row", pa.int32()),  # the row of the layer's input: 0 .. tokens the layer computed - 1
            # that row's token, by its place in the graph's batch (graphs.token_positions[i]); -1 where
            # the layer's rows are neither the graph's tokens nor those it computes logits for
            ("token_index", pa.int32()),
            ("slot", pa.int32()),  # 0 .. experts per token - 1, in the router's order (best first)
            ("expert", pa.int32()),
            ("weight", pa.float32()),  # what the expert's output is multiplied by (null: not found)
            ("n_expert", pa.int32()),  # experts the layer chooses among
        ]
    ),
    # GPU time (CUDA: CUPTI's records; Vulkan: the layer's timestamp queries; see capture/gpu/): what the GPU ran
    # in traced graphs
    "gpu_kernels": pa.schema(
        [
            ("graph_id", pa.int32()),  # -1: outside any recorded graph
            ("node_index", pa.int32()),  # the node that launched it (-1: a copy or memset, or not attributed)
            ("group_end", pa.int32()),  # the last node of that node's fused group (== node_index: not fused)
            ("device", pa.int32()),
            ("stream", pa.int32()),
            ("kind", pa.string()),  # kernel | memcpy | memset
            ("kernel", pa.string()),  # the kernel's function (quantize_q8_1), or the copy's kind (HtoD)
            ("name", pa.string()),  # the kernel's whole name, demangled
            ("start_ns", pa.int64()),  # on the GPU, in the recorder's clock
            ("end_ns", pa.int64()),
            ("busy_ns", pa.int64()),  # its share of the device's busy time (overlap counted once, to the earlier)
            ("bytes", pa.int64()),  # copies and memsets
            (
                "correlation_id",
                pa.int64(),
            ),  # the call that launched it (CUPTI's runtime API call; the layer's timed command on Vulkan)
            # the first node of the scheduler's split it ran in, or, for a transfer (a copy of no node's
            # between splits), of the split it feeds (-1: unknown, or a run recorded before splits' ends)
            ("split", pa.int32()),
        ]
    ),
    "gpu_node_times": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("node_index", pa.int32()),
            ("group_end", pa.int32()),  # its kernels compute nodes node_index..group_end (ggml-cuda fused them)
            ("device", pa.int32()),
            ("start_ns", pa.int64()),  # its first kernel began on the GPU ...
            ("end_ns", pa.int64()),  # ... and its last ended
            ("gpu_ns", pa.int64()),  # its kernels' share of the device's busy time
            ("kernels", pa.int32()),
        ]
    ),
    "gpu_graphs": pa.schema(
        [
            ("graph_id", pa.int32()),
            ("device", pa.int32()),
            ("start_ns", pa.int64()),  # the graph's first activity on this device began ...
            ("end_ns", pa.int64()),  # ... and its last ended
            ("busy_ns", pa.int64()),  # the device was busy with it (kernels, copies, memsets; overlap once)
            ("kernels", pa.int32()),
            ("attributed", pa.int32()),  # kernels attributed to a node
            # eager | capture | replay | unattributed: how kernels found their nodes (splits mapped
            # different ways: the ways joined with "+", "eager+replay")
            ("mapping", pa.string()),
        ]
    ),
    # ggml's RPC protocol (llama.cpp's distributed inference): each message that passed this process
    # on a connection to a worker (the head) or from the head (a worker), whole; see capture/rpc.py
    "rpc_messages": pa.schema(
        [
            ("connection", pa.int32()),  # the manifest's rpc.connections[connection]
            ("sequence", pa.int64()),  # the request's number on its connection (a response: its request's)
            ("command", pa.string()),  # GRAPH_COMPUTE, SET_TENSOR, GET_TENSOR, ...
            ("is_response", pa.bool_()),  # worker → head (else a request, head → worker)
            ("sent", pa.bool_()),  # this process sent it (else received it)
            ("start_ns", pa.int64()),  # its first byte was handed to / came from the socket ...
            ("end_ns", pa.int64()),  # ... and its last (this process's monotonic clock)
            ("bytes", pa.int64()),  # on the wire, the protocol's framing included
            ("data_bytes", pa.int64()),  # tensor bytes it carries (SET_TENSOR, GET_TENSOR's response)
            ("tensor_id", pa.int64()),  # the tensor it names: the head's address of it (0: none)
            ("tensor_name", pa.string()),
        ]
    ),
}

# Tables a run of an earlier ggml-viz may lack (read as empty).
OPTIONAL_TABLES = (
    "node_values",
    "captures",
    "gpu_kernels",
    "gpu_node_times",
    "gpu_graphs",
    "rpc_messages",
    "moe_routing",
)
GPU_TABLES = ("gpu_kernels", "gpu_node_times", "gpu_graphs")
# Tables written only by a run that has rows for them (no file otherwise).
SPARSE_TABLES = (*GPU_TABLES, "rpc_messages", "moe_routing")
# Columns a run of an earlier ggml-viz may lack (read as nulls).
OPTIONAL_COLUMNS = {"node_times": ("wait_ns",), "graphs": ("token_batch_indexes",), "gpu_kernels": ("split",)}
# Columns a run of an earlier ggml-viz may lack, which the reader then computes from the others.
DERIVED_COLUMNS = {"structure_nodes": ("layer",)}
CAPTURES_FILE = "captures.bin"

# Tables whose rows belong to one graph (filtered together by graph_id).
GRAPH_TABLES = ("graphs", "node_times", "node_values", "captures", *GPU_TABLES, "moe_routing")


def table_metadata(table: str, experiment_id: str) -> dict[bytes, bytes]:
    """What every file of a run is stamped with: its recording, format version and table."""
    return {
        META_EXPERIMENT_ID: experiment_id.encode(),
        META_FORMAT_VERSION: str(FORMAT_VERSION).encode(),
        META_TABLE: table.encode(),
    }


def table_schema(table: str, experiment_id: str) -> pa.Schema:
    """The schema of `table`, stamped with the recording's experiment id."""
    return TABLES[table].with_metadata(table_metadata(table, experiment_id))


def stream_segment_name(table: str, segment: int) -> str:
    """A recording table's stream file: `node_times.arrows`, then (rolled) `node_times.1.arrows`, ..."""
    return f"{table}{STREAM_SUFFIX}" if segment == 0 else f"{table}.{segment}{STREAM_SUFFIX}"


def part_name(table: str, segment: int) -> str:
    """The Parquet part a rolled stream segment becomes: `node_times.0.parquet`, `node_times.1.parquet`, ..."""
    return f"{table}.{segment}{PARQUET_SUFFIX}"


def part_of_stream(stream: Path) -> Path:
    """The Parquet part a stream segment becomes (`node_times.arrows`: `node_times.0.parquet`)."""
    stem = stream.name.removesuffix(STREAM_SUFFIX)
    table, _, segment = stem.partition(".")
    return stream.with_name(part_name(table, int(segment or 0)))


def stream_segments(run_dir: Path, table: str) -> list[Path]:
    """A recording table's stream segments, in order (none once the run is closed)."""
    return [path for _, path in _numbered(run_dir, table, STREAM_SUFFIX)]


def parquet_parts(run_dir: Path, table: str) -> list[Path]:
    """A table's Parquet files, in order: `TABLE.parquet`, or the parts it was rolled into
    while recording (none for a table still in its streams)."""
    whole = run_dir / f"{table}{PARQUET_SUFFIX}"
    if whole.exists():
        return [whole]
    return [path for segment, path in _numbered(run_dir, table, PARQUET_SUFFIX) if segment is not None]


def table_segments(run_dir: Path, table: str) -> list[Path]:
    """Where a table's rows are, in order: `TABLE.parquet`, or per segment its Parquet part
    where it has one (a part is written whole, then its stream removed: a part wins) and its
    stream where not; none for a table the run does not have."""
    whole = run_dir / f"{table}{PARQUET_SUFFIX}"
    if whole.exists():
        return [whole]
    found: dict[int, Path] = {}
    for segment, path in _numbered(run_dir, table, STREAM_SUFFIX):
        found[segment or 0] = path
    for segment, path in _numbered(run_dir, table, PARQUET_SUFFIX):
        if segment is not None:
            found[segment] = path
    return [found[segment] for segment in sorted(found)]


def _numbered(run_dir: Path, table: str, suffix: str) -> list[tuple[int | None, Path]]:
    """The table's files ending in `suffix`, by segment: `TABLE.N<suffix>` is segment N,
    `TABLE<suffix>` None (sorted first)."""
    found: list[tuple[int, int | None, Path]] = []
    for path in run_dir.glob(f"{table}*{suffix}"):
        middle = path.name[len(table) : -len(suffix)]
        if middle == "":
            found.append((-1, None, path))
        elif middle[0] == "." and middle[1:].isdigit():
            found.append((int(middle[1:]), int(middle[1:]), path))
    return [(segment, path) for _, segment, path in sorted(found)]
