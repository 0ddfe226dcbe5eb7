"""`ggml-viz summary` keeps the summary it computed in the run, and answers from it while the run and
ggml-viz are as they were: the same bytes as computing it again, text and JSON, and never a stale
answer for a run that changed, one still recording, or one with a findings plugin installed."""

from __future__ import annotations

import json
import os
import socket

import pytest

import ggml_viz.analysis.summary
from ggml_viz.commands import main
from ggml_viz.commands.stored_summary import SUMMARY_FILE, findings_plugins_installed, summary_key
from ggml_viz.runformat.manifest import write_manifest
from ggml_viz.runformat.schema import MANIFEST_FILE
from ggml_viz.runformat.synthetic import write_synthetic_run


@pytest.fixture
def run(tmp_path):
    return write_synthetic_run(tmp_path / "kept.ggmlviz", graphs=6, layers=2, seed=3)


@pytest.fixture
def computed(monkeypatch):
    """Counts the summaries computed from the run's tables (not read back from the kept one)."""
    calls = []
    summarize = ggml_viz.analysis.summary.summarize

    def counting(*args, **kwargs):
        calls.append(1)
        return summarize(*args, **kwargs)

    monkeypatch.setattr(ggml_viz.analysis.summary, "summarize", counting)
    return calls


def summary_of(capsys, *argv) -> str:
    assert main(["summary", *map(str, argv)]) == 0
    return capsys.readouterr().out


def set_manifest(run, **changes) -> None:
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    write_manifest(run, {**manifest, **changes})


def test_the_kept_summary_is_the_computed_one_byte_for_byte(run, capsys, computed):
    # GIVEN a closed run summarized once: computed, and kept in the run
    first_text = summary_of(capsys, run)
    assert computed == [1] and (run / SUMMARY_FILE).is_file()
    # WHEN it is summarized again, as tables and as JSON, and then recomputed on purpose
    kept_text, kept_json = summary_of(capsys, run), summary_of(capsys, run, "--json")
    assert computed == [1]  # both answered from the kept summary
    fresh_json, fresh_text = summary_of(capsys, run, "--json", "--recompute"), summary_of(capsys, run, "--recompute")
    # THEN the kept answers are the computed ones, byte for byte
    assert computed == [1, 1, 1]
    assert kept_text == first_text == fresh_text and "time by op" in kept_text
    assert kept_json == fresh_json and json.loads(kept_json)["run"] == str(run)


def test_a_run_that_changed_is_summarized_again(run, capsys, computed):
    before = json.loads(summary_of(capsys, run, "--json"))
    # WHEN the manifest changes (the run's status, its generated text) ...
    set_manifest(run, status="incomplete", generation={"prompt": "Why?", "generated_text": "Because."})
    after = json.loads(summary_of(capsys, run, "--json"))
    # THEN the summary is computed again and says so
    assert computed == [1, 1]
    assert (before["status"], after["status"]) == ("complete", "incomplete")
    assert after["generated_text"] == "Because."
    # AND a table file rewritten (its times differ) is computed again too, as is another --top
    table = next(run.glob("node_times*.parquet"))
    os.utime(table, ns=(table.stat().st_atime_ns, table.stat().st_mtime_ns + 1_000_000_000))
    summary_of(capsys, run, "--json")
    summary_of(capsys, run, "--json", "--top", "3")
    assert computed == [1, 1, 1, 1]
    # ... while the run as it is now is answered from what was kept
    summary_of(capsys, run, "--json", "--top", "3")
    assert computed == [1, 1, 1, 1]


def test_a_run_still_recording_is_never_kept_nor_served_from_an_older_summary(run, capsys, computed):
    # GIVEN a run summarized and kept, then marked recording by a recorder that lives (this process)
    summary_of(capsys, run, "--json")
    set_manifest(run, status="recording", recorder={"host": socket.gethostname(), "pid": os.getpid()})
    assert summary_key(run, 10) is None
    # WHEN it is summarized twice
    first, second = (json.loads(summary_of(capsys, run, "--json")) for _ in range(2))
    # THEN each is computed, and says it is still recording
    assert computed == [1, 1, 1]
    assert first["status"] == second["status"] == "recording"


def test_a_moved_run_is_answered_with_its_new_path(run, capsys, computed):
    summary_of(capsys, run)
    moved = run.rename(run.with_name("moved.ggmlviz"))
    assert json.loads(summary_of(capsys, moved, "--json"))["run"] == str(moved)
    assert computed == [1]


def test_with_a_findings_plugin_installed_nothing_is_kept(run, tmp_path, monkeypatch, capsys, computed):
    # GIVEN a package on the path declaring a finding (its metadata is what says so)
    site = tmp_path / "site"
    (site / "demo_finding-1.0.dist-info").mkdir(parents=True)
    (site / "demo_finding-1.0.dist-info" / "entry_points.txt").write_text("[ggml_viz.findings]\nx = nowhere:X\n")
    assert not findings_plugins_installed()
    monkeypatch.syspath_prepend(str(site))
    assert findings_plugins_installed()
    # THEN every summary is computed, and none is kept
    summary_of(capsys, run, "--json")
    summary_of(capsys, run, "--json")
    assert computed == [1, 1] and not (run / SUMMARY_FILE).exists()


def test_a_kept_summary_that_is_not_json_is_recomputed_and_replaced(run, capsys, computed):
    text = summary_of(capsys, run)
    (run / SUMMARY_FILE).write_text("{not json")
    assert summary_of(capsys, run) == text and computed == [1, 1]
    assert json.loads((run / SUMMARY_FILE).read_text())["key"] == summary_key(run, 10)
