"""Plays deploy/k8s's Deployment with podman (make kube-test; also the end of make container-test).

No Kubernetes cluster runs here, but `podman kube play` runs a Deployment's pods from its YAML.
This test renders deploy/k8s/base with kubectl's Kustomize, sets the image to the one
scripts/container-test.sh builds (IMAGE, attnserve:test), drops the containers' `ports` (podman
4.3 would publish each on the host, where 50051 and 9090 may be taken) and plays the Deployment:
its replicas each get their own network namespace and address on podman's bridge, as pods do.
The pod has two containers from the one image: the server (`attnserve`, on the pod's loopback)
and the HTTP/2 proxy in front of it (`proxy`, nghttpx, on the pod's gRPC port). Then, for every
pod:
- it checks what podman applied of each container's spec: user, capabilities,
  no-new-privileges, seccomp, read-only root, environment (the downward API too), volume mounts,
  CPU and memory limits (in the cgroup, and as the server sees them);
- it checks that the server's port answers inside the pod but not at the pod's address;
- it runs the probes the manifest declares itself, honoring their timing fields, as a kubelet
  would (podman runs none of grpc, startup and readiness probes): exec probes in their
  container, the others from the host to the pod's address; a probe or lifecycle handler kind it
  cannot run fails the test;
- it calls NextToken with the image's attn, the same through KServe v2 (Open Inference Protocol,
  on the gRPC port) with Triton's Python client, both through the proxy, and scrapes /metrics
  where the pod's prometheus.io annotations point;
then it stops the pods as a kubelet does: every container's preStop hook at once, then SIGTERM
to each container when its own hook returns, with what is left of
terminationGracePeriodSeconds, while a Generate call is held in flight through the proxy (its
client stops reading, so the server pauses it). After the server's SIGTERM readiness must fail
and a new call must be refused with UNAVAILABLE; released, the call must finish, each server
must log its drain and exit 0, and each proxy must be stopped only after its server exited.
(Podman 4.3 would not: it runs no lifecycle hooks, ignores terminationGracePeriodSeconds, and its
pod stop takes the pod's network down with the server, then kills it after 10 s.) Then
`podman kube down` removes the pods, and the test checks that nothing is left (it also removes
the bridge network and the pause image if it created them). docs/deploy.md says what this does
and does not prove about a real cluster.

Needs root, podman (scripts/container-base.sh), kubectl, python3-yaml, python3-grpc-tools
and, for KServe v2, tritonclient in the project's .venv (scripts/install-deps.sh). Builds the
image with scripts/container-test.sh when it is absent (which then runs this test)."""
import concurrent.futures
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
IMAGE = os.environ.get("IMAGE", "attnserve:test")
KUSTOMIZATION = os.path.join(ROOT, "deploy", "k8s", "base")
KUBE_NETWORK = "podman-default-kube-network"  # where podman kube play puts pods by default
PAUSE_IMAGE = "localhost/podman-pause"        # the infra image podman builds on first use
TEXT = "The meaning of life is"
SERVER_CONTAINER = "attnserve"  # the pod's other containers are sidecars (the proxy)
failures = []


class Fatal(Exception):
    pass


def log(message):
    print(f"kube-test: {message}", flush=True)


def check(condition, message):
    """A failed check is reported and the test goes on; the run fails at the end."""
    if not condition:
        failures.append(message)
        print(f"kube-test: FAILED: {message}", file=sys.stderr, flush=True)
    return condition


def run(*args, timeout=120, check_exit=True, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check_exit and result.returncode != 0:
        raise Fatal(f"{' '.join(args)} exited {result.returncode}: "
                    f"{(result.stdout + result.stderr).strip()}")
    return result


def podman(*args, **kwargs):
    return run("podman", *args, **kwargs)


def inspect(name, template):
    return podman("inspect", "--format", template, name).stdout.strip()


def quantity(text):
    """A Kubernetes quantity ("2", "500m", "2Gi") as a number."""
    text = str(text)
    for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40),
                           ("m", 1e-3), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * factor
    return float(text)


# ------------------------------------------------------------------------------------------------
# Rendering and playing


def render(workdir):
    """deploy/k8s/base through an overlay that only sets the image; returns (all objects, the
    Deployment as played, the containers' ports by name before they were dropped)."""
    name, _, tag = IMAGE.rpartition(":") if ":" in IMAGE.split("/")[-1] else (IMAGE, "", "latest")
    if "/" not in name:
        name = "localhost/" + name  # how podman names a locally built image
    overlay = os.path.join(workdir, "overlay")
    os.mkdir(overlay)
    with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                        "resources": [os.path.relpath(KUSTOMIZATION, overlay)],
                        "images": [{"name": "attnserve", "newName": name, "newTag": tag}]}, f)
    objects = [o for o in yaml.safe_load_all(run("kubectl", "kustomize", overlay).stdout) if o]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    if len(deployments) != 1:
        raise Fatal(f"expected one Deployment in {KUSTOMIZATION}, found {len(deployments)}")
    deployment = deployments[0]
    ports = {}
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        ports[container["name"]] = {p.get("name", str(p["containerPort"])): p["containerPort"]
                                    for p in container.pop("ports", [])}
    return objects, deployment, ports


