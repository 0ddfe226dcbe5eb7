"""The GPU check's table (benchmarks/gpu.sh runs it): what recording costs llama-bench on CUDA,
where ggml-viz says the GPU's time went beside an independent tally of CUPTI's kernels, GPU
busy per decode step against llama-bench's own rate, and whether the text stayed the same.

    python benchmarks/gpu_report.py WORK_DIR
    python benchmarks/gpu_report.py --texts FOLDER     (only: are the texts there identical?)

WORK_DIR as gpu.sh leaves it: bench/CONFIG.ROUND.json (llama-bench -o json), runs/*.ggmlviz,
tally.tsv (gpu_kernel_tally.c on an untraced llama-completion), text/*.txt.
"""

from __future__ import annotations

import csv
import hashlib
import json
import statistics
import sys
from pathlib import Path

import pandas as pd

from ggml_viz import open as open_run
from ggml_viz.capture.gpu.kernel_names import kernel_function

CONFIGS = {
    "untraced": "untraced",
    "graph": "--detail graph (graphs read at compute, no CUPTI)",
    "nocupti": "op detail, --gpu off (as where no libcupti is found)",
    "windows": "default: op detail, GPU windows",
    "keep": "windows, CUPTI kept attached (GGML_VIZ_GPU_DETACH=0)",
    "every": "--gpu every (every graph traced)",
    "sync": "--timing sync (each node alone)",
}


def main() -> None:
    if sys.argv[1] == "--texts":
        texts(Path(sys.argv[2]))
        return
    work = Path(sys.argv[1])
    overhead(work / "bench")
    for run in sorted((work / "runs").glob("*.ggmlviz")):
        gpu_figures(run)
    tally = work / "tally.tsv"
    every = work / "runs" / "completion-every.ggmlviz"
    if tally.exists() and every.exists():
        kernel_shares(every, tally)
    texts(work / "text")


def overhead(bench: Path) -> None:
    rates: dict[str, list[float]] = {}
    prompt: dict[str, list[float]] = {}
    for path in sorted(bench.glob("*.json")):
        config = path.name.split(".")[0]
        try:
            results = bench_results(path)
        except (OSError, ValueError) as error:
            print(f"  {path.name}: no result ({error})")
            continue
        for result in results:
            (rates if result["n_gen"] > 0 else prompt).setdefault(config, []).append(float(result["avg_ts"]))
    if "untraced" not in rates:
        print("no untraced llama-bench result: no overhead table")
        return
    base = statistics.median(rates["untraced"])
    print("\nllama-bench tg (tokens/s), rounds alternating; ratio = untraced median / configuration median")
    print(f"{'configuration':56s} {'tg per round':28s} {'median':>8s} {'ratio':>7s}")
    for config, label in CONFIGS.items():
        if config in rates:
            median = statistics.median(rates[config])
            runs = ", ".join(f"{r:.0f}" for r in rates[config])
            print(f"{label:56s} {runs:28s} {median:8.1f} {base / median:7.3f}")
    if prompt:
        print("pp (tokens/s): " + "; ".join(f"{c} {statistics.median(v):.0f}" for c, v in prompt.items()))


def bench_results(path: Path) -> list[dict]:
    """llama-bench's results (`-o json`) in `path`, perhaps followed by ggml-viz's lines."""
    results, _ = json.JSONDecoder().raw_decode(path.read_text().lstrip())
    return list(results)


