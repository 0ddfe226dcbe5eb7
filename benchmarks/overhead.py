"""What recording costs: SmolLM2-135M, 2 threads, a 14-token prompt, 64 generated tokens.

Each configuration runs in a fresh process, alternating untraced and traced runs, at
least 7 pairs; each process times only the generation (the model is loaded first).
Prints tokens/s and the median traced/untraced wall-time ratio per configuration.
The default recorder times nodes inline (the graph runs in one piece; ggml's CPU backend
reports each node it finishes). `native-op-sync` times nodes the other way: each node is
computed alone and synchronized. `floor-op` is no recorder: a C callback that asks for
every node and records nothing, so its ratio is what node-by-node computing costs by
itself on this machine, the floor under `native-op-sync`. `floor-graph` is a C callback
that declines every node and records nothing: what having an eval callback at all costs,
the floor under `native-graph`.

    python benchmarks/overhead.py                 # all configurations, 7 pairs
    python benchmarks/overhead.py --pairs 11 --configs native-op python-op
    python benchmarks/overhead.py --in-process    # also: paired within one process
    python benchmarks/overhead.py --in-process --no-fresh   # only that
    python benchmarks/overhead.py --model moe.gguf --configs native-op native-op-routing-off --in-process

`--model` measures another model (a mixture of experts, written by benchmarks/moe_model.py: its
routing is read by default, `native-op-routing-off` is the same recording without it).

Fresh processes are what a user sees, but on a shared machine they differ from each
other by more than recording costs. `--in-process` adds a paired measurement with less
noise: one process holds an untraced and a traced context of the same model and
alternates generations between them (15 pairs by default), so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

PROMPT = "The history of the printing press begins in the fifteenth century, when the"  # 14 tokens
N_PREDICT = 64
THREADS = 2

CONFIGS: dict[str, dict[str, object]] = {
    # Not a recorder: a C callback that only asks for every node, the floor of per-node timing.
    "floor-op": {"floor": "TIMING_FLOOR_CALLBACK_ADDRESS"},
    # Not a recorder: a C callback that declines every node, the floor of graph-level recording.
    "floor-graph": {"floor": "GRAPH_FLOOR_CALLBACK_ADDRESS"},
    "native-op": {"recorder": "native"},
    "native-op-routing-off": {"recorder": "native", "routing": "off"},
    "native-op-sync": {"recorder": "native", "timing": "sync"},
    "native-graph": {"recorder": "native", "detail": "graph"},
    "native-sample-8": {"recorder": "native", "sample": 8},
    "python-op": {"recorder": "python"},
    # Not time: every node's output read after it is computed (each node computed alone).
    "native-values-stats": {"recorder": "native", "values": "stats"},
}

# Gives every context created afterwards a floor callback (a C function that records
# nothing), in a worker process.
INSTALL_FLOOR = """
def install_floor_callback(name):
    import llama_cpp.llama_cpp as core
    from ggml_viz.capture.core import _recorder
    original = core.llama_init_from_model
    def with_floor_callback(model, params):
        params.cb_eval = core.ggml_backend_sched_eval_callback(getattr(_recorder, name))
        return original(model, params)
    core.llama_init_from_model = with_floor_callback
