"""GPU node times on Vulkan, from the GPU's own timestamps: llama.cpp's Vulkan build run on
lavapipe (Mesa's Vulkan device in software) through ggml-viz's Vulkan layer, checked against
ggml-vulkan's own clock (GGML_VK_PERF_LOGGER: a timestamp after every node, untraced)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.runformat.reader import Run

from ..vulkan_perf_log import ggml_op_of, perf_logger_reports
from .arch_models import write_model
from .smollm2 import ggml_viz_cli
from .vulkan import environment, vulkan_llama_folder

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
N_PREDICT = 12
ROUNDS = 4


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("vulkan") / "tiny-llama.gguf", "llama").path


def completion(model, n_predict: int = N_PREDICT) -> list[str]:
    """llama-completion of the Vulkan build, every layer on the GPU, greedy, no warm-up graph."""
    program = vulkan_llama_folder() / "bin" / "llama-completion"
    return [
        str(program),
        "-m",
        str(model),
        "-p",
        PROMPT,
        "-n",
        str(n_predict),
        "-ngl",
        "99",
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "--no-warmup",
        "-t",
        "2",
        "-c",
        "256",
        "--seed",
        "0",
    ]


@pytest.fixture(scope="module")
def warm_shader_cache(tiny_model) -> None:
    """One untraced run before any that is measured. lavapipe compiles each pipeline to machine code
    at its first dispatch, on the GPU's timeline, and keeps it in Mesa's disk cache
    (~/.cache/mesa_shader_cache), written by a thread of its own: with that cache empty (a fresh
    home), the first graph took 54 s of GPU time here instead of 0.14 s. Later runs load the code."""
    untraced_run(tiny_model, timeout=600)


@pytest.fixture(scope="module")
def traced(tiny_model, tmp_path_factory, warm_shader_cache):
    """The program run under ggml-viz, every graph traced on the GPU (--gpu every)."""
    return traced_run(tiny_model, tmp_path_factory.mktemp("vulkan-run"))


def untraced_run(model, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess[str]:
    """The program run without ggml-viz (with `extra` in its environment), checked to succeed."""
    result = subprocess.run(
        completion(model), env=environment(**extra), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def traced_run(model, folder, **extra: str) -> tuple[subprocess.CompletedProcess[str], Run]:
    output = folder / "vulkan.ggmlviz"
    result = ggml_viz_cli(
        "run", "--gpu", "every", "-o", str(output), "--", *completion(model), env=environment(**extra)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, ggml_viz.open(output)


@pytest.fixture(scope="module")
def logged_rounds(tiny_model, tmp_path_factory, warm_shader_cache):
    """ROUNDS rounds, each a run traced by ggml-viz and one untraced, both with ggml-vulkan's perf
    logger on (GGML_VK_PERF_LOGGER=1: a timestamp after every node, and a barrier), interleaved.
    lavapipe's op shares move from one process to the next by themselves (RMS_NORM 13.5 to 16.5 %
    over five untraced runs here, nothing else running): one run of each side can differ by more
    than the bound, the mean of several cannot."""
    traced_runs, untraced = [], []
    for _ in range(ROUNDS):
        traced_runs.append(traced_run(tiny_model, tmp_path_factory.mktemp("logged"), GGML_VK_PERF_LOGGER="1"))
        untraced.append(untraced_run(tiny_model, GGML_VK_PERF_LOGGER="1"))
    return traced_runs, untraced


def our_later_decode_times(run: Run) -> pd.Series:
    """GPU time by op over the decode steps after the first (a pipeline's first use may compile it)."""
    times = run.raw("gpu_node_times").merge(run.graphs[["graph_id", "phase", "structure_id"]], on="graph_id")
    decode = times[times["phase"] == "decode"]
    later = decode[decode["graph_id"].isin(sorted(decode["graph_id"].unique())[1:])]
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    mine = later.merge(nodes, on=["structure_id", "node_index"]).merge(run.tensors[["tensor_id", "op"]], on="tensor_id")
    return mine.groupby("op")["gpu_ns"].sum().astype(float)


def logged_later_decode_times(stderr: str, ops: set[str]) -> pd.Series:
    """The perf logger's time by ggml op over the same steps: its reports after the prompt's and
    the first decode step's (fused groups credited to their first op, as ggml-viz credits them)."""
    reports = perf_logger_reports(stderr)
    assert len(reports) == N_PREDICT, len(reports)  # the prompt's graph and N_PREDICT - 1 decode steps
    theirs: dict[str, float] = {}
    for report in reports[2:]:
        for name, total in report.items():
            op = ggml_op_of(name, ops)
            theirs[op] = theirs.get(op, 0.0) + total
    return pd.Series(theirs, dtype=float)


def share_differences(ours: pd.Series, theirs: pd.Series) -> tuple[pd.Series, pd.DataFrame]:
    """Each op's share of ours less its share of theirs, for the ops above 2 % of either."""
    shares = pd.DataFrame({"ours": ours / ours.sum(), "theirs": theirs / theirs.sum()}).fillna(0)
    big = shares[(shares["ours"] > 0.02) | (shares["theirs"] > 0.02)]
    assert len(big) >= 3, shares
    return (big["ours"] - big["theirs"]).abs(), shares.sort_values("theirs", ascending=False)


def test_every_vulkan_node_gets_the_gpus_time(traced):
    result, run = traced
    # GIVEN llama-completion computing on a Vulkan device, recorded with --gpu every
    gpu = run.manifest["gpu"]
    # THEN the Vulkan layer timed it: no problem, and every dispatch found its node
    assert gpu["timer"] == "vulkan" and gpu["problem"] is None
    assert gpu["vulkan_layer"].endswith("libggml_viz_vulkan_layer.so")
    assert gpu["kernels"] > 0 and gpu["attributed_kernels"] == gpu["kernels"]
    assert gpu["traced_graphs"] == len(run.graphs) and gpu["unattributed_graphs"] == 0
    # AND each GPU node's time is the GPU's: on the device's clock, in the same tables as CUDA's
    totals = run.node_totals
    on_gpu = totals[totals["buffer_name"].fillna("").str.startswith("Vulkan") & (totals["op"] != "NONE")]
    timed = on_gpu[on_gpu["clock"] == "gpu"]
    assert len(timed) and (timed["est_ns"] > 0).all()
    kernels = run.gpu_kernels
    assert (kernels["end_ns"] >= kernels["start_ns"]).all() and (kernels["busy_ns"] >= 0).all()
    # the kernels are named as ggml-vulkan names its pipelines (its debug markers)
    names = set(kernels.loc[kernels["kind"] == "kernel", "name"])
    assert any(name.startswith("mul_mat") for name in names), names
    # AND a node's kernels ran within its graph's host-side compute (one clock: CLOCK_MONOTONIC)
    graphs = run.graphs.set_index("graph_id")
    first = kernels[kernels["graph_id"] >= 0].groupby("graph_id")["start_ns"].min()
    assert (first.to_numpy() >= graphs.loc[first.index, "decode_start_ns"].to_numpy()).all()
    # AND the summary says where the times come from
    assert "Vulkan timestamp queries" in ggml_viz_cli("summary", str(run.path)).stdout.replace("\n", " ")


def test_per_op_shares_agree_with_ggml_vulkans_own_clock_in_the_same_process(logged_rounds):
    traced_runs, _ = logged_rounds
    for result, run in traced_runs:
        # GIVEN the same decode steps of one traced process timed by ggml-viz's layer and by
        # ggml-vulkan's perf logger (skipping the prompt's graph and the first decode step)
        ours = our_later_decode_times(run)
        theirs = logged_later_decode_times(result.stderr, set(run.tensors["op"]))
        # THEN every op above 2 % of either has the same share within 1.5 points (0.2 to 0.6 seen)
        differences, shares = share_differences(ours, theirs)
        assert (differences <= 0.015).all(), shares.to_string()


def test_per_op_shares_traced_agree_with_ggml_vulkans_own_clock_untraced(logged_rounds):
    traced_runs, untraced = logged_rounds
    # GIVEN the decode steps of ROUNDS traced runs timed by ggml-viz's layer, and of ROUNDS untraced
    # runs timed by ggml-vulkan's perf logger, each side summed over its runs
    ops = set(traced_runs[0][1].tensors["op"])
    ours = pd.concat([our_later_decode_times(run) for _, run in traced_runs]).groupby(level=0).sum()
    theirs = pd.concat([logged_later_decode_times(plain.stderr, ops) for plain in untraced]).groupby(level=0).sum()
    # THEN every op above 2 % of either has the same share within 3 points: tracing moves none
    differences, shares = share_differences(ours, theirs)
    assert (differences <= 0.03).all(), shares.to_string()


def test_greedy_text_is_the_same_traced(traced, tiny_model):
    result, _ = traced
    # GIVEN the program's own output untraced (no perf logger, no layer)
    plain = untraced_run(tiny_model)
    # THEN the traced run printed the same text: the layer changed nothing the program computes
    assert plain.stdout.strip() and result.stdout == plain.stdout


def test_a_layer_that_cannot_load_leaves_graph_times(tiny_model, tmp_path):
    # GIVEN the loader told to leave ggml-viz's layer out (as a loader that refuses it would)
    output = tmp_path / "no-layer.ggmlviz"
    env = environment(VK_LOADER_LAYERS_DISABLE="VK_LAYER_GGMLVIZ_timer")
    result = ggml_viz_cli("run", "-o", str(output), "--", *completion(tiny_model, 3), env=env)
    # THEN the program ran to its end, and one message says why GPU times are off
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "GPU node times are off" in line]
    assert len(said) == 1 and "Vulkan layer is not in this process" in said[0], result.stderr[-3000:]
    # AND the run is complete, its graphs timed whole, with no GPU table
    run = ggml_viz.open(output)
    assert run.status == "complete" and len(run.graphs) == 3
    assert "Vulkan layer" in run.manifest["gpu"]["problem"] and not run.has_gpu_times


