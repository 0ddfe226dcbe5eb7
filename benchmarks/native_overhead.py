"""What recording a native program costs: llama.cpp's own llama-bench and llama-completion on
SmolLM2-135M, 2 threads, untraced and under `ggml-viz run` (op detail, inline timing: the
defaults), alternating, in fresh processes.

The figures are the programs' own: llama-bench's tokens/s for its text-generation test
(`-n 64`, its own 5 repetitions averaged), and llama-completion's eval rate from its
performance report (256 generated tokens). The traced figure includes everything
`ggml-viz run` does meanwhile on the same 2 cores: the preload library recording, and the
collector reading the spool and writing the run (on CPU time the program leaves). Each
pair runs both, in alternating order. Prints each pair and the median untraced/traced rate
ratio (above 1: recording slows the program).

    python benchmarks/native_overhead.py                 # both programs, 7 pairs
    python benchmarks/native_overhead.py --pairs 11 --programs llama-bench

`--baseline SITE` adds a third run to each round: the program under another ggml-viz, installed
in SITE (`pip install --no-deps --target SITE CHECKOUT`), so that a change is measured against
what it changes in the same rounds, and prints that one's median ratio too. `--baseline-options`
gives the baseline run options of its own (this checkout's ggml-viz, unless --baseline names
another): `--model moe.gguf --baseline-options="--routing off"` measures what reading a mixture of
experts' routing costs, against the same recording without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

THREADS = 2
N_GENERATE = 64  # llama-bench tg64, 5 repetitions
N_PROMPT = 256  # llama-bench pp256, 5 repetitions
N_COMPLETE = 256  # llama-completion: one generation, long enough for its own eval timer to settle
PROMPT = "The history of the printing press begins in the fifteenth century, when the"


def model_path() -> str:
    from ggml_viz.modelfile.locate import default_model_path

    return str(default_model_path())


def tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        sys.exit(f"{path} is missing: `make setup` builds llama.cpp's own programs")
    return str(path)


def commands(model: str) -> dict[str, list[str]]:
    return {
        "llama-bench": [
            tool("llama-bench"),
            "-m",
            model,
            "-p",
            "0",
            "-n",
            str(N_GENERATE),
            "-r",
            "5",
            "-t",
            str(THREADS),
            "-o",
            "json",
        ],
        # prompt processing: graphs of many tokens, whose token lookup the recorder reads (its ubatch)
        "llama-bench-prompt": [
            tool("llama-bench"),
            "-m",
            model,
            "-p",
            str(N_PROMPT),
            "-n",
            "0",
            "-r",
            "5",
            "-t",
            str(THREADS),
            "-o",
            "json",
        ],
        "llama-completion": [
            tool("llama-completion"),
            "-m",
            model,
            "-p",
            PROMPT,
            "-n",
            str(N_COMPLETE),
            "--temp",
            "0",
            "--ignore-eos",
            "-no-cnv",
            "-t",
            str(THREADS),
            "-c",
            "512",
        ],
    }


def tokens_per_second(program: str, completed: subprocess.CompletedProcess) -> float:
    """The program's own generation rate."""
    if completed.returncode != 0:
        raise RuntimeError(f"{program} failed ({completed.returncode}): {completed.stderr[-2000:]}")
    if program.startswith("llama-bench"):
        results, _ = json.JSONDecoder().raw_decode(completed.stdout.lstrip())
        test = "n_gen" if program == "llama-bench" else "n_prompt"
        return float(next(result["avg_ts"] for result in results if result[test] > 0))
    # llama_perf_context_print: "eval time = X ms / N runs ( ... ms per token, R tokens per second)"
    # (not the "prompt eval time" line before it)
    match = re.search(r"(?<!prompt )\beval time =.*?([\d.]+) tokens per second", completed.stderr)
    if not match:
        raise RuntimeError(f"no eval rate in llama-completion's output: {completed.stderr[-2000:]}")
    return float(match.group(1))


def run_round(
    program: str, command: list[str], folder: Path, index: int, baseline: str | None, baseline_options: list[str]
) -> dict[str, float]:
    """One untraced and one traced run (and one under the baseline ggml-viz), in an order that
    turns from round to round (drift cancels)."""
    runs: dict[str, tuple[list[str], dict[str, str] | None]] = {"untraced": (command, None)}
    for name, site in (("traced", None), ("baseline", baseline)):
        if name == "baseline" and site is None and not baseline_options:
            continue
        output = folder / f"{program}-{name}-{index}.ggmlviz"
        env = {**os.environ, "PYTHONPATH": site} if site else None
        options = baseline_options if name == "baseline" else []
        runs[name] = ([sys.executable, "-m", "ggml_viz", "run", "-o", str(output), *options, "--", *command], env)
    names = sorted(runs)
    order = names[index % len(names) :] + names[: index % len(names)]
    results = {}
    for name in order if index % 2 else order[::-1]:
        argv, env = runs[name]
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        results[name] = tokens_per_second(program, completed)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--programs", nargs="+", default=["llama-bench", "llama-completion"])
    parser.add_argument("--baseline", metavar="SITE", help="a folder holding another ggml-viz to compare with")
    parser.add_argument("--baseline-options", default="", help="options of `ggml-viz run` for the baseline run")
    parser.add_argument("--model", default="", help="a GGUF model (default: SmolLM2-135M Q4_1)")
    args = parser.parse_args()
    if args.baseline and not (Path(args.baseline) / "ggml_viz").is_dir():
        sys.exit(f"{args.baseline} holds no ggml_viz package: pip install --no-deps --target {args.baseline} CHECKOUT")
    model = args.model or model_path()
    all_commands = commands(model)
    with tempfile.TemporaryDirectory() as folder:
        for program in args.programs:
            ratios: dict[str, list[float]] = {"traced": [], "baseline": []}
            print(f"{program}: {' '.join(all_commands[program][1:])}")
            for index in range(args.pairs):
                rates = run_round(
                    program, all_commands[program], Path(folder), index, args.baseline, args.baseline_options.split()
                )
                line = f"  pair {index + 1}: untraced {rates['untraced']:7.1f} tok/s"
                for name in ("traced", "baseline"):
                    if name in rates:
                        ratios[name].append(rates["untraced"] / rates[name])
                        line += f"   {name} {rates[name]:7.1f} tok/s   ratio {ratios[name][-1]:.3f}"
                print(line)
            for name, values in ratios.items():
                if values:
                    print(
                        f"{program}: median untraced/{name} {statistics.median(values):.3f} over {args.pairs} "
                        f"pairs (min {min(values):.3f}, max {max(values):.3f})"
                    )


if __name__ == "__main__":
    main()
