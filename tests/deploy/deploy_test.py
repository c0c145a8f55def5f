"""Checks deploy/ without a cluster (none runs here): yamllint; the Kustomize builds; every
rendered object against the Kubernetes API types of python3-kubernetes, strictly (an unknown or
misspelt field fails); the manifests' consistency with each other and with the server (ports,
labels, flags, drain timing, security); promtool on the Prometheus configuration and rules, and
the rules' unit tests; and that the rules and the Grafana dashboard only use metrics the server
really exports.
Env: ATTNSERVE_BINARY (the server, to list its flags and scrape its metrics), ATTNSERVE_MODELS."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import unittest
import urllib.request

import yaml
from kubernetes import client

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEPLOY = os.path.join(ROOT, "deploy")

# python3-kubernetes 22.6 models Kubernetes 1.22. Newer fields and versions the manifests use
# are described here: gRPC probes (GA in 1.27), and autoscaling/v2 (GA in 1.23), whose schema
# is v2beta2's.
NEWER_FIELDS = {("V1Probe", "grpc"): {"port": int, "service": str}}
KINDS = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("v1", "Service"): "V1Service",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2beta2HorizontalPodAutoscaler",
}


def check_model(value, type_name, path, errors):
    """Appends to `errors` every field of `value` that the API type `type_name` lacks or types
    differently."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: a list expected")
            return
        for i, item in enumerate(value):
            check_model(item, type_name[5:-1], f"{path}[{i}]", errors)
        return
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: a map expected")
            return
        for key, item in value.items():
            check_model(item, type_name[type_name.index(", ") + 2:-1], f"{path}.{key}", errors)
        return
    basic = {"str": str, "int": int, "bool": bool, "float": (int, float)}
    if type_name in basic:
        if not isinstance(value, basic[type_name]) or (type_name == "int" and
                                                       isinstance(value, bool)):
            errors.append(f"{path}: {type_name} expected, got {value!r}")
        return
    if type_name in ("object", "datetime", "date"):
        return
    model = getattr(client, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: an object ({type_name}) expected")
        return
    json_to_python = {v: k for k, v in model.attribute_map.items()}
    for key, item in value.items():
        newer = NEWER_FIELDS.get((type_name, key))
        if newer is not None:
            for field, field_value in item.items():
                if field not in newer:
                    errors.append(f"{path}.{key}.{field}: not a field of {key}")
                elif not isinstance(field_value, newer[field]):
                    errors.append(f"{path}.{key}.{field}: {newer[field].__name__} expected")
            continue
        if key not in json_to_python:
            errors.append(f"{path}.{key}: not a field of {type_name}")
            continue
        check_model(item, model.openapi_types[json_to_python[key]], f"{path}.{key}", errors)


def kustomize(directory):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise AssertionError("kubectl is missing: run scripts/install-deps.sh")
    out = subprocess.run([kubectl, "kustomize", os.path.join(DEPLOY, "k8s", directory)],
                         check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def container(spec, name):
    """The pod spec's container `name`: attnserve (the server) or proxy (nghttpx)."""
    found = [c for c in spec["containers"] if c["name"] == name]
    assert found, f"no container {name}"
    return found[0]


def nghttpx_settings():
    """deploy/proxy/nghttpx.conf as {option: [values]}."""
    settings = {}
    with open(os.path.join(DEPLOY, "proxy", "nghttpx.conf")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def by_kind(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or
                                                          o["metadata"]["name"] == name)]
    assert found, f"no {kind} {name or ''}"
    return found[0] if name else found


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = kustomize("base")
        cls.volume = kustomize("overlays/model-volume")

    def test_yamllint(self):
        result = subprocess.run(["yamllint", "--strict", "-c", os.path.join(DEPLOY, ".yamllint"),
                                 DEPLOY], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_every_object_matches_the_kubernetes_api_types(self):
        for objects in (self.base, self.volume):
            for obj in objects:
                key = (obj["apiVersion"], obj["kind"])
                if key == ("monitoring.coreos.com/v1", "ServiceMonitor"):
                    continue  # a CRD: test_service_monitor_scrapes_the_metrics_port
                self.assertIn(key, KINDS, f"unexpected {key}")
                errors = []
                check_model(obj, KINDS[key], obj["kind"], errors)
                self.assertEqual(errors, [])
                # Required fields: the client's models refuse to be built without them.
                api = client.ApiClient()
                api._ApiClient__deserialize(obj, KINDS[key])

    def test_the_strict_check_catches_mistakes(self):
        deployment = json.loads(json.dumps(by_kind(self.base, "Deployment", "attnserve")))
        container = deployment["spec"]["template"]["spec"]["containers"][1]
        container["readinessProbe"]["grpc"]["prot"] = 50051
        container["resources"]["limit"] = {}
        deployment["spec"]["replicas"] = "two"
        errors = []
        check_model(deployment, "V1Deployment", "Deployment", errors)
        self.assertEqual(len(errors), 3, errors)

    def test_pods_are_found_by_their_services_and_probes(self):
        deployment = by_kind(self.base, "Deployment", "attnserve")
        pod = deployment["spec"]["template"]
        labels = pod["metadata"]["labels"]
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"].items() - labels.items(),
                         set())
        server, proxy = container(pod["spec"], "attnserve"), container(pod["spec"], "proxy")
        # gRPC and the server's /metrics reach the pod through the proxy only; the OpenAI API
        # (HTTP/1.1, with its own limits) the server serves on the pod's address itself.
        ports = {p["name"]: p["containerPort"] for c in (server, proxy) for p in c.get("ports", [])}
        self.assertEqual(ports, {"grpc": 50051, "metrics": 9090, "http": 8000})
        self.assertEqual([p["name"] for p in server["ports"]], ["http"])
        for service in by_kind(self.base, "Service"):
            self.assertEqual(service["spec"]["selector"].items() - labels.items(), set())
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], ports)
        headless = by_kind(self.base, "Service", "attnserve-headless")
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        # The server's probes ask its health on the loopback, where it listens, with attn.
        env = {e["name"]: e.get("value") for e in server["env"]}
        self.assertEqual((env["ATTNSERVE_HTTP_HOST"], int(env["ATTNSERVE_HTTP_PORT"])),
                         ("0.0.0.0", ports["http"]))
        target = f"{env['ATTNSERVE_HOST']}:{env['ATTNSERVE_PORT']}"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            command = server[probe]["exec"]["command"]
            self.assertEqual(command[:2], ["attn", "health"])
            self.assertEqual(command[command.index("--target") + 1], target)
        self.assertIn("attnserve.v1.Inference", server["readinessProbe"]["exec"]["command"])
        # The proxy is ready when the server answers through it.
        self.assertEqual(proxy["readinessProbe"]["grpc"]["port"], ports["grpc"])
        self.assertEqual(proxy["readinessProbe"]["grpc"]["service"], "attnserve.v1.Inference")
        annotations = pod["metadata"]["annotations"]
        self.assertEqual(int(annotations["prometheus.io/port"]), ports["metrics"])
        pdb = by_kind(self.base, "PodDisruptionBudget", "attnserve")
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"].items() - labels.items(), set())
        hpa = by_kind(self.base, "HorizontalPodAutoscaler", "attnserve")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"])

    def test_the_drain_fits_the_grace_period(self):
        spec = by_kind(self.base, "Deployment", "attnserve")["spec"]["template"]["spec"]
        server = container(spec, "attnserve")
        env = {e["name"]: e for e in server["env"]}
        drain = int(env["ATTNSERVE_DRAIN_TIMEOUT_S"]["value"])
        pause = int(server["lifecycle"]["preStop"]["exec"]["command"][1])
        self.assertGreater(spec["terminationGracePeriodSeconds"], pause + drain)
        # The proxy outlives the server's pause and drain: SIGTERM, which stops nghttpx, comes
        # after its own preStop pause, and within the grace period.
        hook = container(spec, "proxy")["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(hook[0], "sleep")
        self.assertGreater(int(hook[1]), pause + drain)
        self.assertGreater(spec["terminationGracePeriodSeconds"], int(hook[1]))
        # Compute threads follow the CPU limit.
        self.assertEqual(env["ATTNSERVE_THREADS"]["valueFrom"]["resourceFieldRef"]["resource"],
                         "limits.cpu")

    def test_environment_variables_name_real_server_flags(self):
        flags = server_flags()
        for objects in (self.base, self.volume):
            server = container(by_kind(objects, "Deployment", "attnserve")["spec"]["template"][
                "spec"], "attnserve")
            for variable in server["env"]:
                name = variable["name"]
                self.assertTrue(name.startswith("ATTNSERVE_"), name)
                self.assertIn(name[len("ATTNSERVE_"):].lower(), flags, name)

    def test_pods_are_locked_down(self):
        spec = by_kind(self.base, "Deployment", "attnserve")["spec"]["template"]["spec"]
        self.assertTrue(spec["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(spec["securityContext"]["runAsUser"], 0)
        for each in spec["containers"]:
            security = each["securityContext"]
            self.assertTrue(security["readOnlyRootFilesystem"], each["name"])
            self.assertFalse(security["allowPrivilegeEscalation"], each["name"])
            self.assertEqual(security["capabilities"]["drop"], ["ALL"], each["name"])

    def test_the_proxy_fronts_the_server(self):
        spec = by_kind(self.base, "Deployment", "attnserve")["spec"]["template"]["spec"]
        server, proxy = container(spec, "attnserve"), container(spec, "proxy")
        settings = nghttpx_settings()
        # The image's copy of deploy/proxy/nghttpx.conf is the one the container runs.
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            self.assertIn("COPY deploy/proxy/nghttpx.conf /etc/attnserve/nghttpx.conf", f.read())
        self.assertIn("nghttpx --conf=/etc/attnserve/nghttpx.conf", proxy["command"][-1])
        self.assertEqual(proxy["image"], server["image"])
        # Its frontends are the pod's ports; its backends are where the server listens, on the
        # loopback, which nothing outside the pod reaches: gRPC for every path but /metrics.
        fronts = [f.split(";")[0].split(",") for f in settings["frontend"]]
        self.assertEqual([(h, int(p)) for h, p in fronts],
                         [("*", p["containerPort"]) for p in proxy["ports"]])
        self.assertTrue(all("no-tls" in f for f in settings["frontend"]))
        backends = {}
        for backend in settings["backend"]:
            address, pattern, options = backend.split(";")
            backends[pattern] = (address, options)
        env = {e["name"]: e.get("value") for e in server["env"]}
        self.assertEqual(env["ATTNSERVE_HOST"], "127.0.0.1")
        self.assertEqual(backends[""], (f"{env['ATTNSERVE_HOST']},{env['ATTNSERVE_PORT']}",
                                        "proto=h2"))
        self.assertEqual(backends["/metrics"], (f"127.0.0.1,{env['ATTNSERVE_METRICS_PORT']}",
                                                "proto=http/1.1"))
        self.assertEqual(int(spec_annotations(self.base)["prometheus.io/port"]),
                         {p["name"]: p["containerPort"] for p in proxy["ports"]}["metrics"])
        # The limits that matter, and timeouts that do not cut what the server keeps.
        self.assertEqual(settings["frontend-http2-max-concurrent-streams"], ["100"])
        self.assertEqual(settings["request-header-field-buffer"], ["64K"])  # --max_metadata_bytes
        self.assertEqual(settings["backend-read-timeout"], ["1h"])
        self.assertEqual(settings["stream-write-timeout"], ["0"])
        self.assertLessEqual(quantity(proxy["resources"]["limits"]["memory"]), 2**30)

    def test_the_volume_overlay_serves_the_volume(self):
        spec = by_kind(self.volume, "Deployment", "attnserve")["spec"]["template"]["spec"]
        server = container(spec, "attnserve")
        env = {e["name"]: e.get("value") for e in server["env"]}
        mounts = {m["name"]: m for m in server["volumeMounts"]}
        self.assertEqual(env["ATTNSERVE_MODEL_REPOSITORY"], mounts["models"]["mountPath"])
        self.assertTrue(mounts["models"]["readOnly"])
        self.assertIn("tmp", mounts)  # the base's volumes are kept
        claim = {v["name"]: v for v in spec["volumes"]}["models"]["persistentVolumeClaim"]
        by_kind(self.volume, "PersistentVolumeClaim", claim["claimName"])

    def test_service_monitor_scrapes_the_metrics_port(self):
        monitor = by_kind(self.base, "ServiceMonitor", "attnserve")
        services = [s for s in by_kind(self.base, "Service")
                    if monitor["spec"]["selector"]["matchLabels"].items()
                    <= s["metadata"].get("labels", {}).items()]
        self.assertTrue(services)
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertEqual(endpoint["path"], "/metrics")
            self.assertTrue(any(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}
                                for s in services))


class MonitoringTest(unittest.TestCase):
    def promtool(self, *args):
        result = subprocess.run(["promtool", *args], cwd=os.path.join(DEPLOY, "prometheus"),
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_prometheus_configuration(self):
        self.promtool("check", "config", "prometheus.yml")

    def test_rules(self):
        self.promtool("check", "rules", "rules.yml")

    def test_rules_fire_when_they_should(self):
        self.promtool("test", "rules", "rules_test.yml")

    def test_rules_and_dashboard_use_only_exported_metrics(self):
        exported = scraped_metric_names()
        with open(os.path.join(DEPLOY, "prometheus", "rules.yml")) as f:
            rules = yaml.safe_load(f)
        recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
        expressions = [r["expr"] for g in rules["groups"] for r in g["rules"]]
        with open(os.path.join(DEPLOY, "grafana", "attnserve-dashboard.json")) as f:
            dashboard = json.load(f)
        self.assertGreaterEqual(len(dashboard["panels"]), 8)
        expressions += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        used = set()
        for expression in expressions:
            used |= set(re.findall(r"\b((?:attnserve|process)[_:][a-z0-9_:]*)", expression))
        unknown = {name for name in used
                   if name not in recorded and re.sub(r"_(bucket|sum|count)$", "", name)
                   not in exported}
        self.assertEqual(unknown, set())
        self.assertIn("attnserve_queue_length", used)

    def test_the_image_compiles_with_the_packages_the_build_needs(self):
        # CI builds the image from build/'s binaries (make container-test
        # CONTAINER_BINARIES=prebuilt), so the Dockerfile's compiling stage must keep up with
        # scripts/install-deps.sh by itself: every package the engine and the server build with
        # (install-deps.sh's list from "# engine" to "# end-to-end tests") is installed there,
        # and both stages copy what the runtime stage expects.
        with open(os.path.join(ROOT, "scripts", "install-deps.sh")) as f:
            script = f.read()
        listed = script[script.index("  # engine"):script.index("  # end-to-end tests")]
        needed = {word for line in listed.splitlines() if not line.strip().startswith("#")
                  for word in line.split()}
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            dockerfile = f.read()
        stages = dict(re.findall(r"^FROM \S+ AS (\S+)\n(.*?)(?=^FROM )", dockerfile, re.M | re.S))
        self.assertEqual(set(stages), {"build-source", "build-prebuilt", "build"})
        def installed(stage):
            return set(re.search(r"apt-get install[^\n]*?(\S*\s*\\\n.*?) \\\n &&",
                                 stages[stage], re.S).group(1).split())

        self.assertGreaterEqual(len(needed), 10)
        self.assertEqual(needed - installed("build-source"), set())
        # The prebuilt binaries' libraries come with the same -dev packages (those of header-only
        # libraries and compilers aside).
        compile_only = {"protobuf-compiler", "protobuf-compiler-grpc", "libboost-dev",
                        "nlohmann-json3-dev"}
        self.assertEqual(needed - compile_only - installed("build-prebuilt"), set())
        for stage in ("build-source", "build-prebuilt"):
            self.assertIn("build/server/attnserve", stages[stage])
            self.assertIn("nghttp2-proxy", stages[stage])


def spec_annotations(objects):
    return by_kind(objects, "Deployment", "attnserve")["spec"]["template"]["metadata"][
        "annotations"]


def quantity(text):
    """A Kubernetes memory quantity ("256Mi", "2Gi") in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(text[:-2]) * units[text[-2:]] if text[-2:] in units else int(text)


def server_flags():
    result = subprocess.run([os.environ["ATTNSERVE_BINARY"], "--helpfull"], capture_output=True,
                            text=True)
    return set(re.findall(r"^\s+--([a-z_]+) ", result.stdout + result.stderr, re.M))


def scraped_metric_names():
    """The metric families of a real server's /metrics."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    server = subprocess.Popen(
        [os.environ["ATTNSERVE_BINARY"], "--host=127.0.0.1", "--port=0",
         f"--metrics_port={metrics_port}", "--threads=1",
         f"--model_repository={os.environ['ATTNSERVE_MODELS']}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                              timeout=2).read().decode()
                return set(re.findall(r"^# TYPE (\S+) ", text, re.M))
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the server's /metrics never answered")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
