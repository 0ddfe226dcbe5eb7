"""A run whose derived tables (node_totals, graph_op_totals) are damaged: truncated, bit-flipped,
zeroed or replaced. They are summed again from the node times (and stored again), so the summary
gives the sound run's numbers; where the node times are damaged too, one clean error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz._errors import RunFormatError
from ggml_viz.analysis.summary import summarize
from ggml_viz.runformat.stored import StoredRun
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.runformat.totals import GRAPH_OP_TOTALS, NODE_TOTALS, read_totals


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for position in range(middle - 4, middle + 4):
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def flip_data_page(path: Path) -> None:
    """One bit of the first data page's payload: the footer stays sound, the damage shows only
    when that page is decoded."""
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    end = start + column.total_compressed_size
    data = bytearray(path.read_bytes())
    data[end - 3] ^= 0x10
    path.write_bytes(bytes(data))


def zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def garbage(path: Path) -> None:
    path.write_text("this is not a Parquet file\n" * 20)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "bit-flipped": flip_middle,
    "data page bit-flipped": flip_data_page,
    "zeroed": zero,
    "garbage": garbage,
}


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A small closed run, its summary, and what `ggml-viz summary --json` prints for it."""
    run = write_synthetic_run(tmp_path_factory.mktemp("sound") / "run.ggmlviz", graphs=6, layers=2)
    done = summary_cli(run)
    assert done.returncode == 0, done.stderr
    return run, plain(summarize(ggml_viz.open(run))), json.loads(done.stdout)


def plain(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without what names its directory (the copies live elsewhere)."""
    return without_paths(json.loads(json.dumps(summary, default=str)))


def damaged_copy(run: Path, tmp_path: Path, tables: tuple[str, ...], kind: str) -> Path:
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    for table in tables:
        DAMAGE[kind](copy / f"{table}.parquet")
    return copy


def summary_cli(run: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(ggml_viz.__file__).parents[1])}
    argv = [sys.executable, "-m", "ggml_viz", "summary", "--json", str(run)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def without_paths(printed: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in printed.items() if key != "run"}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("table", [NODE_TOTALS, GRAPH_OP_TOTALS])
def test_damaged_totals_are_summed_again_from_the_node_times(sound, tmp_path, table, kind, capsys):
    run, summary, printed = sound
    damaged = damaged_copy(run, tmp_path, (table,), kind)

    assert plain(summarize(ggml_viz.open(damaged))) == summary
    said = capsys.readouterr().err
    assert f"{table}.parquet cannot be read" in said and "summed again" in said and said.count("\n") == 1

    # stored again: the next open reads them
    assert read_totals(damaged, ggml_viz.open(damaged).experiment_id) is not None

    DAMAGE[kind](damaged / f"{table}.parquet")
    done = summary_cli(damaged)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "summed again" in done.stderr
    assert without_paths(json.loads(done.stdout)) == without_paths(printed)


# (bit-flipped in the middle: below, the flip lands in a compressed page that still decodes)
@pytest.mark.parametrize("kind", [kind for kind in DAMAGE if kind != "bit-flipped"])
def test_totals_damaged_with_their_node_times_are_one_clean_error(sound, tmp_path, kind, capsys):
    run, _, _ = sound
    damaged = damaged_copy(run, tmp_path, ("node_times", NODE_TOTALS), kind)

    with pytest.raises(RunFormatError, match="node_times.parquet cannot be read"):
        summarize(ggml_viz.open(damaged))
    assert capsys.readouterr().err == ""  # no notice of a rebuild that did not happen

    done = summary_cli(damaged)
    assert done.returncode != 0 and done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ggml-viz: error: ") and "node_times.parquet" in lines[0]


def test_sound_totals_are_read_not_summed(sound, monkeypatch):
    run, summary, _ = sound

    def summed(*_: Any, **__: Any) -> Any:
        raise AssertionError("a sound run's stored totals were summed again")

    monkeypatch.setattr(StoredRun, "_compute_totals", summed)
    assert plain(summarize(ggml_viz.open(run))) == summary


def test_node_times_damaged_where_reading_cannot_tell_give_no_traceback(sound, tmp_path):
    """The node times are written without page checksums: this flip lands in a compressed
    dictionary page of wait_ns that still decodes (to other values). The totals are summed
    again from what the node times now hold; what reading cannot tell apart from sound data
    is shown as read, and nothing ends in a traceback."""
    run, _, _ = sound
    damaged = damaged_copy(run, tmp_path, ("node_times", NODE_TOTALS), "bit-flipped")
    done = summary_cli(damaged)
    assert "Traceback" not in done.stderr
    if done.returncode != 0:
        assert len(done.stderr.strip().splitlines()) == 1
