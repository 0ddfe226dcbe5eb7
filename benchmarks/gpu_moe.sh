#!/usr/bin/env bash
# The mixture-of-experts GPU check: ggml-viz's routing on llama.cpp built with CUDA, one NVIDIA GPU,
# in about 6 minutes (4 of them building llama.cpp).
#
#   benchmarks/gpu_moe.sh --vocab VOCAB.gguf --llama-src TREE.tar.gz|DIR [--wheels DIR] [--work DIR]
#
# It writes a random-weight qwen3moe model of a realistic shape (benchmarks/moe_model.py: 24 layers,
# 64 experts, 8 per token, Q4_0 experts), then runs llama-completion (greedy, 32 tokens):
#  - untraced, with every layer on the GPU;
#  - under `ggml-viz run` (GPU windows, the default), every layer on the GPU;
#  - the same with --n-cpu-moe 12 (the experts of half the layers on the CPU);
#  - on the CPU alone (-ngl 0), the routing read through the eval callback, for comparison;
# and prints a table: the text traced against untraced, the routing read (graphs, layers, how),
# the experts' bytes a decode step read from each device, and how often the GPU-read experts agree
# with the CPU run's for the same tokens. ggml-viz runs from this checkout (PYTHONPATH); its C
# parts are compiled here with gcc; Python packages it lacks come from the wheels in --wheels.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VOCAB= SRC= WHEELS= WORK=
while [[ $# -gt 0 ]]; do
    case $1 in
        --vocab) VOCAB=$2; shift 2 ;;
        --llama-src) SRC=$2; shift 2 ;;
        --wheels) WHEELS=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n $VOCAB && -n $SRC ]] || { sed -n 2,16p "$0" >&2; exit 2; }
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
T0=$(date +%s)
step() { echo "[gpu_moe.sh +$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC=$(command -v nvcc || true)
CUDA_HOME=${CUDA_HOME:-$([[ -n $NVCC ]] && dirname "$(dirname "$(readlink -f "$NVCC")")")}
export LD_LIBRARY_PATH=${CUDA_HOME:+$CUDA_HOME/lib64:$CUDA_HOME/lib:}${LD_LIBRARY_PATH:-}
if [[ -n $WHEELS ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=$WORK/site
fi
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}

if [[ -f $SRC ]]; then mkdir -p "$WORK/src" && tar -C "$WORK/src" -xzf "$SRC" && SRC=$WORK/src; fi
step "building llama.cpp with CUDA from $SRC"
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90} -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$WORK/cmake.log" 2>&1 \
    && cmake --build "$WORK/build" -j "$(nproc)" --target llama-completion > "$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/cmake.log" "$WORK/build.log"; exit 1; }
BIN=$WORK/build/bin
export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
export LLAMA_CPP_LIB_PATH=$BIN

step "ggml-viz's C parts"
sh "$REPO/benchmarks/c_parts.sh" "$REPO" "$PY" "$WORK" || exit 1

step "model"
M=$WORK/moe.gguf
$PY "$REPO/benchmarks/moe_model.py" "$M" --vocab "$VOCAB" ${GPU_MOE_MODEL:-} || exit 1

PROMPT="The history of the city begins with a small settlement on the river, where"
COMPLETION=("$BIN/llama-completion" -m "$M" -p "$PROMPT" -n "${GPU_MOE_TOKENS:-32}" -no-cnv --temp 0 -s 1 -c 1024)
text_of() { sed '/^run written to /,$d' "$1"; }
step "llama-completion untraced, every layer on the GPU"
timeout 180 "${COMPLETION[@]}" -ngl 99 > "$WORK/untraced.txt" 2> "$WORK/untraced.err"; echo "  exit $?"
for config in gpu cpu-moe cpu; do
    case $config in
        gpu) options=(-ngl 99) ;;
        cpu-moe) options=(-ngl 99 --n-cpu-moe 12) ;;
        cpu) options=(-ngl 0) ;;
    esac
    step "llama-completion under ggml-viz: $config (${options[*]})"
    timeout 300 $PY -m ggml_viz run -f -o "$WORK/$config.ggmlviz" -- "${COMPLETION[@]}" "${options[@]}" \
        > "$WORK/$config.txt" 2> "$WORK/$config.err"
    echo "  exit $?; $(grep -h 'ggml-viz' "$WORK/$config.err" | head -3 | tr '\n' ' ')"
done
[[ -f $WORK/cpu-moe.txt ]] && timeout 180 "${COMPLETION[@]}" -ngl 99 --n-cpu-moe 12 > "$WORK/untraced-cpu-moe.txt" 2> /dev/null

step "report"
$PY - "$WORK" <<'EOF'
import sys
from pathlib import Path

import numpy as np

import ggml_viz
from ggml_viz.analysis.moe import expert_bytes_by_device

work = Path(sys.argv[1])
text = lambda name: (work / name).read_text(errors="replace") if (work / name).exists() else ""
runs = {c: ggml_viz.open(work / f"{c}.ggmlviz") for c in ("gpu", "cpu-moe", "cpu") if (work / f"{c}.ggmlviz").exists()}
for traced, untraced in (("gpu.txt", "untraced.txt"), ("cpu-moe.txt", "untraced-cpu-moe.txt")):
    same = text(traced) == text(untraced) if text(untraced) else "not run"
    print(f"text {traced}: the same traced and untraced: {same} ({len(text(untraced))} characters)")
print("| run | graphs | with routing (prompt, decode) | layers read: answered, at ticks, unreadable | "
      "experts per decode step by device (MiB) | GPU node times |")
print("|---|---|---|---|---|---|")
for name, run in runs.items():
    counts = run.manifest["counts"]
    routed = run.moe_routing
    with_routing = routed.groupby("phase")["graph_id"].nunique().to_dict()
    devices = expert_bytes_by_device(run)
    decode = devices[devices["phase"] == "decode"].groupby("device")["bytes_read"].median() / 2**20
    print(f"| {name} | {len(run.graphs)} | {with_routing.get('prompt', 0)}, {with_routing.get('decode', 0)} | "
          f"{counts.get('routing_answered')}, {counts.get('routing_at_ticks')}, {counts.get('routing_unreadable')} | "
          f"{', '.join(f'{d} {v:.1f}' for d, v in decode.items()) or '-'} | {run.has_gpu_times} |")
if "cpu" in runs:
    reference = runs["cpu"].moe_routing
    for name in ("gpu", "cpu-moe"):
        if name not in runs:
            continue
        mine = runs[name].moe_routing
        keys = ["phase", "layer", "position", "slot"]
        merged = mine.merge(reference, on=keys, suffixes=("", "_cpu"))
        same = (merged["expert"] == merged["expert_cpu"]).mean() if len(merged) else float("nan")
        sets = merged.groupby(["phase", "layer", "position"]).apply(
            lambda g: set(g["expert"]) == set(g["expert_cpu"]), include_groups=False)
        print(f"{name}: {len(merged)} (token, layer, slot) rows compared with the CPU run: same expert in "
              f"{same:.1%}, same set of experts per token and layer in {sets.mean():.1%}; weights differ by "
              f"{np.nanmedian(np.abs(merged['weight'] - merged['weight_cpu'])):.2e} (median)")
EOF
step "done"
