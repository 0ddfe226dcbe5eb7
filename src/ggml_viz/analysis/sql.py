"""SQL over a run (DuckDB): the reader's tables registered as views."""

from __future__ import annotations

import pandas as pd

from .._errors import GgmlVizError
from ..runformat.reader import Run

TABLE_DOCS = {
    "graphs": "one row per computed graph: graph_id, context_id, phase, start_ns, end_ns, n_nodes, n_tokens, ...",
    "nodes": "one row per node event: graph_id, node_index, start_ns, end_ns, duration_ns, timed, name, op, type, "
    "ne0..ne3, nbytes, layer, buffer_name, buffer_kind, ...",
    "edges": "one row per (node, source): graph_id, node_index, src_slot, src_name, src_op, src_usage, memory "
    "(disk|buffer), file_offset, buffer_offset, ...",
    "tokens": "one row per token of each graph's batch: graph_id, batch_index, pos, token_id, text",
    "buffers": "backend buffers: buffer, name, kind, usage, size, first_seen_ns, last_seen_ns",
    "tensors": "each distinct tensor description once",
    "memory_map": "the model file's regions: kind, name, start, end, type, layer, category",
    "raw_*": "the stored tables as they are (raw_graphs, raw_node_times, raw_structure_nodes, raw_edges, ...)",
}
VIEWS = ("graphs", "nodes", "edges", "tokens", "buffers", "tensors", "memory_map")
RAW = ("graphs", "node_times", "structure_nodes", "edges", "tensors", "buffers", "memory_map")


def run_query(run: Run, sql: str) -> pd.DataFrame:
    import duckdb

    connection = duckdb.connect()
    try:
        for name in VIEWS:
            connection.register(name, _plain(getattr(run, name)))
        for name in RAW:
            connection.register(f"raw_{name}", run.raw(name))
        try:
            return connection.execute(sql).fetchdf()
        except duckdb.Error as error:
            raise GgmlVizError(f"the query failed: {str(error).splitlines()[0]}") from None
    finally:
        connection.close()


def _plain(table: pd.DataFrame) -> pd.DataFrame:
    """Nullable pandas columns as plain numpy ones DuckDB reads without surprises."""
    table = table.copy()
    for column in table.columns:
        if isinstance(table[column].dtype, pd.StringDtype) or table[column].dtype == object:
            table[column] = table[column].astype(object)
    return table
