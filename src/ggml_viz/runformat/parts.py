"""A table's rows as one Parquet file: how the recorder's stream segments become parts, and
how the close (or the converter after it: conversion.py) writes them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import PARQUET_SUFFIX, TABLES
from .streams import stream_schema

PARQUET_ROW_GROUP = 1 << 17  # rows: a window of a long run reads the row groups it overlaps
# Node times (most of a run's bytes: ints, each graph's times rising) stored as differences,
# not dictionaries: 5.9 bytes an event instead of 11.3, written five times faster (8.4M events:
# 1.4 s, not 7.3), read as fast, by any Parquet reader (a standard encoding).
PARQUET_OPTIONS: dict[str, dict[str, Any]] = {
    "node_times": {
        "use_dictionary": False,
        "column_encoding": dict.fromkeys(TABLES["node_times"].names, "DELTA_BINARY_PACKED"),
    },
}


def to_parquet(sources: list[Path], target: Path, keep: pa.Array | None) -> int:
    """The rows of `sources` (stream segments or Parquet parts, in order) as one Parquet file
    `target`, batch by batch (bounded memory at any length), in row groups of about
    PARQUET_ROW_GROUP rows, keeping only the rows of the graphs in `keep` when it is given;
    written under a temporary name, renamed, and only then the sources removed; each page
    with its checksum (a reader that verifies them refuses a damaged page). Returns the rows
    written."""
    partial = target.with_name(target.name + ".partial")
    schema = stream_schema(sources[0]) if sources[0].suffix != PARQUET_SUFFIX else pq.read_schema(sources[0])
    rows = 0
    options = PARQUET_OPTIONS.get(target.name.split(".")[0], {})
    with pq.ParquetWriter(partial, schema, compression="zstd", write_page_checksum=True, **options) as parquet:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for batch in batches_of(sources):
            if keep is not None:
                batch = batch.filter(pc.is_in(batch.column("graph_id"), value_set=keep))
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= PARQUET_ROW_GROUP:
                parquet.write_table(pa.Table.from_batches(pending, parquet.schema), row_group_size=pending_rows)
                rows, pending, pending_rows = rows + pending_rows, [], 0
        parquet.write_table(pa.Table.from_batches(pending, parquet.schema), row_group_size=max(pending_rows, 1))
        rows += pending_rows
    os.replace(partial, target)
    for source in sources:
        if source != target:
            source.unlink()
    return rows


def batches_of(sources: list[Path]) -> Iterator[pa.RecordBatch]:
    for source in sources:
        if source.suffix == PARQUET_SUFFIX:
            yield from pq.ParquetFile(source).iter_batches(batch_size=PARQUET_ROW_GROUP)
        else:
            with pa.OSFile(str(source), "rb") as stream:
                yield from pa.ipc.open_stream(stream)
