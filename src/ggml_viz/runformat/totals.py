"""What every view needs at a glance, without reading the node events: their totals.

A run of an hour of a busy server holds some 250 million node events, but few distinct
graph structures. Every aggregate the summary and the viewer's statistics show (time by
op, layer, tensor, component; waits; FLOPs per op) is a sum over node events grouped by
something a node's structure fixes, so it is a sum over `node_totals`: per (phase,
structure, node) the timed events, their time and their wait. The time of each op in each
graph (`graph_op_totals`) answers per-step questions (does an op's time grow with the
context?). Both are computed by DuckDB, streaming the node times (bounded memory at any
length), when a run is closed, and stored beside its tables; a run without them (recording
still, cut short, or from an older ggml-viz) has them computed the same way when read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .._errors import RunFormatError
from .schema import META_EXPERIMENT_ID, PARQUET_SUFFIX, parquet_parts, table_metadata

NODE_TOTALS = "node_totals"
GRAPH_OP_TOTALS = "graph_op_totals"
TOTALS_SCHEMAS = {
    NODE_TOTALS: pa.schema(
        [
            ("phase", pa.string()),
            ("structure_id", pa.int32()),
            ("node_index", pa.int32()),
            ("timed", pa.int64()),  # node events timed (one per graph of this structure and phase, when timed)
            ("time_ns", pa.int64()),  # their time, summed
            ("wait_ns", pa.int64()),  # the part of it waiting for other threads (where seen)
            ("waits_seen", pa.int64()),  # events whose wait was seen
        ]
    ),
    GRAPH_OP_TOTALS: pa.schema(
        [
            ("graph_id", pa.int32()),
            ("op", pa.string()),  # the specific op (tensors.op)
            ("time_ns", pa.int64()),
        ]
    ),
}
_KEYS = {NODE_TOTALS: ["phase", "structure_id", "node_index"], GRAPH_OP_TOTALS: ["graph_id", "op"]}  # rows by these
# Memory DuckDB may use for the aggregation before it spills to disk: the reader's bound.
DUCKDB_MEMORY = "768MB"

_NODE_TOTALS_SQL = """
    select g.phase, g.structure_id, t.node_index, count(*) as timed,
           sum(t.end_ns - t.start_ns) as time_ns, sum(t.wait_ns) as wait_ns, count(t.wait_ns) as waits_seen
    from node_times t join graphs g using (graph_id)
    group by all
"""
# Nodes are looked up by one key, (structure, node index), that only a node event and its
# graph make together: with two join conditions DuckDB may join every graph with every node
# of its structure first (graphs x nodes rows: ten million for a live run of 17,500 graphs,
# 0.7 s for 33,000 events), which one key rules out.
_GRAPH_OP_TOTALS_SQL = """
    with node_op as (select (s.structure_id::bigint << 32) | s.node_index as node_key, d.op
                     from structure_nodes s join tensors d using (tensor_id))
    select t.graph_id, n.op, sum(t.end_ns - t.start_ns) as time_ns
    from node_times t
    join graphs g using (graph_id)
    join node_op n on n.node_key = ((g.structure_id::bigint << 32) | t.node_index)
    group by all
"""


# GPU time (capture/gpu): per (phase, structure, node) and per (graph, op), from the kernels'
# share of the device's busy time in the graphs traced. Computed when the run is read (the
# traced graphs are windows of a run, a small part of its events). A node has a row per
# device it ran kernels on: its graphs are counted once. `traced_graphs`: the graphs of the
# node's phase and structure whose kernels found their nodes, which its time is summed over
# (the reader's estimate for the run, `est_ns`: that sum / traced_graphs x the graphs that ran).
_GPU_NODE_TOTALS_SQL = """
    with traced as (select g.phase, g.structure_id, count(distinct t.graph_id) as traced_graphs
                    from gpu_node_times t join graphs g using (graph_id)
                    group by all)
    select g.phase, g.structure_id, t.node_index, count(distinct t.graph_id) as gpu_timed, sum(t.gpu_ns) as gpu_ns,
           max(t.group_end) as group_end, sum(t.kernels) as kernels, any_value(traced.traced_graphs) as traced_graphs
    from gpu_node_times t join graphs g using (graph_id) join traced using (phase, structure_id)
    group by all
