"""Starts the real attnserve binary on loopback for end-to-end tests and gives stubs for it.

Environment (set by ctest): ATTNSERVE_BINARY, ATTNSERVE_STUBS (generated Python stubs),
ATTNSERVE_MODELS (the model repository).
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.environ["ATTNSERVE_STUBS"])

import grpc  # noqa: E402
from attnserve.v1 import inference_pb2 as pb  # noqa: E402,F401
from attnserve.v1 import inference_pb2_grpc as pb_grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402,F401
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc  # noqa: E402,F401


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Authorization(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <key>` to every call, as a client of a keyed server does."""

    def __init__(self, key):
        self.metadata = ("authorization", f"Bearer {key}")

    def _with_key(self, details):
        metadata = list(details.metadata or []) + [self.metadata]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_key(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_key(details), request)


def keyed(channel, key):
    """`channel` with an API key on every call."""
    return grpc.intercept_channel(channel, _Authorization(key))


def make_certificates(directory):
    """A CA, a server certificate for localhost and a client certificate, with openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    for name in ("ca", "other_ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem")
    for name, ca in (("server", "ca"), ("client", "ca"), ("stranger", "other_ca")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout",
            f"{name}.key", "-out", f"{name}.csr")
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")

    def read(name):
        with open(os.path.join(directory, name), "rb") as f:
            return f.read()
    return read


class Server:
    def __init__(self, *flags, models=None, credentials=None, health_credentials=None,
                 preexec_fn=None, api_key=None):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                     f"attnserve-{self.port}.log"), "w+")
        self.process = subprocess.Popen(
            [os.environ["ATTNSERVE_BINARY"], "--host=127.0.0.1", f"--port={self.port}",
             f"--metrics_port={self.metrics_port}", "--threads=1",
             f"--model_repository={models or os.environ['ATTNSERVE_MODELS']}", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        self._wait_until_listening()
        target = f"127.0.0.1:{self.port}"
        options = [("grpc.ssl_target_name_override", "localhost")]
        self.channel = grpc.secure_channel(target, credentials, options) if credentials \
            else grpc.insecure_channel(target)
        # Health checks need no key; the rest go with `api_key`, when the server wants one.
        self.stub = pb_grpc.InferenceStub(keyed(self.channel, api_key) if api_key
                                          else self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.wait_until_serving()

    def _wait_until_listening(self, timeout=30):
        # A channel made before the server listens has its first connections refused, and
        # gRPC's reconnect backoff then held a TLS channel back for 15 s after the server was up.
        # The kernel's socket tables say when the port listens (state 0A), without connecting;
        # gRPC listens on an IPv6 socket, at 127.0.0.1 mapped (::ffff:127.0.0.1).
        addresses = {f"{ip}:{self.port:04X}" for ip in ("0100007F", "0000000000000000FFFF00000100007F")}
        deadline = time.time() + timeout
        while time.time() < deadline and self.process.poll() is None:
            for path in ("/proc/net/tcp", "/proc/net/tcp6"):
                with open(path) as table:
                    if any(f[1] in addresses and f[3] == "0A" for f in map(str.split, table)):
                        return
            time.sleep(0.02)

    def wait_until_serving(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.output()}")
            try:
                response = self.health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy: " + self.output())

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as response:
            return response.read().decode()

    def metric_value(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            series, value = line.rsplit(" ", 1)
            if series.split("{")[0] != name:
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def terminate(self, timeout=30):
        """SIGTERM, then the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.channel.close()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.channel.close()
        self.log.close()
