"""What a dormant recording costs a server: llama-server untraced and under `ggml-viz run
--dormant`, both started, then loaded in turns (one idle while the other serves), round after
round; the cost is the median of the rounds' throughput ratios (goal: at most 1 %).

    python benchmarks/dormant_cost.py --server BIN/llama-server --model M.gguf
        [--rounds 8] [--round-seconds 20] [--clients 8] [--slots 4] [--out table.txt]

Turns, not two long runs: a shared machine's speed drifts over minutes, and each pair of turns
sees the same drift. The order within a round alternates (untraced first, then dormant first).
Throughput is the generated tokens the answers report (`predicted_n`) per second of the turn.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from served_load import N_PREDICT, PROMPTS, free_port, post, wait_ready


def serve(command: list[str], run_dir: Path | None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    full = [*command, "--host", "127.0.0.1", "--port", str(port)]
    if run_dir is not None:
        full = [sys.executable, "-m", "ggml_viz", "run", "--dormant", "-f", "-o", str(run_dir), "--", *full]
    process = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, process)
    return process, port


def turn(port: int, seconds: float, clients: int) -> float:
    """Generated tokens per second with `clients` asking without pause for `seconds`."""
    stop_at = time.monotonic() + seconds
    generated = [0] * clients
    body = {"n_predict": N_PREDICT, "temperature": 0, "ignore_eos": True}

    def client(index: int) -> None:
        k = index
        while time.monotonic() < stop_at:
            generated[index] += post(port, "/completion", {**body, "prompt": PROMPTS[k % len(PROMPTS)]})["timings"][
                "predicted_n"
            ]
            k += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(generated) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    command = [args.server, "-m", args.model, "-np", str(args.slots), "-c", str(512 * args.slots)]
    command += ["-t", str(args.threads), "--seed", "1"]
    work = Path(tempfile.mkdtemp())
    untraced, untraced_port = serve(command, None)
    dormant, dormant_port = serve(command, work / "dormant.ggmlviz")
    ratios, rates = [], {"untraced": [], "dormant": []}
    try:
        for k in range(args.rounds):
            order = [("untraced", untraced_port), ("dormant", dormant_port)]
            if k % 2:
                order.reverse()
            got = {name: turn(port, args.round_seconds, args.clients) for name, port in order}
            for name, rate in got.items():
                rates[name].append(rate)
            ratios.append(got["dormant"] / got["untraced"])
            said = ", ".join(f"{name} {rate:.1f} t/s" for name, rate in got.items())
            print(f"round {k + 1}: {said}", file=sys.stderr)
    finally:
        for process in (untraced, dormant):
            process.terminate()
            process.wait(timeout=120)
    cost = 1 - statistics.median(ratios)
    lines = [
        f"untraced: median {statistics.median(rates['untraced']):.1f} generated t/s over {args.rounds} turns",
        f"dormant:  median {statistics.median(rates['dormant']):.1f} generated t/s over {args.rounds} turns",
        f"ratios dormant/untraced: {', '.join(f'{r:.3f}' for r in ratios)}",
        f"cost: {100 * cost:.2f} % (median of the rounds' ratios; goal at most 1 %): "
        f"{'pass' if cost <= 0.01 else 'FAIL'}",
        f"({args.clients} clients, {args.slots} slots, {args.round_seconds:.0f} s a turn, n_predict {N_PREDICT})",
    ]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