"""
_GPU_GRAPH_OP_TOTALS_SQL = """
    with node_op as (select (s.structure_id::bigint << 32) | s.node_index as node_key, d.op
                     from structure_nodes s join tensors d using (tensor_id))
    select t.graph_id, n.op, sum(t.gpu_ns) as time_ns
    from gpu_node_times t
    join graphs g using (graph_id)
    join node_op n on n.node_key = ((g.structure_id::bigint << 32) | t.node_index)
    group by all
"""


def gpu_totals(connection: Any) -> tuple[pa.Table, pa.Table]:
    """The GPU's node totals and graph-op totals, from a connection where `gpu_node_times`,
    `graphs`, `structure_nodes` and `tensors` are tables or views."""
    nodes = connection.sql(_GPU_NODE_TOTALS_SQL).to_arrow_table()
    per_graph_op = connection.sql(_GPU_GRAPH_OP_TOTALS_SQL).to_arrow_table().cast(TOTALS_SCHEMAS[GRAPH_OP_TOTALS])
    return nodes, per_graph_op


def traced_graph_weights(graphs: pd.DataFrame, traced: Iterable[int]) -> pd.Series:
    """Per traced graph (indexed by graph_id): how many graphs of its phase and structure ran
    per traced one. The GPU timer traces a few computes of each new structure and a few every
    256, so a run's first graphs (the prompt) are traced as often as a long decode: a sum over
    the traced graphs, each weighted so, estimates the whole run's (each structure counts as
    often as it ran); a phase and structure never traced counts nowhere."""
    graphs = graphs[["graph_id", "phase", "structure_id"]]
    ran = graphs.groupby(["phase", "structure_id"]).size().rename("ran")
    measured = graphs[graphs["graph_id"].isin(list(traced))]
    counted = measured.groupby(["phase", "structure_id"]).size().rename("traced")
    kinds = pd.concat([ran, counted], axis=1, join="inner")
    weights = measured.join((kinds["ran"] / kinds["traced"]).rename("weight"), on=["phase", "structure_id"])
    return weights.set_index("graph_id")["weight"].astype("float64")


def connect() -> Any:
    """A DuckDB connection held to the reader's memory bound, spilling to a temporary folder."""
    import duckdb

    connection = duckdb.connect()
    connection.execute(f"set memory_limit = '{DUCKDB_MEMORY}'")
    connection.execute(f"set temp_directory = '{Path(tempfile.gettempdir()) / 'ggml-viz-duckdb'}'")
    connection.execute("set preserve_insertion_order = false")
    connection.execute("set enable_progress_bar = false")
    return connection


def compute_totals(connection: Any) -> dict[str, pa.Table]:
    """Both totals, from a connection where `node_times`, `graphs`, `structure_nodes` and
    `tensors` are tables or views."""
    totals = {}
    for name, sql in ((NODE_TOTALS, _NODE_TOTALS_SQL), (GRAPH_OP_TOTALS, _GRAPH_OP_TOTALS_SQL)):
        table = connection.sql(sql).to_arrow_table().cast(TOTALS_SCHEMAS[name])
        totals[name] = table.sort_by([(key, "ascending") for key in _KEYS[name]])
    return totals


def sql_string(text: object) -> str:
    """`text` as an SQL string literal for DuckDB (a path, a run's name): quoted, its quotes doubled."""
    return "'" + str(text).replace("'", "''") + "'"


def parquet_files(paths: Iterable[Path]) -> str:
    """DuckDB's read_parquet over these files, as SQL."""
    return f"read_parquet([{', '.join(sql_string(path) for path in paths)}])"


def totals_of_parquet_run(run_dir: Path) -> dict[str, pa.Table]:
    """The totals of a closed run, straight from its Parquet files."""
    connection = connect()
    try:
        for table in ("node_times", "graphs", "structure_nodes", "tensors"):
            connection.execute(f"create view {table} as select * from {parquet_files(parquet_parts(run_dir, table))}")
        return compute_totals(connection)
    finally:
        connection.close()


