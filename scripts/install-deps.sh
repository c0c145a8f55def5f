#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need.
# Idempotent: packages already present are skipped, and apt-get runs only when
# something is missing. Needs root (or sudo) when it has something to install.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang-format
  # engine
  libdnnl-dev libabsl-dev nlohmann-json3-dev
  # server: gRPC, Protobuf, the embedded HTTP server for /metrics
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libcivetweb-dev
  # end-to-end tests: real clients in Python, health and reflection protos, a real Prometheus
  python3-grpcio python3-grpc-tools grpc-proto prometheus
  # tests and micro-benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing the parsers (make fuzz): clang with libFuzzer
  clang libclang-rt-14-dev
  # PyTorch reference (run with /usr/bin/python3); OpenBLAS so torch matmul is not the reference BLAS
  python3 python3-torch python3-numpy libopenblas0-openmp
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
