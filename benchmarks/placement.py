"""How well `ggml-viz whatif` and `advise` predict other flags, against llama-bench run untraced.

Two models written with gguf's writer (tests/integration's writers, seeded random weights), of
architectures other than the tests' usual llama: a dense Gemma 3 (12 layers, sliding-window
attention on every other one, n_embd 512) and a Qwen 3 MoE (8 layers of 16 experts, 2 used).
On this CPU machine an `ggml-rpc-server` worker on loopback stands in for the device beside the
CPU (the same prediction a CUDA GPU gets).

Each round records two runs per model and sweeps llama-bench untraced right after them, so each
prediction is paired with a measurement made minutes from it:

- split: head and worker under `ggml-viz run` (one thread each), joined; the dense model at
  `-ngl 7` of 13 blocks, the MoE model at `-ngl 99 --n-cpu-moe 4`. Predicted and swept: `-ngl`
  (both models) and `--n-cpu-moe` (the MoE model);
- cpu: the CPU alone at `-t 1`, with this machine's limits at 1 and 2 threads measured in the
  same round (`ggml-viz limits --for`). Predicted and swept: `-t` (with `-tb`) 1 and 2, and
  `-ub` (prompt steps of 16 and 32 tokens against the recorded one step);
- two workers: every block on them (`-ngl 99`, llama.cpp's default split), three processes
  of one thread each on the machine. Predicted and swept: `-ts` 1/1, 3/1 and 1/3.

Prints, per model, flag and phase: the ratio predicted / measured, as the median over rounds
with its range, and the same relative to the recorded placement (what the prediction says about
changing the flag, apart from what recording costs the recorded run), then the recorded
placement's prediction against its own run (the check `whatif` prints), and whether the setting
predicted fastest in each family is the one measured fastest (or within 5 % of it).

    python benchmarks/placement.py
    python benchmarks/placement.py --rounds 5 --repeats 3 --models moe
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(REPOSITORY))  # the tests' model writers
from distributed_overhead import clean_environment, start_workers, tool  # noqa: E402

PROMPT = (
    "The history of the printing press begins in the fifteenth century, when the goldsmith Johannes Gutenberg "
    "of Mainz combined movable metal type, oil based ink and a wooden screw press into one system that let a "
    "small workshop print hundreds of identical pages in a day"
)
GENERATED = 32
MODELS = {
    # name: (writer, architecture, overrides, recorded split flags, swept split families)
    "dense": ("arch", "gemma3", {"n_layers": 12, "n_embd": 512, "n_ff": 2048}, ["-ngl", "7"],
              {"ngl": ["-ngl", "0,3,7,10,13"]}),
    "moe": ("moe", "qwen3moe", {"n_layers": 8, "n_embd": 512, "n_expert": 16, "n_ff_exp": 512},
            ["-ngl", "99", "--n-cpu-moe", "4"],
            {"n_cpu_moe": ["-ngl", "99", "-ncmoe", "0,2,4,6,8"], "ngl": ["-ngl", "0,3,6,9", "-ncmoe", "4"]}),
}  # fmt: skip
UBATCHES = (16, 32)
SPLITS = "1/1,3/1,1/3"  # -ts over two workers


def write(folder: Path, name: str) -> Path:
    kind, architecture, overrides, _, _ = MODELS[name]
    path = folder / f"{name}.gguf"
    if kind == "arch":
        from tests.integration.arch_models import write_model

        write_model(path, architecture, **overrides)
    else:
        from tests.integration.moe_models import write_moe_model

        write_moe_model(path, architecture, **overrides)
    return path


def ggml_viz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ggml_viz", *args], capture_output=True, text=True, check=True)


def completion(model: Path, flags: list[str]) -> list[str]:
    return [
        tool("llama-completion"),
        "-m",
        str(model),
        *flags,
        "-p",
        PROMPT,
        "-n",
        str(GENERATED),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "-c",
        "1024",
    ]


def record_split(folder: Path, model: Path, flags: list[str], workers: int = 1) -> Path:
    """The head and `workers` workers recorded, joined (in a folder of their own)."""
    folder = folder / f"split-{workers}"
    folder.mkdir()
    processes, ports = start_workers(folder, workers)
    try:
        endpoints = ",".join(f"127.0.0.1:{port}" for port in ports)
        command = completion(model, ["--rpc", endpoints, *flags, "-t", "1"])
        ggml_viz("run", "-f", "-o", str(folder / "head.ggmlviz"), "--", *command)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=120)
    joined = folder / "split.joined"
    runs = [str(folder / "head.ggmlviz"), *(str(folder / f"w{index}.ggmlviz") for index in range(workers))]
    ggml_viz("join", *runs, "-o", str(joined))
    return joined


def record_cpu(folder: Path, model: Path) -> Path:
    run = folder / "cpu.ggmlviz"
    ggml_viz("run", "-f", "-o", str(run), "--", *completion(model, ["-t", "1"]))
    return run


def sweep(model: Path, flags: list[str], prompt_tokens: int, repeats: int, workers: int) -> list[dict[str, str]]:
    """llama-bench's rows for these flags, untraced (over `workers` workers of its own)."""
    processes, ports = start_workers(None, workers) if workers else ([], [])
    rpc = ["--rpc", ",".join(f"127.0.0.1:{port}" for port in ports)] if ports else []
    try:
        command = [
            tool("llama-bench"),
            "-m",
            str(model),
            *rpc,
            *flags,
            "-p",
            str(prompt_tokens),
            "-n",
            str(GENERATED),
            "-r",
            str(repeats),
            "-o",
            "csv",
        ]
        done = subprocess.run(command, capture_output=True, text=True, env=clean_environment(), timeout=1800)
    finally:
        for process in processes:
            process.terminate()
    if done.returncode != 0:
        sys.exit(f"llama-bench failed: {done.stderr[-2000:]}")
    return list(csv.DictReader(io.StringIO(done.stdout)))