def write_totals(run_dir: Path, totals: dict[str, pa.Table], experiment_id: str, suffix: str = "") -> None:
    """Store the totals beside the run's tables, stamped as they are (each file whole or not
    at all), each page with its checksum: a damaged page is refused when read, not summed.
    (`suffix`: before PARQUET_SUFFIX, for totals of part of a run: runformat/conversion.py.)"""
    for name, table in totals.items():
        path = run_dir / f"{name}{suffix}{PARQUET_SUFFIX}"
        partial = run_dir / f"{name}{suffix}{PARQUET_SUFFIX}.partial"
        stamped = table.replace_schema_metadata(table_metadata(name, experiment_id))
        pq.write_table(stamped, partial, compression="zstd", write_page_checksum=True)
        os.replace(partial, path)


# What reading a damaged Parquet file raises, at its footer or only when a page is decoded
# (no magic bytes, bad thrift, a failed decompression or checksum, a column renamed or retyped).
PARQUET_DAMAGE = (pa.ArrowException, OSError, ValueError, KeyError)


# Columns of the stored totals read as Arrow dictionaries, not strings: decoding every row's
# string costs more than the reading (a billion node events: 0.5 s of a summary's 5); DuckDB,
# Arrow and the viewer's op codes read either, totals summed when a run is read are strings.
KEPT_AS_DICTIONARY = {GRAPH_OP_TOTALS: ("op",)}


def read_totals(run_dir: Path, experiment_id: str, suffix: str = "") -> dict[str, pa.Table] | None:
    """The totals stored with a run, if both are there and are this recording's (None if
    not); RunFormatError naming the file if one cannot be read whole: the totals are derived,
    the caller sums them again from the node times."""
    totals = {}
    for name, schema in TOTALS_SCHEMAS.items():
        path = run_dir / f"{name}{suffix}{PARQUET_SUFFIX}"
        if not path.exists():
            return None
        # its strings (the ops, the phases: a few distinct ones in millions of rows) read as
        # dictionaries and decoded once from them: faster than decoding each row's from the file;
        # the per-graph ops (twenty million rows for a billion node events) kept so (KEPT_AS_DICTIONARY)
        strings = [field.name for field in schema if field.type == pa.string()]
        kept = KEPT_AS_DICTIONARY.get(name, ())
        schema = pa.schema(
            [
                field.with_type(pa.dictionary(pa.int32(), pa.string())) if field.name in kept else field
                for field in schema
            ]
        )
        try:  # the whole table: damage in a data page shows only when that page is decoded
            # (not pq.read_table: pyarrow.dataset)
            table = pq.ParquetFile(path, page_checksum_verification=True, read_dictionary=strings).read()
            if (table.schema.metadata or {}).get(META_EXPERIMENT_ID, b"").decode() != experiment_id:
                return None
            totals[name] = table.select(schema.names).cast(schema)
        except PARQUET_DAMAGE as error:
            raise RunFormatError(f"{path} cannot be read as a table: {one_line(error)}") from None
    return totals


def one_line(error: BaseException) -> str:
    """An error's message on one line (DuckDB's and Arrow's may span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def merge_totals(parts: list[dict[str, pa.Table]]) -> dict[str, pa.Table]:
    """Totals of several parts of a run (its stream segments, its journal) as the totals of
    the whole: sums of sums (a wait total stays null where no part saw a wait). Each table the
    parts hold (both, or one: the writer merges node totals alone) is merged."""
    merged = {}
    for name in parts[0] if parts else TOTALS_SCHEMAS:
        schema, keys = TOTALS_SCHEMAS[name], _KEYS[name]
        values = [column for column in schema.names if column not in keys]
        table = pa.concat_tables([part[name].cast(schema) for part in parts] or [schema.empty_table()])
        summed = table.group_by(keys).aggregate([(column, "sum") for column in values])
        summed = summed.rename_columns([column.removesuffix("_sum") for column in summed.column_names])
        merged[name] = summed.select(schema.names).cast(schema).sort_by([(key, "ascending") for key in keys])
    return merged