class Container:
    """One of a pod's containers, as podman runs it (named <pod>-<container>)."""

    def __init__(self, pod_name, spec):
        self.spec = spec
        self.name = f"{pod_name}-{spec['name']}"
        self.pid = int(inspect(self.name, "{{.State.Pid}}"))

    def exec(self, *command, timeout=30):
        return podman("exec", self.name, *command, timeout=timeout, check_exit=False)

    def logs(self):
        result = podman("logs", self.name, check_exit=False)
        return result.stdout + result.stderr


class Pod:
    def __init__(self, name, template, ports):
        self.name = name
        self.metadata = template["metadata"]
        self.spec = spec = template["spec"]
        self.containers = [Container(name, c) for c in spec["containers"]]
        self.server = next(c for c in self.containers if c.spec["name"] == SERVER_CONTAINER)
        # The containers share the pod's network namespace: a port name is the pod's.
        self.ports = {name: port for c in spec["containers"] for name, port in
                      ports[c["name"]].items()}
        infra = inspect(name, "{{.InfraContainerID}}")
        networks = json.loads(inspect(infra, "{{json .NetworkSettings.Networks}}"))
        self.ip = next(iter(networks.values()))["IPAddress"]

    def port(self, port):
        return self.ports[port] if isinstance(port, str) else port


# ------------------------------------------------------------------------------------------------
# What podman applied of the pod spec


def cgroup_limits(pid):
    """(memory bytes or None, CPUs or None) that the kernel enforces on process `pid`."""
    paths = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.strip().split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                paths[controller] = path

    def read(path):
        try:
            with open(path) as f:
                return f.read().split()
        except OSError:
            return None
    memory = cpus = None
    if "memory" in paths:  # cgroup v1
        value = read(f"/sys/fs/cgroup/memory{paths['memory']}/memory.limit_in_bytes")
        memory = int(value[0]) if value and int(value[0]) < 2**60 else None
        quota = read(f"/sys/fs/cgroup/cpu{paths['cpu']}/cpu.cfs_quota_us")
        period = read(f"/sys/fs/cgroup/cpu{paths['cpu']}/cpu.cfs_period_us")
        if quota and period and int(quota[0]) > 0:
            cpus = int(quota[0]) / int(period[0])
    elif "unified" in paths:  # cgroup v2
        value = read(f"/sys/fs/cgroup{paths['unified']}/memory.max")
        memory = int(value[0]) if value and value[0] != "max" else None
        value = read(f"/sys/fs/cgroup{paths['unified']}/cpu.max")
        if value and value[0] != "max":
            cpus = int(value[0]) / int(value[1])
    return memory, cpus


