#!/usr/bin/env bash
# Builds the OCI image with podman and checks it end to end (make container-test): the image
# starts, reports healthy over grpc.health.v1, answers a NextToken call from the attn inside it
# and a /v1/completions call from the host, serves /metrics, and drains and exits 0 on SIGTERM.
# Prints the build time and image size. Then plays deploy/k8s's Deployment on it with podman
# (scripts/kube-test.py, also make kube-test).
# Needs root for podman; scripts/container-base.sh installs podman and makes the base image
# locally when they are missing (a machine without a Docker engine or a registry).
set -euo pipefail

cd "$(dirname "$0")/.."
image=${IMAGE:-attnserve:test}
# source: the image compiles the binaries (as users build it); prebuilt: it takes them from
# build/ (the Dockerfile's BINARIES argument), which CI's `make test` has just built.
binaries=${CONTAINER_BINARIES:-source}
if [[ $binaries == prebuilt && ! -x build/server/attnserve ]]; then
  echo "container-test: CONTAINER_BINARIES=prebuilt needs build/server/attnserve (make build)" >&2
  exit 1
fi
eval "$(bash scripts/container-base.sh | tail -n 1)"  # export CONTAINERS_CONF=...

start=$(date +%s)
podman build --pull=never --isolation chroot --network host --format docker -q -t "$image" \
  --build-arg BINARIES="$binaries" . >/dev/null
built=$(date +%s)
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "container-test: built $image ($binaries binaries) in $((built - start)) s," \
  "$((size / 1000000)) MB"

# Free ports on the host network (the sandbox has no port mapping).
read -r grpc_port metrics_port http_port < <(/usr/bin/python3 -c '
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))')
name=attnserve-test-$$
cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
podman run -d --name "$name" --runtime runc --network host \
  -e ATTNSERVE_PORT="$grpc_port" -e ATTNSERVE_METRICS_PORT="$metrics_port" \
  -e ATTNSERVE_HTTP_PORT="$http_port" \
  -e ATTNSERVE_THREADS=1 "$image" >/dev/null 2>&1  # podman warns that it has no systemd timers

fail() {
  echo "container-test: FAILED: $*" >&2
  podman logs "$name" >&2 || true
  exit 1
}
attn() { podman exec "$name" attn --target "localhost:$grpc_port" "$@"; }

for _ in $(seq 60); do
  if attn health --timeout 1 --retries 1 >/dev/null 2>&1; then break; fi
  sleep 0.5
done
[[ $(attn health --retries 1) == SERVING ]] || fail "health is not SERVING"
[[ $(podman exec "$name" id -u) == 10001 ]] || fail "the server does not run as user 10001"
table=$(attn next-token --text "The meaning of life is" --top_k 3) || fail "attn next-token"
[[ $(echo "$table" | grep -c '^ *[0-9]') == 3 ]] || fail "next-token table: $table"
metrics=$(/usr/bin/python3 -c "import urllib.request;
print(urllib.request.urlopen('http://127.0.0.1:$metrics_port/metrics', timeout=5).read().decode())")
grep -q 'attnserve_requests_total{code="OK",method="NextToken",model="demo"} 1' <<<"$metrics" ||
  fail "/metrics does not count the NextToken call"
completion=$(/usr/bin/python3 -c "import json, urllib.request;
request = urllib.request.Request('http://127.0.0.1:$http_port/v1/completions', json.dumps(
    {'model': 'demo', 'prompt': 'Hello', 'max_tokens': 4, 'temperature': 0}).encode(),
    {'Content-Type': 'application/json'})
print(json.load(urllib.request.urlopen(request, timeout=30))['usage']['completion_tokens'])") ||
  fail "the OpenAI API's /v1/completions"
# Greedy: a sampled answer may end early at the demo model's end-of-text token.
[[ $completion == 4 ]] || fail "/v1/completions made $completion tokens, not 4"
# The image's HEALTHCHECK, run once by hand: podman schedules it with systemd, absent here.
podman healthcheck run "$name" >/dev/null 2>&1 || fail "the image's HEALTHCHECK reports unhealthy"

podman stop --time 30 "$name" >/dev/null 2>&1  # SIGTERM, then SIGKILL after 30 s
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
logs=$(podman logs "$name" 2>&1)
[[ $exit_code == 0 ]] || fail "exit code $exit_code after SIGTERM"
grep -q "SIGTERM: draining" <<<"$logs" || fail "no drain on SIGTERM"
grep -q "drained, exiting" <<<"$logs" || fail "did not finish draining"
echo "container-test: OK (health, HEALTHCHECK, NextToken, /v1/completions, /metrics, drain on" \
  "SIGTERM;" \
  "$(($(date +%s) - start)) s in all)"
cleanup

# The Kubernetes manifests on the same image, played by podman kube play.
IMAGE=$image /usr/bin/python3 scripts/kube-test.py