def phase_of(row: dict[str, str]) -> str:
    return "prompt" if int(row["n_prompt"]) else "decode"


def predictions(run: Path, args: list[str]) -> dict:
    return json.loads(ggml_viz("whatif", str(run), *args, "--json").stdout)


def one_round(folder: Path, name: str, model: Path, repeats: int, results: dict) -> None:
    _, _, _, split_flags, families = MODELS[name]
    joined = record_split(folder, model, split_flags)
    cpu = record_cpu(folder, model)
    # this machine's limits at 1 and 2 threads, which -t is predicted from, measured in each round
    # beside the run they go into (a shared machine's second core comes and goes)
    ggml_viz("limits", "--for", str(cpu), "--threads", "1", "2", "--types", "F32", "F16", "Q8_0", "--again")
    tokens = predictions(cpu, [])["predictions"][0]["prompt_tokens"]
    blocks = int(predictions(joined, [])["n_layer"]) + 1
    # split: each family's settings predicted, then measured over a worker
    for family, flags in families.items():
        asked = []
        for option, value in zip(flags[::2], flags[1::2], strict=True):
            asked += ["--ngl" if option == "-ngl" else "--n-cpu-moe", value.replace("99", str(blocks))]
        predicted = predictions(joined, [*asked, "--prompt-tokens", str(tokens)])
        for row in sweep(model, [*flags, "-t", "1"], tokens, repeats, workers=1):
            ngl, n_cpu_moe = min(int(row["n_gpu_layers"]), blocks), int(row.get("n_cpu_moe") or 0)
            match = [p for p in predicted["predictions"] if (p["ngl"], p["n_cpu_moe"]) == (ngl, n_cpu_moe)]
            _pair(results, (name, family), ngl if family == "ngl" else n_cpu_moe, row, match, predicted)
    # the CPU alone: threads (the prompt's too), and the prompt's ubatch
    ubatches = ",".join(map(str, (*UBATCHES, 512)))
    predicted = predictions(cpu, ["-t", "1,2", "-tb", "1,2", "-ub", ubatches, "--prompt-tokens", str(tokens)])
    for row in sweep(model, ["-t", "1,2", "-ub", ubatches], tokens, repeats, workers=0):
        threads, ubatch = int(row["n_threads"]), int(row["n_ubatch"])
        match = [
            p
            for p in predicted["predictions"]
            if (p["threads"], p["threads_batch"], p["ubatch"]) == (threads, threads, ubatch)
        ]
        if ubatch == 512:
            _pair(results, (name, "threads"), threads, row, match, predicted)
        if threads == 1 and phase_of(row) == "prompt":
            _pair(results, (name, "ubatch"), ubatch, row, match, predicted)
    # two workers: every block on them, split as -ts says
    two = record_split(folder, model, ["-ngl", "99"], workers=2)
    predicted = predictions(two, ["-ts", SPLITS, "--prompt-tokens", str(tokens)])
    for row in sweep(model, ["-ngl", "99", "-ts", SPLITS, "-t", "1"], tokens, repeats, workers=2):
        shares = [float(share) for share in row["tensor_split"].split("/")]
        match = [p for p in predicted["predictions"][1:] if _same_split(p["split"], shares)]  # ([0]: the recorded)
        _pair(results, (name, "ts"), "/".join(f"{s:g}" for s in shares), row, match, predicted)


