"""A run directory's tables as stored: its manifest, and each table's Parquet file (or, for a run
still recording or cut short, its stream segments and graph journal), checked against this
recording when the run is opened and read when first asked for; the node totals, stored with
a closed run or summed when read (totals.py)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import RunFormatError
from ..log import say
from . import journal
from .manifest import STATUS_COMPLETE, effective_status, load_manifest
from .schema import (
    DERIVED_COLUMNS,
    GPU_TABLES,
    GRAPH_TABLES,
    META_EXPERIMENT_ID,
    NO_ID,
    OPTIONAL_COLUMNS,
    OPTIONAL_TABLES,
    PARQUET_SUFFIX,
    TABLES,
    stream_segments,
)
from .streams import NodeTimesSegment, node_times_segment, read_stream, read_stream_once, stream_schema
from .structure_layers import structure_layers
from .totals import PARQUET_DAMAGE, compute_totals, connect, merge_totals, one_line, read_totals, write_totals

UPGRADE_NOTICE_EVENTS = 1_000_000  # an older run's first open says it sums this many node events or more


class StoredRun:
    """A run's stored tables (reader.py's Run describes and joins them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest = load_manifest(path)
        self.experiment_id: str = self.manifest["experiment_id"]
        for table in TABLES:  # every table there and this recording's: checked now, read when asked for
            self._check_schema(table)
        # Tables are read when first asked for: the node times of a long run are most of
        # its bytes, and a summary or a window of the timeline never reads them whole.
        self._raw: dict[str, pa.Table] = {}
        self._pandas: dict[str, pd.DataFrame] = {}  # raw()'s conversions, made once
        self._raw["graphs"], self._journal_only = self._graphs_with_journal()
        self.manifest["status"] = effective_status(self.manifest)

    def __repr__(self) -> str:
        return f"<Run {self.path} {self.experiment_id[:8]} {self.manifest['status']}>"

    @property
    def status(self) -> str:
        return str(self.manifest["status"])

    def raw(self, table: str) -> pd.DataFrame:
        """A table exactly as stored (ids, no joins): a copy, the caller's to change."""
        if table not in self._pandas:
            self._pandas[table] = self.arrow(table).to_pandas()
        return self._pandas[table].copy()

    def arrow(self, table: str) -> pa.Table:
        """A table as stored, as Arrow (read on first use): only the rows of graphs that
        finished, with the graphs still in the journal of a run being recorded."""
        if table not in self._raw:
            data = self._read_table(table)
            if table == "structure_nodes":
                data = self._with_node_layers(data)
            if table in GRAPH_TABLES:
                # rows of finished graphs only (not the one a crash interrupted); the node
                # times of a graph only the journal held when the run was opened, from it
                finished = self._stream_graph_ids if table == "node_times" else self._raw["graphs"].column("graph_id")
                keep = pc.is_in(data.column("graph_id"), value_set=finished)
                if table in GPU_TABLES:  # and what the GPU ran outside any graph recorded
                    keep = pc.or_(keep, pc.equal(data.column("graph_id"), NO_ID))
                if not pc.all(keep).as_py():
                    data = data.filter(keep)
            if table == "node_times":
                data = pa.concat_tables([data, self._journaled_node_times])
            self._raw[table] = data
        return self._raw[table]

    def dataset(self, table: str) -> Any:
        """A stored table as a `pyarrow.dataset.Dataset`, scanned lazily (filters and columns
        pushed down to the Parquet row groups): over its Parquet file, or, for a run still
        recording, over the table as read now."""
        import pyarrow.dataset as ds

        if table not in TABLES:
            raise RunFormatError(f"no table '{table}' (the tables: {', '.join(TABLES)})")
        parquet = self.path / (table + PARQUET_SUFFIX)
        return ds.dataset(parquet, format="parquet") if parquet.exists() else ds.dataset(self.arrow(table))

    def totals_table(self, name: str) -> pa.Table:
        """A totals table (NODE_TOTALS or GRAPH_OP_TOTALS) as Arrow, as stored."""
        return self._totals[name]

    @cached_property
    def _totals(self) -> dict[str, pa.Table]:
        if self.status != STATUS_COMPLETE:
            return self._compute_totals()
        try:
            stored = read_totals(self.path, self.experiment_id)
        except RunFormatError as damage:  # derived: summed again from the node times (and stored again)
            try:
                totals = self._compute_totals(rebuilding=True)
            except RunFormatError as error:  # its sources damaged too: one error, saying both
                raise RunFormatError(
                    f"{str(damage).rstrip('.')}, and the totals cannot be summed again from the node times: {error}"
                ) from None
            say(f"{str(damage).rstrip('.')} (derived: its totals were summed again from the node times)")
            return totals
        return stored or self._compute_totals()

    def _compute_totals(self, rebuilding: bool = False) -> dict[str, pa.Table]:
        """The totals by DuckDB, streaming the node times (a Parquet file, or the stream and
        journal of a run still recording); a closed run of an older ggml-viz, or one whose
        stored totals are damaged (`rebuilding`), keeps them."""
        parquet = self.path / ("node_times" + PARQUET_SUFFIX)
        if not parquet.exists():  # still recording (or cut short): its stream segments
            return self._totals_of_segments()
        try:
            events = pq.ParquetFile(parquet).metadata.num_rows
        except PARQUET_DAMAGE as error:
            raise RunFormatError(f"{parquet} cannot be read as a table: {one_line(error)}") from None
        upgrading = self.status == STATUS_COMPLETE  # (else a run being closed: its totals come next)
        if upgrading and not rebuilding and events >= UPGRADE_NOTICE_EVENTS:  # seconds per 10M events: say why
            say(f"{self.path.name}: summing its {events:,} node events once (an older ggml-viz recorded it "
                f"without their totals); later opens read the stored totals")  # fmt: skip
        import duckdb  # (imported by connect() already)

        connection = connect()
        try:
            escaped = str(parquet).replace("'", "''")
            connection.execute(f"create view node_times as select * from read_parquet('{escaped}')")
            totals = self._totals_over(connection)
        except duckdb.Error as error:  # damage in a page of the node times shows only when it is read
            raise RunFormatError(f"{parquet} cannot be read as a table: {one_line(error)}") from None
        finally:
            connection.close()
        if upgrading:
            try:  # an older run upgraded, or damaged totals replaced: next time it opens without reading its events
                write_totals(self.path, totals, self.experiment_id)
            except OSError as error:
                if events >= UPGRADE_NOTICE_EVENTS:
                    say(f"{self.path.name}: its totals cannot be stored ({error.strerror or error}): "
                        f"every open sums its events again")  # fmt: skip
        return totals

    def _totals_over(self, connection: Any) -> dict[str, pa.Table]:
        for table in ("graphs", "structure_nodes", "tensors"):
            connection.register(table, self.arrow(table))
        return compute_totals(connection)

    def _totals_of_segments(self) -> dict[str, pa.Table]:
        """The totals of a run being recorded: each stream segment's, summed with its
        journal's. What a segment's batches add is summed once (streams.node_times_segment),
        so a live view reads only what is new."""
        parts = [segment.totals for segment in self._node_times_segments if segment.totals is not None]
        parts.append(self._totals_of_times(self._journaled_node_times))
        return merge_totals(parts)

    @cached_property
    def _node_times_segments(self) -> list[NodeTimesSegment]:
        """The node-times segments of a run being recorded, as far as their graphs finished."""
        finished = self._stream_graph_ids
        return [node_times_segment(path, finished, self._totals_of_times)
                for path in stream_segments(self.path, "node_times")]  # fmt: skip

    def _totals_of_times(self, times: pa.Table) -> dict[str, pa.Table]:
        connection = connect()
        try:
            connection.register("node_times", times)
            return self._totals_over(connection)
        finally:
            connection.close()

    def node_times_of(self, graph_ids: list[int]) -> pd.DataFrame:
        """The stored node times of some graphs (their row groups only, once closed)."""
        if not graph_ids:
            return TABLES["node_times"].empty_table().to_pandas()
        parquet = self.path / ("node_times" + PARQUET_SUFFIX)
        if "node_times" not in self._raw and not parquet.exists():
            return self._node_times_of_segments(graph_ids)
        if "node_times" in self._raw:
            times = self.arrow("node_times")
            wanted = pc.is_in(times.column("graph_id"), value_set=pa.array(graph_ids, pa.int32()))
            return times.filter(wanted).to_pandas()
        return self._node_times_of_row_groups(graph_ids)

    @cached_property
    def _node_times_row_groups(self) -> tuple[pq.ParquetFile, list[tuple[Any, Any]]]:
        """The closed run's node times file, and each row group's graph ids (min, max) from
        its footer's statistics ((None, None) where it has none)."""
        file = pq.ParquetFile(self.path / ("node_times" + PARQUET_SUFFIX))
        column = file.schema_arrow.get_field_index("graph_id")
        spans = []
        for index in range(file.metadata.num_row_groups):
            stats = file.metadata.row_group(index).column(column).statistics
            spans.append((stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None))
        return file, spans

    def _node_times_of_row_groups(self, graph_ids: list[int]) -> pd.DataFrame:
        """The node times of some graphs of a closed run: only the Parquet row groups whose
        graph ids can hold them."""
        file, spans = self._node_times_row_groups
        lo, hi = min(graph_ids), max(graph_ids)
        groups = [i for i, (first, last) in enumerate(spans) if first is None or (first <= hi and last >= lo)]
        data = file.read_row_groups(groups) if groups else file.schema_arrow.empty_table()
        data = data.filter(pc.is_in(data.column("graph_id"), value_set=pa.array(graph_ids, pa.int32())))
        return _with_optional_columns(data, "node_times").to_pandas()

    def _node_times_of_segments(self, graph_ids: list[int]) -> pd.DataFrame:
        """node_times_of a run being recorded: the stream batches that can hold those graphs,
        and the journal."""
        wanted = pa.array(graph_ids, pa.int32())
        lo, hi = min(graph_ids), max(graph_ids)
        parts = [segment.read_graphs(lo, hi) for segment in self._node_times_segments]
        parts = [_with_optional_columns(part, "node_times") for part in parts]
        parts = [part.filter(pc.is_in(part.column("graph_id"), value_set=wanted)) for part in parts]
        journaled = self._journaled_node_times
        parts.append(journaled.filter(pc.is_in(journaled.column("graph_id"), value_set=wanted)))
        return pa.concat_tables(parts).to_pandas()

    def _graphs_with_journal(self) -> tuple[pa.Table, list[tuple[dict[str, Any], dict[str, np.ndarray]]]]:
        """The graphs table, with the graphs a run still open (or cut short) keeps only in
        its journal; and those journal records (row, node times)."""
        graphs = self._read_table("graphs")
        known = set(graphs.column("graph_id").to_pylist())
        records = [record for record in journal.read(self.path / journal.JOURNAL_FILE)
                   if record[0].get("graph_id") not in known]  # fmt: skip
        if not records:
            return graphs, records
        try:
            rows = pa.Table.from_pylist([row for row, _ in records], schema=graphs.schema)
            return pa.concat_tables([graphs, rows]), records
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as error:
            raise RunFormatError(f"{self.path}: the graph journal is damaged ({error})") from None

    @cached_property
    def _stream_graph_ids(self) -> pa.Array:
        """The graphs whose rows the tables held when the run was opened (not those only in
        its journal): their node times come from the tables."""
        journaled = pa.array([row["graph_id"] for row, _ in self._journal_only], pa.int32())
        graph_id = self._raw["graphs"].column("graph_id")
        return graph_id.filter(pc.invert(pc.is_in(graph_id, value_set=journaled)))

    @cached_property
    def _journaled_node_times(self) -> pa.Table:
        """The node times of the graphs only the journal holds."""
        schema = TABLES["node_times"]
        parts = [schema.empty_table()]
        for row, times in self._journal_only:
            waits = np.ma.masked_less(times["wait_ns"], 0)
            columns = {"graph_id": np.full(len(times["node_index"]), row["graph_id"], np.int32),
                       "node_index": times["node_index"], "start_ns": times["start_ns"], "end_ns": times["end_ns"],
                       "wait_ns": pa.array(waits, type=pa.int64())}  # fmt: skip
            try:
                parts.append(pa.table(columns, schema=schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as error:
                raise RunFormatError(f"{self.path}: the graph journal is damaged ({error})") from None
        return pa.concat_tables(parts)

    def _with_node_layers(self, nodes: pa.Table) -> pa.Table:
        """A run written before structure_nodes held each node's layer: infer it here, from
        the run's own structures (the rule the recorder follows), once per structure."""
        if "layer" in nodes.schema.names:
            return nodes
        layer = structure_layers(nodes.to_pandas(), self.raw("edges"), self.raw("tensors"), self.raw("buffers"))
        return nodes.append_column(TABLES["structure_nodes"].field("layer"), pa.array(layer))

    def _table_files(self, table: str) -> list[Path]:
        """Where a table is stored: its Parquet file, or the stream segments of a run not
        closed; none for an optional table the run does not have; RunFormatError if missing."""
        parquet = self.path / (table + PARQUET_SUFFIX)
        if parquet.exists():
            return [parquet]
        segments = stream_segments(self.path, table)
        if segments or table in OPTIONAL_TABLES:  # an optional table: from before it existed
            return segments
        raise RunFormatError(f"{self.path} has no '{table}' table: the run is damaged or not a ggml-viz run")

    def _check_schema(self, table: str) -> None:
        """The table is this recording's and has the columns this reader needs (its schema
        alone is read)."""
        files = self._table_files(table)
        if not files:
            return
        path = files[0]
        try:
            schema = pq.read_schema(path) if path.suffix == PARQUET_SUFFIX else stream_schema(path)
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFormatError(f"{path} cannot be read as a table: {error}") from None
        found = (schema.metadata or {}).get(META_EXPERIMENT_ID, b"").decode()
        if found != self.experiment_id:
            raise RunFormatError(
                f"{self.path}: table '{table}' belongs to experiment {found or '?'} but the manifest "
                f"says {self.experiment_id}; the directory mixes files of different recordings"
            )
        optional = set(OPTIONAL_COLUMNS.get(table, ())) | set(DERIVED_COLUMNS.get(table, ()))
        missing = set(TABLES[table].names) - set(schema.names) - optional
        if missing:
            raise RunFormatError(f"{self.path}: table '{table}' lacks columns {sorted(missing)}")

    def _read_table(self, table: str) -> pa.Table:
        files = self._table_files(table)
        if not files:
            return TABLES[table].empty_table()
        try:
            if files[0].suffix == PARQUET_SUFFIX:
                data = pq.ParquetFile(files[0]).read()  # (pq.read_table would import pyarrow.dataset)
            else:
                # node times whole (a user asked): read once; a small table: only what is new
                read = read_stream_once if table == "node_times" else read_stream
                data = pa.concat_tables([read(path) for path in files])
        except PARQUET_DAMAGE as error:  # (the whole table: damage in a page shows only when it is decoded)
            raise RunFormatError(f"{files[0]} cannot be read as a table: {one_line(error)}") from None
        return _with_optional_columns(data, table)


def _with_optional_columns(data: pa.Table, table: str) -> pa.Table:
    """A table as an older ggml-viz or an older segment wrote it, with the columns added
    since as nulls."""
    for column in OPTIONAL_COLUMNS.get(table, ()):
        if column not in data.schema.names:
            field = TABLES[table].field(column)
            data = data.append_column(field, pa.nulls(len(data), field.type))
    return data
