"""Do recorded node times say where the time goes? Checked against `perf`'s samples.

One process generates with SmolLM2-135M (3 generations of 64 tokens, greedy) while
ggml-viz records it (op detail, inline timing: the defaults) and `perf record` samples it.
Per op, two independent shares:

- recorded: the op's work in the run, each node's time less its wait at the barrier for
  the other threads (`duration_ns - wait_ns`), over all ops' work;
- sampled: perf's samples in the op's kernels in libggml-cpu (by symbol: ggml_vec_dot_* is
  a matrix multiplication, ggml_compute_forward_rope* a rope, ...), over all samples the
  kernel map attributes to an op.

Samples in OpenMP's barrier (libgomp) are the threads' waits, shown apart; samples in a
kernel two ops share (fp32 to fp16 conversion: a matrix multiplication's input or a KV cache
write) and in ggml-cpu code without a symbol are counted and left out of both sides' shares.
Runs at 1 thread (no barrier) and 2. Targets: MUL_MAT within 3 points at both; no op above
1 % of the work at more than twice its sampled share.

    python benchmarks/fidelity.py                 # 1 and 2 threads
    python benchmarks/fidelity.py --threads 2 --tokens 128
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

GENERATION = """
import sys
import ggml_viz
from llama_cpp import Llama
from ggml_viz.modelfile.locate import default_model_path

run, threads, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with ggml_viz.record(run, overwrite=True):
    llm = Llama(model_path=str(default_model_path()), n_ctx=512, n_threads=threads, n_threads_batch=threads,
                seed=0, verbose=False)
    for _ in range(3):
        llm("The history of the printing press begins", max_tokens=tokens, temperature=0.0)
