#!/usr/bin/env bash
# The GPU check: every claim ggml-viz makes about a GPU, checked on one NVIDIA GPU (H100, H200) in
# under 10 minutes, ending in ONE table: claim by claim, the figure measured and PASS, FAIL or SKIP
# with the reason (benchmarks/gpu_check_table.py makes it).
#
#   PYTHON=.venv/bin/python benchmarks/gpu_check.sh --prepare [--from LLAMA_CPP_TREE]
#   benchmarks/gpu_check.sh [--work DIR] [--table FILE] [--budget SECONDS] [--llama-src DIR]
#                           [--vocab FILE] [--llama-bin DIR] [--vulkan-bin DIR] [--small] [--rehearse]
#
# Prepare once where the network is (it fills .gpu-check/, 52 MiB), carry .gpu-check/ along with the
# checkout, then on the GPU machine, from the root of that copy of the checkout:
#   bash benchmarks/gpu_check.sh --work /tmp/gpu-check --table "$OUT/table.md" 2>&1 | tee "$OUT/log.txt"
# A rehearsal on a machine without a GPU, on `make setup`'s CPU and lavapipe builds (~4 minutes on 2 cores):
#   benchmarks/gpu_check.sh --small --rehearse --budget 1000 \
#       --llama-bin ~/.cache/ggml-viz/llama.cpp-0.3.36-portable-rpc/bin --vulkan-bin ~/.cache/ggml-viz/llama.cpp-0.3.36-vulkan/bin
#
#   --prepare     copy what the GPU machine cannot fetch into .gpu-check/ (ignored by git; carry it
#                 along): llama.cpp's source without build outputs, docs, tests or models
#                 (.gpu-check/llama.cpp; --from: the tree, by default the one llama-cpp-python
#                 vendors, as `make setup` unpacks it), llama.cpp's models/ggml-vocab-llama-spm.gguf,
#                 wheels of the Python packages that machine's image lacks (duckdb, gguf: pip
#                 download) and, packed, this machine's glslc, Vulkan loader and headers and
#                 SPIRV-Headers (for the Vulkan build); then checks it all, with the checkout's
#                 own files, is under the 64 MiB a device run may carry
#   --work        where the builds, models, runs and logs go (default: a new folder in /tmp)
#   --table       also write the table there
#   --budget      seconds after which no step starts (default 540; the table takes ~30 s more)
#   --llama-src   llama.cpp's source tree (default .gpu-check/llama.cpp)
#   --vocab       a GGUF vocabulary (default .gpu-check/ggml-vocab-llama-spm.gguf)
#   --llama-bin   llama.cpp's programs built with CUDA already (no CUDA build); --vulkan-bin: with Vulkan
#   --small       tiny models and short runs (a rehearsal's)
#   --rehearse    no GPU: run every step on the --llama-bin and --vulkan-bin given (a CPU build, and a
#                 Vulkan build on Mesa's lavapipe) to try the script's own plumbing; the table says so
#
# What it does: builds llama.cpp (llama-completion, llama-bench) with CUDA and, in the background
# beside it, with Vulkan where glslc, the headers and NVIDIA's Vulkan driver (its ICD) are there;
# meanwhile ggml-viz's C parts (benchmarks/c_parts.sh), the CUPTI tally (gpu_kernel_tally.c) and
# random-weight models written with gguf's writer (benchmarks/gpu_model.py: a dense llama of
# TinyLlama-1.1B's shape in Q4_0, a 4-layer one in F16; benchmarks/moe_model.py: a 12-layer qwen3moe
# of 32 experts). Then one step after another, each timed, recorded in WORK/steps.tsv as ok, fail
# or skip with its reason, never stopping the rest; no step starts once the budget is spent. The
# claims (gpu_check_table.py's CLAIMS):
#   dense -ngl 99    greedy text the same untraced and under `ggml-viz run`; every non-view node of
#                    every traced step timed; op shares (ggml-viz's op table, estimated over the run
#                    from the traced graphs) against an independent CUPTI tally of every kernel of an
#                    untraced run (each device's busy time counted once), within 3 points; kernel
#                    shares under --gpu every against the tally; the default recording's cost over
#                    512 decode steps (llama-bench tg, median of alternating rounds) at most 1.05x,
#                    else what dominates: the timer's own overhead_ns or the rest
#   -ngl N/2, MoE --n-cpu-moe N/2
#                    every node of a traced step timed on its own device (CPU nodes by their ticks,
#                    GPU nodes by the GPU's records); each device's busy and waiting parts adding up
#                    to the step within 1 %; the scheduler's copies between splits present, each with
#                    the split it feeds and bytes more than 0 and at most the step's largest
#                    activation; whatif's recorded placement within 3 % of its own steps, and its
#                    predictions within 15 % of llama-bench measured at those placements
#   F16 prompt       512 tokens through cuBLAS (--gpu every): every kernel attributed to its node,
#                    cuBLAS's own (launched through the driver API) among them
#   limits           `ggml-viz limits` on the GPU: read bandwidth 60-100 % of the part's published
#                    figure (nvidia-smi's name), F16 matrix product 25-100 % of its dense peak
#   Vulkan           on NVIDIA's Vulkan driver: greedy text, op shares against GGML_VK_PERF_LOGGER
#                    (ggml-vulkan's own timing, in the same process), the default recording's cost
# Without a GPU every claim is SKIP with the reason, the table printed all the same.
# ggml-viz runs from this checkout (PYTHONPATH=src); python3 (or $PYTHON) runs it. Knobs: JOBS_CUDA
# (default: every core) and JOBS_VULKAN (6) build jobs, CUDA_ARCHITECTURES (default: the GPU's own,
# from nvidia-smi, as NN-real), GPU_CHECK_ROUNDS (llama-bench's alternating rounds, 3).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$REPO/benchmarks
# shellcheck source=benchmarks/gpu_common.sh
source "$BENCH/gpu_common.sh"
DATA=$REPO/.gpu-check
PY=${PYTHON:-python3}
SRC='' VOCAB='' WORK='' TABLE='' BUDGET=540 BIN='' VK_BIN='' SMALL=0 REHEARSE=0 PREPARE=0 FROM=''
while [[ $# -gt 0 ]]; do
    case $1 in
        --prepare) PREPARE=1; shift ;;
        --from) FROM=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --table) TABLE=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --llama-src) SRC=$2; shift 2 ;;
        --vocab) VOCAB=$2; shift 2 ;;
        --llama-bin) BIN=$2; shift 2 ;;
        --vulkan-bin) VK_BIN=$2; shift 2 ;;
        --small) SMALL=1; shift ;;
        --rehearse) REHEARSE=1; shift ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (--help)" >&2; exit 2 ;;
    esac
