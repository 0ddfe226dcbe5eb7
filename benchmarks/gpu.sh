#!/usr/bin/env bash
# The GPU check: ggml-viz on llama.cpp built with CUDA, one NVIDIA GPU, in about 8 minutes.
#
#   benchmarks/gpu.sh --vocab VOCAB.gguf (--llama-bin DIR | --llama-src DIR) [--work DIR]
#
#   --vocab      a GGUF vocabulary: llama.cpp's models/ggml-vocab-llama-spm.gguf
#   --llama-bin  llama.cpp's programs and shared libraries, built with -DGGML_CUDA=ON
#   --llama-src  a llama.cpp source tree to build them from (about 4 minutes with 16 jobs); with
#                --llama-bin, built only when those programs do not run
#   --work       where runs, logs and the model go (default: a new temporary folder)
#
# It writes a random-weight TinyLlama-shaped model (Q4_0), then:
#  - llama-bench (-ngl 99, 512 decode steps, 2 repetitions) untraced and under `ggml-viz run`
#    with each recording configuration, in alternating rounds (5; the costliest in the first);
#  - llama-completion (greedy, 128 tokens) untraced, under an independent CUPTI kernel tally
#    (benchmarks/gpu_kernel_tally.c), under the preload library alone (its spool kept), and
#    under ggml-viz with GPU windows and with every graph;
#  - a Python program on llama-cpp-python loaded against these libraries (LLAMA_CPP_LIB_PATH);
# and prints benchmarks/gpu_report.py's table. ggml-viz runs from this checkout (PYTHONPATH);
# its C parts are compiled here with gcc. Python packages it lacks can be put in a folder of
# wheels named by GGML_VIZ_WHEELS. A quick rehearsal on a small model: GPU_CHECK_MODEL="--layers 2
# --embd 256 --ff 512" GPU_CHECK_BENCH="-p 32 -n 32 -r 1" GPU_CHECK_TOKENS=16.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benchmarks/gpu_common.sh
source "$REPO/benchmarks/gpu_common.sh"
VOCAB= BIN= SRC= WORK=
while [[ $# -gt 0 ]]; do
    case $1 in
        --vocab) VOCAB=$2; shift 2 ;;
        --llama-bin) BIN=$2; shift 2 ;;
        --llama-src) SRC=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n $VOCAB && ( -n $BIN || -n $SRC ) ]] || { sed -n 2,10p "$0" >&2; exit 2; }
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"/{bench,runs,text,text-python}
T0=$(date +%s)
step() { echo "[gpu.sh +$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cuda_setup
echo "CUDA_HOME=$CUDA_HOME nproc=$(nproc)"

if [[ -n ${GGML_VIZ_WHEELS:-} ]]; then
    step "installing the wheels of $GGML_VIZ_WHEELS into $WORK/site"
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$GGML_VIZ_WHEELS"/*.whl
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}
[[ -d ${GGML_VIZ_PYTHON_PACKAGES:-/nonexistent} ]] && export PYTHONPATH=$PYTHONPATH:$GGML_VIZ_PYTHON_PACKAGES

if [[ -n $BIN ]] && ! LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH "$BIN/llama-bench" --help > /dev/null 2>&1; then
    for folder in $(find /usr/local /opt /usr/lib -name 'libcublas.so.1*' -printf '%h\n' 2> /dev/null | sort -u); do
        export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$folder # a CUDA library the programs need, wherever it is
    done
fi
if [[ -n $BIN ]] && ! LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH "$BIN/llama-bench" --help > /dev/null 2>&1; then
    echo "the programs in $BIN do not run here:"; LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH ldd "$BIN/llama-bench" | grep "not found"
    [[ -n $SRC ]] && BIN= || exit 1
fi
if [[ -z $BIN ]]; then
    step "building llama.cpp with CUDA from $SRC"
    cuda_configure "$SRC" "$WORK/build" > "$WORK/cmake.log" 2>&1 \
        && cmake --build "$WORK/build" -j "$(nproc)" --target llama-bench llama-completion > "$WORK/build.log" 2>&1 \
        || { tail -30 "$WORK/cmake.log" "$WORK/build.log"; exit 1; }
    BIN=$WORK/build/bin
fi
export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
export LLAMA_CPP_LIB_PATH=$BIN # ggml-viz, and llama-cpp-python, read the very ggml the programs run
"$BIN/llama-bench" --help > /dev/null 2>&1 || { echo "llama-bench does not run:"; ldd "$BIN/llama-bench" | grep "not found"; exit 1; }

step "ggml-viz's C parts"
sh "$REPO/benchmarks/c_parts.sh" "$REPO" "$PY" "$WORK" || exit 1
PRELOAD=$REPO/src/ggml_viz/capture/preload
TALLY=
if tally_build "$WORK/tally.so" "$WORK/tally.log"; then TALLY=$WORK/tally.so; fi
echo "cupti: $CUPTI_LIB; tally: ${TALLY:-not built ($(tail -1 "$WORK/tally.log"))}"

step "model"
M=$WORK/model.gguf
$PY "$REPO/benchmarks/gpu_model.py" "$M" --vocab "$VOCAB" ${GPU_CHECK_MODEL:-} || exit 1
VIZ="$PY -m ggml_viz"

