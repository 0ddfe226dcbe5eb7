"""Native programs that are not llama.cpp, recorded through the preload library: a plain
ggml program the tests build, and the bad cases (no ggml, a full disk, the collector killed;
other ggml versions and layouts: test_ggml_versions.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import ggml_viz

from .native import build_plain_program, untraced
from .smollm2 import ggml_viz_cli


@pytest.fixture(scope="module")
def plain_program(tmp_path_factory):
    return build_plain_program(tmp_path_factory.mktemp("plain"))


def test_a_plain_ggml_program_is_recorded_graph_by_graph(tmp_path, plain_program):
    # GIVEN a ggml program that computes relu(W x + b) three times through a backend scheduler
    expected = untraced([str(plain_program)])
    output = tmp_path / "plain.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", str(plain_program))
    # THEN the program's output and exit status are its own
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected.stdout  # byte for byte
    # AND each compute is a graph, without tokens, its nodes named, timed and linked
    run = ggml_viz.open(output)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    graphs = run.graphs
    assert len(graphs) == 3 and set(graphs.phase) == {"other"} and graphs.n_tokens.sum() == 0
    nodes = run.nodes
    assert nodes.groupby("graph_id").op.apply(list).tolist() == [["MUL_MAT", "ADD", "RELU"]] * 3
    assert nodes.groupby("graph_id").name.apply(list).tolist() == [["product", "sum", "output"]] * 3
    assert nodes.timed.all() and (nodes.duration_ns > 0).all()
    product = run.edges[(run.edges.graph_id == 0) & (run.edges.node_index == 0)]
    assert product.src_name.tolist() == ["layer.weight", "input"]
    # AND the manifest says which program ran, and how it ended
    program = run.manifest["program"]
    assert program["argv"] == [str(plain_program)] and program["exit_status"] == 0
    assert run.manifest["contexts"][0]["kind"] == "ggml"
    assert not (output / "spool").exists()


def test_a_nodes_wait_for_its_stragglers_is_charged_to_it(tmp_path, plain_program):
    # GIVEN the plain program with a node that thread 0 finishes at once while thread 1
    # sleeps 30 ms in it (a straggler), followed by a RELU
    output = tmp_path / "straggler.ggmlviz"
    expected = untraced([str(plain_program), "3", "0", "-", "30"])
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", str(plain_program), "3", "0", "-", "30")
    assert result.returncode == 0, result.stderr
    assert expected.stdout in result.stdout
    nodes = ggml_viz.open(output).nodes
    assert nodes.groupby("graph_id").name.apply(list).tolist() == [["product", "sum", "straggler", "output"]] * 3
    straggler, relu = nodes[nodes.name == "straggler"], nodes[nodes.name == "output"]
    # THEN the straggler's node holds the wait for its slow thread, as its wait
    assert (straggler.wait_ns >= 29_000_000).all(), straggler.wait_ns.tolist()
    assert (straggler.duration_ns >= straggler.wait_ns).all()
    assert (straggler.duration_ns - straggler.wait_ns < 10_000_000).all()  # thread 0's own work is short
    # AND the node after it does not (ggml's abort callback fires before the barrier: a
    # node timed by it alone would hold the wait of the node before)
    assert (relu.duration_ns < 10_000_000).all(), relu.duration_ns.tolist()
    # AND the nodes tile each graph: each starts where the one before it ended
    for _, graph in nodes.groupby("graph_id"):
        assert (graph.start_ns.to_numpy()[1:] == graph.end_ns.to_numpy()[:-1]).all()
        assert (graph.wait_ns.notna()).all() and (graph.wait_ns <= graph.duration_ns).all()


def test_the_exit_status_is_the_programs(tmp_path):
    result = ggml_viz_cli("run", "-o", str(tmp_path / "x.ggmlviz"), "--", "sh", "-c", "exit 3")
    assert result.returncode == 3
    assert "no run was written" in result.stderr and not (tmp_path / "x.ggmlviz").exists()


def test_a_program_without_ggml_gets_one_message_and_runs(tmp_path):
    result = ggml_viz_cli("run", "-o", str(tmp_path / "x.ggmlviz"), "--", "echo", "hello")
    assert result.returncode == 0 and "hello" in result.stdout
    assert "echo loads no ggml shared library" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.ggmlviz").exists()


def test_a_full_disk_stops_the_recording_not_the_program(tmp_path, plain_program):
    # GIVEN a program that may write only 64 blocks to files (writes past that fail, as on a
    # full disk; the signal such a write raises is ignored, as a program's own could be)
    output = tmp_path / "full.ggmlviz"
    limited = f"ulimit -f 64; trap '' XFSZ; exec {plain_program} 400"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", "sh", "-c", limited)
    # THEN the program computes every graph and ends well
    assert result.returncode == 0
    assert result.stdout.count(": sum ") == 400
    # AND recording stopped with one message; the run keeps what came before, marked incomplete
    assert "recording stopped: writing the spool" in result.stderr
    run = ggml_viz.open(output)
    assert run.status == "incomplete"
    assert 0 < len(run.graphs) < 400


def test_killing_the_collector_leaves_the_program_running(tmp_path, plain_program):
    # GIVEN a program computing a graph every 20 ms for about a second, under ggml-viz run
    output = tmp_path / "orphan.ggmlviz"
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", "run", "-o", str(output), "--", str(plain_program), "50", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(output.glob("spool/*.spool")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the program has started once its spool exists
    # WHEN the collector is killed
    wrapper.send_signal(signal.SIGKILL)
    wrapper.wait(timeout=30)
    # THEN the program goes on to its end (its output reaches the pipe until it exits)
    assert wrapper.stdout is not None
    printed = wrapper.stdout.read()
    assert printed.count(": sum ") == 50
    # AND its spool holds every graph, for a later collect
    spools = list((output / "spool").glob("*.spool"))
    assert len(spools) == 1


def _preload_by_hand(program: list[str], output, **env_extra) -> subprocess.CompletedProcess:
    """The program run with LD_PRELOAD and GGML_VIZ_OUTPUT set by hand, without ggml-viz run."""
    preload = ggml_viz_cli("preload-path").stdout.strip()
    env = {**os.environ, "LD_PRELOAD": preload, "GGML_VIZ_OUTPUT": str(output), **env_extra}
    return subprocess.run(program, env=env, capture_output=True, text=True, timeout=300)


def test_a_spool_left_without_the_wrapper_is_collected_by_the_first_command(tmp_path, plain_program):
    # GIVEN a program recorded with LD_PRELOAD alone (a service, a container)
    output = tmp_path / "service.ggmlviz"
    assert _preload_by_hand([str(plain_program), "5"], output, GGML_VIZ_DETAIL="graph").returncode == 0
    assert list(output.glob("spool/*.spool")) and not (output / "manifest.json").exists()
    # WHEN a ggml-viz command opens the run
    summary = ggml_viz_cli("summary", str(output))
    # THEN the spool becomes the run first: complete, every graph in it
    assert summary.returncode == 0, summary.stderr
    run = ggml_viz.open(output)
    assert run.status == "complete" and len(run.graphs) == 5
    assert not (output / "spool").exists()
    # AND with the settings it ran with, as its spool keeps them
    assert run.manifest["capture"]["detail"] == "graph" and not run.nodes.timed.any()


def test_a_spool_cut_short_or_damaged_keeps_the_frames_before(tmp_path, plain_program):
    # GIVEN two spools of 40 graphs written in several frames (20 ms between graphs)
    cut, damaged = tmp_path / "cut.ggmlviz", tmp_path / "damaged.ggmlviz"
    for output in (cut, damaged):
        assert _preload_by_hand([str(plain_program), "40", "20"], output).returncode == 0
    # WHEN one loses its last bytes (a crash in the middle of a write) and the other has a byte changed
    spool = next(cut.glob("spool/*.spool"))
    spool.write_bytes(spool.read_bytes()[:-30])
    broken = next(damaged.glob("spool/*.spool"))
    data = bytearray(broken.read_bytes())
    data[-300] ^= 0xFF  # in its last frame of graphs
    broken.write_bytes(bytes(data))
    # THEN each opens, incomplete, with the graphs of the whole frames before the cut or the damage
    run = ggml_viz.open(cut)
    assert run.status == "incomplete" and "bytes of a frame cut short" in run.manifest["incomplete_reason"]
    assert len(run.graphs) == 40  # only the last frame (the end of the process) was cut
    result = ggml_viz_cli("summary", str(damaged))
    assert result.returncode == 0 and "Traceback" not in result.stderr
    run = ggml_viz.open(damaged)
    assert run.status == "incomplete" and "the spool is damaged" in run.manifest["incomplete_reason"]
    assert 0 < len(run.graphs) < 40


def test_the_programs_own_callbacks_keep_being_called(tmp_path, plain_program):
    # GIVEN a program with an abort callback on its CPU backend and an eval callback on its
    # scheduler, which count their calls
    command = [str(plain_program), "4", "0", "callbacks"]
    expected = untraced(command)
    assert "abort calls 12, eval asks 12" in expected.stdout  # one per node
    output = tmp_path / "callbacks.ggmlviz"
    # WHEN ggml-viz records it (its eval callback and abort callback installed in their place)
    result = ggml_viz_cli("run", "-o", str(output), "--", *command)
    # THEN the program's callbacks are called as often as without ggml-viz, and the run is whole
    assert result.returncode == 0, result.stderr
    assert expected.stdout in result.stdout
    run = ggml_viz.open(output)
    assert len(run.graphs) == 4 and run.nodes.timed.all()


def test_the_event_bound_keeps_the_first_graphs_and_counts_the_rest(tmp_path, plain_program):
    # GIVEN a program computing five graphs of three nodes, 0.6 s apart (so the graphs reach the
    # spool in frames of their own), under a bound of seven node events
    output = tmp_path / "bounded.ggmlviz"
    result = ggml_viz_cli("run", "--max-events", "7", "-o", str(output), "--", str(plain_program), "5", "600")
    assert result.returncode == 0, result.stderr
    # THEN the run keeps the first two whole graphs and counts the three it dropped
    run = ggml_viz.open(output)
    assert len(run.graphs) == 2 and len(run.nodes) == 6
    counts = run.manifest["counts"]
    assert (counts["dropped_graphs"], counts["dropped_events"]) == (3, 9)