done

# -- preparing .gpu-check/ (here) ---------------------------------------------------------------

CARRY_LIMIT=$((64 << 20))
# what llama-completion and llama-bench do not need, left out of the copy
LEAVE_OUT=(.git .github .devops build 'build-*' docs models tests examples pocs benches media gguf-py
    scripts conversion grammars requirements app tools/ui tools/server tools/cli '*.o' '*.so' '*.a')
# ggml's backends other than the CPU's, CUDA's and Vulkan's (ggml adds only those switched on)
for backend in cann et hexagon hip metal musa opencl openvino sycl virtgpu webgpu zdnn zendnn; do
    LEAVE_OUT+=("ggml/src/ggml-$backend")
done

prepare() {
    local cache=${GGML_VIZ_CACHE:-$HOME/.cache/ggml-viz}
    local from=${FROM:-$cache/llama.cpp-0.3.36-portable-rpc/src/llama_cpp_python-0.3.36/vendor/llama.cpp}
    [[ -f $from/CMakeLists.txt && -d $from/ggml/src/ggml-cuda ]] || {
        echo "no llama.cpp tree at $from (--from DIR; \`make setup\` unpacks llama-cpp-python's)" >&2
        return 1
    }
    mkdir -p "$DATA"
    rm -rf "$DATA/llama.cpp" && mkdir "$DATA/llama.cpp"
    local excludes=() item
    for item in "${LEAVE_OUT[@]}"; do excludes+=(--exclude="./$item"); done
    tar -C "$from" "${excludes[@]}" -cf - . | tar -C "$DATA/llama.cpp" -xf - || return 1
    cp "$from/models/ggml-vocab-llama-spm.gguf" "$DATA/" || return 1
    echo "llama.cpp's source from $from: $(du -sh "$DATA/llama.cpp" | cut -f1)"
    prepare_wheels
    prepare_vulkan_tools
    local carried tracked
    carried=$(du -sb "$DATA" | cut -f1)
    tracked=$(cd "$REPO" && git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
    echo "$DATA: $((carried >> 20)) MiB; with the checkout's files $(((carried + tracked) >> 20)) MiB" \
        "(a device run carries at most $((CARRY_LIMIT >> 20)) MiB)"
    if ((carried + tracked > CARRY_LIMIT)); then
        echo "too large to carry: leave something out" >&2
        return 1
    fi
    echo "ready: carry .gpu-check (run's carry: [\".gpu-check\"]) and run, in the checkout's root:"
    echo "  bash benchmarks/gpu_check.sh --work /tmp/gpu-check --table \"\$OUT/table.md\" 2>&1 | tee \"\$OUT/log.txt\""
}

prepare_wheels() { # the packages ggml-viz needs that the GPU machine's image lacks, for its Python 3.12
    local wanted
    wanted=$("$PY" -c 'from importlib.metadata import version as v; print("duckdb==" + v("duckdb"), "gguf==" + v("gguf"))') || {
        echo "no wheels: $PY lacks duckdb or gguf" >&2
        return 0
    }
    mkdir -p "$DATA/wheels"
    # shellcheck disable=SC2086 # the list splits on purpose
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$DATA/wheels" $wanted || echo "the wheels were not downloaded ($wanted): bring them into $DATA/wheels" >&2
    ls "$DATA/wheels"
}

prepare_vulkan_tools() { # glslc, the Vulkan loader, Vulkan's headers and SPIRV-Headers, packed
    local tools glslc shaderc loader headers
    headers=${VULKAN_HEADERS:-${GGML_VIZ_CACHE:-$HOME/.cache/ggml-viz}/vulkan-headers-1.4.309/usr/include}
    glslc=$(command -v glslc || true)
    [[ -d $headers/vulkan ]] || headers=/usr/include
    if [[ -z $glslc || ! -f $headers/vulkan/vulkan.hpp || ! -d /usr/share/cmake/SPIRV-Headers ]]; then
        echo "no Vulkan tools packed: glslc, Vulkan's headers or SPIRV-Headers missing here (make setup installs them)"
        return 0
    fi
    tools=$(mktemp -d)
    mkdir -p "$tools/bin" "$tools/lib" "$tools/loader" "$tools/include" "$tools/share/cmake"
    shaderc=$(ldd "$glslc" | awk '/libshaderc/ {print $3}')
    loader=$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/ {print $NF; exit}')
    cp "$glslc" "$tools/bin/" && cp -L "$shaderc" "$tools/lib/" && cp -L "$loader" "$tools/loader/libvulkan.so.1"
    cp -r "$headers/vulkan" "$headers/vk_video" "$tools/include/" 2> /dev/null
    cp -r /usr/include/spirv "$tools/include/" && cp -r /usr/share/cmake/SPIRV-Headers "$tools/share/cmake/"
    tar -C "$tools" -cJf "$DATA/vulkan-tools.tar.xz" . && rm -rf "$tools"
    echo "Vulkan tools: $(du -h "$DATA/vulkan-tools.tar.xz" | cut -f1) ($glslc, $loader, headers of $headers)"
}

if ((PREPARE)); then
    prepare
    exit $?
fi

# -- the check ----------------------------------------------------------------------------------

WORK=${WORK:-$(mktemp -d /tmp/gpu-check.XXXX)}
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK"/{dense,half,moe,f16,limits,vulkan}
: > "$WORK/steps.tsv"
START=$(date +%s)
END=$((START + BUDGET))
RESERVE=100 # seconds the steps after a build need at least
elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((END - $(date +%s))); }
say() { echo "[gpu_check +$(elapsed)s] $*"; }
fact() { printf '%s\t%s\n' "$1" "$2" >> "$WORK/machine.tsv"; }

