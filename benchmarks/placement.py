"""How well `ggml-viz whatif` predicts other splits of a model: SmolLM2-135M on the head's CPU and one
ggml-rpc-server worker on loopback standing in for a second device (the same prediction a CUDA GPU
beside the CPU gets; one thread each).

One placement (`--record`, default -ngl 15 of 31 blocks) is recorded (head and worker under
`ggml-viz run`, joined); `whatif` predicts it and the others (`--ngl`); then llama-bench measures
every placement untraced (`-p PROMPT_TOKENS -n 32 -r REPEATS`, its own mean). Prints, per
placement, the predicted and measured decode and prompt rates, their ratio, and the same ratio
relative to the recorded placement (what the prediction says about moving layers, apart from what
recording costs the recorded run).

    python benchmarks/placement.py
    python benchmarks/placement.py --record 15 --ngl 0,8,24,31 --repeats 5
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from distributed_overhead import clean_environment, start_workers, tool  # noqa: E402

PROMPT = "The history of the printing press begins in the fifteenth century, when the"


def record(folder: Path, model: str, ngl: int, tokens: int) -> Path:
    workers, ports = start_workers(folder, 1)
    try:
        command = [sys.executable, "-m", "ggml_viz", "run", "-o", str(folder / "head.ggmlviz"), "--",
                   tool("llama-completion"), "-m", model, "--rpc", f"127.0.0.1:{ports[0]}", "-ngl", str(ngl),
                   "-p", PROMPT, "-n", str(tokens), "--temp", "0", "--ignore-eos", "-no-cnv", "--no-warmup",
                   "-t", "1", "-c", "1024"]  # fmt: skip
        subprocess.run(command, capture_output=True, text=True, env=clean_environment(), timeout=600, check=True)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=120)
    joined = folder / "split.joined"
    subprocess.run([sys.executable, "-m", "ggml_viz", "join", str(folder / "head.ggmlviz"),
                    str(folder / "w0.ggmlviz"), "-o", str(joined)], check=True, capture_output=True)  # fmt: skip
    return joined


def measure(model: str, ngls: list[int], prompt_tokens: int, repeats: int) -> dict[tuple[int, str], float]:
    """llama-bench's mean tokens/s per (ngl, "prompt" or "decode"), untraced."""
    workers, ports = start_workers(None, 1)
    try:
        done = subprocess.run([tool("llama-bench"), "-m", model, "--rpc", f"127.0.0.1:{ports[0]}",
                               "-ngl", ",".join(map(str, ngls)), "-p", str(prompt_tokens), "-n", "32", "-t", "1",
                               "-r", str(repeats), "-o", "csv"], capture_output=True, text=True,
                              env=clean_environment(), timeout=1800, check=True)  # fmt: skip
    finally:
        for worker in workers:
            worker.terminate()
    rates = {}
    for row in csv.DictReader(io.StringIO(done.stdout)):
        phase = "prompt" if int(row["n_prompt"]) else "decode"
        rates[(int(row["n_gpu_layers"]), phase)] = float(row["avg_ts"])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=int, default=15, help="the placement recorded (-ngl)")
    parser.add_argument("--ngl", default="0,8,24,31", help="placements predicted and measured")
    parser.add_argument("--tokens", type=int, default=48, help="tokens generated in the recording")
    parser.add_argument("--repeats", type=int, default=5, help="llama-bench repetitions per placement")
    args = parser.parse_args()
    from ggml_viz.modelfile.locate import default_model_path

    model = str(default_model_path())
    ngls = sorted({args.record, *(int(n) for n in args.ngl.split(","))})
    with tempfile.TemporaryDirectory() as name:
        joined = record(Path(name), model, args.record, args.tokens)
        whatif = [sys.executable, "-m", "ggml_viz", "whatif", str(joined), "--ngl", ",".join(map(str, ngls)), "--json"]
        done = subprocess.run(whatif, capture_output=True, text=True, check=True)
        prediction = {row["ngl"]: row for row in json.loads(done.stdout)["predictions"]}
        prompt_tokens = _prompt_tokens(joined)
    measured = measure(model, ngls, prompt_tokens, args.repeats)
    print(f"recorded -ngl {args.record}; llama-bench -p {prompt_tokens} -n 32 -r {args.repeats}, one thread each")
    print(f"{'ngl':>4} {'phase':>7} {'predicted':>10} {'measured':>9} {'pred/meas':>10} {'relative to recorded':>21}")
    for phase in ("decode", "prompt"):
        base = prediction[args.record][f"{phase}_tokens_per_s"] / measured[(args.record, phase)]
        for ngl in ngls:
            predicted, actual = prediction[ngl][f"{phase}_tokens_per_s"], measured[(ngl, phase)]
            ratio = predicted / actual
            print(f"{ngl:>4} {phase:>7} {predicted:>10.1f} {actual:>9.1f} {ratio:>10.3f} {ratio / base:>21.3f}")


def _prompt_tokens(joined: Path) -> int:
    import pandas as pd

    graphs = pd.read_parquet(joined / "graphs.parquet")
    prompt = graphs[graphs["phase"] == "prompt"]
    return int(prompt["n_tokens"].max()) if len(prompt) else 16


if __name__ == "__main__":
    main()
