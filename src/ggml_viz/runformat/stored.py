"""A run directory's tables as stored: its manifest, and each table's Parquet file (or, for a run
still recording or cut short, its stream segments and graph journal), checked against this
recording when the run is opened and read when first asked for; the node totals, stored with
a closed run or summed when read (totals.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import RunFormatError
from ..log import long_step, say
from . import journal
from .conversion import pending_parts, stored_totals_of_parts, totals_of_parts_stored
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
    part_of_stream,
    table_segments,
)
from .streams import (
    NodeTimesSegment,
    holds_any,
    node_times_segment,
    part_totals,
    read_part,
    read_stream,
    read_stream_once,
    stream_schema,
)
from .structure_layers import structure_layers
from .totals import (
    NODE_TOTALS,
    PARQUET_DAMAGE,
    compute_totals,
    connect,
    merge_totals,
    one_line,
    parquet_files,
    read_totals,
    write_totals,
)

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
        # Stream segments a closed run left to its converter (conversion.py): read where
        # they are, a stream or, converted since, its part.
        self.pending_parts = pending_parts(self.manifest)

    @property
    def stored_as_parquet(self) -> bool:
        """Whether every table is in Parquet files (a closed run whose conversion is not
        pending): what reads them straight from the files (DuckDB views, merges) needs."""
        return self.status == STATUS_COMPLETE and not self.pending_parts

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
            if table in GRAPH_TABLES and data.num_rows:  # (the finished graphs: millions of ids to look up in)
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
        files = self._table_files(table)
        if files and all(path.suffix == PARQUET_SUFFIX for path in files) and table not in self._raw:
            return ds.dataset([str(path) for path in files], format="parquet")
        return ds.dataset(self.arrow(table))

    def totals_table(self, name: str) -> pa.Table:
        """A totals table (NODE_TOTALS or GRAPH_OP_TOTALS) as Arrow, as stored (read from its
        file: the per-graph ops an Arrow dictionary, totals.KEPT_AS_DICTIONARY)."""
        return self._totals[name]

    @cached_property
    def _totals(self) -> dict[str, pa.Table]:
        if self.status != STATUS_COMPLETE:
            return self._compute_totals()
        if self.pending_parts:
            return self._totals_with_pending()
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
        """The totals by DuckDB, streaming the node times (Parquet files, or the streams,
        parts and journal of a run still recording); a closed run of an older ggml-viz, or
        one whose stored totals are damaged (`rebuilding`), keeps them."""
        if self.status != STATUS_COMPLETE:  # still recording (or cut short)
            return self._totals_of_segments()
        parquet = self._table_files("node_times")
        try:
            events = sum(pq.ParquetFile(path).metadata.num_rows for path in parquet)
        except PARQUET_DAMAGE as error:
            raise RunFormatError(f"{_file_of(error, parquet)} cannot be read as a table: {one_line(error)}") from None
        if rebuilding:  # damage found beside them: the node times are summed only if their pages are sound
            _verify_pages(parquet)
        if not rebuilding and events >= UPGRADE_NOTICE_EVENTS:  # seconds per 10M events: say why
            say(
                f"{self.path.name}: summing its {events:,} node events once (an older ggml-viz recorded it "
                f"without their totals); later opens read the stored totals"
            )
        import duckdb  # (imported by connect() already)

        connection = connect()
        try:
            with long_step(f"summing the {events:,} node events of {self.path.name}"):
                connection.execute(f"create view node_times as select * from {parquet_files(parquet)}")
                totals = self._totals_over(connection)
        except duckdb.Error as error:  # damage in a page of the node times shows only when it is read
            raise RunFormatError(f"{_file_of(error, parquet)} cannot be read as a table: {one_line(error)}") from None
        finally:
            connection.close()
        try:  # an older run upgraded, or damaged totals replaced: next time it opens without reading its events
            write_totals(self.path, totals, self.experiment_id)
        except OSError as error:
            if events >= UPGRADE_NOTICE_EVENTS:
                say(
                    f"{self.path.name}: its totals cannot be stored ({error.strerror or error}): "
                    f"every open sums its events again"
                )
        return totals

    def _totals_over(self, connection: Any) -> dict[str, pa.Table]:
        for table in ("graphs", "structure_nodes", "tensors"):
            connection.register(table, self.arrow(table))
        return compute_totals(connection)

    def _totals_of_segments(self) -> dict[str, pa.Table]:
        """The totals of a run being recorded: each part's and stream segment's, summed with
        its journal's. What a part holds, and what a segment's batches add, is summed once
        (streams.part_totals, streams.node_times_segment): a live view reads only what is new."""
        parts = [part_totals(path, self._totals_of_part) for path in self._node_times_parts]
        parts += [segment.totals for segment in self._node_times_segments if segment.totals is not None]
        parts.append(self._totals_of_times(self._journaled_node_times))
        return merge_totals(parts)

    def _totals_with_pending(self) -> dict[str, pa.Table]:
        """The totals of a closed run whose conversion is pending: those its close stored of
        the parts written before it, plus each pending node-times segment's (from its stream,
        or from its part once converted), each summed once; once the conversion is done (its
        totals of parts removed), the run's totals as stored."""
        stored = totals_of_parts_stored(self.manifest)
        before = stored_totals_of_parts(self.path, self.experiment_id) if stored else None
        if before is None:
            done = read_totals(self.path, self.experiment_id) if stored else None
            return done if done is not None else self._totals_of_segments()
        pending = {part_of_stream(self.path / name).name for name in self.pending_parts}
        parts = [before]
        parts += [part_totals(path, self._totals_of_part) for path in self._node_times_parts if path.name in pending]
        parts += [segment.totals for segment in self._node_times_segments if segment.totals is not None]
        return merge_totals(parts)

    @property
    def _node_times_parts(self) -> list[Path]:
        """The Parquet files of a run's node times (a run being recorded: the parts written so far)."""
        return self._node_times_sources[0]

    @property
    def _node_times_segments(self) -> list[NodeTimesSegment]:
        """The node-times segments of a run being recorded, as far as their graphs finished."""
        return self._node_times_sources[1]

    @cached_property
    def _node_times_sources(self) -> tuple[list[Path], list[NodeTimesSegment]]:
        """Where the node times are, listed once: Parquet files, and stream segments (a run
        being recorded); a segment converted to its part since it was listed counts as the part."""
        parts, segments = [], []
        finished = self._stream_graph_ids
        for path in self._table_files("node_times"):
            if path.suffix == PARQUET_SUFFIX:
                parts.append(path)
                continue
            try:
                segments.append(node_times_segment(path, finished, self._totals_of_times))
            except RunFormatError:
                if path.exists() or not part_of_stream(path).exists():
                    raise
                parts.append(part_of_stream(path))
        return parts, segments

    def _totals_of_part(self, part: Path) -> tuple[dict[str, pa.Table], bool]:
        """A part's totals over the graphs this reader knows, and whether they are all of
        its events (a part written after the run was opened may hold graphs it does not)."""
        import duckdb

        connection = connect()
        try:
            connection.execute(f"create view node_times as select * from {parquet_files([part])}")
            totals = self._totals_over(connection)
            events = pq.ParquetFile(part).metadata.num_rows
        except (duckdb.Error, *PARQUET_DAMAGE) as error:
            raise RunFormatError(f"{part} cannot be read as a table: {one_line(error)}") from None
        finally:
            connection.close()
        return totals, (pc.sum(totals[NODE_TOTALS].column("timed")).as_py() or 0) == events

    def _totals_of_times(self, times: pa.Table) -> dict[str, pa.Table]:
        connection = connect()
        try:
            connection.register("node_times", times)
            return self._totals_over(connection)
        finally:
            connection.close()

    def node_times_of(self, graph_ids: list[int]) -> pd.DataFrame:
        """The stored node times of some graphs: the Parquet row groups that can hold them,
        and, of a run being recorded, the stream batches and the journal."""
        if not graph_ids:
            return TABLES["node_times"].empty_table().to_pandas()
        wanted = pa.array(graph_ids, pa.int32())
        if "node_times" in self._raw:
            times = self.arrow("node_times")
            return times.filter(pc.is_in(times.column("graph_id"), value_set=wanted)).to_pandas()
        ids = np.unique(np.asarray(graph_ids, np.int64))  # (sorted: a row group or batch is read if it holds one)
        parts = []
        for file, spans in self._node_times_row_groups:
            groups = [i for i, (first, last) in enumerate(spans) if holds_any(ids, first, last)]
            if groups:
                parts.append(file.read_row_groups(groups))
        if not self.stored_as_parquet:
            parts += [_graphs_of_segment(segment, ids) for segment in self._node_times_segments]
            parts.append(self._journaled_node_times)
        parts = [_with_optional_columns(part, "node_times") for part in parts]
        parts = [part.filter(pc.is_in(part.column("graph_id"), value_set=wanted)) for part in parts]
        return pa.concat_tables(parts or [TABLES["node_times"].empty_table()]).to_pandas()

    @cached_property
    def _node_times_row_groups(self) -> list[tuple[pq.ParquetFile, list[tuple[Any, Any]]]]:
        """The node times' Parquet files, each with its row groups' graph ids (min, max) from
        its footer's statistics ((None, None) where it has none)."""
        found = []
        for path in self._node_times_parts:
            try:
                file = pq.ParquetFile(path)
            except PARQUET_DAMAGE as error:
                raise RunFormatError(f"{path} cannot be read as a table: {one_line(error)}") from None
            found.append((file, _graph_spans(file)))
        return found

    def _graphs_with_journal(self) -> tuple[pa.Table, list[tuple[dict[str, Any], dict[str, np.ndarray]]]]:
        """The graphs table, with the graphs a run still open (or cut short) keeps only in
        its journal; and those journal records (row, node times)."""
        graphs = self._read_table("graphs")
        records = journal.read(self.path / journal.JOURNAL_FILE)
        if records:  # (a closed run has none: its graph ids, millions, are not looked through)
            known = set(graphs.column("graph_id").to_pylist())
            records = [record for record in records if record[0].get("graph_id") not in known]
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
            columns = {
                "graph_id": np.full(len(times["node_index"]), row["graph_id"], np.int32),
                "node_index": times["node_index"],
                "start_ns": times["start_ns"],
                "end_ns": times["end_ns"],
                "wait_ns": pa.array(waits, type=pa.int64()),
            }
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
        """Where a table is stored (schema.table_segments): its Parquet file or parts, or, of
        a run not closed, its parts and stream segments; none for an optional table the run
        does not have; RunFormatError if missing."""
        files = table_segments(self.path, table)
        if files or table in OPTIONAL_TABLES:  # an optional table: from before it existed
            return files
        raise RunFormatError(f"{self.path} has no '{table}' table: the run is damaged or not a ggml-viz run")

    def _check_schema(self, table: str) -> None:
        """The table is this recording's and has the columns this reader needs (each file's
        schema alone is read)."""
        for path in self._table_files(table):
            try:
                schema = pq.read_schema(path) if path.suffix == PARQUET_SUFFIX else _stream_schema(path)
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
        data = []
        for path in files:
            try:
                if path.suffix == PARQUET_SUFFIX and len(files) == 1:  # a closed table: read as asked
                    data.append(pq.ParquetFile(path).read())  # (pq.read_table would import pyarrow.dataset)
                elif path.suffix == PARQUET_SUFFIX:  # one of its parts: node times whole once, the rest kept
                    data.append(pq.ParquetFile(path).read() if table == "node_times" else read_part(path))
                else:
                    # node times whole (a user asked): read once; a small table: only what is new
                    data.append(_read_segment(path, read_stream_once if table == "node_times" else read_stream))
            except PARQUET_DAMAGE as error:  # (the whole file: damage in a page shows only when it is decoded)
                raise RunFormatError(f"{path} cannot be read as a table: {one_line(error)}") from None
        return _with_optional_columns(pa.concat_tables(data), table)


