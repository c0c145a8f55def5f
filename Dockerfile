# attnserve's OCI image: the server, the attn client and the demo model on Debian bookworm-slim,
# and nghttpx with deploy/proxy/nghttpx.conf, which the Kubernetes pod runs as a sidecar in front
# of the server (Debian's gRPC 1.51 has no HTTP/2 rapid-reset defence: docs/reliability.md).
#   podman build --format docker -t attnserve .     (or docker build -t attnserve .)
# --build-arg BINARIES=prebuilt takes build/server/attnserve and build/client/attn from a `make
# build` on a Debian bookworm host instead of compiling them again (CI: make container-test
# CONTAINER_BINARIES=prebuilt, after make test built them with the same flags).
#   podman run --rm -p 50051:50051 -p 9090:9090 -p 8000:8000 attnserve   (8000: the OpenAI API)
# Flags come from ATTNSERVE_* environment variables (ATTNSERVE_THREADS=2) or from arguments. The
# proxy: `--entrypoint nghttpx attnserve --conf=/etc/attnserve/nghttpx.conf` (deploy/k8s/base).

ARG BINARIES=source

FROM debian:bookworm-slim AS build-source
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config libdnnl-dev libabsl-dev nlohmann-json3-dev libicu-dev libonig-dev \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler prometheus-cpp-dev \
      grpc-proto libboost-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY common common
COPY text text
COPY engine engine
COPY proto proto
COPY server server
COPY client client
# llguidance's static library (structured outputs) as the host's build made it with cargo
# (third_party/llguidance: `make build` first); Debian's Rust is too old to build it here.
COPY third_party third_party
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_TESTS=OFF \
      -DATTNSERVE_LLGUIDANCE_DIR=/src/third_party/llguidance/target/release \
 && cmake --build build -j "$(nproc)" --target attnserve attn \
 && strip build/server/attnserve build/client/attn
# nghttpx, the HTTP/2 proxy the pod runs in front of the server: only its binary goes on, since
# its package also pulls in python3 (about 100 MB) for helper scripts the proxy never runs.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nghttp2-proxy \
 && rm -rf /var/lib/apt/lists/*
# The host's binaries: the same packages (the runtime libraries they link come from them), no
# compiler.
FROM debian:bookworm-slim AS build-prebuilt
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils \
      libdnnl-dev libabsl-dev nlohmann-json3-dev libicu-dev libonig-dev libgrpc++-dev \
      libprotobuf-dev prometheus-cpp-dev libssl-dev nghttp2-proxy \
 && rm -rf /var/lib/apt/lists/*
COPY build/server/attnserve /src/build/server/attnserve
COPY build/client/attn /src/build/client/attn
RUN strip /src/build/server/attnserve /src/build/client/attn

# The runtime image installs exactly the packages whose libraries the binaries link.
FROM build-${BINARIES} AS build
RUN ldd /src/build/server/attnserve /src/build/client/attn /usr/sbin/nghttpx \
    | awk '/=> \//{print $3}' | xargs -r realpath | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 \
    | sort -u > /runtime-packages \
 && cat /runtime-packages

FROM debian:bookworm-slim
COPY --from=build /runtime-packages /tmp/runtime-packages
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin attnserve
COPY --from=build /src/build/server/attnserve /src/build/client/attn /usr/sbin/nghttpx \
     /usr/local/bin/
COPY models/demo /opt/attnserve/models/demo
COPY deploy/proxy/nghttpx.conf /etc/attnserve/nghttpx.conf
USER 10001
ENV ATTNSERVE_MODEL_REPOSITORY=/opt/attnserve/models \
    ATTNSERVE_PORT=50051 \
    ATTNSERVE_METRICS_PORT=9090 \
    ATTNSERVE_HTTP_PORT=8000
EXPOSE 50051 9090 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD attn health --target "localhost:${ATTNSERVE_PORT}" --timeout 2 --retries 1 || exit 1
ENTRYPOINT ["attnserve"]