declare -A STATUS REASON
record() { # NAME ok|fail|skip SECONDS REASON
    local reason=${4//$'\t'/ }
    reason=${reason//$'\n'/ }
    STATUS[$1]=$2 REASON[$1]=$reason
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$reason" >> "$WORK/steps.tsv"
    [[ $2 == ok ]] || say "$2 $1: $reason"
}
skip() { # NAME REASON...
    local name=$1
    shift
    record "$name" skip 0 "$*"
}
needs() { # NAME STEP...: whether every STEP went well; NAME skipped, with the first one's reason, if not
    local name=$1 other
    shift
    for other in "$@"; do
        case ${STATUS[$other]:-} in
            ok) ;;
            skip) skip "$name" "${REASON[$other]}"; return 1 ;;
            fail) skip "$name" "$other failed: ${REASON[$other]}"; return 1 ;;
            *) skip "$name" "$other did not run"; return 1 ;;
        esac
    done
}
check() { # NAME SECONDS STEP... -- FUNCTION [ARGS...]: step NAME, once every STEP it needs went well
    local name=$1 wanted=$2 needed=()
    shift 2
    while [[ $1 != -- ]]; do needed+=("$1"); shift; done
    shift
    needs "$name" "${needed[@]}" && step "$name" "$wanted" "$@"
}
last_words() { tail -n 3 "$1" 2> /dev/null | tr '\n' ' ' | cut -c1-240; }
step() { # NAME SECONDS FUNCTION [ARGS...]: FUNCTION run as step NAME if SECONDS are left; its status recorded
    local name=$1 wanted=$2 began rc
    shift 2
    if (($(left) < wanted)); then
        skip "$name" "out of time: $(left)s of the ${BUDGET}s budget left, the step needs ~${wanted}s"
        return 1
    fi
    say "step $name"
    began=$(date +%s)
    "$@" >> "$LOGS/$name.log" 2>&1
    rc=$?
    if ((rc == 0)); then
        record "$name" ok $(($(date +%s) - began)) ""
    elif ((rc == 124 || rc == 137)) && (($(left) <= 1)); then
        record "$name" skip $(($(date +%s) - began)) "out of time: cut at the end of the ${BUDGET}s budget"
    elif ((rc == 124 || rc == 137)); then
        record "$name" fail $(($(date +%s) - began)) "timed out (log: logs/$name.log)"
    else
        record "$name" fail $(($(date +%s) - began)) "exit $rc: $(last_words "$LOGS/$name.log")"
    fi
    return $rc
}
limited() { # SECONDS COMMAND...: COMMAND for at most SECONDS, and never past the budget's end
    local limit=$1 rest
    shift
    rest=$(left)
    ((rest < limit)) && limit=$rest
    ((limit > 0)) || return 124
    timeout -k 5 "$limit" "$@"
}