def _read_segment(stream: Path, read: Callable[[Path], pa.Table]) -> pa.Table:
    """A stream segment, or the Parquet part it became since its name was listed (the
    recording converts a full segment while a reader opens the run)."""
    try:
        return read(stream)
    except RunFormatError:
        part = part_of_stream(stream)
        if stream.exists() or not part.exists():
            raise
        return pq.ParquetFile(part).read()


def _graphs_of_segment(segment: NodeTimesSegment, wanted: np.ndarray) -> pa.Table:
    """The node times a segment's batches hold of the `wanted` graphs (sorted ids); where
    the segment was converted since it was indexed (a closed run's converter, or the
    recorder's worker, at work meanwhile), its part's row groups that can hold them (the
    caller keeps the graphs it wants)."""
    try:
        return segment.read_graphs(wanted)
    except FileNotFoundError:
        part = part_of_stream(segment.path)
        if not part.exists():
            raise
        file = pq.ParquetFile(part)
        groups = [i for i, (first, last) in enumerate(_graph_spans(file)) if holds_any(wanted, first, last)]
        return file.read_row_groups(groups) if groups else file.schema_arrow.empty_table()


def _graph_spans(file: pq.ParquetFile) -> list[tuple[Any, Any]]:
    """Each row group's graph ids (min, max) from the file's footer ((None, None) where it has none)."""
    column = file.schema_arrow.get_field_index("graph_id")
    spans = []
    for index in range(file.metadata.num_row_groups):
        stats = file.metadata.row_group(index).column(column).statistics
        spans.append((stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None))
    return spans


