"""SQL over runs (DuckDB): the reader's tables as views, over one run or many at once.

The views over node events (`nodes`, `edges`) are DuckDB views over the runs' Parquet files
(or, for a run still recording, its streams read as Arrow), joined with the small tables
(graphs, structures, tensor descriptions) inside DuckDB: a query over an hour of a server
streams, in bounded memory, instead of materializing the events. Each row names its `run`
(the run directory's name): a folder of runs from several servers or hosts reads as one
dataset, and the same Parquet files are what a user takes to another engine.

A run with GPU times (CUDA) adds its GPU tables: `gpu_kernels`, `gpu_node_times` and
`gpu_graphs`, over their Parquet files too; over a run without them they are empty.

Every row knows its run, and `runs` says each run's host and process (`graphs` and `nodes` carry
both too): runs of a distributed inference (the head's and its workers', `ggml-viz join`) read
as one dataset, with the joined tables (`hosts`, `splits`, `transfers`, `remote_nodes`) beside.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa

from .._errors import GgmlVizError
from .schema import OPTIONAL_COLUMNS, parquet_parts
from .totals import connect, parquet_files, sql_string


class ReadableRun(Protocol):
    """A run as the views read it: reader.py's Run (which opens its connection with this module)."""

    path: Path
    experiment_id: str
    manifest: dict[str, Any]

    @property
    def status(self) -> str: ...
    @property
    def stored_as_parquet(self) -> bool: ...
    @property
    def structure_edges(self) -> pd.DataFrame: ...
    def arrow(self, table: str) -> pa.Table: ...


TABLE_DOCS = {
    "graphs": "one row per computed graph: run, graph_id, context_id, phase, start_ns, end_ns, n_nodes, n_tokens, ...",
    "nodes": "one row per node event: run, graph_id, node_index, start_ns, end_ns, duration_ns, wait_ns, timed, "
    "name, op, type, ne0..ne3, nbytes, layer, buffer_name, buffer_kind, ...",
    "edges": "one row per (node, source): run, graph_id, node_index, src_slot, src_name, src_op, src_usage, memory "
    "(disk|buffer), file_offset, buffer_offset, src_bytes_read, ...",
    "tokens": "one row per token of each graph's batch: run, graph_id, batch_index, pos, token_id, text",
    "buffers": "backend buffers: run, buffer, name, kind, usage, size, first_seen_ns, last_seen_ns",
    "tensors": "each distinct tensor description once (per run)",
    "memory_map": "the model file's regions: run, kind, name, start, end, type, layer, category",
    "node_totals": "per (run, phase, structure_id, node_index): graphs, timed events, time_ns (the GPU's for nodes "
    "the GPU timed), clock (host|gpu), group_end, wait_ns, name, op, ...",
    "gpu_kernels": "GPU runs: one row per kernel, memcpy or memset the GPU ran while the timer traced: run, "
    "graph_id (-1: outside any graph, no phase), node_index (-1: none), group_end, device, stream, kind, kernel, "
    "name (demangled), start_ns, end_ns (GPU times), busy_ns, bytes, correlation_id, phase, node_name, op, layer",
    "gpu_node_times": "GPU runs: per traced graph and node with kernels: run, graph_id, node_index, group_end, "
    "device, start_ns, end_ns, gpu_ns (busy share), kernels, phase, name, op, layer",
    "gpu_graphs": "GPU runs: per traced graph and device: run, graph_id, device, start_ns, end_ns, busy_ns, kernels, "
    "attributed, mapping, phase, host_start_ns, host_end_ns, host_ns, idle_ns",
    "moe_routing": "mixture-of-experts models: per graph, MoE layer, token and slot, the expert chosen: run, "
    "graph_id, context_id, phase, layer, node_index (the layer's first MUL_MAT_ID), row (of the layer's input), "
    "token_index (in the graph's batch; -1: not known), position, sequence, slot (0: the router's first choice), "
    "expert, weight, n_expert",
    "moe_experts": "mixture-of-experts models: per MoE layer and expert (the never chosen too): run, layer, expert, "
    "n_expert, tokens (routed to it: prompt_tokens + decode_tokens), weight_mass, graphs (that read it), "
    "bytes_read (its slices, once per graph that chose it), est_time_ns and time_share (an estimate: the "
    "layer's MUL_MAT_ID time split by the rows each expert computed)",
    "runs": "one row per run: run, experiment_id, host (the machine's name), pid, rpc_role (head | worker in a "
    "distributed run), program, status",
    "rpc_messages": "distributed runs (ggml's RPC backend): each protocol message that passed the process, whole: "
    "run, host, pid, connection, sequence, command, is_response, sent, start_ns, end_ns, bytes, data_bytes, "
    "tensor_id, tensor_name",
    "hosts, splits, transfers, remote_nodes": "a joined distributed run (ggml-viz join): each host with its clock "
    "offset; each graph a worker computed for a head graph, with the head's wait; each message with its bytes, "
    "sent and received on the head's clock; each remote node with its worker's time (docs/run-format.md)",
    "raw_*": "the stored tables as they are, with run (raw_graphs, raw_node_times, raw_structure_nodes, "
    "raw_edges, ..., raw_gpu_kernels)",
}
SMALL_VIEWS = ("graphs", "tokens", "buffers", "tensors", "memory_map", "node_totals", "moe_routing", "moe_experts")
GPU_TABLES = ("gpu_kernels", "gpu_node_times", "gpu_graphs")
RAW = ("graphs", "node_times", "structure_nodes", "edges", "tensors", "buffers", "memory_map", *GPU_TABLES,
       "rpc_messages", "moe_routing")  # fmt: skip
