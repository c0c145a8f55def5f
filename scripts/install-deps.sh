#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need, then the Node
# client example's npm dependencies, the pinned PyPI packages, and the toolchains and
# dependencies of the Go, Java and Rust client examples. Idempotent: packages already present are
# skipped, apt-get runs only when something is missing, and npm, pip, go, cargo and mvn only when
# their lockfiles changed. Needs root (or sudo) when it has something to install.
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
  # the OpenAI-compatible HTTP API: Boost.Beast over Asio (docs/serving.md says why); Debian's
  # default Boost, 1.74: libboost1.81-dev conflicts with it, and apt would remove python3-scipy
  # (through python3-pythran) to install it; OpenSSL for HTTPS on that port
  libboost-dev libssl-dev
  # end-to-end tests: real clients in Python, health and reflection protos, a real Prometheus
  python3-grpcio python3-grpc-tools grpc-proto prometheus
  # an HTTP/2 client that speaks below gRPC, for the rapid-reset tests; the HTTP/2 proxy the
  # image and the pod put in front of the server (deploy/proxy/nghttpx.conf, tests/e2e/proxy_test.py)
  python3-h2 nghttp2-proxy
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
  python3-sympy python3-protobuf python3-psutil
  # chat templates' reference: jinja2, which transformers renders them with
  python3-jinja2
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

# The Go, Java and Rust client examples (client/examples/): a toolchain new enough for each, then
# everything their builds fetch, so that tests/e2e/examples_test.py builds them offline. Each
# looks for its tools where this script does (the order below). The fetching is skipped while
# its stamp is newer than the example's lockfile.
examples="$repo/client/examples"
at_least() { dpkg --compare-versions "$1" ge "$2"; }  # at_least VERSION MINIMUM
first_executable() {
  local candidate
  for candidate in "$@"; do
    if [[ -n $candidate && -x $candidate ]]; then echo "$candidate"; return; fi
  done
}

