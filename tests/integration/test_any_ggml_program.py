"""Any ggml program, the rest of the way: ggml's own compute path (ggml_graph_compute with a plan,
ggml_graph_compute_with_ctx, a CPU backend's graph plan), programs that find ggml with dlsym
(ggml-python, a ctypes program of our own), and ggml of 2024 (ggml-python 0.0.37's, gpt4all
2.8.2's llama.cpp), each run by `ggml-viz run` as a user would, its output unchanged and its graphs
recorded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import backends
from ggml_viz.runformat.reader import Run

from .arch_models import ModelSpec, write_model
from .native import (
    PROGRAMS,
    build_simple_ctx_program,
    compile_native,
    ggml_python,
    ggml_python_ggml,
    gpt4all_folder,
    untraced,
)
from .smollm2 import ggml_viz_cli

RUNS = 20
NAMES = ["product", "sum", "relu", "output"]  # y = relu(W x + b) * 0.5, in every program below
OPS = ["MUL_MAT", "ADD", "RELU", "SCALE"]


def traced(tmp_path: Path, program: list[str], *options: str, extra_env: dict[str, str] | None = None):
    """The program run untraced, then under `ggml-viz run`: both results, and the run."""
    expected = untraced(program, extra_env=extra_env)
    assert expected.returncode == 0, expected.stderr
    output = tmp_path / "program.ggmlviz"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")}
    result = ggml_viz_cli("run", *options, "-o", str(output), "--", *program, env={**env, **(extra_env or {})})
    assert result.returncode == 0, result.stderr
    assert output.exists(), result.stderr
    return expected, result, ggml_viz.open(output)


def assert_graph_recorded(run: Run, timed: bool) -> None:
    """RUNS graphs of the four nodes, each graph after the first a repeat of its structure; node
    times (if `timed`) inside their graph's span."""
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    assert len(run.graphs) == RUNS
    assert run.graphs["structure_id"].nunique() == 1  # computed again, unchanged: one structure
    nodes = run.nodes
    assert nodes.groupby("graph_id").name.apply(list).tolist() == [NAMES] * RUNS
    assert nodes.groupby("graph_id").op.apply(list).tolist() == [OPS] * RUNS
    product = run.edges[(run.edges.graph_id == 0) & (run.edges.node_index == 0)]
    assert product.src_name.tolist() == ["layer.weight", "input"]
    assert backends(run) == ["CPU"]
    assert bool(nodes.timed.all()) == timed
    if timed:
        spans = nodes.merge(run.graphs[["graph_id", "start_ns", "end_ns"]], on="graph_id", suffixes=("", "_graph"))
        assert (spans.duration_ns > 0).all()
        assert (spans.start_ns >= spans.start_ns_graph).all() and (spans.end_ns <= spans.end_ns_graph).all()


# -- ggml's own compute path, in a C program --------------------------------------------------------


@pytest.fixture(scope="module")
def simple_ctx(tmp_path_factory) -> Path:
    return build_simple_ctx_program(tmp_path_factory.mktemp("simple-ctx"))