@pytest.mark.parametrize("how", ["start-up hook", "ggml-viz run"])
def test_a_python_program_on_vulkan(tiny_model, tmp_path, how):
    # GIVEN llama-cpp-python loading the Vulkan build's libraries, recorded by the start-up hook
    # (GGML_VIZ_OUTPUT), or by `ggml-viz run -- python` (the preload library in the process too)
    output = tmp_path / "python.ggmlviz"
    code = (
        "from llama_cpp import Llama\n"
        f"llm = Llama(model_path={str(tiny_model)!r}, n_gpu_layers=99, n_ctx=256, verbose=False, seed=0)\n"
        f"print(llm({PROMPT!r}, max_tokens=4, temperature=0)['choices'][0]['text'])\n"
    )
    env = environment(LLAMA_CPP_LIB_PATH=str(vulkan_llama_folder() / "lib"))
    if how == "start-up hook":
        env.update(GGML_VIZ_OUTPUT=str(output), GGML_VIZ_GPU="every")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    else:
        result = ggml_viz_cli("run", "--gpu", "every", "-o", str(output), "--", sys.executable, "-c", code, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "eval callback" not in result.stderr, result.stderr[-3000:]  # the graphs were read at the compute call
    # THEN its graphs have the GPU's node times too, with their tokens
    run = ggml_viz.open(output)
    gpu = run.manifest["gpu"]
    assert gpu["timer"] == "vulkan" and gpu["problem"] is None
    assert gpu["kernels"] > 0 and gpu["attributed_kernels"] == gpu["kernels"]
    assert run.has_gpu_times and len(run.tokens)


def test_shown_as_cudas_is(traced, tmp_path):
    _, run = traced
    # GIVEN the traced run opened for the viewer
    from ggml_viz.ui.context import RunContext
    from ggml_viz.ui.gpu import gpu_of
    from ggml_viz.ui.views.overview import gpu_overview

    gpu = gpu_of(RunContext("vulkan", run.path))
    # THEN its GPU lane and overview name the Vulkan device and where its times come from
    assert gpu is not None and gpu.devices == ["Vulkan0"]
    assert [lane["label"] for lane in gpu.lanes] == ["Vulkan0 · GPU (Vulkan timestamp queries)"]
    overview = gpu_overview(gpu)
    assert overview["source"] == "Vulkan timestamp queries" and overview["steps"][0]["device"] == "Vulkan0"
    # AND the Chrome trace export has the GPU's kernels on their own track
    trace = tmp_path / "vulkan.json"
    result = ggml_viz_cli("export", str(run.path), "-o", str(trace))
    assert result.returncode == 0, result.stderr
    import json

    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    kernels = [e for e in events if e.get("cat") == "gpu" and e.get("ph") == "X"]
    assert len(kernels) == int((run.gpu_kernels["graph_id"] >= 0).sum())
