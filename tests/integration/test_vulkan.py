"""GPU node times on Vulkan, from the GPU's own timestamps: llama.cpp's Vulkan build run on
lavapipe (Mesa's Vulkan device in software) through ggml-viz's Vulkan layer, checked against
ggml-vulkan's own clock (GGML_VK_PERF_LOGGER: a timestamp after every node, untraced)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import ggml_viz

from .arch_models import write_model
from .smollm2 import ggml_viz_cli
from .vulkan import environment, ggml_op_of, perf_logger_reports, vulkan_llama_folder

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
N_PREDICT = 12


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("vulkan") / "tiny-llama.gguf", "llama").path


def completion(model, n_predict: int = N_PREDICT) -> list[str]:
    """llama-completion of the Vulkan build, every layer on the GPU, greedy, no warm-up graph."""
    program = vulkan_llama_folder() / "bin" / "llama-completion"
    return [str(program), "-m", str(model), "-p", PROMPT, "-n", str(n_predict), "-ngl", "99", "--temp", "0",
            "--ignore-eos", "-no-cnv", "--no-warmup", "-t", "2", "-c", "256", "--seed", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def untraced_with_perf_logger(tiny_model):
    """The program run without ggml-viz, ggml-vulkan's perf logger on."""
    result = subprocess.run(completion(tiny_model), env=environment(GGML_VK_PERF_LOGGER="1"), capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def traced(tiny_model, tmp_path_factory):
    """The program run under ggml-viz, every graph traced on the GPU (--gpu every)."""
    output = tmp_path_factory.mktemp("vulkan-run") / "vulkan.ggmlviz"
    result = ggml_viz_cli("run", "--gpu", "every", "-o", str(output), "--", *completion(tiny_model),
                          env=environment())  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result, ggml_viz.open(output)


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


def test_per_op_shares_agree_with_ggml_vulkans_own_clock(traced, untraced_with_perf_logger):
    _, run = traced
    # GIVEN the same decode steps timed by ggml-viz's layer and, untraced, by GGML_VK_PERF_LOGGER
    # (skipping the prompt's graph and the first decode step: a pipeline's first use compiles it)
    reports = perf_logger_reports(untraced_with_perf_logger.stderr)
    assert len(reports) == N_PREDICT, len(reports)  # the prompt's graph and N_PREDICT - 1 decode steps
    times = run.raw("gpu_node_times").merge(run.graphs[["graph_id", "phase", "structure_id", "start_ns"]],
                                            on="graph_id")  # fmt: skip
    decode = times[times["phase"] == "decode"]
    later = sorted(decode["graph_id"].unique())[1:]
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    ops = run.tensors[["tensor_id", "op"]]
    mine = (
        decode[decode["graph_id"].isin(later)]
        .merge(nodes, on=["structure_id", "node_index"])
        .merge(ops, on="tensor_id")
    )
    ours = mine.groupby("op")["gpu_ns"].sum()
    theirs: dict[str, float] = {}
    for report in reports[2:]:
        for name, total in report.items():
            op = ggml_op_of(name, set(ops["op"]))
            theirs[op] = theirs.get(op, 0.0) + total
    shares = pd.DataFrame({"ours": ours / ours.sum(), "theirs": pd.Series(theirs) / sum(theirs.values())}).fillna(0)
    # THEN every op above 2 % of either has the same share within 3 points
    big = shares[(shares["ours"] > 0.02) | (shares["theirs"] > 0.02)]
    assert len(big) >= 3, shares
    differences = (big["ours"] - big["theirs"]).abs()
    assert (differences <= 0.03).all(), shares.sort_values("theirs", ascending=False).to_string()


def test_greedy_text_is_the_same_traced(traced, tiny_model):
    result, _ = traced
    # GIVEN the program's own output untraced (no perf logger, no layer)
    plain = subprocess.run(completion(tiny_model), env=environment(), capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
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
    code = ("from llama_cpp import Llama\n"
            f"llm = Llama(model_path={str(tiny_model)!r}, n_gpu_layers=99, n_ctx=256, verbose=False, seed=0)\n"
            f"print(llm({PROMPT!r}, max_tokens=4, temperature=0)['choices'][0]['text'])\n")  # fmt: skip
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
