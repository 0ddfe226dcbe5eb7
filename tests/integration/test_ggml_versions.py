"""Programs on other ggml versions than llama-cpp-python's: the plain ggml program built against
whisper.cpp 1.8.5's ggml (0.13.1) is recorded with that ggml's own op and type names; a ggml whose
ggml_tensor ggml-viz does not read, or that lacks a function ggml-viz calls, leaves the program
untraced and unchanged, with one line that names the ggml found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import backends

from .native import Ggml, build_plain_program, compile_native, llama_cpp_ggml, untraced, whisper_cpp_ggml
from .smollm2 import ggml_viz_cli


@pytest.fixture(scope="module")
def whisper_ggml() -> Ggml:
    return whisper_cpp_ggml()


@pytest.fixture(scope="module")
def program_on_whisper_ggml(tmp_path_factory, whisper_ggml) -> Path:
    return build_plain_program(tmp_path_factory.mktemp("ggml-0.13"), whisper_ggml)


def test_a_program_on_whisper_cpps_ggml_is_recorded_with_that_ggmls_op_names(
    tmp_path, whisper_ggml, program_on_whisper_ggml
):
    # GIVEN the plain program built against whisper.cpp 1.8.5's ggml, whose op numbers are not
    # llama-cpp-python's (ops were added before UNARY since): read with the wrong ggml, RELU
    # would be named as another op
    assert whisper_ggml.version() == "0.13.1"
    assert whisper_ggml.op_number("UNARY") != llama_cpp_ggml().op_number("UNARY")
    expected = untraced([str(program_on_whisper_ggml)])
    output = tmp_path / "ggml-0.13.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", str(program_on_whisper_ggml))
    # THEN the program's output and exit status are its own, and nothing is said of its ggml
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected.stdout
    assert "untraced" not in result.stderr
    # AND its three graphs are recorded, each node named, typed, timed, with its ops named by its ggml
    run = ggml_viz.open(output)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert len(run.graphs) == 3
    nodes = run.nodes
    assert nodes.groupby("graph_id").name.apply(list).tolist() == [["product", "sum", "output"]] * 3
    assert nodes.groupby("graph_id").op.apply(list).tolist() == [["MUL_MAT", "ADD", "RELU"]] * 3
    assert nodes.groupby("graph_id").op_base.apply(list).tolist() == [["MUL_MAT", "ADD", "UNARY"]] * 3
    assert set(nodes.type) == {"f32"} and nodes.timed.all() and (nodes.duration_ns > 0).all()
    product = run.edges[(run.edges.graph_id == 0) & (run.edges.node_index == 0)]
    assert product.src_name.tolist() == ["layer.weight", "input"]
    # AND its buffers and backend are as its ggml named them
    buffers = run.buffers.set_index("usage")
    assert buffers.loc["compute", "buffer_type"] == "CPU" and buffers.loc["any", "size"] >= (64 * 32 + 32 + 64 * 4) * 4
    assert backends(run) == ["CPU"]
    # AND the manifest names the ggml the program ran with
    assert run.manifest["versions"]["ggml"]["version"] == "0.13.1"
    ggml_library = run.manifest["program"]["ggml_library"]
    assert Path(ggml_library).resolve() == whisper_ggml.base_library.resolve()


def test_a_scripts_programs_on_two_ggml_versions_are_each_read_with_their_own(tmp_path, program_on_whisper_ggml):
    # GIVEN a script running the plain program on ggml 0.13.1, then on llama-cpp-python's ggml
    program_on_llama_ggml = build_plain_program(tmp_path, llama_cpp_ggml())
    output = tmp_path / "two-versions.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli(
        "run", "-o", str(output), "--", "sh", "-c", f"{program_on_whisper_ggml} && {program_on_llama_ggml}"
    )
    assert result.returncode == 0, result.stderr
    # THEN each program's graphs are there, their ops named by the ggml each ran with
    run = ggml_viz.open(output)
    assert len(run.manifest["contexts"]) == 2 and len(run.graphs) == 6
    ops = run.nodes.merge(run.graphs[["graph_id", "context_id"]]).groupby("context_id").op.apply(set)
    assert ops.tolist() == [{"MUL_MAT", "ADD", "RELU"}] * 2


def ggml_viz_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ggml-viz")]


def test_a_ggml_with_another_tensor_layout_leaves_the_program_untraced_and_unchanged(tmp_path):
    # GIVEN a script running the plain program and exiting with 3, on a ggml built with longer
    # tensor names (GGML_MAX_NAME=128: its ggml_tensor is 400 bytes, not the 336 ggml-viz reads)
    ggml = llama_cpp_ggml()
    program = build_plain_program(tmp_path, ggml)
    longer_names = compile_native(
        "longer_names_ggml.c", tmp_path / "liblonger_names_ggml.so", "-shared", f"-I{ggml.include}"
    )
    script = ["sh", "-c", f"{program}; exit 3"]
    expected = untraced(script, preload=longer_names)
    output = tmp_path / "other-layout.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", *script, env={**os.environ, "LD_PRELOAD": str(longer_names)})
    # THEN the program's output is unchanged, byte for byte, and its exit status passes through
    assert result.stdout == expected.stdout and expected.stdout.count(": sum ") == 3
    assert result.returncode == expected.returncode == 3
    # AND one line says why, naming the ggml found; no run is written
    assert ggml_viz_messages(result.stderr) == [
        f"ggml-viz: this program's ggml {ggml.version()} ({ggml.base_library}) is not one ggml-viz reads: it lays "
        "out ggml_tensor in 400 bytes, ggml-viz expects 336; the program runs untraced"
    ]
    assert not output.exists()


@pytest.fixture
def early_ggml_program(tmp_path) -> Path:
    """A program on a ggml from before ggml_op_desc and ggml_version (a stand-in libggml-base)."""
    compile_native("early_ggml.c", tmp_path / "libggml-base.so", "-shared")
    return compile_native(
        "early_ggml_program.c",
        tmp_path / "early_ggml_program",
        f"-L{tmp_path}",
        "-lggml-base",
        f"-Wl,-rpath,{tmp_path}",
    )


def test_a_ggml_without_a_function_ggml_viz_calls_leaves_the_program_untraced(tmp_path, early_ggml_program):
    # GIVEN a program on a ggml without ggml_op_desc and ggml_version, that exits with 3
    expected = untraced([str(early_ggml_program)])
    output = tmp_path / "early.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", str(early_ggml_program))
    # THEN its output and exit status are its own
    assert result.returncode == expected.returncode == 3
    assert result.stdout == expected.stdout == "computed: 0\n"
    # AND one line names what its ggml lacks, of an unknown version; no run is written
    assert ggml_viz_messages(result.stderr) == [
        f"ggml-viz: this program's ggml of unknown version ({tmp_path / 'libggml-base.so'}) lacks functions "
        "ggml-viz calls: ggml_op_desc; the program runs untraced"
    ]
    assert not output.exists()


def test_a_run_notes_the_processes_that_ran_untraced(tmp_path, early_ggml_program):
    # GIVEN a script that runs the plain program on llama-cpp-python's ggml, then a program on an
    # early ggml ggml-viz cannot read
    program = build_plain_program(tmp_path, llama_cpp_ggml())
    script = ["sh", "-c", f"{program} && {early_ggml_program}"]
    output = tmp_path / "mixed.ggmlviz"
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", *script)
    # THEN the script's exit status is the second program's
    assert result.returncode == 3
    # AND the run holds the first program's graphs, and names the process that ran untraced and why
    run = ggml_viz.open(output)
    assert run.status == "complete" and len(run.graphs) == 3
    (note,) = run.manifest["program"]["untraced"]
    assert note["argv"] == [str(early_ggml_program)] and note["ggml_version"] is None
    assert note["reason"].endswith("lacks functions ggml-viz calls: ggml_op_desc")
    assert len([line for line in ggml_viz_messages(result.stderr) if "untraced" in line]) == 1