def check_pod_spec(pod, running):
    """What podman applied of the spec of `running`, one of the pod's containers."""
    spec, container = pod.spec, running.spec
    where = f"{pod.name}/{container['name']}"
    status = {}
    with open(f"/proc/{running.pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.split()
    applied = []
    pod_security = spec.get("securityContext", {})
    security = {**pod_security, **container.get("securityContext", {})}
    if "runAsUser" in security:
        check(int(status["Uid"][1]) == security["runAsUser"],
              f"{where}: runs as uid {status['Uid'][1]}, not runAsUser {security['runAsUser']}")
        applied.append(f"uid {status['Uid'][1]}")
    if "runAsGroup" in security:
        check(int(status["Gid"][1]) == security["runAsGroup"],
              f"{where}: runs as gid {status['Gid'][1]}, not runAsGroup "
              f"{security['runAsGroup']}")
        applied.append(f"gid {status['Gid'][1]}")
    if security.get("runAsNonRoot"):
        check(status["Uid"][1] != "0", f"{where}: runAsNonRoot, yet it runs as root")
    if security.get("capabilities", {}).get("drop") == ["ALL"]:
        check(int(status["CapEff"][0], 16) == 0 and int(status["CapBnd"][0], 16) == 0,
              f"{where}: capabilities left: CapEff {status['CapEff'][0]}, "
              f"CapBnd {status['CapBnd'][0]}")
        applied.append("no capabilities")
    if security.get("allowPrivilegeEscalation") is False:
        check(status["NoNewPrivs"] == ["1"], f"{where}: no_new_privs is not set")
        applied.append("no_new_privs")
    if security.get("seccompProfile", {}).get("type") == "RuntimeDefault":
        check(status["Seccomp"] == ["2"], f"{where}: no seccomp filter")
        applied.append("seccomp filter")
    if security.get("readOnlyRootFilesystem"):
        result = running.exec("sh", "-c", "touch /kube-test-probe")
        check(result.returncode != 0, f"{where}: the root filesystem is writable")
        applied.append("read-only /")

    # Environment, the downward API's resourceFieldRef included.
    env = dict(e.split("=", 1) for e in json.loads(inspect(running.name, "{{json .Config.Env}}")))
    resources = container.get("resources", {})
    for variable in container.get("env", []):
        name = variable["name"]
        if "value" in variable:
            expected = variable["value"]
        elif "resourceFieldRef" in variable.get("valueFrom", {}):
            ref = variable["valueFrom"]["resourceFieldRef"]
            kind, _, resource = ref["resource"].partition(".")
            expected = str(math.ceil(quantity(resources[kind][resource]) /
                                     quantity(ref.get("divisor", "1"))))
        else:
            check(False, f"{where}: env {name}: a source the test does not know how to check")
            continue
        check(env.get(name) == expected,
              f"{where}: env {name}={env.get(name)!r}, the manifest says {expected!r}")
    applied.append(f"{len(container.get('env', []))} env")

    # Volume mounts: present, and writable unless read-only.
    mounts = {m["Destination"]: m for m in json.loads(inspect(running.name, "{{json .Mounts}}"))}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"]
        if not check(path in mounts,
                     f"{where}: volume {mount['name']} is not mounted at {path}"):
            continue
        if not mount.get("readOnly"):
            result = running.exec("sh", "-c", f"touch {path}/.kube-test && rm {path}/.kube-test")
            check(result.returncode == 0, f"{where}: {path} is not writable: {result.stderr}")
        kind = next(k for k in volumes[mount["name"]] if k != "name")
        applied.append(f"{kind} at {path} (podman: {mounts[path]['Type']} {mounts[path]['Name']})")

    # Limits: what podman configured, what the kernel enforces, what the server sees.
    limits = resources.get("limits", {})
    memory, cpus = cgroup_limits(running.pid)
    logs = running.logs()
    if "memory" in limits:
        want = int(quantity(limits["memory"]))
        check(int(inspect(running.name, "{{.HostConfig.Memory}}")) == want and memory == want,
              f"{where}: memory limit {memory} in the cgroup, the manifest says {want}")
        seen = re.search(r"memory limit (\d+) MiB \(([^)]*)\)", logs)
        check(running is not pod.server or seen and int(seen.group(1)) == want >> 20,
              f"{where}: the server budgets for "
              f"{seen.group(0) if seen else 'an unknown limit'}, not the {want >> 20} MiB "
              f"limit its cgroup enforces")
        applied.append(f"memory limit {want >> 20} MiB")
    if "cpu" in limits:
        want = quantity(limits["cpu"])
        check(cpus is not None and abs(cpus - want) < 1e-6,
              f"{where}: {cpus} CPUs in the cgroup, the manifest says {want}")
        threads = re.search(r"with (\d+) compute thread", logs)
        check(running is not pod.server or threads and int(threads.group(1)) == math.ceil(want),
              f"{where}: the server runs {threads.group(1) if threads else '?'} compute "
              f"threads, not {math.ceil(want)} for its CPU limit")
        applied.append(f"{want:g} CPUs")
    log(f"{where}: applied: {', '.join(applied)}")


# ------------------------------------------------------------------------------------------------
# Probes and lifecycle handlers, run as a kubelet would


def grpc_health(target, service="", timeout=1.0):
    """grpc.health.v1 Check: the status name, or the error."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    with grpc.insecure_channel(target) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        except grpc.RpcError as e:
            return e.code().name


def probe_once(pod, container, probe, timeout):
    """One attempt of a probe of `container` (exec runs there; the others dial the pod's
    address): (success, what it saw)."""
    if "grpc" in probe:
        status = grpc_health(f"{pod.ip}:{probe['grpc']['port']}",
                             probe["grpc"].get("service", ""), timeout)
        return status == "SERVING", status
    if "exec" in probe:
        try:
            result = container.exec(*probe["exec"]["command"], timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, "timed out"
        return result.returncode == 0, f"exit {result.returncode}"
    if "tcpSocket" in probe:
        try:
            socket.create_connection((pod.ip, pod.port(probe["tcpSocket"]["port"])),
                                     timeout).close()
            return True, "connected"
        except OSError as e:
            return False, str(e)
    if "httpGet" in probe:
        get = probe["httpGet"]
        url = (f"{get.get('scheme', 'HTTP').lower()}://{pod.ip}:{pod.port(get['port'])}"
               f"{get.get('path', '/')}")
        request = urllib.request.Request(
            url, headers={h["name"]: h["value"] for h in get.get("httpHeaders", [])})
        try:
            code = urllib.request.urlopen(request, timeout=timeout).status
        except OSError as e:
            code = getattr(e, "code", str(e))
        return isinstance(code, int) and 200 <= code < 400, f"HTTP {code}"
    raise Fatal(f"a probe of a kind the test does not know how to run: {sorted(probe)}")


PROBE_KINDS = ("grpc", "exec", "tcpSocket", "httpGet")


def describe(probe):
    kind = next(k for k in PROBE_KINDS if k in probe)
    what = {"grpc": lambda p: f":{p['port']}" + (f" {p['service']}" if p.get("service") else ""),
            "exec": lambda p: " ".join(p["command"]),
            "tcpSocket": lambda p: f":{p['port']}",
            "httpGet": lambda p: f":{p['port']}{p.get('path', '/')}"}[kind](probe[kind])
    return f"{kind} {what}"


def run_probe(pod, container, which, started):
    """Runs the container's `which` probe until it succeeds successThreshold times in a row, or
    fails failureThreshold times in a row (a kubelet would then restart the container, or keep
    the pod out of its Services); returns what it did."""
    probe = container.spec.get(which)
    if probe is None:
        return None
    period = probe.get("periodSeconds", 10)
    timeout = probe.get("timeoutSeconds", 1)
    failure_threshold = probe.get("failureThreshold", 3)
    success_threshold = probe.get("successThreshold", 1)
    next_attempt = started + probe.get("initialDelaySeconds", 0)
    successes = failures_in_a_row = attempts = 0
    while True:
        time.sleep(max(0.0, next_attempt - time.monotonic()))
        next_attempt = time.monotonic() + period
        attempts += 1
        ok, seen = probe_once(pod, container, probe, timeout)
        successes, failures_in_a_row = (successes + 1, 0) if ok else (0, failures_in_a_row + 1)
        if successes >= success_threshold:
            return (f"{which} {describe(probe)}: passed at attempt {attempts}, "
                    f"{time.monotonic() - started:.1f} s after the start")
        if failures_in_a_row >= failure_threshold:
            raise Fatal(f"{pod.name}/{container.spec['name']}: {which} {describe(probe)} failed "
                        f"{failures_in_a_row} times "
                        f"in a row (last: {seen})")


def check_handlers_known(container):
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in container and not any(k in container[probe] for k in PROBE_KINDS):
            raise Fatal(f"{probe} of a kind the test does not know how to run: "
                        f"{sorted(container[probe])}")
    for hook, handler in container.get("lifecycle", {}).items():
        if hook != "preStop" or set(handler) != {"exec"}:
            raise Fatal(f"lifecycle {hook} {sorted(handler)}: the test does not know how to run "
                        f"it (podman runs no lifecycle handlers)")


def check_server_port_is_private(pod):
    """The server listens where its environment says (ATTNSERVE_HOST, ATTNSERVE_PORT): when
    that is the loopback, nothing outside the pod reaches it but through the proxy."""
    env = {e["name"]: e.get("value") for e in pod.server.spec.get("env", [])}
    host, port = env.get("ATTNSERVE_HOST"), env.get("ATTNSERVE_PORT")
    if host not in ("127.0.0.1", "localhost", "::1") or not port:
        return
    try:
        socket.create_connection((pod.ip, int(port)), timeout=2).close()
        reached = "connected"
    except OSError as e:
        reached = str(e)
    check(reached != "connected", f"{pod.name}: the server's port {port} is reachable at the "
                                  f"pod's address {pod.ip}; only the proxy's should be")
    status = pod.server.exec("attn", "health", "--target", f"{host}:{port}", "--retries", "1")
    check(status.stdout.strip() == "SERVING", f"{pod.name}: attn health on {host}:{port} inside "
                                              f"the pod: {status.stdout.strip()} "
                                              f"{status.stderr.strip()}")
    log(f"{pod.name}: the server answers on {host}:{port} inside the pod, not at {pod.ip}:{port} "
        f"({reached})")


# ------------------------------------------------------------------------------------------------
# Calls


def next_token(pod):
    """NextToken with the image's own attn inside the server's container, at the pod's gRPC port
    (the proxy's): the top 3 (id, probability)."""
    result = pod.server.exec("attn", "next-token", "--target", f"localhost:{pod.ports['grpc']}",
                      "--text", TEXT, "--top_k", "3", "--json")
    if not check(result.returncode == 0, f"{pod.name}: attn next-token: {result.stderr.strip()}"):
        return None
    top = json.loads(result.stdout)["results"][0]["top"]
    check(len(top) == 3, f"{pod.name}: attn next-token listed {len(top)} tokens, not 3")
    return [(int(t["id"]), t["probability"]) for t in top]


def scrape_metrics(pod):
    annotations = pod.metadata.get("annotations", {})
    port = annotations.get("prometheus.io/port", pod.ports.get("metrics"))
    path = annotations.get("prometheus.io/path", "/metrics")
    url = f"http://{pod.ip}:{port}{path}"
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError as e:
        check(False, f"{pod.name}: {url}: {e}")
        return
    check('attnserve_requests_total{code="OK",method="NextToken",model="demo"} 1' in text,
          f"{pod.name}: {url} does not count the NextToken call")
    log(f"{pod.name}: {url} (the pod's prometheus.io annotations) counts the NextToken call")


# ------------------------------------------------------------------------------------------------
# KServe v2 (Open Inference Protocol): the contract the server implements as
# inference.GRPCInferenceService on its gRPC port, checked with Triton's Python client. Adjust
# this function, and only it, if that contract changes.

KSERVE_MODEL = "demo"


def check_kserve(pod, expected):
    """Liveness, readiness, model readiness, and one inference: the same text as attn's
    NextToken, whose top 3 tokens (`expected`: [(id, probability)]) it must give."""
    try:
        import numpy as np
        import tritonclient.grpc as triton
        from tritonclient.utils import InferenceServerException
    except ImportError as e:
        check(False, f"KServe v2: Triton's client is missing ({e}): scripts/install-deps.sh "
                     f"installs it in {os.path.dirname(os.path.dirname(VENV_PYTHON))}")
        return
    target = f"{pod.ip}:{pod.ports['grpc']}"
    failed_before = len(failures)
    client = triton.InferenceServerClient(target)
    try:
        check(client.is_server_live(client_timeout=10), f"{pod.name}: KServe v2: not live")
        check(client.is_server_ready(client_timeout=10), f"{pod.name}: KServe v2: not ready")
        check(client.is_model_ready(KSERVE_MODEL, client_timeout=10),
              f"{pod.name}: KServe v2: model {KSERVE_MODEL} is not ready")
        text = triton.InferInput("text", [1], "BYTES")
        text.set_data_from_numpy(np.array([TEXT.encode()], dtype=object))
        result = client.infer(KSERVE_MODEL, inputs=[text],
                              outputs=[triton.InferRequestedOutput("top_k_ids"),
                                       triton.InferRequestedOutput("top_k_probabilities")],
                              parameters={"top_k": 3}, client_timeout=30)
    except InferenceServerException as e:
        status = str(e.status()).replace("StatusCode.", "")
        hint = ": the server does not serve it" if status == "UNIMPLEMENTED" else ""
        check(False, f"{pod.name}: KServe v2 on {target} (inference.GRPCInferenceService): "
                     f"{status} {e.message() or ''}".rstrip() + hint)
        return
    finally:
        client.close()
    ids, probabilities = result.as_numpy("top_k_ids"), result.as_numpy("top_k_probabilities")
    if not check(ids is not None and probabilities is not None,
                 f"{pod.name}: KServe v2: outputs top_k_ids and top_k_probabilities expected"):
        return
    check(ids.dtype == np.int64 and ids.shape == (1, 3),
          f"{pod.name}: KServe v2: top_k_ids is {ids.dtype} {list(ids.shape)}, not INT64 [1, 3]")
    check(probabilities.dtype == np.float32 and probabilities.shape == (1, 3),
          f"{pod.name}: KServe v2: top_k_probabilities is {probabilities.dtype} "
          f"{list(probabilities.shape)}, not FP32 [1, 3]")
    p = [round(x, 6) for x in probabilities.ravel().tolist()]
    check(all(0 < x <= 1 for x in p) and p == sorted(p, reverse=True),
          f"{pod.name}: KServe v2: probabilities {p} are not descending in (0, 1]")
    if expected:
        check(ids.ravel().tolist() == [i for i, _ in expected],
              f"{pod.name}: KServe v2 gives ids {ids.ravel().tolist()}, NextToken "
              f"{[i for i, _ in expected]}")
        check(all(abs(a - b) < 1e-3 for a, b in zip(p, [q for _, q in expected])),
              f"{pod.name}: KServe v2 gives probabilities {p}, NextToken "
              f"{[q for _, q in expected]}")
    if len(failures) == failed_before:
        log(f"{pod.name}: KServe v2 on {target}: live, ready, model {KSERVE_MODEL} ready; "
            f"top 3 ids {ids.ravel().tolist()} and probabilities as NextToken's")

# ------------------------------------------------------------------------------------------------
# Stopping, as a kubelet does


class HeldStream(threading.Thread):
    """A Generate call from the host to the pod that reads its first token, then nothing until
    released. The channel's small HTTP/2 window (no BDP probing to widen it) soon fills, and the
    server pauses the generation: the call stays in flight, at no CPU cost, for as long as the
    test holds it. Released, it reads to the end."""

    def __init__(self, target, max_tokens):
        super().__init__(daemon=True)
        from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc
        self.pb, self.max_tokens = pb, max_tokens
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)])
        self.stub = pb_grpc.InferenceStub(self.channel)
        self.reading, self.release = threading.Event(), threading.Event()
        self.tokens, self.finish, self.error = 0, None, None

    def run(self):
        request = self.pb.GenerateRequest(model="demo", prompt=self.pb.Sequence(text=TEXT),
                                          max_tokens=self.max_tokens)
        try:
            for response in self.stub.Generate(request, timeout=120):
                if response.HasField("token"):
                    self.tokens += 1
                else:
                    self.finish = self.pb.FinishReason.Name(response.finish.reason)
                if not self.reading.is_set():
                    self.reading.set()
                    self.release.wait(120)
        except grpc.RpcError as e:
            self.error = f"{e.code().name} {e.details()}"
        finally:
            self.reading.set()
            self.channel.close()


