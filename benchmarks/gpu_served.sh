#!/usr/bin/env bash
# A served model on one NVIDIA GPU: llama-server built with CUDA, all layers on the GPU, several
# slots, requests arriving together, checked against the server's own figures
# (benchmarks/served_check.py), in about 6 minutes on 16 cores.
#
#   benchmarks/gpu_served.sh --vocab VOCAB.gguf --llama-src DIR [--work DIR] [--out TABLE]
#
#   --vocab      a GGUF vocabulary: llama.cpp's models/ggml-vocab-llama-spm.gguf
#   --llama-src  a llama.cpp source tree (llama-server is built from it, with -DGGML_CUDA=ON)
#   --work       where the build, runs and the model go (default: a new temporary folder)
#   --out        also write the table there
#
# The model is a random-weight llama written by benchmarks/gpu_model.py (8 layers, n_embd 1024).
# ggml-viz runs from this checkout (PYTHONPATH), its C parts compiled here with gcc; Python
# packages it lacks can be put in a folder of wheels named by GGML_VIZ_WHEELS.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VOCAB= SRC= WORK= OUT_TABLE=
while [[ $# -gt 0 ]]; do
    case $1 in
        --vocab) VOCAB=$2; shift 2 ;;
        --llama-src) SRC=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --out) OUT_TABLE=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n $VOCAB && -n $SRC ]] || { sed -n 2,12p "$0" >&2; exit 2; }
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
T0=$(date +%s)
step() { echo "[gpu_served.sh +$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC=$(command -v nvcc || true)
CUDA_HOME=${CUDA_HOME:-$([[ -n $NVCC ]] && dirname "$(dirname "$(readlink -f "$NVCC")")")}
export LD_LIBRARY_PATH=${CUDA_HOME:+$CUDA_HOME/lib64:$CUDA_HOME/lib:}${LD_LIBRARY_PATH:-}
if [[ -n ${GGML_VIZ_WHEELS:-} ]]; then
    step "installing the wheels of $GGML_VIZ_WHEELS"
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$GGML_VIZ_WHEELS"/*.whl || exit 1
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}

step "building llama-server with CUDA from $SRC"
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-native} -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$WORK/cmake.log" 2>&1 \
    && cmake --build "$WORK/build" -j "$(nproc)" --target llama-server > "$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/cmake.log" "$WORK/build.log"; exit 1; }
BIN=$WORK/build/bin
for folder in $(find /usr/local /opt /usr/lib -name 'libcublas.so.1*' -printf '%h\n' 2> /dev/null | sort -u); do
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$folder # a CUDA library the program needs, wherever it is
done
export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
export LLAMA_CPP_LIB_PATH=$BIN # ggml-viz reads the very ggml the server runs
"$BIN/llama-server" --help > /dev/null 2>&1 || { echo "llama-server does not run:"; ldd "$BIN/llama-server" | grep "not found"; exit 1; }

step "ggml-viz's C parts"
sh "$REPO/benchmarks/c_parts.sh" "$REPO" "$PY" "$WORK" || exit 1

step "model"
$PY "$REPO/benchmarks/gpu_model.py" "$WORK/model.gguf" --vocab "$VOCAB" --layers 8 --embd 1024 --ff 2816 || exit 1

step "served, untraced and traced"
$PY "$REPO/benchmarks/served_check.py" --server "$BIN/llama-server" --model "$WORK/model.gguf" --slots 4 \
    --requests 12 --server-args "-ngl 99" --work "$WORK" ${OUT_TABLE:+--out "$OUT_TABLE"}
step "done"