"""

# ggml-cpu's kernels, by symbol, and the op (ggml's base op name, as the run's op_base) they
# compute; the first match wins. Kernels of a name not listed go by their
# ggml_compute_forward_<op> entry point.
KERNELS = (
    (r"^ggml_compute_forward_rms_norm_mul_fused", "RMS_NORM"),  # the fused pair, recorded on the norm
    (r"^ggml_cpu_fp32_to_fp16|^ggml_cpu_fp16_to_fp32|^ggml_vec_scale|^ggml_vec_cpy", "(shared kernels)"),
    (r"^ggml_vec_dot_|^ggml_gemv_|^ggml_gemm_|^quantize_row_q|^quantize_mat_|mul_mat|repack|sgemm|tinyblas", "MUL_MAT"),
    (r"^ggml_vec_soft_max|^ggml_vec_max_f32", "SOFT_MAX"),
    (r"^ggml_vec_swiglu|^ggml_vec_geglu|^ggml_vec_reglu", "GLU"),
    (r"rope", "ROPE"),
    (r"^ggml_vec_add", "ADD"),
    (r"^ggml_barrier", "(barrier wait)"),
    (r"^ggml_compute_forward_(?P<op>[a-z0-9_]+?)(_f32|_f16|_bf16|_q\w+|_non_quantized|_one_chunk)*$", None),
)
OUTSIDE = "(other ggml-cpu)"


def op_of_symbol(symbol: str) -> str:
    for pattern, op in KERNELS:
        match = re.search(pattern, symbol)
        if match:
            return op if op is not None else match.group("op").upper()
    return OUTSIDE


def sampled_shares(perf_data: Path) -> pd.Series:
    """Samples per op (and the barrier, shared kernels, unattributed ggml-cpu code)."""
    report = subprocess.run(
        ["perf", "report", "-i", str(perf_data), "--no-children", "--sort", "dso,symbol", "--stdio", "-q", "-n",
         "-t", "\t"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    samples: dict[str, int] = {}
    for line in report.splitlines():
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) < 4:
            continue
        count, dso, symbol = int(fields[1]), fields[2], fields[3].removeprefix("[.] ").strip()
        if dso.startswith("libgomp"):
            op = "(barrier wait)"
        elif dso.startswith("libggml-cpu"):
            op = OUTSIDE if symbol.startswith("0x") else op_of_symbol(symbol)
        else:
            continue
        samples[op] = samples.get(op, 0) + count
    return pd.Series(samples, dtype=float)


def recorded_shares(run_dir: Path) -> tuple[pd.Series, pd.Series, float]:
    """Per op: work (time less wait) and time, in ns; and the share of time that was waiting."""
    import ggml_viz

    nodes = ggml_viz.open(run_dir).nodes
    nodes = nodes[nodes.timed]
    wait = nodes["wait_ns"].fillna(0).astype("int64")
    work = (nodes["duration_ns"].astype("int64") - wait).groupby(nodes["op_base"]).sum()
    time = nodes["duration_ns"].astype("int64").groupby(nodes["op_base"]).sum()
    return work.astype(float), time.astype(float), float(wait.sum() / time.sum())


def measure(threads: int, tokens: int, folder: Path) -> pd.DataFrame:
    script = folder / "generate.py"
    script.write_text(GENERATION)
    run_dir, perf_data = folder / f"t{threads}.ggmlviz", folder / f"t{threads}.perf"
    subprocess.run(
        ["perf", "record", "-q", "-F", "1999", "-o", str(perf_data), "--", sys.executable, str(script),
         str(run_dir), str(threads), str(tokens)],
        check=True, capture_output=True,
    )  # fmt: skip
    sampled = sampled_shares(perf_data)
    work, time, wait_share = recorded_shares(run_dir)
    ops = sorted(set(work.index) | {op for op in sampled.index if not op.startswith("(")})
    attributed = sampled.reindex(ops).fillna(0)
    table = pd.DataFrame({
        "recorded work %": 100 * work.reindex(ops).fillna(0) / work.sum(),
        "sampled %": 100 * attributed / attributed.sum(),
        "recorded time %": 100 * time.reindex(ops).fillna(0) / time.sum(),
    })  # fmt: skip
    table = table[(table.max(axis=1) >= 0.05)].sort_values("sampled %", ascending=False)
    ggml_samples = sampled.sum() - sampled.get("(barrier wait)", 0)
    print(f"\n{threads} thread(s): {int(sampled.sum())} samples in ggml-cpu and libgomp; "
          f"barrier wait {100 * sampled.get('(barrier wait)', 0) / sampled.sum():.1f} % of them "
          f"(recorded: {100 * wait_share:.1f} % of node time); left out of the shares: shared kernels "
          f"{100 * sampled.get('(shared kernels)', 0) / ggml_samples:.1f} %, ggml-cpu code without a symbol "
          f"{100 * sampled.get(OUTSIDE, 0) / ggml_samples:.1f} %")  # fmt: skip
    print(table.round(2).to_string())
    return table


def verdict(threads: int, table: pd.DataFrame) -> list[str]:
    failures = []
    gap = abs(table.loc["MUL_MAT", "recorded work %"] - table.loc["MUL_MAT", "sampled %"])
    if gap > 3:
        failures.append(f"{threads} thread(s): MUL_MAT recorded and sampled shares differ by {gap:.1f} points")
    big = table[(table["recorded work %"] > 1) & (table["recorded work %"] > 2 * table["sampled %"])]
    for op, row in big.iterrows():
        failures.append(f"{threads} thread(s): {op} recorded at {row['recorded work %']:.2f} % of work, "
                        f"sampled at {row['sampled %']:.2f} %")  # fmt: skip
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=64, help="tokens per generation (3 generations)")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: linux-perf)")
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        for threads in args.threads:
            failures += verdict(threads, measure(threads, args.tokens, Path(folder)))
    print("\n" + ("\n".join(failures) if failures else "targets met: MUL_MAT within 3 points; no op above 1 % at "
                                                          "more than twice its sampled share"))  # fmt: skip
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