def _stream_schema(stream: Path) -> pa.Schema:
    try:
        return stream_schema(stream)
    except FileNotFoundError:  # converted since it was listed
        return pq.read_schema(part_of_stream(stream))


def _verify_pages(files: list[Path]) -> None:
    """Every page of these Parquet files decoded against its checksum (written with each page
    since format 3; a file without them is decoded alone): RunFormatError naming the first
    damaged. Differences-encoded node times decode a flipped bit into other numbers, where
    a dictionary's indices would fail: the checksum is what tells."""
    for path in files:
        try:
            for _ in pq.ParquetFile(path, page_checksum_verification=True).iter_batches(batch_size=1 << 20):
                pass
        except PARQUET_DAMAGE as error:
            raise RunFormatError(f"{path} cannot be read as a table: {one_line(error)}") from None


def _file_of(error: BaseException, files: list[Path]) -> Path:
    """The file an error is about: the one its message names, else the first."""
    return next((path for path in files if str(path) in str(error)), files[0])


def _with_optional_columns(data: pa.Table, table: str) -> pa.Table:
    """A table as an older ggml-viz or an older segment wrote it, with the columns added
    since as nulls."""
    for column in OPTIONAL_COLUMNS.get(table, ()):
        if column not in data.schema.names:
            field = TABLES[table].field(column)
            data = data.append_column(field, pa.nulls(len(data), field.type))
    return data
