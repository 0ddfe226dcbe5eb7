from __future__ import annotations

import argparse
import csv
import json
import sys

from .base import Command
from .common import add_model_arguments, positive_int


class BenchCommand(Command):
    """Benchmark a model like llama-bench, with a per-op breakdown.

    Prompt processing and generation tokens/s, mean ± std over repetitions, beside llama.cpp's
    own figure, and where the time goes from one traced repetition.

    example:
      ggml-viz bench                              # the embedded SmolLM2-135M
      ggml-viz bench -m model.gguf -p 512 -n 128 -r 5 -t 8
      ggml-viz bench -m Qwen/Qwen3-0.6B-GGUF:Q8_0 --download
      ggml-viz bench -o json > bench.json
    """

    name = "bench"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, default="the embedded SmolLM2-135M")
        parser.add_argument("-p", "--n-prompt", type=int, default=64, help="prompt tokens for pp (default 64; 0 skips)")
        parser.add_argument("-n", "--n-gen", type=int, default=32, help="generated tokens for tg (default 32; 0 skips)")
        parser.add_argument("-r", "--repetitions", type=positive_int, default=5, help="repetitions (default 5)")
        parser.add_argument(
            "-t", "--threads", type=positive_int, default=None, help="CPU threads (default: llama.cpp's)"
        )
        parser.add_argument("-o", "--output", choices=("md", "csv", "json"), default="md", help="output format")

    def run(self, args: argparse.Namespace) -> int:
        from rich.console import Console

        from ..capture.llama_cpp_python.bench import run_bench
        from ..modelfile.locate import resolve_model

        model_path = resolve_model(args.model, download=args.download)
        console = Console(stderr=True)
        with console.status("benchmarking") as status:
            results = run_bench(
                model_path,
                max(0, args.n_prompt),
                max(0, args.n_gen),
                args.repetitions,
                args.threads,
                progress=lambda step: status.update(step),
            )
        if args.output == "json":
            print(
                json.dumps(
                    {"model": str(model_path), "threads": args.threads, "results": [r.as_dict() for r in results]},
                    indent=2,
                )
            )
        elif args.output == "csv":
            writer = csv.writer(sys.stdout)
            writer.writerow(["model", "threads", "test", "tokens_per_s_mean", "tokens_per_s_std", "llama_tokens_per_s"])
            for r in results:
                writer.writerow(
                    [
                        model_path.name,
                        args.threads or "",
                        r.test,
                        f"{r.mean:.2f}",
                        f"{r.std:.2f}",
                        f"{r.as_dict()['llama_tokens_per_s_mean']:.2f}",
                    ]
                )
        else:
            print("| model | threads | test | t/s | llama.cpp's own t/s |\n|---|---|---|---|---|")
            for r in results:
                own = r.as_dict()["llama_tokens_per_s_mean"]
                print(
                    f"| {model_path.name} | {args.threads or 'default'} | {r.test} | {r.mean:.2f} ± {r.std:.2f} | "
                    f"{own:.2f} |"
                )
            for r in results:
                print(
                    f"\nwhere {r.test}'s time goes (one traced repetition):\n\n| op | share | ms per token | events |"
                    "\n|---|---|---|---|"
                )
                for op in r.ops[:8]:
                    per_token_ms = op["time_ns"] / 1e6 / r.n_tokens
                    print(f"| {op['op']} | {op['share']:.1%} | {per_token_ms:.3f} | {op['events']:,} |")
        return 0