def stop_and_check_drain(pods, grace):
    """Stops the pods as a kubelet does, with a Generate call held in flight on the first: every
    container's preStop hook at once, then SIGTERM to each container as soon as its own hook
    returns, with what is left of the grace period."""
    from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc
    pod = pods[0]
    target = f"{pod.ip}:{pod.ports['grpc']}"
    held = HeldStream(target, 500)
    held.start()
    if not held.reading.wait(60) or held.error:
        raise Fatal(f"{pod.name}: Generate: {held.error or 'no token in 60 s'}")

    started = time.monotonic()
    sigterm = {(p.name, c.spec["name"]): threading.Event() for p in pods for c in p.containers}
    records = {}

    def terminate(p, c):
        record = records.setdefault((p.name, c.spec["name"]), {})
        command = c.spec.get("lifecycle", {}).get("preStop", {}).get("exec")
        if command:
            result = c.exec(*command["command"], timeout=grace)
            record["hook"] = (result.returncode, result.stderr.strip(),
                              time.monotonic() - started)
        remaining = max(1, math.ceil(grace - (time.monotonic() - started)))
        record["sigterm_at"] = time.monotonic() - started
        record["grace_left"] = remaining
        sigterm[(p.name, c.spec["name"])].set()
        result = podman("stop", "--time", str(remaining), c.name, timeout=remaining + 30,
                        check_exit=False)
        record["stopped_at"] = time.monotonic() - started
        record["stop"] = (result.returncode, result.stderr.strip())

    containers = [(p, c) for p in pods for c in p.containers]
    with concurrent.futures.ThreadPoolExecutor(len(containers)) as pool:
        futures = [pool.submit(terminate, p, c) for p, c in containers]
        # During the hooks the pods keep serving: every readiness probe passes.
        for p, c in containers:
            readiness = c.spec.get("readinessProbe")
            if readiness and c.spec.get("lifecycle", {}).get("preStop"):
                ok, seen = probe_once(p, c, readiness, readiness.get("timeoutSeconds", 1))
                check(ok, f"{p.name}/{c.spec['name']}: not ready during its preStop hook "
                          f"({seen})")
        # The server of the first pod drains once it has its SIGTERM: while the call is held,
        # every readiness probe of the pod fails (the proxy's sees the server's NOT_SERVING),
        # and a new call through the proxy is refused.
        if not sigterm[(pod.name, SERVER_CONTAINER)].wait(grace):
            raise Fatal(f"{pod.name}: no SIGTERM for the server within {grace} s")
        # (The server stops listening when its drain begins, so a probe that dials it sees
        # the refusal, or the proxy's 502, rather than NOT_SERVING: either keeps the pod out of
        # its Services.)
        seen = {}
        deadline = time.monotonic() + 10
        for c in pod.containers:
            readiness = c.spec.get("readinessProbe")
            ok = True
            while readiness and time.monotonic() < deadline:
                ok, seen[c.spec["name"]] = probe_once(pod, c, readiness,
                                                      readiness.get("timeoutSeconds", 1))
                if not ok:
                    break
                time.sleep(0.05)
            if readiness:
                check(not ok, f"{pod.name}/{c.spec['name']}: readiness ({describe(readiness)}) "
                              f"still passed 10 s after the server's SIGTERM, with a call in "
                              f"flight")
        with grpc.insecure_channel(target) as channel:
            try:
                pb_grpc.InferenceStub(channel).NextToken(
                    pb.NextTokenRequest(model="demo", sequences=[pb.Sequence(text=TEXT)]),
                    timeout=10)
                refused = "OK"
            except grpc.RpcError as e:
                refused = e.code().name
        check(refused == "UNAVAILABLE", f"{pod.name}: a new call during the drain got "
                                        f"{refused}, not UNAVAILABLE")
        check(held.is_alive(), f"{pod.name}: the held call ended before it was released")
        held.release.set()
        held.join(120)
        check(held.error is None and held.finish == "FINISH_REASON_MAX_TOKENS"
              and held.tokens == held.max_tokens,
              f"{pod.name}: the call in flight at SIGTERM ended with {held.tokens} token(s), "
              f"{held.finish or held.error}")
        for future in futures:
            future.result()
    log(f"a Generate call held in flight on {pod.name} through its proxy; after the server's "
        f"SIGTERM readiness said {', '.join(f'{k}: {v}' for k, v in seen.items())}, a new call "
        f"got {refused}; released, the call finished ({held.tokens} tokens, "
        f"{held.finish or held.error})")
    for p in pods:
        for c in p.containers:
            record = records[(p.name, c.spec["name"])]
            where = f"{p.name}/{c.spec['name']}"
            if "hook" in record:
                code, errors, at = record["hook"]
                check(code == 0, f"{where}: preStop hook exited {code}: {errors}")
            code, errors = record["stop"]
            check(code == 0, f"{where}: podman stop exited {code}: {errors}")
            check(record["stopped_at"] <= grace, f"{where}: stopped {record['stopped_at']:.1f} s "
                                                 f"after the hooks began, past the {grace} s grace")
            exit_code = inspect(c.name, "{{.State.ExitCode}}")
            log(f"{where}: preStop hook done {record['hook'][2] if 'hook' in record else 0:.1f} s "
                f"after the start, SIGTERM with {record['grace_left']} s of grace left, exited "
                f"{exit_code} at {record['stopped_at']:.1f} s")
            if c is p.server:
                logs = c.logs()
                check(exit_code == "0", f"{where}: exit code {exit_code} after SIGTERM"
                                        f"{' (SIGKILL)' if exit_code == '137' else ''}")
                check("SIGTERM: draining" in logs, f"{where}: no drain on SIGTERM")
                check("drain timeout" not in logs, f"{where}: the drain timed out")
                answered = re.search(r"drained, exiting; answered (.*)", logs)
                check(answered, f"{where}: did not finish draining")
                if answered:
                    log(f"{where}: drained: answered {answered.group(1)}")
            else:
                # A sidecar in front of the server must outlive its drain, or it cuts the calls
                # the server is finishing.
                server = records[(p.name, SERVER_CONTAINER)]
                check(record["sigterm_at"] >= server["stopped_at"] - 0.5,
                      f"{where}: SIGTERM at {record['sigterm_at']:.1f} s, before the server "
                      f"had exited ({server['stopped_at']:.1f} s)")
                check(exit_code != "137", f"{where}: killed (SIGKILL) after SIGTERM")


