"""The GPU check's table (benchmarks/gpu_check_table.py) without a GPU: claim by claim, the figure
and the PASS, FAIL or SKIP it prints, fed with what a GPU machine's steps leave (synthetic CUDA runs
of ggml-viz's run format, llama-bench's JSON, the CUPTI tally's records, whatif's JSON, the limits,
ggml-vulkan's perf logger) and with the CUPTI records of a real H200 run (tests/data/h200-q4_0)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.runformat.manifest import write_manifest
from ggml_viz.runformat.synthetic import write_synthetic_run

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import gpu_check_table as table  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "h200-q4_0"
TEXT = "The history of the city begins with a small settlement on the river, where the river"
ALL_STEPS = [
    *(f"dense-{s}" for s in ("untraced", "traced", "tally", "every", "bench")),
    *(f"{part}-{s}" for part in ("half", "moe") for s in ("traced", "whatif", "bench")),
    "f16-prompt",
    "limits",
    *(f"vulkan-{s}" for s in ("untraced", "traced", "logged", "bench")),
]


def _steps(work: Path, **status: tuple[str, str]) -> None:
    """steps.tsv as gpu_check.sh writes it: every step ok unless `status` names it (name: (status, reason))."""
    lines = []
    for name in ALL_STEPS:
        state, reason = status.get(name.replace("-", "_"), ("ok", ""))
        lines.append(f"{name}\t{state}\t3\t{reason}")
    (work / "steps.tsv").write_text("\n".join(lines) + "\n")


def _rows(text: str) -> dict[int, list[str]]:
    """The table's rows by number: [claim, measured, result]."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            rows[int(cells[0])] = cells[1:]
    return rows


def _bench(path: Path, rate: float, tokens: int = 512) -> None:
    """A llama-bench -o json result of one tg test, ggml-viz's line after it (as `ggml-viz run` leaves it)."""
    result = [{"n_prompt": 0, "n_gen": tokens, "n_gpu_layers": 99, "avg_ts": rate, "samples_ts": [rate, rate]}]
    path.write_text(json.dumps(result, indent=2) + "\nggml-viz: run written\n")