# -- the machine ---------------------------------------------------------------------------------

fact cores "$(nproc)"
fact budget "$BUDGET"
GPU_REASON=''
if ! command -v nvidia-smi > /dev/null; then
    GPU_REASON="no NVIDIA GPU (nvidia-smi not found)"
elif ! GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1) ||
    [[ -z $GPU_NAME || $GPU_NAME == *[Ff]ailed* || $GPU_NAME == *"No devices"* ]]; then
    GPU_REASON="no NVIDIA GPU (nvidia-smi: ${GPU_NAME:-no answer})"
fi
MODE=gpu
if [[ -n $GPU_REASON ]]; then
    MODE=none
    ((REHEARSE)) && [[ -n $BIN ]] && MODE=rehearsal
else
    fact gpu "$GPU_NAME"
    fact driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
fi
fact mode "$MODE"
cuda_setup
BASE_LD=$LD_LIBRARY_PATH
if [[ $MODE == gpu ]] && command -v nvcc > /dev/null; then
    fact cuda "$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
fi
say "mode $MODE, work in $WORK, budget ${BUDGET}s; CUDA_HOME=${CUDA_HOME:-none}, $(nproc) cores"

if ((SMALL)); then
    DENSE_SHAPE=(--layers 2 --embd 256 --ff 512) LAYERS=2
    F16_SHAPE=(--layers 2 --embd 256 --ff 512)
    MOE_SHAPE=(--layers 2 --experts 8 --used 2 --embd 256 --ff-exp 128) MOE_LAYERS=2
    TOKENS=16 SPLIT_TOKENS=8 BENCH_TOKENS=32 BENCH_REPS=1 ROUNDS=${GPU_CHECK_ROUNDS:-2}
else
    DENSE_SHAPE=(--layers 22 --embd 2048 --ff 5632) LAYERS=22
    F16_SHAPE=(--layers 4 --embd 2048 --ff 5632)
    MOE_SHAPE=(--layers 12 --experts 32 --used 4 --embd 1024 --ff-exp 512) MOE_LAYERS=12
    TOKENS=128 SPLIT_TOKENS=32 BENCH_TOKENS=512 BENCH_REPS=2 ROUNDS=${GPU_CHECK_ROUNDS:-3}
fi
HALF=$((LAYERS / 2)) ALL=$((LAYERS + 1)) MOE_HALF=$((MOE_LAYERS / 2))
PROMPT="The history of the city begins with a small settlement on the river, where"
GREEDY=(-p "$PROMPT" -no-cnv --temp 0 -s 1)
DENSE=$WORK/dense.gguf F16=$WORK/f16.gguf MOE=$WORK/moe.gguf
VIZ=("$PY" -m ggml_viz)

SRC=${SRC:-$DATA/llama.cpp}
if [[ -z $VOCAB ]]; then
    VOCAB=$DATA/ggml-vocab-llama-spm.gguf
    [[ -f $VOCAB ]] || VOCAB=$SRC/models/ggml-vocab-llama-spm.gguf
fi