def _same_split(predicted: list[float] | None, shares: list[float]) -> bool:
    """Whether a prediction's split is llama-bench's (each normalized: 1/1 is 0.5/0.5)."""
    if not predicted or len(predicted) != len(shares):
        return False
    return all(abs(a / sum(predicted) - b / sum(shares)) < 1e-6 for a, b in zip(predicted, shares, strict=True))


def _pair(results: dict, key: tuple[str, str], setting: int, row: dict, match: list, predicted: dict) -> None:
    """One prediction paired with llama-bench's mean for the same setting and phase."""
    phase = phase_of(row)
    if not match or not match[0].get(f"{phase}_tokens_per_s"):
        return
    results[(*key, phase)][setting].append(
        (match[0][f"{phase}_tokens_per_s"], float(row["avg_ts"]), bool(match[0]["recorded"]))
    )
    check = predicted.get("check", {}).get(phase)
    if check and match[0]["recorded"]:
        results[(key[0], "check", phase)][key[1]].append(
            (check["predicted_tokens_per_s"], check["measured_tokens_per_s"], True)
        )


def report(results: dict) -> None:
    print(
        f"{'model':>6} {'flag':>10} {'phase':>7} {'setting':>14} {'predicted':>10} {'measured':>9} "
        f"{'pred/meas (range)':>22} {'relative to recorded':>21}"
    )
    for (name, family, phase), settings in sorted(results.items()):
        base = [p / m for values in settings.values() for p, m, recorded in values if recorded]
        base_ratio = statistics.median(base) if base and family != "check" else None
        for setting, values in sorted(settings.items(), key=lambda kv: str(kv[0])):
            ratios = [p / m for p, m, _ in values]
            relative = f"{statistics.median(ratios) / base_ratio:>21.3f}" if base_ratio else f"{'':>21}"
            recorded = " (recorded)" if any(r for _, _, r in values) and family != "check" else ""
            predicted, measured = (statistics.median(v[i] for v in values) for i in (0, 1))
            label = f"{setting}{recorded}"
            print(
                f"{name:>6} {family:>10} {phase:>7} {label:>14} {predicted:>10.1f} {measured:>9.1f} "
                f"{statistics.median(ratios):>8.3f} ({min(ratios):.3f}..{max(ratios):.3f}) {relative}"
            )
        if family != "check":
            best_predicted = max(settings, key=lambda s: statistics.median(p for p, _, _ in settings[s]))
            measured = {s: statistics.median(m for _, m, _ in v) for s, v in settings.items()}
            best = max(measured, key=lambda s: measured[s])
            share = measured[best_predicted] / measured[best]
            print(
                f"{'':>6} {'':>10} {'':>7} predicted fastest {best_predicted}, measured fastest {best}: "
                f"{share:.1%} of the best"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="dense,moe", help="dense, moe or both")
    parser.add_argument("--rounds", type=int, default=3, help="record-then-sweep rounds per model")
    parser.add_argument("--repeats", type=int, default=3, help="llama-bench repetitions per setting and round")
    args = parser.parse_args()
    results: dict = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for model_name in args.models.split(","):
            model = write(folder, model_name)
            for round_index in range(args.rounds):
                print(f"{model_name}: round {round_index + 1} of {args.rounds}", file=sys.stderr, flush=True)
                runs = folder / f"{model_name}-{round_index}"
                runs.mkdir()
                one_round(runs, model_name, model, args.repeats, results)
    print(
        f"{args.rounds} rounds, llama-bench -n {GENERATED} -r {args.repeats} per round, untraced; "
        "a worker on loopback, one thread, for the split flags"
    )
    report(results)


if __name__ == "__main__":
    main()
