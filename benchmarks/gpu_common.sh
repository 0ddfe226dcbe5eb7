# Shell functions the GPU benchmarks share (benchmarks/gpu.sh, benchmarks/gpu_check.sh): sourced, not run.
# shellcheck shell=bash

# cuda_setup: CUDA_HOME (the toolkit nvcc belongs to, unless set) and its libraries on LD_LIBRARY_PATH.
cuda_setup() {
    local nvcc
    nvcc=$(command -v nvcc || true)
    if [[ -z ${CUDA_HOME:-} && -n $nvcc ]]; then
        CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
        # an nvcc that is a copy outside its toolkit (/usr/local/bin/nvcc): the usual folder instead
        [[ -f $CUDA_HOME/include/cuda.h ]] || [[ ! -f /usr/local/cuda/include/cuda.h ]] || CUDA_HOME=/usr/local/cuda
    fi
    export CUDA_HOME=${CUDA_HOME:-}
    export LD_LIBRARY_PATH=${CUDA_HOME:+$CUDA_HOME/lib64:$CUDA_HOME/lib:}${LD_LIBRARY_PATH:-}
}

# cuda_configure SRC BUILD [CMAKE_ARGS...]: llama.cpp configured with ggml's CUDA backend, shared
# libraries, no tests, examples or server (build the programs wanted with --target).
cuda_configure() {
    local src=$1 build=$2
    shift 2
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-native}" -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "$@"
}

# tally_build OUT LOG: benchmarks/gpu_kernel_tally.c compiled against the toolkit's CUPTI into OUT
# (CUPTI_LIB: the library it links); fails, with the reason in LOG, where CUPTI is not found.
tally_build() {
    local out=$1 log=$2 include
    CUPTI_LIB=$(find -L "${CUDA_HOME:-/nonexistent}" -name 'libcupti.so*' 2> /dev/null | grep -v stub | sort | head -1)
    include=$(find -L "${CUDA_HOME:-/nonexistent}" -name cupti.h 2> /dev/null | head -1)
    if [[ -z $CUPTI_LIB || -z $include ]]; then
        echo "no CUPTI in CUDA_HOME=${CUDA_HOME:-} (libcupti: ${CUPTI_LIB:-none}, cupti.h: ${include:-none})" > "$log"
        return 1
    fi
    gcc -O2 -shared -fPIC -I"$(dirname "$include")" -I"$CUDA_HOME/include" "$(dirname "${BASH_SOURCE[0]}")/gpu_kernel_tally.c" \
        -o "$out" "$CUPTI_LIB" -Wl,-rpath,"$(dirname "$CUPTI_LIB")" -ldl 2> "$log"
}