def _tally(run: ggml_viz.Run, folder: Path, scale: dict[str, float] | None = None) -> None:
    """The CUPTI tally of a program whose every step is `run`'s (a run whose every graph was traced):
    its records (start, end, device, stream, symbol) and its per-symbol tally; `scale` lengthens
    the kernels of some functions."""
    kernels = run.raw("gpu_kernels")
    kernels = kernels[kernels["kind"] == "kernel"]
    factor = kernels["kernel"].map(scale or {}).fillna(1.0)
    end = kernels["start_ns"] + ((kernels["end_ns"] - kernels["start_ns"]) * factor).astype("int64")
    records = pd.DataFrame(
        {"start": kernels["start_ns"], "end": end, "device": 0, "stream": 7, "symbol": kernels["name"]}
    )
    records.to_csv(folder / "tally-records.tsv", sep="\t", header=False, index=False)
    per_symbol = records.assign(ns=records["end"] - records["start"]).groupby("symbol")["ns"].agg(["size", "sum"])
    per_symbol.to_csv(folder / "tally.tsv", sep="\t", header=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A CUDA run of 12 decode steps as the default records it (every fourth graph traced), the
    same program with every graph traced (--gpu every: its kernels are every step's), and a
    llama-bench run whose manifest says what attaching the GPU timer cost."""
    folder = tmp_path_factory.mktemp("gpu-check-runs")
    paths = {
        "windows": write_synthetic_run(folder / "windows.ggmlviz", graphs=12, layers=2, gpu_every=4),
        "every": write_synthetic_run(folder / "every.ggmlviz", graphs=12, layers=2, gpu_every=1),
        "bench": write_synthetic_run(folder / "bench.ggmlviz", graphs=12, layers=2, gpu_every=4),
    }
    manifest = ggml_viz.open(paths["bench"]).manifest
    manifest["gpu"] = {**manifest["gpu"], "overhead_ns": 30_000_000, "windows": 5}
    write_manifest(paths["bench"], manifest)
    return paths


def _copy(run: Path, to: Path) -> None:
    import shutil

    shutil.copytree(run, to)


def _logger_stderr(run: ggml_viz.Run, skew: dict[str, float] | None = None) -> str:
    """GGML_VK_PERF_LOGGER's standard error for `run`: a report per graph, each op's GPU time (µs)
    from the run's own node times (`skew` scales some ops), under the logger's own names."""
    times = run.raw("gpu_node_times").merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    ops = times.merge(nodes, on=["structure_id", "node_index"]).merge(run.tensors[["tensor_id", "op"]], on="tensor_id")
    names = {"MUL_MAT": "MUL_MAT_VEC q4_0 m=576 n=1 k=576", "RMS_NORM": "RMS_NORM_MUL"}
    lines = []
    for _, graph in ops.groupby("graph_id"):
        lines.append("Vulkan Timings:")
        for op, ns in graph.groupby("op")["gpu_ns"].sum().items():
            total = ns / 1000 * (skew or {}).get(op, 1.0)
            lines.append(f"{names.get(op, op)}: 1 x {total:.1f} us = {total:.1f} us")
    return "llama_model_loader: loaded\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def work(runs, tmp_path_factory) -> Path:
    """A GPU machine's WORK: the dense claims' outputs, the half-layers run out of time, the MoE's
    whatif failed, the F16 prompt failed, the limits of an H200, Vulkan with a text that changed."""
    work = tmp_path_factory.mktemp("work")
    for part in ("dense", "half", "moe", "f16", "limits", "vulkan"):
        (work / part).mkdir()
    dense = work / "dense"
    (dense / "untraced.txt").write_text(TEXT)
    (dense / "traced.txt").write_text(TEXT)
    _copy(runs["windows"], dense / "traced.ggmlviz")
    _copy(runs["every"], dense / "every.ggmlviz")
    _tally(ggml_viz.open(runs["every"]), dense)
    (dense / "bench").mkdir()
    _bench(dense / "bench" / "untraced.1.json", 900.0)
    _bench(dense / "bench" / "default.1.json", 850.0)
    _bench(dense / "bench" / "untraced.2.json", 910.0)
    _bench(dense / "bench" / "default.2.json", 860.0)
    _copy(runs["bench"], dense / "bench" / "default.1.ggmlviz")
    limits = {
        "measurements": [
            {"device": "CPU", "threads": 1, "what": "memory_read", "type": None, "gb_per_s": 20.0, "gflop_per_s": None},
            {"device": "CUDA0", "threads": None, "what": "memory_read", "type": None, "gb_per_s": 4100.0},
            {
                "device": "CUDA0",
                "threads": None,
                "what": "matmul",
                "type": "F16",
                "gb_per_s": 9.0,
                "gflop_per_s": 650e3,
            },
        ]
    }
    (work / "limits" / "limits.json").write_text(json.dumps(limits))
    vulkan = work / "vulkan"
    (vulkan / "untraced.txt").write_text(TEXT)
    (vulkan / "traced.txt").write_text(TEXT.replace("river, where", "river; where"))
    _copy(runs["every"], vulkan / "logged.ggmlviz")
    (vulkan / "logged.err").write_text(_logger_stderr(ggml_viz.open(runs["every"])))
    (work / "machine.tsv").write_text("gpu\tNVIDIA H200\ndriver\t580.159.04\ncuda\t13.0\ncores\t16\nseconds\t571\n")
    out_of_time = ("skip", "out of time: 12s of the 540s budget left, the step needs ~40s")
    _steps(
        work,
        half_traced=out_of_time,
        half_whatif=out_of_time,
        half_bench=out_of_time,
        moe_traced=("ok", ""),
        moe_whatif=("fail", "exit 2: ggml-viz whatif: error: no run at moe/traced.ggmlviz"),
        moe_bench=("skip", "moe-whatif failed: exit 2"),
        f16_prompt=("fail", "exit 139: Segmentation fault"),
        vulkan_bench=("skip", "no NVIDIA Vulkan driver (no nvidia_icd.json)"),
    )
    return work


@pytest.fixture(scope="module")
def printed(work) -> dict[int, list[str]]:
    text = table.render(table.evaluate(work), table.read_machine(work), table.read_steps(work))
    assert text.startswith("## ggml-viz GPU check: NVIDIA H200, driver 580.159.04, CUDA 13.0, 16 cores, 571 s")
    return _rows(text)


def test_a_dense_run_s_claims_are_judged_from_its_runs_and_the_tally(printed):
    # the same text traced and untraced, every node of the traced steps timed by the GPU
    assert printed[1][1:] == ["84 characters, sha256 fd9c21f92f both", "PASS"]
    assert printed[2][1:] == ["120/120 nodes of 3 traced steps (CUDA0 120/120)", "PASS"]
    # op shares estimated from 3 traced steps of 12, against every kernel of every step
    assert printed[3][0].startswith("dense, every layer on the GPU: op shares (default run, estimated)")
    assert printed[3][1:] == [
        "largest difference 0.32 points (MUL_MAT); ggml-viz/tally %: MUL_MAT 83.8/83.5, ADD 3.1/3.1, RMS_NORM 3.1/3.1, "
        "ROPE 3.1/3.1",
        "PASS",
    ]
    # kernel shares of the run that traced every step, against the tally of the same kernels
    assert printed[4][1].startswith("largest difference 0.00 points") and printed[4][2] == "PASS"


def test_a_cost_above_the_goal_says_what_dominates(printed):
    # GIVEN tg512 at 900 and 910 tokens/s untraced, 850 and 860 under the default recording, whose
    # first round's run says the timer spent 30 ms attaching and detaching CUPTI in 5 windows
    assert printed[5][1] == "1.058x over 2 rounds (tg512: 905.0 untraced, 855.0 traced tokens/s)"
    # THEN the claim fails, and says where the 66 ms more of the traced process's 1,024 tokens went
    assert printed[5][2] == (
        "FAIL: above 1.05x: 66.2 ms more over 1024 tokens; the timer's attach/detach 30.0 ms in 5 windows, "
        "traced graphs' extra 0.1 ms, the rest 36.0 ms: the rest dominates"
    )


def test_skipped_and_failed_steps_give_their_reasons(printed):
    # the half-layers run was out of time: its five claims are SKIP with that reason
    for number in range(6, 11):
        assert printed[number][1:] == ["-", "SKIP: out of time: 12s of the 540s budget left, the step needs ~40s"]
    # the MoE run's whatif failed: FAIL where its claims read it, SKIP where a step after it did not run
    assert (
        printed[14][2] == "FAIL: step moe-whatif failed: exit 2: ggml-viz whatif: error: no run at moe/traced.ggmlviz"
    )
    assert (
        printed[15][2] == "FAIL: step moe-whatif failed: exit 2: ggml-viz whatif: error: no run at moe/traced.ggmlviz"
    )
    # its traced run is missing here: the claim cannot be judged, and says why
    assert printed[11][2].startswith("FAIL: could not be judged:")
    assert printed[16][2] == "FAIL: step f16-prompt failed: exit 139: Segmentation fault"
    assert printed[21][2] == "SKIP: no NVIDIA Vulkan driver (no nvidia_icd.json)"


def test_the_limits_stand_beside_the_published_figures(printed):
    assert printed[17][1:] == ["CUDA0 4.10 TB/s: 85% of H200 SXM's published 4.8 TB/s", "PASS"]
    assert printed[18][1:] == ["CUDA0 650.00 TFLOP/s: 66% of H200 SXM's published 989 TFLOP/s", "PASS"]


def test_vulkan_s_text_and_op_shares(printed):
    assert printed[19][1:] == [
        "84 / 84 characters, sha256 fd9c21f92f / 7bf2eebdc4",
        "FAIL: they differ from character 67",
    ]
    # the logger's report of each graph (its names: MUL_MAT_VEC, RMS_NORM_MUL) against the same steps' node times
    assert printed[20][1].startswith("10 decode steps; largest difference 0.01 points (MUL_MAT)")
    assert printed[20][2] == "PASS"


def test_a_machine_without_a_gpu_prints_every_claim_skipped(tmp_path):
    reason = "no NVIDIA GPU (nvidia-smi not found)"
    _steps(tmp_path, **{name.replace("-", "_"): ("skip", reason) for name in ALL_STEPS if "vulkan" not in name})
    lines = (tmp_path / "steps.tsv").read_text().replace("vulkan-untraced\tok\t3\t", "vulkan-untraced\tskip\t0\tno ICD")
    (tmp_path / "steps.tsv").write_text(lines.replace("\tok\t3\t\n", "\tskip\t0\tno ICD\n"))
    (tmp_path / "machine.tsv").write_text("cores\t2\nmode\tnone\nseconds\t15\n")
    text = table.render(table.evaluate(tmp_path), table.read_machine(tmp_path), table.read_steps(tmp_path))
    rows = _rows(text)
    assert text.startswith("## ggml-viz GPU check: no NVIDIA GPU, 2 cores, 15 s")
    assert len(rows) == len(table.CLAIMS) == 21
    assert all(rows[n][1:] == ["-", f"SKIP: {reason}"] for n in range(1, 19))
    assert all(rows[n][2] == "SKIP: no ICD" for n in range(19, 22))
    assert text.rstrip().endswith("0 PASS, 0 FAIL, 21 SKIP; steps: 0 ok, 0 failed, 17 skipped")


def test_op_shares_off_by_more_than_three_points_fail(runs, tmp_path):
    # GIVEN a tally whose rms_norm kernels took three times what the run's did
    run = ggml_viz.open(runs["windows"])
    _tally(ggml_viz.open(runs["every"]), tmp_path, scale={"rms_norm_f32": 3.0})
    records = table.tally_records(tmp_path / "tally-records.tsv")
    theirs = table.tally_op_shares(records, table.function_ops(run))
    result = table.shares_result(table.gpu_op_shares(run), theirs, ("ggml-viz", "tally"))
    # THEN RMS_NORM's share differs most, by more than 3 points
    assert result.verdict == "FAIL" and result.reason.startswith("RMS_NORM differs by ")
    # AND a kernel function the run never saw gets a row of its own
    unseen = pd.concat([records, records.head(1).assign(function="mystery", start_ns=0, end_ns=10**9)])
    shares = table.tally_op_shares(unseen, table.function_ops(run))
    assert shares["(kernels ggml-viz never saw)"] > 50


def test_busy_time_is_counted_once_and_given_to_the_kernel_running_first():
    # two kernels overlapping (programmatic dependent launch), one inside another, one alone on device 1
    records = pd.DataFrame(
        {"start_ns": [0, 80, 90, 300, 0], "end_ns": [100, 200, 150, 400, 50], "device": [0, 0, 0, 0, 1]}
    )
    assert table.busy_once(records).tolist() == [100, 100, 0, 100, 50]


def test_coverage_on_each_node_s_own_device():
    coverage = pd.DataFrame(
        {
            "graph_id": [0, 0, 0, 1, 1, 1],
            "node_index": [0, 1, 2, 0, 1, 2],
            "op": ["GET_ROWS", "MUL_MAT", "ADD"] * 2,
            "device": ["CPU", "CUDA0", "CUDA0"] * 2,
            "host_timed": [True, False, False, False, False, False],
            "gpu_timed": [False, True, True, False, True, True],
        }
    )
    # the second step's CPU node has no ticks: untimed, whether or not its device counts
    for own in (False, True):
        result = table.coverage_result(coverage, own)
        assert result.figure == "5/6 nodes of 2 traced steps (CPU 1/2, CUDA0 4/4)"
        assert result.verdict == "FAIL" and result.reason.endswith("GET_ROWS 1")
    # a CPU node the GPU's records claim is not timed on its own device
    coverage.loc[3, "gpu_timed"] = True
    assert table.coverage_result(coverage).verdict == "PASS"
    assert table.coverage_result(coverage, True).reason == "1 untimed on their own device: GET_ROWS 1"
    assert table.coverage_result(coverage.iloc[:0]).reason == "no traced step: the GPU timer traced no graph"


def test_each_device_s_parts_add_up_to_the_step():
    steps = pd.DataFrame(
        [(7, "decode", 0, 100_000, 5_000, 95_000)],
        columns=["graph_id", "phase", "start_ns", "end_ns", "compute_start_ns", "compute_end_ns"],
    )
    activity = pd.DataFrame(
        [
            (7, 0, "CPU", "compute", 0, "MUL_MAT", 10_000, 40_000),
            (7, 2, "CUDA0", "compute", 1, "MUL_MAT", 40_000, 80_000),
            (7, -1, "CUDA0", "transfer", None, "memcpy", 80_000, 90_000),
        ],
        columns=["graph_id", "node_index", "device", "kind", "layer", "op", "start_ns", "end_ns"],
    )
    result = table.breakdown_result(steps, activity)
    assert result == (
        "PASS",
        "1 steps x 2 devices, parts within 0.00% of the step; decode step 0.100 ms: CUDA0 busy 40%, CPU busy 30%",
        "",
    )
    one_device = table.breakdown_result(steps, activity[activity["device"] == "CUDA0"])
    assert one_device == ("FAIL", "devices computing: CUDA0", "fewer than two devices in the steps")


def test_transfers_need_their_split_and_plausible_bytes():
    copies = pd.DataFrame({"graph_id": [1, 1, 2], "bytes": [8192, 4, 8192], "kind": "memcpy", "node_index": -1})
    bound = pd.Series({1: 8192, 2: 8192})
    figure = "3 transfers in 2 of 2 steps, 4 B to 8.0 KiB (largest activation 8.0 KiB)"
    assert table.transfer_result(copies, bound, 2) == ("FAIL", figure, "no split column")
    with_split = copies.assign(split=[12, -1, 12])
    assert table.transfer_result(with_split, bound, 2) == ("PASS", figure + "; split named for 2", "")
    too_big = with_split.assign(bytes=[8192, 4, 1 << 30])
    assert table.transfer_result(too_big, bound, 2).reason == "1 transfers larger than their step's largest activation"
    empty = table.transfer_result(copies.iloc[:0], bound, 2)
    assert empty == ("FAIL", "2 traced steps", "no transfer (a copy of no node) in them")
    assert table.transfer_result(with_split.assign(bytes=[0, 4, 8]), bound, 2).reason == "1 transfers of no bytes"


def test_whatif_s_predictions_against_llama_bench():
    whatif = {
        "n_layer": 22,
        "check": {
            "decode": {"predicted_tokens_per_s": 101.0, "measured_tokens_per_s": 100.0, "ratio": 1.01},
            "prompt": {"predicted_tokens_per_s": 980.0, "measured_tokens_per_s": 1000.0, "ratio": 0.98},
        },
        "predictions": [
            {"ngl": 11, "n_cpu_moe": 0, "recorded": True, "decode_tokens_per_s": 101.0, "prompt_tokens_per_s": 980.0},
            {"ngl": 0, "n_cpu_moe": 0, "recorded": False, "decode_tokens_per_s": 60.0, "prompt_tokens_per_s": 500.0},
            {"ngl": 23, "n_cpu_moe": 0, "recorded": False, "decode_tokens_per_s": 800.0, "prompt_tokens_per_s": 9e3},
        ],
    }
    bench = [
        {"n_gpu_layers": ngl, "n_cpu_moe": 0, "n_prompt": prompt, "n_gen": 32 * (not prompt), "avg_ts": rate}
        for ngl, prompt, rate in ((0, 16, 520.0), (0, 0, 62.0), (11, 0, 104.0), (99, 0, 790.0), (99, 16, 9.5e3))
    ]
    check, predicted = table.placement_results(whatif, bench, "ngl")
    assert check.verdict == "PASS" and check.figure.startswith("decode 101.0 predicted, 100.0 measured (+1.0%)")
    assert predicted == (
        "PASS",
        "predicted/measured by ngl: prompt 0 0.96, 23 0.95; decode 0 0.97, 11 0.97, 23 1.01",
        "",
    )
    bench[1]["avg_ts"] = 90.0  # -ngl 0 decoding far faster than predicted
    _, off = table.placement_results(whatif, bench, "ngl")
    assert off.verdict == "FAIL" and off.reason == "decode at ngl 0: 0.67 (within 15% asked)"
    whatif["check"]["decode"]["ratio"] = 1.05
    assert table.placement_results(whatif, bench, "ngl")[0].reason == "off by 5.0% (at most 3%)"


def test_a_prompt_through_cublas():
    kernels = pd.DataFrame(
        {
            "graph_id": [0, 0, 0, 0],
            "node_index": [3, 3, 4, -1],
            "kind": ["kernel", "kernel", "kernel", "memcpy"],
            "kernel": ["convert_unary", "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "k_bin_bcast", "HtoD"],
            "name": ["", "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "", ""],
        }
    )
    cublas = "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"
    figure = f"3/3 kernels attributed in 1 graphs (largest 512 tokens); cuBLAS 1/1 ({cublas})"
    assert table.cublas_result(kernels, 512) == ("PASS", figure, "")
    unattributed = kernels.assign(node_index=[3, -1, 4, -1])
    assert table.cublas_result(unattributed, 512).reason.startswith("unattributed: nvjet_hsh")
    assert table.cublas_result(kernels.iloc[[0, 2]], 512).reason == "no cuBLAS kernel ran"


def test_limits_far_from_the_published_figure_or_of_an_unknown_part():
    limits = {"measurements": [{"device": "CUDA0", "what": "memory_read", "gb_per_s": 1900.0}]}
    bandwidth, peak = table.limits_results(limits, "NVIDIA H100 80GB HBM3")
    assert bandwidth == (
        "FAIL",
        "CUDA0 1.90 TB/s: 57% of H100 SXM's published 3.35 TB/s",
        "outside 60% to 100% of the published read bandwidth",
    )
    assert peak.verdict == "FAIL" and peak.reason == "limits measured no GPU peak (1 GPU rows)"
    assert table.limits_results(limits, "NVIDIA A100-SXM4-80GB")[0] == (
        "SKIP",
        "CUDA0 1.90 TB/s",
        "no published figure for NVIDIA A100-SXM4-80GB",
    )
    assert table.published("NVIDIA H100 PCIe")[0] == "H100 PCIe" and table.published("NVIDIA H200 NVL")[0] == "H200 NVL"


def test_vulkan_op_shares_off_from_the_logger_fail(runs):
    run = ggml_viz.open(runs["every"])
    result = table.vulkan_share_result(run, _logger_stderr(run, skew={"MUL_MAT": 0.5}))
    assert result.verdict == "FAIL" and "MUL_MAT differs by" in result.reason
    assert table.vulkan_share_result(run, "no report\n").reason == "0 perf-logger reports, 10 later decode steps"


def test_the_greedy_text_compared_byte_for_byte():
    assert table.text_result("", "x") == ("FAIL", "", "the untraced program printed no text")
    assert table.text_result("abc", "abd").reason == "they differ from character 2"


@pytest.mark.llama_cpp  # collecting the spool loads ggml
def test_an_h200_run_against_the_cupti_records_of_another(tmp_path):
    # GIVEN ggml-viz's default recording of llama-completion on an H200 (128 tokens, its GPU windows)
    # and the CUPTI records of every kernel of an untraced run of the same program (64 tokens)
    run_dir = tmp_path / "completion.ggmlviz"
    (run_dir / "spool").mkdir(parents=True)
    (run_dir / "spool" / "2570.spool").write_bytes(gzip.decompress((DATA / "completion-windows.spool.gz").read_bytes()))
    run = ggml_viz.open(run_dir)
    lines = gzip.decompress((DATA / "kernels.csv.gz").read_bytes()).decode().splitlines()
    fields = [line.split(",", 7) for line in lines]  # K,start,end,graph,graph node,correlation,stream,name
    records = pd.DataFrame(
        {"start": [int(f[1]) for f in fields], "end": [int(f[2]) for f in fields], "device": 0, "stream": 7}
    ).assign(symbol=[f[7] for f in fields])
    records.to_csv(tmp_path / "records.tsv", sep="\t", header=False, index=False)
    # THEN the op shares ggml-viz estimates from 6 traced graphs agree with every kernel's
    theirs = table.tally_op_shares(table.tally_records(tmp_path / "records.tsv"), table.function_ops(run))
    shares = table.shares_result(table.gpu_op_shares(run), theirs, ("ggml-viz", "tally"))
    assert shares.verdict == "PASS" and shares.figure.startswith("largest difference 0.85 points (MUL_MAT)")
    # AND the checks that this recording fails say why: the CPU's embedding lookup had no ticks
    # (recorded before a CPU split beside CUDA was timed by them), and no transfer names the split
    # it feeds (recorded before the splits' ends were marked)
    traced = table.traced_graphs(run)
    coverage = table.coverage_result(table.node_coverage(run, traced), True)
    assert coverage == (
        "FAIL",
        "2,538/2,544 nodes of 6 traced steps (CPU 0/6, CUDA0 2,538/2,538)",
        "6 untimed on their own device: GET_ROWS 6",
    )
    transfers = table.transfer_result(table.step_transfers(run, traced), table.activation_bound(run, traced), 6)
    assert transfers.reason == "no transfer names the split it feeds" and transfers.figure.startswith(
        "42 transfers in 6 of 6 steps, 4 B to 128.0 KiB"
    )
    # AND with programmatic dependent launch overlapping the kernels, busy time counted once is less
    # than their summed durations
    tallied = table.tally_records(tmp_path / "records.tsv")
    busy, summed = table.busy_once(tallied).sum(), (tallied["end_ns"] - tallied["start_ns"]).sum()
    assert 0.5 < busy / summed < 0.95


def test_a_reference_that_failed_leaves_its_claims_unjudged(tmp_path):
    # GIVEN the CUPTI tally (no ggml-viz in it) failed, and ggml-viz's --gpu every run too
    _steps(
        tmp_path,
        dense_tally=("fail", "exit 1: gpu_kernel_tally: CUPTI refused"),
        dense_every=("fail", "exit 134: Aborted"),
    )
    claims = {claim.key: claim for claim in table.evaluate(tmp_path)}
    # THEN the op shares are SKIP, the reference missing; the kernel shares FAIL, ggml-viz's step failed
    assert (claims["dense.ops"].verdict, claims["dense.ops"].reason) == (
        "SKIP",
        "the reference could not be measured: step dense-tally failed: exit 1: gpu_kernel_tally: CUPTI refused",
    )
    assert (claims["dense.kernels"].verdict, claims["dense.kernels"].reason) == (
        "FAIL",
        "step dense-every failed: exit 134: Aborted",
    )
