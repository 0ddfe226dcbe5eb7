"""Converting what a closed run left in its streams into Parquet parts, after the close.

A recording's streams become Parquet parts as they fill, on a thread of the recorder; when
the recording outran that thread (a billion events written at full speed), the close does
not wait for the backlog: it marks the run complete at once, lists the stream segments not
yet converted in the manifest (`pending_parts`, `conversion: pending`), stores the totals of
the parts already written (`node_totals.of-parts.parquet`, `graph_op_totals.of-parts.parquet`)
and starts a converter in a process of its own, detached and at idle priority, which
outlives the recording program (a Python program's run is closed as its interpreter exits).

Until it is done the run reads as any run does: each pending segment from its stream, or
from its part once converted (the reader sums their totals onto the stored ones). The
converter takes the segments one by one with the steps the recorder takes (the part written
under a temporary name, renamed, and only then the stream removed), so that a converter
killed at any moment leaves every row in a stream or a part; another one
(`python -m ggml_viz.runformat.conversion RUN`) goes on where it stopped. Last, it stores
the run's totals, marks the conversion done and removes the totals of parts.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from .manifest import load_manifest, utc_now, write_manifest
from .parts import to_parquet
from .schema import PARQUET_SUFFIX, parquet_parts, part_of_stream
from .totals import (
    TOTALS_SCHEMAS,
    compute_totals,
    connect,
    merge_totals,
    parquet_files,
    read_totals,
    totals_of_parquet_run,
    write_totals,
)

CONVERSION_PENDING = "pending"
CONVERSION_DONE = "done"
# The totals of the parts written before the close, beside the final names (which only a
# finished conversion writes): a reader adds the pending segments' totals to these.
TOTALS_OF_PARTS = ".of-parts"
# Held (flock) by the converter at work: a second one started meanwhile leaves the run to it.
CONVERSION_LOCK = "conversion.lock"


def pending_parts(manifest: dict[str, Any]) -> list[str]:
    """The stream segments a closed run left to convert (file names), in the order written;
    none for a run whose close converted everything, or whose conversion is done."""
    if manifest.get("conversion") != CONVERSION_PENDING:
        return []
    return [str(name) for name in manifest.get("pending_parts") or []]


def totals_of_parts_stored(manifest: dict[str, Any]) -> bool:
    """Whether the close stored the totals of the parts written before it (TOTALS_OF_PARTS)."""
    return bool(manifest.get("totals_of_parts"))


def start_converter(run_dir: Path) -> subprocess.Popen[bytes]:
    """The converter for `run_dir`, in a process of its own: a new session (a signal to the
    recording program's group, or its terminal closing, does not reach it), its output
    nowhere, and none of the recording's settings (it records nothing itself)."""
    package_root = str(Path(__file__).resolve().parents[2])  # (this ggml_viz, installed or not)
    env = {key: value for key, value in os.environ.items() if not key.startswith("GGML_VIZ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "ggml_viz.runformat.conversion", str(run_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=env,
    )


def convert_pending(run_dir: Path) -> bool:
    """Convert the run's pending segments, store its totals and mark the conversion done;
    False (nothing done) if another converter holds the run."""
    with open(run_dir / CONVERSION_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        manifest = load_manifest(run_dir)
        pending = pending_parts(manifest)
        if not pending:
            return True
        for name in pending:
            convert_segment(run_dir, name)
        _store_totals(run_dir, manifest, pending)
        manifest = load_manifest(run_dir)  # (as it is now: only the conversion's fields change)
        manifest.update(conversion=CONVERSION_DONE, pending_parts=[], totals_of_parts=False, converted=utc_now())
        manifest["counts"] = {**manifest.get("counts", {}), **_rows_of(run_dir, pending)}
        write_manifest(run_dir, manifest)
        for name in TOTALS_SCHEMAS:
            (run_dir / f"{name}{TOTALS_OF_PARTS}{PARQUET_SUFFIX}").unlink(missing_ok=True)
        (run_dir / CONVERSION_LOCK).unlink(missing_ok=True)
    return True


def convert_segment(run_dir: Path, name: str) -> Path:
    """One pending stream segment as its Parquet part (schema.part_of_stream), crash-safe at
    every step: a part already renamed in place wins (its stream, if still there, is removed)."""
    stream = run_dir / name
    part = part_of_stream(stream)
    if part.exists():
        stream.unlink(missing_ok=True)  # killed between the rename and the removal
    elif stream.exists():
        to_parquet([stream], part, None)  # (a `.partial` left by a killed converter is written over)
    return part


def _store_totals(run_dir: Path, manifest: dict[str, Any], pending: list[str]) -> None:
    """The run's totals: those of the parts written before the close plus those of the parts
    converted since; all summed from the parts where the former were not stored."""
    experiment_id = manifest["experiment_id"]
    before = None
    if totals_of_parts_stored(manifest):
        before = read_totals(run_dir, experiment_id, suffix=TOTALS_OF_PARTS)
    if before is None:
        write_totals(run_dir, totals_of_parquet_run(run_dir), experiment_id)
        return
    converted = [part_of_stream(run_dir / name) for name in pending if name.startswith("node_times")]
    if not converted:
        write_totals(run_dir, before, experiment_id)
        return
    connection = connect()
    try:
        for table in ("graphs", "structure_nodes", "tensors"):
            connection.execute(f"create view {table} as select * from {parquet_files(parquet_parts(run_dir, table))}")
        connection.execute(f"create view node_times as select * from {parquet_files(converted)}")
        after = compute_totals(connection)
    finally:
        connection.close()
    write_totals(run_dir, merge_totals([before, after]), experiment_id)


def _rows_of(run_dir: Path, pending: list[str]) -> dict[str, int]:
    """The rows stored of each table that had pending segments."""
    import pyarrow.parquet as pq

    tables = {name.split(".")[0] for name in pending}
    return {f"{t}_rows": sum(pq.read_metadata(p).num_rows for p in parquet_parts(run_dir, t)) for t in tables}


def stored_totals_of_parts(run_dir: Path, experiment_id: str) -> dict[str, pa.Table] | None:
    """The totals of the parts written before the close, as stored (None once the conversion
    removed them)."""
    return read_totals(run_dir, experiment_id, suffix=TOTALS_OF_PARTS)


def _lower_priority() -> None:
    """Run only when the machine has nothing else to do (the recording program's next run)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ggml_viz.runformat.conversion RUN_DIR", file=sys.stderr)
        return 2
    _lower_priority()
    convert_pending(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