@pytest.mark.parametrize("mode", ["with_ctx", "plan", "abort", "backend_plan"])
def test_a_program_on_ggmls_own_compute_path_is_recorded_node_by_node(tmp_path, simple_ctx, mode):
    # GIVEN a simple-ctx-style C program: tensors in a ggml context, no scheduler, computed 20 times
    # by ggml_graph_compute_with_ctx, by ggml_graph_compute with a plan of its own (with an abort
    # callback of its own), or by a CPU backend's graph plan
    # WHEN ggml-viz runs it
    expected, result, run = traced(tmp_path, [str(simple_ctx), str(RUNS), mode])
    # THEN its output is its own (its abort callback called as often: once per node)
    assert result.stdout == expected.stdout
    assert ("abort calls 80" in result.stdout) == (mode == "abort")
    # AND its 20 graphs are recorded, named and timed node by node from the CPU's ticks
    assert_graph_recorded(run, timed=True)
    context = run.manifest["contexts"][0]
    assert context["kind"] == "ggml" and context["compute"] == "ggml_graph_compute"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("GGML_VIZ_DETAIL", "nodes", "GGML_VIZ_DETAIL=nodes: choose one of op|graph"),
        ("GGML_VIZ_READ_GRAPHS", "never", "GGML_VIZ_READ_GRAPHS=never: choose one of compute|callback"),
        ("GGML_VIZ_GPU_WINDOW", "0", "GGML_VIZ_GPU_WINDOW=0: a whole number, 1 or more"),
        ("GGML_VIZ_CAPTURE_BYTES", "-1", "GGML_VIZ_CAPTURE_BYTES=-1: a whole number, 0 or more"),
    ],
)
def test_a_setting_the_preload_library_is_given_wrong_leaves_the_program_untraced_saying_why(
    tmp_path, simple_ctx, variable, value, said
):
    from ggml_viz.capture.preload.library import preload_path

    # GIVEN the preload library put into a program by hand (not through `ggml-viz run`, which checks
    # the settings itself), with a setting the settings' declarations refuse
    program = [str(simple_ctx), "2", "with_ctx"]
    expected = untraced(program)
    run_dir = tmp_path / "run"
    result = untraced(program, preload=preload_path(), extra_env={"GGML_VIZ_OUTPUT": str(run_dir), variable: value})
    # THEN the program's output is its own, and the library says which setting is wrong and how
    assert result.returncode == 0 and result.stdout == expected.stdout
    assert said in result.stderr and "the program runs untraced" in result.stderr


# -- programs that find ggml with dlsym --------------------------------------------------------------


def test_a_ctypes_program_of_our_own_is_recorded_through_dlsym(tmp_path):
    # GIVEN a Python program that loads llama-cpp-python's ggml with ctypes.CDLL (RTLD_LOCAL) and
    # computes with ggml_graph_compute_with_ctx, each function looked up with dlsym
    # WHEN ggml-viz runs it
    expected, result, run = traced(tmp_path, [sys.executable, str(PROGRAMS / "ctypes_ggml.py"), str(RUNS)])
    # THEN its output is its own, and its graphs are recorded node by node
    assert result.stdout == expected.stdout
    assert_graph_recorded(run, timed=True)


@pytest.mark.parametrize("mode", ["backend", "with_ctx"])
def test_a_ggml_python_program_is_recorded(tmp_path, mode):
    # GIVEN ggml-python 0.0.45 (ctypes bindings with their own libggml*.so, ggml 0.15.3) computing
    # a graph 20 times on a CPU backend, or with ggml_graph_compute_with_ctx
    folder = ggml_python("0.0.45")
    program = [sys.executable, str(PROGRAMS / "ggml_python_graph.py"), mode, str(RUNS)]
    # WHEN ggml-viz runs it
    expected, result, run = traced(tmp_path, program, extra_env={"PYTHONPATH": str(folder)})
    # THEN its output is its own, and its graphs are recorded node by node with ggml-python's ggml
    assert result.stdout == expected.stdout
    assert_graph_recorded(run, timed=True)
    assert Path(run.manifest["program"]["ggml_library"]).is_relative_to(folder)


def test_ggml_pythons_own_test_suite_passes_traced_as_untraced(tmp_path):
    # GIVEN ggml-python 0.0.45's own tests of its CPU path (graphs by ggml_graph_compute_with_ctx,
    # by a CPU backend, custom ops, gradients)
    folder = ggml_python("0.0.45")
    suite = [str(folder / "tests" / name) for name in ("test_ggml.py", "test_utils.py")]
    program = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suite]
    # WHEN ggml-viz runs the suite
    expected, result, run = traced(tmp_path, program, extra_env={"PYTHONPATH": str(folder)})
    # THEN the same tests pass
    summary = [line for line in result.stdout.splitlines() if " passed" in line]
    assert summary and summary[-1].split(" in ")[0] == expected.stdout.splitlines()[-1].split(" in ")[0]
    # AND the graphs they computed are in the run, timed node by node
    assert run.status == "complete" and len(run.graphs) >= 5
    assert run.nodes.timed.all() and (run.nodes.duration_ns >= 0).all()


