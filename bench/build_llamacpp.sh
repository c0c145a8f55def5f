#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-server, llama-quantize and llama-perplexity as benchmark
# peers for bench/gguf_vs_llamacpp.py, bench/server_vs_llama_server.py and bench/int4_accuracy.py,
# from the llama.cpp copy vendored in llama-cpp-python 0.3.36's PyPI source distribution. The peer lives
# outside the repository (none of its code or binaries belong in it) and is not part of the
# normal build or CI: run this by hand once.
#   CPU only, Release, GGML_NATIVE=ON (-march=native), no CUDA, BLAS, curl or OpenSSL, static;
#   the server without its web UI (whose assets would be downloaded).
# Usage: bench/build_llamacpp.sh [DIR]   (default /tmp/llamacpp-peer; the binaries end up in
#        DIR/build/bin). JOBS (default 2) sets the build's parallelism; it runs under
#        nice -n 19 so it does not get in the way of other builds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "${1:-/tmp/llamacpp-peer}" && cd "${1:-/tmp/llamacpp-peer}" && pwd)
jobs=${JOBS:-2}
version=0.3.36
sdist=llama_cpp_python-$version.tar.gz
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
pip=${PIP:-$root/.venv/bin/pip}
[[ -x $pip ]] || pip="/usr/bin/python3 -m pip"

if [[ ! -f $dir/$sdist ]]; then
  $pip download --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$dir"
fi
echo "$sha256  $dir/$sdist" | sha256sum -c --quiet
src=$dir/llama_cpp_python-$version/vendor/llama.cpp
[[ -d $src ]] || tar xzf "$dir/$sdist" -C "$dir"

# One fix, for GCC 12: its _tile_loadconfig tells the compiler that it reads 8 of the tile
# configuration's 64 bytes, so the stores that fill in the tiles' shapes are dropped and the
# first AMX tile load raises SIGILL (llama.cpp's AMX path, a prefill of a Q4_0/Q4_1/Q8_0 model
# on a CPU with AMX). A compiler barrier before the load keeps them; the code is otherwise as
# shipped (llama.cpp PR #26954 fixes the same by keeping the configuration off the stack).
mmq=$src/ggml/src/ggml-cpu/amx/mmq.cpp
if ! grep -q "attnserve bench" "$mmq"; then
  barrier='    __asm__ __volatile__("" : : "r"(\&tc) : "memory");  // attnserve bench: GCC 12'
  sed -i "s|^    _tile_loadconfig(&tc);\$|$barrier\n&|" "$mmq"
  grep -q "attnserve bench" "$mmq"
fi

nice -n 19 cmake -S "$src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_BLAS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_APP=OFF -Wno-dev
nice -n 19 cmake --build "$dir/build" -j "$jobs" --target llama-bench llama-server llama-quantize \
  llama-perplexity
for tool in llama-bench llama-server llama-quantize llama-perplexity; do
  "$dir/build/bin/$tool" --help > /dev/null 2>&1 || [[ $tool == llama-quantize ]]
done
echo "built $dir/build/bin/{llama-bench,llama-server,llama-quantize,llama-perplexity}"
