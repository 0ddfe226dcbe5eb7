"""The joined run on disk: the members merged into one run, the joined tables as Parquet beside
it and join.json naming the member runs; reading it back."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from ..._errors import GgmlVizError
from ...runformat.merge import MergeMember, merge_runs
from ...runformat.reader import Run, open_run
from .joined import Joined
from .remote_nodes import REMOTE_NODES_SCHEMA
from .summary import JoinedSummary, summarize_joined

JOIN_FILE = "join.json"
JOIN_FORMAT = "ggml-viz-join"
JOIN_VERSION = 1
JOINED_TABLES = ("hosts", "splits", "transfers", "remote_nodes")


class JoinMember(TypedDict):
    """A member run, as join.json names it."""

    role: str  # "head" or "worker"
    host: str
    pid: int | None
    run_experiment_id: str
    path: str  # relative to the joined folder
    status: str
    clock: dict[str, Any] | None  # a worker's clock offset (join.clocks.ClockOffset's fields); None: the head's


class JoinDescription(TypedDict):
    """join.json: the joined experiment, its member runs and its summary."""

    format: str  # JOIN_FORMAT
    version: int
    experiment_id: str
    members: list[JoinMember]
    summary: JoinedSummary


def write_joined(joined: Joined, output: Path) -> JoinedSummary:
    """The experiment as one run (the members merged, a context per host, every time on the
    head's clock: what the viewer and the exports open), the joined tables as Parquet beside it,
    and join.json naming the member runs (which stay where they are); returns its summary."""
    if output.exists() and not is_joined(output):
        raise GgmlVizError(f"{output} exists and is not a joined experiment: give the joined experiment a new folder")
    if output.exists():  # an earlier join of these runs, say: replaced
        shutil.rmtree(output)
    splits = joined.tables["splits"]
    # a worker's graphs for this head (it may have served others before or after)
    served = (
        {host: set(rows["worker_graph_id"].tolist()) for host, rows in splits.groupby("host")} if len(splits) else {}
    )
    merge_runs(
        [
            MergeMember(
                member.run,
                member.offset,
                {"host": member.host, "role": member.role},
                served.get(member.host, set()) if member.role == "worker" else None,
            )
            for member in joined.members
        ],
        output,
        joined.experiment_id,
        distributed={"join": JOIN_FILE, "hosts": [m.host for m in joined.members]},
    )
    for name, table in joined.tables.items():
        table.to_parquet(output / f"{name}.parquet", index=False)
    _write_remote_nodes(joined, output / "remote_nodes.parquet")
    summary = summarize_joined(joined)
    description: JoinDescription = {
        "format": JOIN_FORMAT,
        "version": JOIN_VERSION,
        "experiment_id": joined.experiment_id,
        "members": [
            {
                "role": member.role,
                "host": member.host,
                "pid": member.pid,
                "run_experiment_id": member.run.experiment_id,
                "path": os.path.relpath(member.run.path.resolve(), output.resolve()),
                "status": member.run.status,
                "clock": asdict(member.clock) if member.clock else None,
            }
            for member in joined.members
        ],
        "summary": summary,
    }
    (output / JOIN_FILE).write_text(json.dumps(description, indent=1, default=str))
    return summary


def _write_remote_nodes(joined: Joined, path: Path) -> None:
    """The remote_nodes table, a chunk of graphs at a time."""
    writer: pq.ParquetWriter | None = None
    try:
        for remote in joined.remote:
            for chunk in remote.chunks():
                table = pa.Table.from_pandas(chunk, schema=REMOTE_NODES_SCHEMA, preserve_index=False)
                writer = writer or pq.ParquetWriter(path, REMOTE_NODES_SCHEMA, compression="zstd")
                writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        pq.write_table(REMOTE_NODES_SCHEMA.empty_table(), path)


def is_joined(path: Path) -> bool:
    return (path / JOIN_FILE).is_file()


def joined_table(path: Path, name: str) -> Path | None:
    """The file of one of a joined folder's own tables (JOINED_TABLES), None where `path` is not
    a joined folder or holds no such table."""
    found = path / f"{name}.parquet"
    return found if is_joined(path) and name in JOINED_TABLES and found.exists() else None


def open_joined(path: Path) -> tuple[JoinDescription, list[Run], dict[str, Path]]:
    """A joined folder: its description, its member runs, its tables' files."""
    try:
        # as write_joined wrote it: the file's format is checked below, its fields are not
        description: JoinDescription = json.loads((path / JOIN_FILE).read_text())
    except (OSError, ValueError) as error:
        raise GgmlVizError(f"{path / JOIN_FILE} cannot be read: {error}") from None
    if description.get("format") != JOIN_FORMAT:
        raise GgmlVizError(f"{path} is not a joined ggml-viz experiment")
    runs = [open_run((path / member["path"]).resolve()) for member in description["members"]]
    tables = {name: path / f"{name}.parquet" for name in JOINED_TABLES if (path / f"{name}.parquet").exists()}
    return description, runs, tables