def test_dlsym_rtld_next_still_finds_the_next_library_for_other_callers(tmp_path):
    # GIVEN a program whose first library looks up the next definition of a function with
    # dlsym(RTLD_NEXT) (as an interposing library does), which only its caller's address decides
    first = compile_native("next_symbol.c", tmp_path / "libfirst.so", "-shared", "-fPIC", "-DFIRST", "-ldl")
    second = compile_native("next_symbol.c", tmp_path / "libsecond.so", "-shared", "-fPIC")
    program = compile_native(
        "next_symbol_program.c",
        tmp_path / "next_symbol",
        "-Wl,--no-as-needed",
        str(first),
        str(second),
        f"-Wl,-rpath,{tmp_path}",
    )
    # WHEN ggml-viz runs it (its dlsym in the process)
    result = ggml_viz_cli("run", "-o", str(tmp_path / "next.ggmlviz"), "--", str(program))
    # THEN the lookup still finds the second library's definition, as it does untraced
    assert untraced([str(program)]).stdout == result.stdout == "next: 2\n"


# -- ggml of 2024 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["backend", "with_ctx"])
def test_a_program_on_a_ggml_of_early_2024_is_recorded_with_graph_times(tmp_path, mode):
    # GIVEN ggml-python 0.0.37 (May 2024): its ggml_tensor is 368 bytes, with the backend, grad and
    # perf fields, and its CPU threads end no node at a barrier
    folder = ggml_python("0.0.37")
    program = [sys.executable, str(PROGRAMS / "ggml_python_graph.py"), mode, str(RUNS)]
    assert "ggml_tensor 368 bytes" in untraced(program, extra_env={"PYTHONPATH": str(folder)}).stdout
    # WHEN ggml-viz runs it
    expected, result, run = traced(tmp_path, program, extra_env={"PYTHONPATH": str(folder)})
    # THEN its output is its own, and its graphs are recorded with that layout read field by field:
    # names, ops, sources, shapes
    assert result.stdout == expected.stdout
    assert run.manifest["capture"]["tensor_layout"].startswith("2024 H1")
    assert_graph_recorded(run, timed=False)
    product = run.nodes[(run.nodes.graph_id == 0) & (run.nodes.name == "product")].iloc[0]
    assert (product["ne0"], product["ne1"], product["type"], product["nbytes"]) == (32, 4, "f32", 32 * 4 * 4)
    # AND it says why its nodes have no times of their own
    reason = run.manifest["capture"]["untimed_reason"]
    assert "before August 2024" in reason and "--timing sync" in reason
    summary = ggml_viz_cli("summary", str(tmp_path / "program.ggmlviz")).stdout
    assert "before August 2024" in " ".join(summary.split())


def test_a_c_program_on_a_ggml_of_early_2024_is_recorded(tmp_path):
    # GIVEN the simple-ctx program built against ggml-python 0.0.37's ggml (one libggml, 2024 H1)
    program = build_simple_ctx_program(tmp_path, ggml_python_ggml("0.0.37"))
    # WHEN ggml-viz runs it, computing with ggml_graph_compute and a plan of its own
    expected, result, run = traced(tmp_path, [str(program), str(RUNS), "plan"])
    # THEN its output is its own and its graphs are there, with graph times
    assert result.stdout == expected.stdout
    assert_graph_recorded(run, timed=False)
    assert (run.graphs.end_ns > run.graphs.start_ns).all()