# Vulkan: NVIDIA's driver (its ICD), glslc, headers and loader (the machine's, else those carried)
ICD='' VK_REASON='' VK_TOOLS=$WORK/vulkan-tools VULKAN_CMAKE=() VK_LOADER=''
find_vulkan() {
    local folder
    if [[ $MODE == rehearsal ]]; then
        local lavapipe=(/usr/share/vulkan/icd.d/lvp_icd.*.json)
        [[ -f ${lavapipe[0]} ]] && ICD=${lavapipe[0]} || VK_REASON="no lavapipe to rehearse on (mesa-vulkan-drivers)"
        [[ -n $VK_BIN ]] || VK_REASON="no --vulkan-bin to rehearse with"
        return
    fi
    local folders=(/usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d)
    for folder in "${folders[@]}"; do
        [[ -f $folder/nvidia_icd.json ]] && ICD=$folder/nvidia_icd.json && break
    done
    if [[ -z $ICD ]]; then
        local looked=${folders[*]}
        VK_REASON="no NVIDIA Vulkan driver (no nvidia_icd.json in ${looked// /, })"
        return
    fi
    [[ -n $VK_BIN ]] && return
    if [[ -f $DATA/vulkan-tools.tar.xz ]]; then
        mkdir -p "$VK_TOOLS" && tar -C "$VK_TOOLS" -xJf "$DATA/vulkan-tools.tar.xz"
    fi
    local glslc headers=/usr/include library
    glslc=$(command -v glslc || true)
    [[ -x $VK_TOOLS/bin/glslc ]] && glslc=$VK_TOOLS/bin/glslc
    [[ -f $VK_TOOLS/include/vulkan/vulkan.hpp ]] && headers=$VK_TOOLS/include
    library=$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/ {print $NF; exit}')
    if [[ -z $library && -f $VK_TOOLS/loader/libvulkan.so.1 ]]; then
        library=$VK_TOOLS/loader/libvulkan.so.1 VK_LOADER=$VK_TOOLS/loader
    fi
    if [[ -z $glslc ]]; then
        VK_REASON="no glslc (shaderc): not on PATH, none carried in .gpu-check/vulkan-tools.tar.xz"
    elif [[ ! -f $headers/vulkan/vulkan.hpp ]]; then
        VK_REASON="no Vulkan headers (vulkan/vulkan.hpp)"
    elif [[ -z $library ]]; then
        VK_REASON="no Vulkan loader (libvulkan.so.1)"
    else
        VULKAN_CMAKE=(-DVulkan_GLSLC_EXECUTABLE="$glslc" -DVulkan_INCLUDE_DIR="$headers" -DVulkan_LIBRARY="$library")
        local spirv=$VK_TOOLS/share/cmake/SPIRV-Headers
        [[ -d $spirv ]] && VULKAN_CMAKE+=(-DSPIRV-Headers_DIR="$spirv")
        export VULKAN_INCLUDE=$headers # (c_parts.sh builds ggml-viz's Vulkan layer against them)
        export LD_LIBRARY_PATH=$VK_TOOLS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} # (glslc's libshaderc)
    fi
}
find_vulkan
[[ -n $VK_REASON ]] && say "Vulkan: $VK_REASON"

# -- the builds, in the background --------------------------------------------------------------

declare -A BUILD_PID BUILD_BEGAN
libraries_of() { # DIR: where a build's shared libraries are (beside its programs, or in ../lib)
    if ls "$1"/libggml-base.so* > /dev/null 2>&1; then echo "$1"; else echo "$(cd "$1/.." && pwd)/lib"; fi
}
build_cuda() {
    local arch
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d '.')
    CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-${arch:+$arch-real}} cuda_configure "$SRC" "$WORK/build-cuda" \
        -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_APP=OFF || return 1
    limited $(($(left) - RESERVE)) cmake --build "$WORK/build-cuda" -j "${JOBS_CUDA:-$(nproc)}" \
        --target llama-completion llama-bench
}
build_vulkan() {
    cmake -S "$SRC" -B "$WORK/build-vulkan" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_VULKAN=ON \
        -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "${VULKAN_CMAKE[@]}" || return 1
    # below the CUDA build's priority: that one is the longer, and the checks wait for it
    limited $(($(left) - RESERVE)) nice -n 10 cmake --build "$WORK/build-vulkan" -j "${JOBS_VULKAN:-6}" \
        --target llama-completion llama-bench
}
start_build() { # NAME FUNCTION: FUNCTION in the background, its exit status in WORK/NAME.rc
    BUILD_BEGAN[$1]=$(date +%s)
    ("$2" > "$LOGS/$1.log" 2>&1; echo $? > "$WORK/$1.rc") &
    BUILD_PID[$1]=$!
    say "building in the background: $1 (log: logs/$1.log)"
}
finish_build() { # NAME: wait for it; its step recorded
    local rc
    wait "${BUILD_PID[$1]}"
    rc=$(cat "$WORK/$1.rc" 2> /dev/null || echo 1)
    if ((rc == 0)); then
        record "$1" ok $(($(date +%s) - BUILD_BEGAN[$1])) ""
    elif ((rc == 124 || rc == 137)); then
        record "$1" fail $(($(date +%s) - BUILD_BEGAN[$1])) "did not finish within the budget (log: logs/$1.log)"
    else
        record "$1" fail $(($(date +%s) - BUILD_BEGAN[$1])) \
            "exit $rc: $(grep -m1 -A2 'error:\|CMake Error' "$LOGS/$1.log" | tr '\n' ' ' | cut -c1-240)"
    fi
}
running() { [[ -n ${BUILD_PID[$1]:-} && ! -f $WORK/$1.rc ]]; }

