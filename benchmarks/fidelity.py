"""Do recorded node times say where the time goes? Checked against `perf`'s samples.

llama.cpp's own llama-completion generates 192 tokens greedily with SmolLM2-135M under
`ggml-viz run` (op detail, inline timing: the defaults) while `perf record` samples the
whole process tree. (llama-completion, not the Python package: `make setup` builds its
libraries with their symbol tables, so perf can name ggml-cpu's static kernels, such as
the rope's; the wheel's are stripped.) Per op, two independent shares:

- recorded: the op's work in the run, each node's time less its wait at the barrier for
  the other threads (`duration_ns - wait_ns`), over all ops' work;
- sampled: perf's samples in the op's kernels in libggml-cpu, on ggml's thread 0 (the
  program's main thread, whose time the recorder measures) and on all threads (by symbol: ggml_vec_dot_* is
  a matrix multiplication, ggml_compute_forward_rope_flt a rope, ...), over all samples the
  kernel map attributes to an op. Flash attention is off (`-fa off`, llama-cpp-python's
  default): its kernel calls the matrix multiplication's dot products, which perf's flat
  samples could not tell apart.

Samples in the barrier (libgomp, ggml_barrier) are the threads' waits, and samples in
ggml-cpu's graph loop and in kernels two ops share (fp32 to fp16 conversion: a matrix
multiplication's input or a KV cache write) belong to no op: all are counted and shown,
and left out of both sides' shares. Runs at 1 thread (no barrier) and 2. Targets: MUL_MAT
within 3 points at both; no op above 1 % of the work at more than twice its sampled share
(thread 0's: across all threads, an op one thread computes alone, such as a one-row norm
while decoding, shows half its wall-clock share).

    python benchmarks/fidelity.py                 # 1 and 2 threads
    python benchmarks/fidelity.py --threads 2 --tokens 256 --keep /tmp/fidelity
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

PROMPT = "The history of the printing press begins in the fifteenth century, when the"


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
    (r"^ggml_graph_compute|^ggml_compute_forward$", "(graph loop)"),
    (r"^ggml_compute_forward_(?P<op>[a-z0-9_]+?)(_f32|_f16|_bf16|_q\w+|_non_quantized|_one_chunk)*$", None),
)
OUTSIDE = "(other ggml-cpu)"


def op_of_symbol(symbol: str) -> str:
    symbol = re.split(r"[<(.]", symbol, maxsplit=1)[0]  # no template arguments, parameters or .isra suffix
    for pattern, op in KERNELS:
        match = re.search(pattern, symbol)
        if match:
            return op if op is not None else match.group("op").upper()
    return OUTSIDE


def sampled_samples(perf_data: Path) -> pd.DataFrame:
    """Samples per (thread id, op): ops, the barrier, shared kernels, ggml-cpu's loop and
    its code without a symbol."""
    report = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(perf_data),
            "--no-children",
            "--sort",
            "pid,dso,symbol",
            "--stdio",
            "-q",
            "-n",
            "-t",
            "\t",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in report.splitlines():
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) < 5:
            continue
        count, thread, dso, symbol = int(fields[1]), fields[2], fields[3], fields[4].removeprefix("[.] ").strip()
        if dso.startswith("libgomp"):
            op = "(barrier wait)"
        elif dso.startswith("libggml-cpu"):
            op = OUTSIDE if symbol.startswith("0x") else op_of_symbol(symbol)
        else:
            continue
        rows.append((int(thread.split(":")[0]), op, count))
    return pd.DataFrame(rows, columns=["tid", "op", "samples"])


def recorded_shares(run_dir: Path) -> tuple[pd.DataFrame, float]:
    """Per op, in ns: work (time less wait), time, and what the time would be if nodes
    ended at ggml's callback (before the barrier: each node then holds the wait for the
    previous node's stragglers); and the share of time that was waiting."""
    import ggml_viz

    nodes = ggml_viz.open(run_dir).nodes
    nodes = nodes[nodes.timed].sort_values(["graph_id", "node_index"])
    duration = nodes["duration_ns"].astype("int64")
    wait = nodes["wait_ns"].fillna(0).astype("int64")
    # a node without work of its own (a view) has no callback: it sits where the one before it ended
    at_callback = (nodes["end_ns"].astype("int64") - wait).where(duration > 0)
    at_callback = at_callback.groupby(nodes["graph_id"]).ffill().fillna(nodes["start_ns"].astype("int64"))
    previous = at_callback.groupby(nodes["graph_id"]).shift(1).fillna(nodes["start_ns"].astype("int64"))
    per_op = pd.DataFrame({"work": duration - wait, "time": duration, "ending at the callback": at_callback - previous})
    return per_op.groupby(nodes["op_base"]).sum().astype(float), float(wait.sum() / duration.sum())