# ------------------------------------------------------------------------------------------------


def stubs(workdir):
    """grpc.health.v1 and attnserve.v1 Python stubs, as tests/e2e/CMakeLists.txt makes them."""
    out = os.path.join(workdir, "stubs")
    health = os.path.join(out, "src", "grpc_health", "v1")
    os.makedirs(health)
    shutil.copy("/usr/share/grpc-proto/grpc/health/v1/health.proto", health)
    run(sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}/proto", f"-I{out}/src",
        f"--python_out={out}", f"--grpc_python_out={out}", "attnserve/v1/inference.proto",
        "grpc_health/v1/health.proto")
    sys.path.insert(0, out)


def store_state():
    networks = podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    images = podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    return KUBE_NETWORK in networks, {i for i in images if i.startswith(PAUSE_IMAGE + ":")}


def main():
    os.chdir(ROOT)
    # Podman, its sandbox configuration and the local base image (installed or made when
    # missing); the script's last line is the CONTAINERS_CONF export.
    export = run("bash", os.path.join(ROOT, "scripts", "container-base.sh"),
                 timeout=1800).stdout.strip().splitlines()[-1]
    name, _, value = export.removeprefix("export ").partition("=")
    os.environ[name] = value
    for tool in ("podman", "kubectl"):
        if shutil.which(tool) is None:
            raise Fatal(f"{tool} is missing: run scripts/install-deps.sh")
    if podman("image", "exists", IMAGE, check_exit=False).returncode != 0:
        log(f"no image {IMAGE}: building it with scripts/container-test.sh, which then runs "
            f"this test")
        sys.stdout.flush()
        os.execvp("bash", ["bash", os.path.join(ROOT, "scripts", "container-test.sh")])
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="kube-test-")
    played = None
    pods = []
    spec = {}
    network_existed, pause_images = store_state()
    try:
        stubs(workdir)
        objects, deployment, ports = render(workdir)
        template = deployment["spec"]["template"]
        spec = template["spec"]
        names = [c["name"] for c in spec["containers"]]
        if SERVER_CONTAINER not in names or spec.get("initContainers"):
            raise Fatal(f"the test knows pods with a container named {SERVER_CONTAINER} and "
                        f"no init containers, not {names}")
        for container in spec["containers"]:
            check_handlers_known(container)
        replicas = deployment["spec"].get("replicas", 1)
        name = deployment["metadata"]["name"]
        skipped = [f"{o['kind']} {o['metadata']['name']}" for o in objects if o is not deployment]
        log(f"rendered {os.path.relpath(KUSTOMIZATION, ROOT)}: Deployment {name}, {replicas} "
            f"replica(s) of {len(names)} container(s) ({', '.join(names)}), image "
            f"{spec['containers'][0]['image']}, ports dropped; podman does not "
            f"play: {', '.join(skipped)}")
        pod_names = [f"{name}-pod-{i}" for i in range(replicas)]
        for pod_name in pod_names:
            if podman("pod", "exists", pod_name, check_exit=False).returncode == 0:
                raise Fatal(f"a pod {pod_name} exists already: another run's? "
                            f"(podman pod rm -f {pod_name})")
        for volume in spec.get("volumes", []):
            if podman("volume", "exists", volume["name"], check_exit=False).returncode == 0:
                raise Fatal(f"a volume {volume['name']} exists already: podman would use it for "
                            f"the pod's volume of that name, and kube down would remove it")
        played = os.path.join(workdir, "deployment.yaml")
        with open(played, "w") as f:
            yaml.safe_dump(deployment, f)
        play_started = time.monotonic()
        result = podman("kube", "play", played, check_exit=False)
        if result.returncode != 0:
            raise Fatal(f"podman kube play exited {result.returncode}: "
                        f"{(result.stdout + result.stderr).strip()}")
        for pod_name in pod_names:
            pods.append(Pod(pod_name, template, ports))
        log(f"played {len(pods)} pod(s) in {time.monotonic() - play_started:.1f} s: " +
            ", ".join(f"{p.name} at {p.ip}" for p in pods))

        for pod in pods:
            for container in pod.containers:
                where = f"{pod.name}/{container.spec['name']}"
                for which in ("startupProbe", "readinessProbe", "livenessProbe"):
                    done = run_probe(pod, container, which, play_started)
                    if done:
                        log(f"{where}: {done}")
                # Podman's own health check, from an exec liveness probe. It turns an HTTP one
                # into a curl inside the container, which the image need not have: those are
                # left out.
                if "exec" in container.spec.get("livenessProbe", {}):
                    result = podman("healthcheck", "run", container.name, check_exit=False)
                    if check(result.returncode == 0, f"{where}: podman healthcheck run: "
                                                     f"{(result.stdout + result.stderr).strip()}"):
                        log(f"{where}: podman's healthcheck (its livenessProbe) passes")
                check_pod_spec(pod, container)
            check_server_port_is_private(pod)

        for pod in pods:
            top = next_token(pod)
            if top:
                log(f"{pod.name}: NextToken with the image's attn: top 3 ids "
                    f"{[i for i, _ in top]}")
            scrape_metrics(pod)
            check_kserve(pod, top)

        grace = spec.get("terminationGracePeriodSeconds", 30)
        stop_and_check_drain(pods, grace)
    except Fatal as e:
        check(False, str(e))
    finally:
        if failures:
            for pod in pods:
                for container in pod.containers:
                    print(f"--- {container.name} logs", file=sys.stderr)
                    print(container.logs().rstrip(), file=sys.stderr)
        if played:
            down = podman("kube", "down", played, check_exit=False)
            for pod in pods:
                check(podman("pod", "exists", pod.name, check_exit=False).returncode != 0,
                      f"{pod.name} is left after podman kube down: {down.stderr.strip()}")
                for container in pod.containers:
                    check(podman("container", "exists", container.name,
                                 check_exit=False).returncode != 0,
                          f"{container.name} is left after podman kube down")
                podman("pod", "rm", "--force", pod.name, check_exit=False)
            for volume in spec.get("volumes", []):
                check(podman("volume", "exists", volume["name"], check_exit=False).returncode != 0,
                      f"volume {volume['name']} is left after podman kube down")
        if not network_existed:
            podman("network", "rm", KUBE_NETWORK, check_exit=False)
        for image in store_state()[1] - pause_images:
            podman("rmi", image, check_exit=False)
        shutil.rmtree(workdir, ignore_errors=True)
    if failures:
        print(f"kube-test: FAILED: {len(failures)} check(s):", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        return 1
    log(f"OK (podman kube play of {os.path.relpath(KUSTOMIZATION, ROOT)}: pod spec, probes, "
        f"NextToken, KServe v2, /metrics, preStop and drain; {time.monotonic() - start:.0f} s "
        f"in all)")
    return 0


if __name__ == "__main__":
    # Triton's client lives in the project's venv: run there when this interpreter lacks it.
    if (importlib.util.find_spec("tritonclient") is None and os.path.exists(VENV_PYTHON)
            and os.path.realpath(sys.prefix) != os.path.realpath(os.path.dirname(
                os.path.dirname(VENV_PYTHON)))):
        os.execv(VENV_PYTHON, [VENV_PYTHON, *sys.argv])
    try:
        sys.exit(main())
    except Fatal as e:  # before anything was played
        print(f"kube-test: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