CUDA_BIN='' CUDA_LIB=''
if [[ $MODE == none ]]; then
    skip cuda-build "$GPU_REASON"
elif [[ -n $BIN ]]; then
    CUDA_BIN=$BIN CUDA_LIB=$(libraries_of "$BIN")
    record cuda-build ok 0 ""
    say "llama.cpp's programs: $BIN (libraries in $CUDA_LIB)"
elif [[ ! -f $SRC/CMakeLists.txt ]]; then
    skip cuda-build "no llama.cpp source at $SRC (benchmarks/gpu_check.sh --prepare fills .gpu-check/)"
elif ! command -v nvcc > /dev/null; then
    skip cuda-build "no CUDA toolkit (nvcc not found)"
else
    CUDA_BIN=$WORK/build-cuda/bin CUDA_LIB=$WORK/build-cuda/bin
    start_build cuda-build build_cuda
fi
VK_BIN_DIR='' VK_LIB=''
if [[ -n $VK_REASON ]]; then
    skip vulkan-build "$VK_REASON"
elif [[ -n $VK_BIN ]]; then
    VK_BIN_DIR=$VK_BIN VK_LIB=$(libraries_of "$VK_BIN")
    record vulkan-build ok 0 ""
elif [[ ! -f $SRC/CMakeLists.txt ]]; then
    skip vulkan-build "no llama.cpp source at $SRC (benchmarks/gpu_check.sh --prepare fills .gpu-check/)"
else
    VK_BIN_DIR=$WORK/build-vulkan/bin VK_LIB=$WORK/build-vulkan/bin
    start_build vulkan-build build_vulkan