def gpu_figures(path: Path) -> None:
    try:
        run = open_run(path)
    except Exception as error:  # noqa: BLE001 - a run that failed is reported, the others still are
        print(f"\n{path.name}: not readable: {error}")
        return
    gpu = run.manifest.get("gpu") or {}
    print(f"\n{path.name}: {len(run.graphs)} graphs; GPU timer: {json.dumps(gpu, default=str)[:600]}")
    graphs = run.raw("gpu_graphs")
    if graphs.empty:
        return
    phases = run.graphs[["graph_id", "phase", "start_ns", "end_ns"]].rename(
        columns={"start_ns": "host_start", "end_ns": "host_end"}
    )
    graphs = graphs.merge(phases, on="graph_id")
    mapping = graphs["mapping"].value_counts().to_dict()
    print(f"  traced graphs by how their kernels mapped to nodes: {mapping}")
    kernels = run.raw("gpu_kernels")
    is_kernel = kernels["kind"] == "kernel"
    attributed = (kernels["node_index"] >= 0) & is_kernel
    print(
        f"  kernels {int(is_kernel.sum())}, attributed to a node {int(attributed.sum())} "
        f"({100 * attributed.sum() / max(is_kernel.sum(), 1):.1f} %)"
    )
    decode = graphs[graphs["phase"] == "decode"]
    if len(decode):
        busy = decode["busy_ns"].median() / 1e6
        span = (decode["end_ns"] - decode["start_ns"]).median() / 1e6
        host = (decode["host_end"] - decode["host_start"]).median() / 1e6
        print(
            f"  decode step (median of {len(decode)} traced): GPU busy {busy:.3f} ms, GPU span {span:.3f} ms, "
            f"host {host:.3f} ms (GPU idle {100 * (1 - busy / host):.1f} % of the host's time)"
        )
    ops = op_shares(run)
    if len(ops):
        print("  GPU time by op, decode graphs (ggml-viz: gpu_node_times):")
        for op, share in ops.head(10).items():
            print(f"    {op:20s} {share:6.2f} %")


def op_shares(run: object) -> pd.Series:
    times = run.raw("gpu_node_times")  # type: ignore[attr-defined]
    graphs = run.graphs[["graph_id", "structure_id", "phase"]]  # type: ignore[attr-defined]
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]  # type: ignore[attr-defined]
    ops = run.raw("tensors")[["tensor_id", "op"]]  # type: ignore[attr-defined]
    joined = (
        times.merge(graphs, on="graph_id").merge(nodes, on=["structure_id", "node_index"]).merge(ops, on="tensor_id")
    )
    decode = joined[joined["phase"] == "decode"]
    total = decode["gpu_ns"].sum()
    return (decode.groupby("op")["gpu_ns"].sum() * 100 / max(total, 1)).sort_values(ascending=False)


def read_tally(path: Path) -> pd.DataFrame:
    """gpu_kernel_tally.c's tally: per kernel symbol, how many ran and their summed durations
    (symbol, count, ns; the line of records CUPTI dropped, if any, left out)."""
    tally = pd.read_csv(path, sep="\t", header=None, names=["symbol", "count", "ns"], quoting=csv.QUOTE_NONE)
    return tally[tally["symbol"] != "(dropped records)"]


def kernel_share_table(kernels: pd.DataFrame, tally: pd.DataFrame) -> pd.DataFrame:
    """Kernel time by function, % of all kernel time (end - start summed): ggml-viz's gpu_kernels
    (`ggml-viz`) beside the tally (`tally`, read_tally), the tally's largest first."""
    kernels = kernels[kernels["kind"] == "kernel"]
    ours = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["kernel"]).sum()
    theirs = tally.groupby(tally["symbol"].map(kernel_function))["ns"].sum()
    table = pd.DataFrame({"ggml-viz": ours * 100 / ours.sum(), "tally": theirs * 100 / theirs.sum()}).fillna(0)
    return table.sort_values("tally", ascending=False)


def kernel_shares(every: Path, tally_path: Path) -> None:
    table = kernel_share_table(open_run(every).raw("gpu_kernels"), read_tally(tally_path))
    print(
        "\nkernel time by function, % of all kernel time (end - start summed): ggml-viz's gpu_kernels "
        "(--gpu every) beside an independent CUPTI tally of an untraced run (gpu_kernel_tally.c)"
    )
    for name, row in table.head(14).iterrows():
        print(f"  {str(name)[:44]:44s} {row['ggml-viz']:7.2f} {row['tally']:7.2f}")


def texts(folder: Path) -> None:
    digests = {path.stem: hashlib.sha256(path.read_bytes()).hexdigest()[:12] for path in sorted(folder.glob("*.txt"))}
    if digests:
        same = len(set(digests.values())) == 1
        print(f"\ngenerated text, greedy: {digests} -> {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
