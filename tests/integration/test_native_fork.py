"""A native program that forks, recorded through the preload library: the spool is the parent's
(named by its pid), and a child, which inherits the library, its open spool and the recorders'
memory, must leave it alone."""

from __future__ import annotations

import os
import subprocess

import pytest

import ggml_viz

from .native import build_plain_program, untraced
from .smollm2 import ggml_viz_cli


@pytest.fixture(scope="module")
def plain_program(tmp_path_factory):
    return build_plain_program(tmp_path_factory.mktemp("fork"))


def test_a_forked_child_that_exits_leaves_the_parents_run_whole(tmp_path, plain_program):
    # GIVEN a ggml program that, after its first compute, forks a child which computes nothing
    # and ends with exit() (its exit handlers run, the preload library's among them)
    command = [str(plain_program), "3", "0", "fork"]
    expected = untraced(command)
    output = tmp_path / "fork.ggmlviz"
    # WHEN it runs with the preload library
    preload = ggml_viz_cli("preload-path").stdout.strip()
    env = {**os.environ, "LD_PRELOAD": preload, "GGML_VIZ_OUTPUT": str(output)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    # THEN the program's output is its own, and only the parent wrote a spool
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected.stdout and "ggml-viz" not in result.stderr
    assert len(list(output.glob("spool/*.spool"))) == 1
    # AND the run it becomes is the parent's, complete: each of its three graphs once, timed
    summary = ggml_viz_cli("summary", str(output))
    assert summary.returncode == 0, summary.stderr
    run = ggml_viz.open(output)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert len(run.graphs) == 3 and run.nodes.timed.all()
    assert run.manifest["program"]["argv"] == command