"""

WORKER = INSTALL_FLOOR + textwrap.dedent(
    """
    import json, sys, time, contextlib
    from llama_cpp import Llama
    import ggml_viz
    from ggml_viz.modelfile.locate import default_model_path
    config = json.loads(sys.argv[1])
    output = sys.argv[2]
    model_path = sys.argv[3] or str(default_model_path())
    if config and "floor" in config:
        install_floor_callback(config.pop("floor"))
    recording = ggml_viz.record(output, **config) if config else contextlib.nullcontext()
    with recording:
        llm = Llama(model_path=model_path, n_ctx=512, n_threads=%(threads)d, seed=0, verbose=False)
        prompt_tokens = len(llm.tokenize(%(prompt)r.encode()))
        start = time.perf_counter()
        out = llm(%(prompt)r, max_tokens=%(n)d, temperature=0.0)
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "tokens": out["usage"]["completion_tokens"], "prompt_tokens": prompt_tokens}))
    """
) % {"threads": THREADS, "prompt": PROMPT, "n": N_PREDICT}


def run_once(config: dict[str, object] | None, workdir: str, index: int, model: str = "") -> dict[str, float]:
    output = os.path.join(workdir, f"run-{index}.ggmlviz")
    result = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(config), output, model],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")},
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


IN_PROCESS_WORKER = INSTALL_FLOOR + textwrap.dedent(
    """
    import json, statistics, sys, time
    from llama_cpp import Llama
    import ggml_viz
    from ggml_viz.modelfile.locate import default_model_path
    config, pairs, output = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    model_path = sys.argv[4] or str(default_model_path())
    def load():
        return Llama(model_path=model_path, n_ctx=512, n_threads=%(threads)d, seed=0, verbose=False)
    untraced = load()
    if "floor" in config:
        install_floor_callback(config.pop("floor"))
        recording = None
    else:
        recording = ggml_viz.record(output, **config).start()
    traced = load()
    ratios = []
    for _ in range(pairs):
        seconds = []
        for llm in (untraced, traced):
            llm.reset()
            start = time.perf_counter()
            llm(%(prompt)r, max_tokens=%(n)d, temperature=0.0)
            seconds.append(time.perf_counter() - start)
        ratios.append(seconds[1] / seconds[0])
    if recording is not None:
        recording.stop()
    quartiles = statistics.quantiles(ratios, n=4)
    print(json.dumps({"median": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2]}))
    """
) % {"threads": THREADS, "prompt": PROMPT, "n": N_PREDICT}


def run_in_process(name: str, pairs: int, workdir: str, model: str = "") -> dict[str, float]:
    config = dict(CONFIGS[name])
    result = subprocess.run(
        [sys.executable, "-c", IN_PROCESS_WORKER, json.dumps(config), str(pairs), os.path.join(workdir, name), model],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")},
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--in-process", action="store_true", help="also measure pairs within one process")
    parser.add_argument("--in-process-pairs", type=int, default=15)
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-process pairs")
    parser.add_argument("--model", default="", help="a GGUF model (default: SmolLM2-135M Q4_1)")
    args = parser.parse_args()
    model = args.model or "SmolLM2-135M Q4_1"
    print(f"{model}, {THREADS} threads, {N_PREDICT} generated tokens, {args.pairs} pairs per configuration")
    header = ("configuration", "untraced tok/s", "traced tok/s", "median ratio", "ratios (min..max)")
    print(f"{header[0]:<18} {header[1]:>15} {header[2]:>13} {header[3]:>13} {header[4]:>19}")
    with tempfile.TemporaryDirectory() as workdir:
        counter = 0
        for name in [] if args.no_fresh else args.configs:
            ratios, untraced_rates, traced_rates = [], [], []
            for _ in range(args.pairs):
                counter += 1
                untraced = run_once(None, workdir, counter, args.model)
                traced = run_once(CONFIGS[name], workdir, counter, args.model)
                ratios.append(traced["seconds"] / untraced["seconds"])
                untraced_rates.append(untraced["tokens"] / untraced["seconds"])
                traced_rates.append(traced["tokens"] / traced["seconds"])
            print(
                f"{name:<18} {statistics.median(untraced_rates):>15.1f} {statistics.median(traced_rates):>13.1f} "
                f"{statistics.median(ratios):>13.3f} {min(ratios):>9.3f}..{max(ratios):.3f}",
                flush=True,
            )
        if args.in_process:
            print(f"\npaired in one process, {args.in_process_pairs} pairs: median ratio (quartiles)")
            for name in args.configs:
                result = run_in_process(name, args.in_process_pairs, workdir, args.model)
                print(f"{name:<18} {result['median']:>6.3f}  ({result['q1']:.3f}..{result['q3']:.3f})", flush=True)


if __name__ == "__main__":
    main()
