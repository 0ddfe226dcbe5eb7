"""What recording a distributed inference costs: llama-completion on SmolLM2-135M split over two
ggml-rpc-server workers on loopback (`--rpc ... -ngl 99`), untraced and with every process
recorded (`ggml-viz run` around the head and around each worker), alternating, in fresh processes.

The figure is llama-completion's own eval rate (its performance report, N generated tokens).
Each round starts its two workers (untraced, or each under `ggml-viz run`), runs one generation,
stops the workers and, traced, waits for their runs to be written. The machine's cores are shared
by the head, both workers and what `ggml-viz run` does meanwhile (the collectors reading the
spools): one thread each for the head and the workers. Prints each pair and the median
untraced/traced rate ratio (above 1: recording slows the distributed inference down), and what
joining each traced round's three runs took (`ggml-viz join`: matching, offsets, the merged run).

    python benchmarks/distributed_overhead.py                 # 7 pairs, 128 tokens
    python benchmarks/distributed_overhead.py --pairs 11 --tokens 256
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "The history of the printing press begins in the fifteenth century, when the"


def tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        sys.exit(f"{path} is missing: `make setup` builds llama.cpp's own programs")
    return str(path)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LD_PRELOAD"}


def start_workers(folder: Path | None, count: int) -> tuple[list[subprocess.Popen], list[int]]:
    processes, ports = [], []
    for index in range(count):
        port = free_port()
        command = [tool("ggml-rpc-server"), "-t", "1", "-H", "127.0.0.1", "-p", str(port)]
        if folder is not None:
            command = [sys.executable, "-m", "ggml_viz", "run", "-o", str(folder / f"w{index}.ggmlviz"), "--", *command]
        processes.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_environment())
        )
        ports.append(port)
    for port in ports:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"a worker did not start on port {port}")
                time.sleep(0.1)
    return processes, ports


JOIN_SECONDS: list[tuple[float, int, int]] = []  # per traced round: seconds, head graphs, remote nodes


def join_round(folder: Path) -> None:
    """Join a traced round's runs, timed."""
    import ggml_viz
    from ggml_viz.analysis.join import join_runs, write_joined

    start = time.perf_counter()
    runs = [ggml_viz.open(folder / name) for name in ("head.ggmlviz", "w0.ggmlviz", "w1.ggmlviz")]
    joined = join_runs(runs)
    write_joined(joined, folder / "joined")
    nodes = sum(remote.counts()["nodes"] for remote in joined.remote)
    JOIN_SECONDS.append((time.perf_counter() - start, len(runs[0].graphs), nodes))


def one_round(model: str, tokens: int, traced: bool) -> float:
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        workers, ports = start_workers(folder if traced else None, 2)
        try:
            command = [
                tool("llama-completion"),
                "-m",
                model,
                "--rpc",
                ",".join(f"127.0.0.1:{p}" for p in ports),
                "-ngl",
                "99",
                "-p",
                PROMPT,
                "-n",
                str(tokens),
                "--temp",
                "0",
                "--ignore-eos",
                "-no-cnv",
                "--no-warmup",
                "-t",
                "1",
                "-c",
                "1024",
            ]
            if traced:
                command = [sys.executable, "-m", "ggml_viz", "run", "-o", str(folder / "head.ggmlviz"), "--", *command]
            done = subprocess.run(command, capture_output=True, text=True, env=clean_environment(), timeout=600)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=120)
        if done.returncode != 0:
            sys.exit(f"the head failed ({done.returncode}): {done.stderr[-2000:]}")
        if traced:
            join_round(folder)
        match = re.search(r"\beval time =.*?([\d.]+) tokens per second", done.stderr)
        if not match:
            sys.exit("llama-completion printed no eval rate")
        return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    from ggml_viz.modelfile.locate import default_model_path

    model = str(default_model_path())
    ratios = []
    for index in range(args.pairs):
        order = (False, True) if index % 2 == 0 else (True, False)
        rates = {traced: one_round(model, args.tokens, traced) for traced in order}
        ratios.append(rates[False] / rates[True])
        print(
            f"pair {index + 1}: untraced {rates[False]:.1f} tok/s, traced {rates[True]:.1f} tok/s, "
            f"ratio {ratios[-1]:.3f}",
            flush=True,
        )
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    seconds, graphs, nodes = (statistics.median(values) for values in zip(*JOIN_SECONDS, strict=True))
    print(f"join: median {seconds:.2f} s for {graphs:.0f} head graphs and {nodes:.0f} remote nodes")
    print(
        f"median untraced/traced eval rate: {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles[0]:.3f}..{quartiles[2]:.3f}, {len(ratios)} pairs)"
    )


if __name__ == "__main__":
    main()