fi
# how each backend's programs run: its own libraries first (the two builds' share their names)
CU_ENV=(env "LD_LIBRARY_PATH=$CUDA_LIB${BASE_LD:+:$BASE_LD}" "LLAMA_CPP_LIB_PATH=$CUDA_LIB")
# (the driver's libraries, where the ICD is NVIDIA's container folder's)
[[ $ICD == /usr/local/nvidia/* ]] && VK_LOADER=${VK_LOADER:+$VK_LOADER:}/usr/local/nvidia/lib64:/usr/local/nvidia/lib
VK_ENV=(env "LD_LIBRARY_PATH=$VK_LIB${VK_LOADER:+:$VK_LOADER}${BASE_LD:+:$BASE_LD}" "LLAMA_CPP_LIB_PATH=$VK_LIB"
    "VK_DRIVER_FILES=$ICD" "VK_ICD_FILENAMES=$ICD" GGML_VK_VISIBLE_DEVICES=0)

# -- meanwhile: Python, ggml-viz's C parts, the tally, the models --------------------------------

python_modules() {
    "$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("numpy", "pandas", "pyarrow", "duckdb", "gguf", "rich") if u.find_spec(m) is None))'
}
python_setup() {
    local missing
    missing=$(python_modules) || return 1
    if [[ -n $missing ]] && ls "$DATA"/wheels/*.whl > /dev/null 2>&1; then
        echo "installing $DATA/wheels into $WORK/site for: $missing"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$DATA"/wheels/*.whl || return 1
        export PYTHONPATH=$WORK/site:$PYTHONPATH
        missing=$(python_modules)
    fi
    [[ -z $missing ]] || { echo "$PY lacks $missing (benchmarks/gpu_check.sh --prepare carries wheels)"; return 1; }
    "$PY" -c 'import ggml_viz; print("ggml-viz", ggml_viz.__version__, "from", ggml_viz.__file__)'
}
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}
[[ -d ${GGML_VIZ_PYTHON_PACKAGES:-/nonexistent} ]] && export PYTHONPATH=$PYTHONPATH:$GGML_VIZ_PYTHON_PACKAGES
step python 10 python_setup
check c-parts 30 python -- sh "$BENCH/c_parts.sh" "$REPO" "$PY" "$WORK"
TALLY=$WORK/tally.so
tally_step() { tally_build "$TALLY" "$LOGS/tally-build.log" || { cat "$LOGS/tally-build.log"; return 1; }; }
if [[ $MODE == none ]]; then
    skip tally "$GPU_REASON"
elif [[ -z $CUDA_HOME ]]; then
    skip tally "no CUDA toolkit (nvcc not found): no CUPTI to build the tally against"
else
    step tally 10 tally_step
fi
write_models() {
    [[ -f $VOCAB ]] || { echo "no vocabulary at $VOCAB (--vocab, or --prepare)"; return 1; }
    "$PY" "$BENCH/gpu_model.py" "$DENSE" --vocab "$VOCAB" "${DENSE_SHAPE[@]}" &&
        "$PY" "$BENCH/gpu_model.py" "$F16" --vocab "$VOCAB" "${F16_SHAPE[@]}" --type f16 &&
        "$PY" "$BENCH/moe_model.py" "$MOE" --vocab "$VOCAB" "${MOE_SHAPE[@]}"
}
if [[ $MODE == none ]] && ((!SMALL)); then
    skip models "$GPU_REASON: no model written (--small writes tiny ones)"
else
    check models 60 python -- write_models
fi

# -- the steps ------------------------------------------------------------------------------------

# each step's function: its outputs in WORK/PART/, its log in WORK/logs/STEP.log
untraced() { # OUT ENV_NAME PROGRAM...: the program alone, its standard output kept
    local out=$1 env_name=$2
    shift 2
    local -n wrap=$env_name
    limited 180 "${wrap[@]}" "$@" > "$out"
}
traced() { # RUN OUT ENV_NAME [RUN_OPTIONS...] -- PROGRAM...: the program under `ggml-viz run`
    local run=$1 out=$2 env_name=$3 options=()
    shift 3
    while [[ $1 != -- ]]; do options+=("$1"); shift; done
    shift
    local -n wrap=$env_name
    limited 240 "${wrap[@]}" "${VIZ[@]}" run -f -o "$run" "${options[@]}" -- "$@" > "$out"
}
tallied() { # FOLDER PROGRAM...: the program under the CUPTI tally (no ggml-viz)
    local folder=$1
    shift
    limited 180 "${CU_ENV[@]}" LD_PRELOAD="$TALLY" GPU_TALLY_OUT="$folder/tally.tsv" \
        GPU_TALLY_RECORDS="$folder/tally-records.tsv" "$@" > /dev/null 2> "$folder/tally.err" ||
        { last_words "$folder/tally.err"; return 1; }
    [[ -s $folder/tally-records.tsv ]] || { echo "the tally recorded no kernel"; return 1; }
}
bench_rounds() { # FOLDER ENV_NAME LLAMA_BENCH MODEL: tg untraced and under the default recording, alternating
    local folder=$1/bench env_name=$2 round config order
    local program=("$3" -m "$4" -ngl 99 -p 0 -n "$BENCH_TOKENS" -r "$BENCH_REPS" -o json)
    local -n wrap=$env_name
    mkdir -p "$folder"
    for round in $(seq "$ROUNDS"); do
        if ((round > 1 && $(left) < 40)); then
            echo "round $round not started: $(left)s left"
            break
        fi
        order="untraced default"
        ((round % 2 == 0)) && order="default untraced"
        for config in $order; do
            if [[ $config == untraced ]]; then
                limited 120 "${wrap[@]}" "${program[@]}" > "$folder/untraced.$round.json" 2> "$folder/untraced.$round.err"
            else
                limited 240 "${wrap[@]}" "${VIZ[@]}" run -f -o "$folder/default.$round.ggmlviz" -- "${program[@]}" \
                    > "$folder/default.$round.json" 2> "$folder/default.$round.err"
            fi || { echo "$config round $round: exit $?: $(last_words "$folder/$config.$round.err")"; return 1; }
            echo "$config round $round done at +$(elapsed)s"
        done
    done
}
whatif() { # FOLDER OPTIONS...: whatif's predictions from FOLDER's traced run
    local folder=$1
    shift
    limited 120 "${CU_ENV[@]}" "${VIZ[@]}" whatif "$folder/traced.ggmlviz" "$@" --prompt-tokens 16 --json \
        > "$folder/whatif.json"
}
benched() { # OUT LLAMA_BENCH_OPTIONS...: llama-bench untraced, on the CUDA build
    local out=$1
    shift
    limited 180 "${CU_ENV[@]}" "$CUDA_BIN/llama-bench" "$@" -o json > "$out"
}
measure_limits() {
    GGML_VIZ_LIMITS_DIR=$WORK/limits/kept limited 150 "${CU_ENV[@]}" "${VIZ[@]}" limits --ggml "$CUDA_LIB" \
        --threads 1 --types F16 --size-mib 64 --repeats 3 --again --json > "$WORK/limits/limits.json"
}

cuda_steps() {
    local D=$WORK/dense H=$WORK/half M=$WORK/moe dense_run half_run moe_run
    dense_run=("$CUDA_BIN/llama-completion" -m "$DENSE" -n "$TOKENS" "${GREEDY[@]}" -ngl 99)
    half_run=("$CUDA_BIN/llama-completion" -m "$DENSE" -n "$SPLIT_TOKENS" "${GREEDY[@]}" -ngl "$HALF")
    moe_run=("$CUDA_BIN/llama-completion" -m "$MOE" -n "$SPLIT_TOKENS" "${GREEDY[@]}" -ngl 99 --n-cpu-moe "$MOE_HALF")
    check dense-untraced 20 cuda-build models -- untraced "$D/untraced.txt" CU_ENV "${dense_run[@]}"
    check dense-traced 40 cuda-build models c-parts dense-untraced -- \
        traced "$D/traced.ggmlviz" "$D/traced.txt" CU_ENV -- "${dense_run[@]}"
    check dense-tally 20 cuda-build models tally -- tallied "$D" "${dense_run[@]}"
    check dense-every 40 cuda-build models c-parts dense-untraced -- \
        traced "$D/every.ggmlviz" /dev/null CU_ENV --gpu every -- "${dense_run[@]}"
    check half-traced 40 cuda-build models c-parts -- \
        traced "$H/traced.ggmlviz" "$H/traced.txt" CU_ENV -- "${half_run[@]}"
    check half-whatif 20 half-traced -- whatif "$H" --ngl "0,$HALF,$ALL"
    check half-bench 30 half-whatif -- \
        benched "$H/bench.json" -m "$DENSE" -ngl "0,$HALF,$ALL" -p 16 -n "$SPLIT_TOKENS" -r 2
    check moe-traced 40 cuda-build models c-parts -- \
        traced "$M/traced.ggmlviz" "$M/traced.txt" CU_ENV -- "${moe_run[@]}"
    check moe-whatif 20 moe-traced -- whatif "$M" --n-cpu-moe "0,$MOE_HALF,$MOE_LAYERS"
    check moe-bench 30 moe-whatif -- \
        benched "$M/bench.json" -m "$MOE" -ngl 99 -ncmoe "0,$MOE_HALF,$MOE_LAYERS" -p 16 -n "$SPLIT_TOKENS" -r 2
    check f16-prompt 40 cuda-build models c-parts -- traced "$WORK/f16/every.ggmlviz" "$WORK/f16/bench.json" \
        CU_ENV --gpu every -- "$CUDA_BIN/llama-bench" -m "$F16" -ngl 99 -p 512 -n 0 -r 1 -o json
    check dense-bench 60 cuda-build models c-parts dense-untraced -- \
        bench_rounds "$D" CU_ENV "$CUDA_BIN/llama-bench" "$DENSE"
    check limits 45 cuda-build python -- measure_limits
}
vulkan_quick_steps() {
    local V=$WORK/vulkan run
    run=("$VK_BIN_DIR/llama-completion" -m "$DENSE" -n 32 "${GREEDY[@]}" -ngl 99 --no-warmup)
    check vulkan-untraced 40 vulkan-build models -- untraced "$V/untraced.txt" VK_ENV "${run[@]}"
    check vulkan-traced 40 vulkan-build models c-parts vulkan-untraced -- \
        traced "$V/traced.ggmlviz" "$V/traced.txt" VK_ENV -- "${run[@]}"
    check vulkan-logged 40 vulkan-build models c-parts vulkan-untraced -- traced_logged "$V" "${run[@]}"
}
traced_logged() { # FOLDER PROGRAM...: --gpu every, ggml-vulkan's perf logger on, its report kept
    local folder=$1
    shift
    limited 240 "${VK_ENV[@]}" GGML_VK_PERF_LOGGER=1 "${VIZ[@]}" run -f -o "$folder/logged.ggmlviz" --gpu every -- "$@" \
        > /dev/null 2> "$folder/logged.err"
}

# Whichever build ends first is checked first: the Vulkan build, if it is done while CUDA's still
# runs, has its text and op shares checked then (its cost, a timing, only once the CPUs are quiet).
while running cuda-build && running vulkan-build; do sleep 2; done
VULKAN_DONE=0
if running cuda-build && [[ -n ${BUILD_PID[vulkan-build]:-} ]]; then
    finish_build vulkan-build
    vulkan_quick_steps
    VULKAN_DONE=1
fi
[[ -n ${BUILD_PID[cuda-build]:-} ]] && finish_build cuda-build
cuda_steps
if ((!VULKAN_DONE)); then
    [[ -n ${BUILD_PID[vulkan-build]:-} ]] && finish_build vulkan-build
    vulkan_quick_steps
fi
check vulkan-bench 60 vulkan-build models c-parts vulkan-untraced -- \
    bench_rounds "$WORK/vulkan" VK_ENV "$VK_BIN_DIR/llama-bench" "$DENSE"

# -- the table ----------------------------------------------------------------------------------

fact seconds "$(elapsed)"
say "the table"
timeout 120 "$PY" "$BENCH/gpu_check_table.py" "$WORK" ${TABLE:+--out "$TABLE"} 2> "$LOGS/table.log" ||
    { echo "the table failed:"; tail -20 "$LOGS/table.log"; cat "$WORK/steps.tsv"; }
say "done; runs and logs in $WORK"