@pytest.fixture(scope="module")
def gpt4all_model(tmp_path_factory) -> ModelSpec:
    return write_model(tmp_path_factory.mktemp("gpt4all") / "tiny-llama.gguf", "llama")


@pytest.mark.parametrize("timing", ["inline", "sync"])
def test_gpt4all_generates_the_same_text_traced_and_is_recorded(tmp_path, gpt4all_model, timing):
    # GIVEN gpt4all 2.8.2 (its llama.cpp of mid-2024: ggml_tensor with `grad`; two copies of that
    # llama.cpp loaded, for AVX2 and AVX only) generating 16 tokens greedily from a tiny llama
    folder = gpt4all_folder()
    program = [sys.executable, str(PROGRAMS / "gpt4all_generate.py"), str(gpt4all_model.path), "16"]
    # WHEN ggml-viz runs it (by default, and timing nodes one by one)
    expected, result, run = traced(tmp_path, program, "--timing", timing, extra_env={"PYTHONPATH": str(folder)})
    # THEN the text is the same
    assert result.stdout == expected.stdout and result.stdout.strip()
    # AND its llama calls are recorded: a prompt graph, then a graph per generated token, with the
    # model's layers' nodes and the tokens fed
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    assert run.manifest["capture"]["tensor_layout"] == "2024 (with grad)"
    phases = run.graphs["phase"].value_counts()
    assert phases.get("prompt", 0) >= 1 and phases.get("decode", 0) >= 14
    first = run.nodes_of(int(run.graphs.graph_id.iloc[0]))
    assert {"MUL_MAT", "RMS_NORM", "ROPE", "SOFT_MAX"} <= set(first.op) or {"MUL_MAT", "RMS_NORM", "ROPE"} <= set(
        first.op
    )
    assert first.layer.max() == gpt4all_model.n_layers - 1
    tokens = run.tokens  # with their text, read through the model (this llama.cpp has no vocabulary API)
    prompt = tokens[tokens.graph_id == run.graphs.graph_id.iloc[0]]
    assert "".join(prompt.text).strip().endswith("The capital of France is")
    assert len(tokens) >= len(prompt) + 14 and (tokens.token_id >= 0).all()
    # AND nodes are timed only where asked one by one (this ggml's threads give no node boundaries)
    assert bool(run.nodes.timed.all()) == (timing == "sync")
    if timing == "sync":
        assert (run.nodes.duration_ns > 0).mean() > 0.5
    # AND its calls ran in the library gpt4all chose (the AVX2 one, loaded second), not in the copy for
    # AVX only that it loaded first to probe the model, which the context names
    assert Path(run.manifest["contexts"][0]["library"]).name == "libllamamodel-mainline-kompute.so"


def test_programs_that_compute_nothing_say_what_was_seen(tmp_path, simple_ctx):
    # GIVEN a Python program that loads no ggml, and a ggml program that exits before computing
    # (an unknown mode: its usage line, exit status 2)
    python = [sys.executable, "-c", "print('hello')"]
    native = [str(simple_ctx), "3", "nonsense"]
    for program, status, words in [
        (python, 0, f"{sys.executable} (a Python program) computed no ggml graph that ggml-viz saw"),
        (native, 2, f"{simple_ctx} computed no ggml graph that ggml-viz saw"),
    ]:
        output = tmp_path / "nothing.ggmlviz"
        # WHEN ggml-viz runs it
        result = ggml_viz_cli("run", "-o", str(output), "--", *program)
        # THEN its output and exit status are its own, no run is written, and one line says so, in
        # the words that fit the program
        expected = untraced(program)
        assert (result.returncode, result.stdout) == (
            expected.returncode,
            expected.stdout,
        ) and result.returncode == status
        assert not output.exists()
        said = [line for line in result.stderr.splitlines() if line.startswith("ggml-viz:")]
        assert len(said) == 1 and words in said[0], result.stderr