bench() { # CONFIG ROUND [ggml-viz run options...]; untraced when CONFIG is untraced
    local config=$1 round=$2; shift 2
    local out=$WORK/bench/$config.$round.json run=$WORK/runs/bench-$config.$round.ggmlviz
    local program=("$BIN/llama-bench" -m "$M" -ngl 99 ${GPU_CHECK_BENCH:--p 512 -n 512 -r 2} -o json)
    local t=$(date +%s)
    if [[ $config == untraced ]]; then
        timeout 180 "${program[@]}" > "$out" 2> "$out.err"
    else
        rm -rf "$run"
        env "${ENVS[@]}" timeout 240 $VIZ run -o "$run" "$@" -- "${program[@]}" > "$out" 2> "$out.err"
    fi
    echo "  $config round $round: exit $? in $(( $(date +%s) - t ))s $(grep -h 'ggml-viz' "$out.err" | head -2 | tr '\n' ' ')"
    [[ $round == 1 ]] || [[ $config == untraced ]] || rm -rf "$run"
}
step "llama-bench rounds"
for round in $(seq "${GPU_CHECK_ROUNDS:-5}"); do # GPU_CHECK_ROUNDS=0: none
    ENVS=(); bench untraced $round
    ENVS=(); bench graph $round --detail graph
    ENVS=(); bench nocupti $round --gpu off
    ENVS=(); bench windows $round
    if [[ $round == 1 ]]; then # the costly ones, once
        ENVS=(GGML_VIZ_GPU_DETACH=0); bench keep $round
        ENVS=(); bench every $round --gpu every
        ENVS=(); bench sync $round --timing sync
    fi
done

step "llama-completion"
PROMPT="The history of the city begins with a small settlement on the river, where"
COMPLETION=("$BIN/llama-completion" -m "$M" -ngl 99 -p "$PROMPT" -n "${GPU_CHECK_TOKENS:-128}" -no-cnv --temp 0 -s 1)
text_of() { sed '/^run written to /,$d' "$1"; } # the program's output, before ggml-viz's lines
timeout 120 "${COMPLETION[@]}" > "$WORK/text/untraced.txt" 2> "$WORK/untraced.err"; echo "  untraced: exit $?"
[[ -n $TALLY ]] && { LD_PRELOAD=$TALLY GPU_TALLY_OUT=$WORK/tally.tsv timeout 120 "${COMPLETION[@]}" > /dev/null 2> "$WORK/tally.err"; echo "  tally: exit $?"; }
# the preload library alone (no `ggml-viz run`): its spool stays in the run until a command opens it
rm -rf "$WORK/runs/completion-spool.ggmlviz"
LD_PRELOAD=$PRELOAD/libggml_viz_preload.so GGML_VIZ_OUTPUT=$WORK/runs/completion-spool.ggmlviz \
    timeout 120 "${COMPLETION[@]}" > "$WORK/text/preload.txt" 2> "$WORK/preload.err"
echo "  preload alone: exit $? $(ls "$WORK/runs/completion-spool.ggmlviz/spool")"
for config in windows every; do
    options=(); [[ $config == every ]] && options=(--gpu every)
    timeout 180 $VIZ run -f -o "$WORK/runs/completion-$config.ggmlviz" "${options[@]}" -- "${COMPLETION[@]}" > "$WORK/$config.out" 2> "$WORK/$config.err"
    echo "  $config: exit $? $(grep -h 'ggml-viz' "$WORK/$config.err" | head -2 | tr '\n' ' ')"
    text_of "$WORK/$config.out" > "$WORK/text/$config.txt"
done

if [[ -n ${GGML_VIZ_LLAMA_CPP_PYTHON:-} ]] && $PY -c "import ggml_viz.capture.core._recorder" 2> /dev/null; then
    step "a Python program (llama-cpp-python on these libraries: LLAMA_CPP_LIB_PATH)"
    cat > "$WORK/app.py" << 'EOF'
import sys, time, ggml_viz
from llama_cpp import Llama
def generate():
    llm = Llama(sys.argv[1], n_gpu_layers=99, n_ctx=1024, verbose=False)
    begin = time.perf_counter()
    text = llm("The history of the city begins with", max_tokens=256, temperature=0)["choices"][0]["text"]
    print(f"{256 / (time.perf_counter() - begin):.1f} tokens/s", file=sys.stderr)
    return text
if len(sys.argv) > 2:
    with ggml_viz.record(sys.argv[2]):
        print(generate())
else:
    print(generate())
EOF
    timeout 120 $PY "$WORK/app.py" "$M" > "$WORK/text-python/untraced.txt" 2> "$WORK/python-untraced.err"
    echo "  untraced: exit $? $(tail -1 "$WORK/python-untraced.err")"
    timeout 180 $PY "$WORK/app.py" "$M" "$WORK/runs/python-windows.ggmlviz" > "$WORK/text-python/windows.txt" 2> "$WORK/python-windows.err"
    echo "  windows: exit $? $(grep -h 'tokens/s\|ggml-viz' "$WORK/python-windows.err" | head -3 | tr '\n' ' ')"
fi

step "report"
$PY "$REPO/benchmarks/gpu_report.py" "$WORK"
$PY "$REPO/benchmarks/gpu_report.py" --texts "$WORK/text-python" 2> /dev/null
step "done; runs in $WORK/runs"
