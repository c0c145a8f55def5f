#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need, then the Node
# client example's npm dependencies. Idempotent: packages already present are skipped, apt-get
# runs only when something is missing, and npm only when its lockfile changed. Needs root (or
# sudo) when it has something to install.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  # build
  build-essential cmake pkg-config clang-format
  # engine; for Hugging Face tokenizers ICU (Unicode normalization, character properties, case
  # mapping) and Oniguruma (the regex engine the reference library itself uses)
  libdnnl-dev libabsl-dev nlohmann-json3-dev libicu-dev libonig-dev
  # server: gRPC, Protobuf, Prometheus metrics (prometheus-cpp serves them with civetweb)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler prometheus-cpp-dev
  # end-to-end tests: real clients in Python, health and reflection protos, a real Prometheus
  python3-grpcio python3-grpc-tools grpc-proto prometheus
  # an HTTP/2 client that speaks below gRPC, for the rapid-reset test
  python3-h2
  # tests and micro-benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing the parsers (make fuzz): clang with libFuzzer, and LLVM's OpenMP runtime, which
  # clang's -fopenmp needs (the engine's OpenMP; gcc builds use libgomp)
  clang libclang-rt-14-dev libomp-14-dev
  # PyTorch reference; OpenBLAS so torch matmul is not the reference BLAS; venv for the pinned
  # PyPI packages below
  python3 python3-torch python3-numpy libopenblas0-openmp python3-venv
  # what the pinned PyPI packages (python/requirements.txt) take from Debian
  python3-requests python3-yaml python3-packaging python3-typing-extensions python3-scipy python3-pil
  python3-sympy python3-protobuf
  # benchmarks plots
  python3-matplotlib
  # the demo model's training text and held-out corpus (the int8 accuracy test reads it)
  fortunes
  # deploy/ checks without a cluster (kubectl for its built-in kustomize; these machines' apt
  # sources carry it); the container test (make container-test) brings its own podman
  yamllint python3-yaml python3-kubernetes kubectl
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

apt_install() {
  local sudo=""
  if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
  echo "install-deps: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "$@"
}

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  apt_install "${missing[@]}"
fi

# Debian's torch calls OpenBLAS through the libblas/liblapack/libopenblas alternatives, which
# default to its pthread build: its threads then fight torch's OpenMP ones (all-MiniLM-L6-v2's
# forward pass took 63 ms instead of 14). The OpenMP build shares torch's threads.
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
for name in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  link="$name-x86_64-linux-gnu"
  if [[ -e $openblas/$name ]] &&
     [[ $(readlink -f "/etc/alternatives/$link" 2>/dev/null) != "$openblas/$name" ]]; then
    sudo=""
    if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
    $sudo update-alternatives --quiet --set "$link" "$openblas/$name"
  fi
done

# Node.js and npm run the Node client example and its test. They are not in the list above:
# NodeSource's nodejs bundles npm and conflicts with Debian's npm package, so Debian's pair is
# installed only when a command is missing.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm
fi

# npm dependencies, exactly as their lockfiles say: the Node client example's, and GPT-2's
# vocabulary for the tokenizer tests. npm rewrites node_modules/.package-lock.json on every
# install, so it is older than the lockfile only when the lockfile changed since.
for npm_dir in client/examples/node tests/engine/gpt2_vocab; do
  dir="$repo/$npm_dir"
  if [[ ! -f $dir/node_modules/.package-lock.json ||
        $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    echo "install-deps: npm ci in $npm_dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
done

# PyPI packages the tests compare against (python/requirements.txt, every version pinned), in a
# virtual environment that also sees Debian's packages, so that Debian's torch stays the one torch.
# Reinstalled only when the requirements changed.
venv="$repo/.venv"
requirements="$repo/python/requirements.txt"
if [[ ! -x $venv/bin/python ]]; then
  echo "install-deps: creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
  echo "install-deps: pip install -r python/requirements.txt"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$venv/installed-requirements.txt"
fi