VIEWS = (*SMALL_VIEWS, "nodes", "edges", *GPU_TABLES, "runs", "rpc_messages")

_NODES_SQL = """
    select g.run, {host} as host, {pid} as pid, g.graph_id, s.node_index, t.start_ns, t.end_ns, s.tensor_id,
           t.start_ns is not null as timed, t.wait_ns, case when s.layer >= 0 then s.layer end as layer,
           d.* exclude (run, tensor_id, layer), d.layer as name_layer, t.end_ns - t.start_ns as duration_ns
    from raw_graphs_{i} g
    join raw_structure_nodes_{i} s using (structure_id)
    left join raw_node_times_{i} t on t.graph_id = g.graph_id and t.node_index = s.node_index
    left join tensors_{i} d on d.tensor_id = s.tensor_id
"""
_EDGES_SQL = """
    select g.run, g.graph_id, e.* exclude (run)
    from raw_graphs_{i} g join structure_edges_{i} e using (structure_id)
"""
# The GPU tables, each row with its graph's phase (rows of no graph the run has left out, as
# the reader leaves them out) and its node described. A node is looked up by one key,
# (structure, node index): see runformat/totals.py.
_GPU_NODES_SQL = """
    with node_of as (select (s.structure_id::bigint << 32) | s.node_index as node_key, d.name, d.op,
                            case when s.layer >= 0 then s.layer end as layer
                     from raw_structure_nodes_{i} s left join tensors_{i} d using (tensor_id))
    select t.*, g.phase, n.name as {name}, n.op, n.layer
    from raw_{table}_{i} t
    left join raw_graphs_{i} g on g.graph_id = t.graph_id
    left join node_of n on n.node_key = ((g.structure_id::bigint << 32) | t.node_index)
"""
_GPU_GRAPHS_SQL = """
    select t.*, g.phase, g.start_ns as host_start_ns, g.end_ns as host_end_ns, g.end_ns - g.start_ns as host_ns,
           greatest(g.end_ns - g.start_ns - t.busy_ns, 0) as idle_ns
    from raw_gpu_graphs_{i} t join raw_graphs_{i} g on g.graph_id = t.graph_id
"""