# Go: at least go.mod's version. The first of .toolchains/go/bin/go, go on PATH and
# /usr/local/go/bin/go counts; if it is missing or too old, the official toolchain comes from
# the Go module proxy (what `go` itself downloads when it switches toolchains), checked against
# the SHA-256 below, into .toolchains/go.
go_minimum=$(awk '$1 == "go" { print $2 }' "$examples/go/go.mod")
go_toolchain=go1.26.8
declare -A go_toolchain_sha256=(
  [amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
  [arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)
go_version() {
  local version
  version=$(cd / && GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null | sed -n 's/^go//p')
  echo "${version:-0}"
}
go_bin=$(first_executable "$repo/.toolchains/go/bin/go" "$(command -v go || true)" \
                          /usr/local/go/bin/go)
if [[ -z $go_bin ]] || ! at_least "$(go_version "$go_bin")" "$go_minimum"; then
  arch=$(dpkg --print-architecture)
  if [[ -z ${go_toolchain_sha256[$arch]:-} ]]; then
    echo "install-deps: the Go example needs Go $go_minimum or later: see https://go.dev/doc/install" >&2
    exit 1
  fi
  if ! command -v curl >/dev/null || ! command -v unzip >/dev/null; then apt_install curl unzip; fi
  version="v0.0.1-$go_toolchain.linux-$arch"
  echo "install-deps: installing $go_toolchain into .toolchains/go from the Go module proxy"
  mkdir -p "$repo/.toolchains"
  download=$(mktemp -d "$repo/.toolchains/download.XXXXXX")
  curl -fsSL --retry 3 -o "$download/go.zip" \
       "https://proxy.golang.org/golang.org/toolchain/@v/$version.zip"
  echo "${go_toolchain_sha256[$arch]}  $download/go.zip" | sha256sum --check --quiet
  unzip -q "$download/go.zip" -d "$download"
  rm -rf "$repo/.toolchains/go"
  mv "$download/golang.org/toolchain@$version" "$repo/.toolchains/go"
  rm -rf "$download"
  go_bin="$repo/.toolchains/go/bin/go"
fi
# The modules go.sum pins; go generate then builds the two protoc plugins into bin/ (the tools
# go.mod names) and generates the stubs.
go_dir="$examples/go"
if [[ ! -f $go_dir/bin/.fetched || $go_dir/go.sum -nt $go_dir/bin/.fetched ||
      $go_dir/go.mod -nt $go_dir/bin/.fetched ]]; then
  echo "install-deps: go mod download and go generate in client/examples/go"
  (cd "$go_dir" && export GOTOOLCHAIN=local GOFLAGS=-mod=readonly &&
   "$go_bin" mod download && "$go_bin" generate && touch bin/.fetched)
fi

# Java: a JDK of at least 17 and Maven 3.6.3 or later, from Debian when missing or too old.
java_major() {
  local major
  major=$(java -version 2>&1 | sed -n '1s/.* version "\([0-9]*\).*/\1/p')
  echo "${major:-0}"
}
if ! command -v javac >/dev/null || ! command -v java >/dev/null || (($(java_major) < 17)); then
  apt_install openjdk-17-jdk-headless
fi
if ! command -v mvn >/dev/null; then apt_install maven; fi
maven=$(mvn -v 2>/dev/null || true)
maven_version=$(grep -o 'Apache Maven [0-9.]*' <<<"$maven" | awk '{ print $3 }')
maven_java=$(sed -n 's/^Java version: \([0-9]*\).*/\1/p' <<<"$maven")
if (($(java_major) < 17 || ${maven_java:-0} < 17)) || ! at_least "${maven_version:-0}" 3.6.3; then
  echo "install-deps: the Java example needs a JDK of at least 17 and Maven 3.6.3 or later;" \
       "java on PATH is $(java_major), Maven ${maven_version:-missing} runs on Java ${maven_java:-?}" >&2
  exit 1
fi
# A first build resolves the dependencies and every plugin the build runs (protoc and the gRPC
# plugin among them), which dependency:go-offline would miss; offline builds then find them all.
java_dir="$examples/java"
if [[ ! -f $java_dir/target/.fetched || $java_dir/pom.xml -nt $java_dir/target/.fetched ]]; then
  echo "install-deps: mvn package in client/examples/java"
  if ! output=$(cd "$java_dir" && mvn -B -q package 2>&1); then
    echo "$output" >&2
    exit 1
  fi
  touch "$java_dir/target/.fetched"
fi

# Rust, for the constrained-decoding engine (third_party/llguidance) and the Rust example: cargo
# at least both Cargo.tomls' rust-version, rustup's ($CARGO_HOME/bin) or else on PATH. Debian
# bookworm's is 1.63, too old for both; rustup is the way to a newer one.
rust_minimum=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$examples/rust/Cargo.toml" \
               "$repo/third_party/llguidance/Cargo.toml" | sort -V | tail -n 1)
cargo_bin=$(first_executable "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" "$(command -v cargo || true)")
cargo_version=$([[ -n $cargo_bin ]] && "$cargo_bin" --version | awk '{ print $2 }' || true)
if ! at_least "${cargo_version:-0}" "$rust_minimum"; then
  echo "install-deps: llguidance and the Rust example need cargo and rustc $rust_minimum or later, found" \
       "${cargo_bin:-none}${cargo_version:+ $cargo_version} (Debian bookworm's 1.63 is too old)." \
       "Install them with rustup:" >&2
  echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal" >&2
  echo "(or \`rustup update stable\`), then run this again." >&2
  exit 1
fi
# llguidance's crates, pinned by its Cargo.lock: the build runs cargo offline.
llg_dir="$repo/third_party/llguidance"
if [[ ! -f $llg_dir/target/.fetched || $llg_dir/Cargo.lock -nt $llg_dir/target/.fetched ]]; then
  echo "install-deps: cargo fetch in third_party/llguidance"
  (cd "$llg_dir" && "$cargo_bin" fetch --locked --quiet && mkdir -p target && touch target/.fetched)
fi
rust_dir="$examples/rust"
if [[ ! -f $rust_dir/target/.fetched || $rust_dir/Cargo.lock -nt $rust_dir/target/.fetched ]]; then
  echo "install-deps: cargo fetch in client/examples/rust"
  (cd "$rust_dir" && PATH="$(dirname "$cargo_bin"):$PATH" "$cargo_bin" fetch --locked --quiet &&
   mkdir -p target && touch target/.fetched)
fi
