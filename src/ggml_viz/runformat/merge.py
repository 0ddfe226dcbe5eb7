"""Several runs as one: the recordings of processes that worked together (a distributed
inference's head and its workers) merged into one run directory, which every reader, view and
export of ggml-viz opens as it opens any run.

Each member keeps its contexts (numbered after the members before it: a context per host, so
the viewer's timeline has a lane per host), and its ids (graphs, structures, tensors, buffers,
RPC connections) are offset past the members before it. Its times are put on the first
member's clock: each member's clock offset (its clock minus the first's) is subtracted from
every time it recorded. The member runs are only read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .manifest import STATUS_COMPLETE, STATUS_INCOMPLETE, new_manifest, utc_now, write_manifest
from .reader import Run
from .schema import GRAPH_TABLES, NO_ID, PARQUET_SUFFIX, SPARSE_TABLES, TABLES, parquet_parts, table_schema
from .totals import totals_of_parquet_run, write_totals

# Per table: the id columns offset by each member (by which id), and the columns of times.
_IDS: dict[str, dict[str, str]] = {
    "graphs": {"graph_id": "graph", "context_id": "context", "structure_id": "structure"},
    "node_times": {"graph_id": "graph"},
    "structure_nodes": {"structure_id": "structure", "tensor_id": "tensor"},
    "edges": {"structure_id": "structure", "src_tensor_id": "tensor"},
    "tensors": {"tensor_id": "tensor", "buffer_id": "buffer", "view_src_id": "tensor"},
    "buffers": {"buffer_id": "buffer", "context_id": "context", "first_graph_id": "graph"},
    "node_values": {"graph_id": "graph"},
    "gpu_kernels": {"graph_id": "graph"},
    "gpu_node_times": {"graph_id": "graph"},
    "gpu_graphs": {"graph_id": "graph"},
    "rpc_messages": {"connection": "connection"},
}
_TIMES: dict[str, tuple[str, ...]] = {
    "graphs": ("start_ns", "end_ns", "decode_start_ns", "decode_end_ns"),
    "node_times": ("start_ns", "end_ns"),
    "gpu_kernels": ("start_ns", "end_ns"),
    "gpu_node_times": ("start_ns", "end_ns"),
    "gpu_graphs": ("start_ns", "end_ns"),
    "rpc_messages": ("start_ns", "end_ns"),
}
# Not merged: captured tensors' bytes live in each member's captures.bin.
_LEFT_OUT = ("captures",)


@dataclass
class MergeMember:
    run: Run
    clock_offset_ns: int = 0  # this member's clock minus the first member's
    labels: dict[str, Any] = field(default_factory=dict)  # added to each of its contexts (host, role)
    graphs: set[int] | None = None  # only these of its graphs (None: all)


def merge_runs(members: list[MergeMember], output: Path, experiment_id: str, **manifest: Any) -> None:
    """Write the members as one run into `output` (a new folder); `manifest`: sections to add.
    Tables are written batch by batch (a member's node times are read a row group at a time):
    memory stays bounded at any length."""
    output.mkdir(parents=True, exist_ok=False)
    next_id = {"graph": 0, "context": 0, "structure": 0, "tensor": 0, "buffer": 0, "connection": 0}
    writers = {table: _TableWriter(output, table, experiment_id) for table in TABLES if table not in _LEFT_OUT}
    contexts, connections = [], []
    for member in members:
        run = member.run
        offsets = dict(next_id)
        for table, writer in writers.items():
            for data in _batches(run, table):
                if member.graphs is not None and table in GRAPH_TABLES:
                    kept = pa.array(sorted(member.graphs), data.schema.field("graph_id").type)
                    data = data.filter(pc.is_in(data.column("graph_id"), value_set=kept))
                if not data.num_rows:
                    continue
                writer.write(_moved(data, table, offsets, member.clock_offset_ns))
                for column, kind in _IDS.get(table, {}).items():
                    highest = pc.max(data.column(column)).as_py()
                    next_id[kind] = max(next_id[kind], offsets[kind] + int(highest) + 1)
        for context in run.manifest.get("contexts") or []:
            contexts.append(
                {
                    **context,
                    "context_id": offsets["context"] + int(context["context_id"]),
                    "run": run.path.name,
                    **member.labels,
                }
            )
        next_id["context"] = max(next_id["context"], offsets["context"] + len(run.manifest.get("contexts") or []))
        for connection in (run.manifest.get("rpc") or {}).get("connections") or []:
            connections.append(
                {
                    **connection,
                    "connection": offsets["connection"] + int(connection["connection"]),
                    "run": run.path.name,
                }
            )
        next_id["connection"] = max(next_id["connection"], len(connections))
    counts = {f"{table}_rows": writer.close(sparse=table in SPARSE_TABLES) for table, writer in writers.items()}
    counts = {name: rows for name, rows in counts.items() if rows is not None}
    write_totals(output, totals_of_parquet_run(output), experiment_id)
    first = members[0].run.manifest
    incomplete = [
        f"{m.run.path.name}: {m.run.manifest.get('incomplete_reason') or m.run.status}"
        for m in members
        if m.run.status != STATUS_COMPLETE
    ]
    description = new_manifest(experiment_id)
    description.update(
        {
            "finished": utc_now(),
            "status": STATUS_INCOMPLETE if incomplete else STATUS_COMPLETE,
            "incomplete_reason": "; ".join(incomplete) or None,
            "contexts": contexts,
            "model": first.get("model"),
            "program": first.get("program"),
            "capture": first.get("capture") or {},
            "generation": first.get("generation") or {},
            "counts": {**counts, "graphs": counts.get("graphs_rows", 0)},
            "merged_from": [
                {
                    "run": m.run.path.name,
                    "path": str(m.run.path),
                    "experiment_id": m.run.experiment_id,
                    "clock_offset_ns": m.clock_offset_ns,
                    **m.labels,
                }
                for m in members
            ],
            **({"rpc": {"connections": connections}} if connections else {}),
            **manifest,
        }
    )
    write_manifest(output, description)


class _TableWriter:
    """One table of the merged run, written as its batches come (opened with the first)."""

    def __init__(self, output: Path, table: str, experiment_id: str) -> None:
        self.path = output / f"{table}{PARQUET_SUFFIX}"
        self.schema = table_schema(table, experiment_id)
        self.writer: pq.ParquetWriter | None = None
        self.rows = 0

    def write(self, data: pa.Table) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        for column in self.schema:  # a column an earlier ggml-viz did not write: nulls
            if column.name not in data.column_names:
                data = data.append_column(column.name, pa.nulls(data.num_rows, column.type))
        self.writer.write_table(data.select(self.schema.names).cast(self.schema))
        self.rows += data.num_rows

    def close(self, *, sparse: bool) -> int | None:
        """Its rows; a sparse table without any is not written (None)."""
        if self.writer is None:
            if sparse:
                return None
            pq.write_table(self.schema.empty_table(), self.path, compression="zstd")
        else:
            self.writer.close()
        return self.rows


def _batches(run: Run, table: str) -> Iterator[pa.Table]:
    """A member's table a piece at a time: its node times (most of a run's bytes) a row group at
    a time from its Parquet file; the rest whole, as the reader gives it."""
    parquet = parquet_parts(run.path, table) if run.stored_as_parquet else []
    if table == "node_times" and parquet:
        for part in parquet:
            for batch in pq.ParquetFile(part).iter_batches(batch_size=1 << 20):
                yield pa.Table.from_batches([batch])
    else:
        yield run.arrow(table)


def _moved(data: pa.Table, table: str, offsets: dict[str, int], clock_offset_ns: int) -> pa.Table:
    """A member's table with its ids offset (NO_ID kept) and its times on the first member's clock."""
    for column, kind in _IDS.get(table, {}).items():
        values = data.column(column)
        moved = pc.add(values, pa.scalar(offsets[kind], values.type))
        data = data.set_column(
            data.schema.get_field_index(column), column, pc.if_else(pc.equal(values, NO_ID), values, moved)
        )
    for column in _TIMES.get(table, ()):
        values = data.column(column)
        data = data.set_column(
            data.schema.get_field_index(column), column, pc.subtract(values, pa.scalar(clock_offset_ns, values.type))
        )
    return data