def measure(threads: int, tokens: int, folder: Path) -> pd.DataFrame:
    from ggml_viz.modelfile.locate import default_model_path

    completion = Path(sys.executable).parent / "llama-completion"
    if not completion.exists():
        sys.exit(f"{completion} is missing: `make setup` builds llama.cpp's own programs")
    run_dir, perf_data = folder / f"t{threads}.ggmlviz", folder / f"t{threads}.perf"
    program = [
        str(completion),
        "-m",
        str(default_model_path()),
        "-p",
        PROMPT,
        "-n",
        str(tokens),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-c",
        "512",
        "-fa",
        "off",
    ]
    subprocess.run(
        [
            "perf",
            "record",
            "-q",
            "-F",
            "1999",
            "-o",
            str(perf_data),
            "--",
            sys.executable,
            "-m",
            "ggml_viz",
            "run",
            "--force",
            "-o",
            str(run_dir),
            "--",
            *program,
        ],
        check=True,
        capture_output=True,
    )
    samples = sampled_samples(perf_data)
    recorded, wait_share = recorded_shares(run_dir)
    main_thread = int(ggml_viz_manifest(run_dir)["program"]["pid"])  # ggml's thread 0: the recorded one
    sampled = samples.groupby("op")["samples"].sum().astype(float)
    sampled_0 = samples[samples["tid"] == main_thread].groupby("op")["samples"].sum().astype(float)
    ops = sorted(set(recorded.index) | {op for op in sampled.index if not op.startswith("(")})

    def shares(values: pd.Series) -> pd.Series:
        values = values.reindex(ops).fillna(0)
        return 100 * values / values.sum()

    table = pd.DataFrame(
        {
            "recorded work %": shares(recorded["work"]),
            "sampled, thread 0 %": shares(sampled_0),
            "sampled, all threads %": shares(sampled),
            "recorded time %": shares(recorded["time"]),
            "ending at the callback %": shares(recorded["ending at the callback"]),
        }
    )
    table = table[(table.max(axis=1) >= 0.05)].sort_values("sampled, thread 0 %", ascending=False)
    ggml_samples = sampled.sum() - sampled.get("(barrier wait)", 0)
    left_out = ", ".join(
        f"{name} {100 * sampled.get(name, 0) / ggml_samples:.1f} %"
        for name in ("(graph loop)", "(shared kernels)", OUTSIDE)
    )
    print(
        f"\n{threads} thread(s): {int(sampled.sum())} samples in ggml-cpu and libgomp; "
        f"barrier wait {100 * sampled.get('(barrier wait)', 0) / sampled.sum():.1f} % of them "
        f"(recorded: {100 * wait_share:.1f} % of node time); of ggml-cpu's samples, left out of the shares: "
        f"{left_out}"
    )
    print(table.round(2).to_string())
    return table


def ggml_viz_manifest(run_dir: Path) -> dict:
    import ggml_viz

    return ggml_viz.open(run_dir).manifest


def verdict(threads: int, table: pd.DataFrame) -> list[str]:
    """The targets, against thread 0's samples: the recorder measures thread 0's time (at 2
    threads an op one thread computes alone, a norm of one row, costs its full time in wall
    clock but half its share of all threads' CPU)."""
    failures = []
    sampled = table["sampled, thread 0 %"]
    gap = abs(table.loc["MUL_MAT", "recorded work %"] - sampled["MUL_MAT"])
    if gap > 3:
        failures.append(f"{threads} thread(s): MUL_MAT recorded and sampled shares differ by {gap:.1f} points")
    big = table[(table["recorded work %"] > 1) & (table["recorded work %"] > 2 * sampled)]
    for op, row in big.iterrows():
        failures.append(
            f"{threads} thread(s): {op} recorded at {row['recorded work %']:.2f} % of work, "
            f"sampled at {sampled[op]:.2f} %"
        )
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=192, help="tokens to generate")
    parser.add_argument("--keep", type=Path, help="keep the runs and perf's data in this folder")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: linux-perf)")
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for threads in args.threads:
            failures += verdict(threads, measure(threads, args.tokens, folder))
    print(
        "\n"
        + (
            "\n".join(failures)
            if failures
            else "targets met: MUL_MAT within 3 points; no op above 1 % at more than twice its sampled share"
        )
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