def run_query(
    runs: ReadableRun | Sequence[ReadableRun],
    sql: str,
    tables: dict[str, Path] | None = None,
    frames: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """The result of `sql` over the views of one run or several (as one dataset), over the
    Parquet files `tables` (a joined distributed run's) and the tables `frames` (an analysis's)
    as views by their names."""
    import duckdb

    connection = connect_runs(runs)
    for name, path in (tables or {}).items():
        connection.execute(f"create view {name} as select * from {parquet_files([path])}")
    for name, frame in (frames or {}).items():
        connection.register(name, frame)
    try:
        try:
            return connection.execute(sql).fetchdf()
        except duckdb.Error as error:
            raise GgmlVizError(f"the query failed: {str(error).splitlines()[0]}") from None
    finally:
        connection.close()


def connect_runs(runs: ReadableRun | Sequence[ReadableRun]) -> Any:
    """A DuckDB connection (held to the reader's memory bound) with every view over `runs`;
    the caller's to close."""
    connection = connect()
    register_runs(connection, list(runs) if isinstance(runs, Sequence) else [runs])
    return connection


def register_runs(connection: Any, runs: Sequence[ReadableRun]) -> None:
    """Create every view (see TABLE_DOCS) in `connection`, over all of `runs`."""
    names = run_names(runs)
    for i, (run, name) in enumerate(zip(runs, names, strict=True)):
        for table in RAW:
            _raw_view(connection, run, table, f"raw_{table}_{i}", name)
        host, pid = _host_and_pid(run)
        for view in SMALL_VIEWS:
            connection.register(f"_{view}_{i}", _plain(getattr(run, view)))
            where = f"{sql_string(name)} as run" + (
                f", {sql_string(host)} as host, {pid} as pid" if view == "graphs" else ""
            )
            connection.execute(f"create view {view}_{i} as select {where}, * from _{view}_{i}")
        connection.register(
            f"_runs_{i}",
            pd.DataFrame(
                [
                    {
                        "run": name,
                        "experiment_id": run.experiment_id,
                        "host": host,
                        "pid": None if pid == "null" else int(pid),
                        "rpc_role": _rpc_role(run),
                        "program": " ".join((run.manifest.get("program") or {}).get("argv") or []) or None,
                        "status": run.status,
                    }
                ]
            ),
        )
        connection.execute(f"create view runs_{i} as select * from _runs_{i}")
        connection.execute(
            f"create view rpc_messages_{i} as select run, {sql_string(host)} as host, {pid} as pid, "
            f"* exclude (run) from raw_rpc_messages_{i}"
        )
        edges = run.structure_edges.assign(run=name)
        connection.register(f"structure_edges_{i}", _plain(edges))
        connection.execute(f"create view nodes_{i} as {_NODES_SQL.format(i=i, host=sql_string(host), pid=pid)}")
        connection.execute(f"create view edges_{i} as {_EDGES_SQL.format(i=i)}")
        for table, name in (("gpu_kernels", "node_name"), ("gpu_node_times", "name")):
            connection.execute(f"create view {table}_{i} as {_GPU_NODES_SQL.format(i=i, table=table, name=name)}")
        connection.execute(f"create view gpu_graphs_{i} as {_GPU_GRAPHS_SQL.format(i=i)}")
    for view in (*VIEWS, *(f"raw_{table}" for table in RAW)):
        union = " union all by name ".join(f"select * from {view}_{i}" for i in range(len(runs)))
        connection.execute(f"create view {view} as {union}")


def _raw_view(connection: Any, run: ReadableRun, table: str, view: str, name: str) -> None:
    """A stored table as a view with its run's name: over its Parquet file where there is one
    (DuckDB reads what a query needs), else over the table as the reader gives it (a run
    still recording; graphs and structures, as the reader completes them)."""
    import pyarrow.parquet as pq

    parquet = parquet_parts(run.path, table) if run.stored_as_parquet else []
    if parquet and table not in ("graphs", "structure_nodes"):
        present = set(pq.read_schema(parquet[0]).names)
        missing = [f"null::bigint as {column}" for column in OPTIONAL_COLUMNS.get(table, ()) if column not in present]
        source = f"(select *{''.join(', ' + m for m in missing)} from {parquet_files(parquet)})"
    else:
        connection.register(f"_{view}", run.arrow(table))
        source = f"_{view}"
    connection.execute(f"create view {view} as select {sql_string(name)} as run, * from {source}")


def _host_and_pid(run: ReadableRun) -> tuple[str, str]:
    """The machine a run was recorded on and its program's process id (SQL's null where unknown)."""
    host = (run.manifest.get("recorder") or {}).get("host") or ""
    pid = (run.manifest.get("program") or {}).get("pid")
    return str(host), str(int(pid)) if isinstance(pid, int) else "null"


def _rpc_role(run: ReadableRun) -> str | None:
    """head | worker in a distributed inference (ggml's RPC protocol), else None."""
    roles = {c.get("role") for c in (run.manifest.get("rpc") or {}).get("connections") or []}
    return "head" if "head" in roles else "worker" if "worker" in roles else None


def run_names(runs: Sequence[ReadableRun]) -> list[str]:
    """Each run's directory name, made unique where two runs share one."""
    names: list[str] = []
    for run in runs:
        name = Path(run.path).name
        names.append(name if name not in names else f"{name} ({run.experiment_id[:8]})")
    return names


def _plain(table: pd.DataFrame) -> pd.DataFrame:
    """Nullable pandas columns as plain numpy ones DuckDB reads without surprises."""
    table = table.copy()
    for column in table.columns:
        if isinstance(table[column].dtype, pd.StringDtype) or table[column].dtype == object:
            table[column] = table[column].astype(object)
    return table
