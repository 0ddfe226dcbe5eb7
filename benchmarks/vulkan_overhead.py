"""What timing GPU nodes on Vulkan costs: llama.cpp's Vulkan build (make setup builds it) on
Mesa's lavapipe, a tiny llama (the tests' 2-layer model, written with gguf's writer), every layer
on the GPU, llama-completion generating 64 tokens, untraced and under `ggml-viz run`, in
alternating fresh processes.

The figure is the program's own decode rate (llama-completion's eval line). Configurations:

    untraced        the program alone
    graph           ggml-viz run --gpu off: graphs read at the compute call, no layer
    windows         ggml-viz run (the default): the layer in the chain, a few graphs timed per
                    structure and every 256th (a timestamp after each dispatch, in those only)
    every           ggml-viz run --gpu every: every graph timed
    perf-logger     the program alone under GGML_VK_PERF_LOGGER=1 (ggml-vulkan's own timestamps
                    and a barrier after every node): what timestamps do to lavapipe by themselves

Prints each round and, per configuration, the median untraced/traced rate ratio (above 1:
recording slows the program). lavapipe runs each dispatch on the CPU's cores, and a timestamp
query there flushes its queue: the ratio, not the rate, is what carries to a real GPU.

    python benchmarks/vulkan_overhead.py               # 5 rounds
    python benchmarks/vulkan_overhead.py --rounds 9 --tokens 128
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))  # the tests' model writer

CONFIGS = {"untraced": None, "graph": ["--gpu", "off"], "windows": [], "every": ["--gpu", "every"], "perf-logger": None}
EXTRA_ENV = {"perf-logger": {"GGML_VK_PERF_LOGGER": "1"}}


def vulkan_program() -> Path:
    cache = Path(os.environ.get("GGML_VIZ_CACHE", Path.home() / ".cache/ggml-viz"))
    program = cache / "llama.cpp-0.3.36-vulkan" / "bin" / "llama-completion"
    if not program.exists():
        sys.exit(f"{program} is missing: `make setup` builds llama.cpp with ggml's Vulkan backend")
    return program


def lavapipe() -> dict[str, str]:
    icds = sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"))
    if not icds:
        sys.exit("Mesa's lavapipe is missing (apt-get install mesa-vulkan-drivers)")
    return {"VK_ICD_FILENAMES": icds[0], "GGML_VK_VISIBLE_DEVICES": "0"}


def decode_rate(completed: subprocess.CompletedProcess) -> float:
    if completed.returncode != 0:
        raise RuntimeError(f"llama-completion failed ({completed.returncode}): {completed.stderr[-2000:]}")
    match = re.search(r"(?<!prompt )\beval time =.*?([\d.]+) tokens per second", completed.stderr)
    if not match:
        raise RuntimeError(f"no eval rate in llama-completion's output: {completed.stderr[-2000:]}")
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    from tests.integration.arch_models import write_model

    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")} | lavapipe()
    with tempfile.TemporaryDirectory() as folder:
        model = write_model(Path(folder) / "tiny-llama.gguf", "llama").path
        command = [
            str(vulkan_program()),
            "-m",
            str(model),
            "-p",
            "The capital of France is",
            "-n",
            str(args.tokens),
            "-ngl",
            "99",
            "--temp",
            "0",
            "--ignore-eos",
            "-no-cnv",
            "-t",
            "2",
            "-c",
            "512",
        ]
        rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
        for index in range(args.rounds):
            order = list(CONFIGS) if index % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                options = CONFIGS[name]
                run = Path(folder) / f"{name}-{index}.ggmlviz"
                program = (
                    command
                    if options is None
                    else [sys.executable, "-m", "ggml_viz", "run", *options, "-o", str(run), "--", *command]
                )
                completed = subprocess.run(program, env=env | EXTRA_ENV.get(name, {}), capture_output=True, text=True)
                rates[name].append(decode_rate(completed))
            print(f"round {index + 1}: " + ", ".join(f"{name} {rates[name][-1]:.2f} tok/s" for name in CONFIGS))
        print("median untraced/traced decode-rate ratio (above 1: slower traced):")
        for name in list(CONFIGS)[1:]:
            ratios = [u / t for u, t in zip(rates["untraced"], rates[name], strict=True)]
            untraced, traced = statistics.median(rates["untraced"]), statistics.median(rates[name])
            ratio = statistics.median(ratios)
            print(f"  {name:8} {ratio:.3f}  (untraced median {untraced:.2f} tok/s, {name} {traced:.2f})")


if __name__ == "__main__":
    main()
