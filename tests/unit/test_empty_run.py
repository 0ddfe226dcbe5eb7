"""A run in which nothing was recorded still summarizes, validates and reads."""

from __future__ import annotations

import json

import pytest

import ggml_viz
from ggml_viz.analysis.summary import summarize
from ggml_viz.commands import main
from ggml_viz.commands.validate import validate_run


@pytest.mark.llama_cpp
def test_a_run_without_graphs_reads_summarizes_and_validates(tmp_path, capsys):
    # GIVEN a recording during which no llama context was created
    with ggml_viz.record(tmp_path / "empty.ggmlviz"):
        pass
    run = ggml_viz.open(tmp_path / "empty.ggmlviz")
    # THEN every table reads empty, the summary says so, and the run is consistent
    for table in ("graphs", "nodes", "edges", "buffers", "tokens", "memory_map"):
        assert len(getattr(run, table)) == 0
    summary = summarize(run)
    assert summary["graphs"] == 0 and summary["node_events"] == 0
    assert validate_run(run) == []
    assert main(["summary", str(tmp_path / "empty.ggmlviz")]) == 0
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "empty.ggmlviz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graphs"] == 0
    assert main(["validate", str(tmp_path / "empty.ggmlviz")]) == 0
