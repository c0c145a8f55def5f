#!/usr/bin/env bash
# Builds bench/candle_peer, the retrieval benchmark's peer on candle (the engine
# text-embeddings-inference runs on CPU), from the crate registry. The build lives outside the
# repository and is not part of the normal build or CI: run this by hand once. candle is built
# as its crates ship (pure Rust, its `gemm` crate for matrix products: the MKL and oneDNN
# features would download vendor libraries), -C target-cpu=native, release.
# Usage: bench/build_candle.sh [DIR]   (default /tmp/candle-peer; the binary ends up in
#        DIR/release/candle_peer). JOBS (default 2) sets the build's parallelism; it runs
#        under nice -n 19 so it does not get in the way of other builds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "${1:-/tmp/candle-peer}" && cd "${1:-/tmp/candle-peer}" && pwd)
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=$dir nice -n 19 "$cargo" build --release \
  --locked -j "${JOBS:-2}" --manifest-path "$root/bench/candle_peer/Cargo.toml"
echo "$dir/release/candle_peer"
