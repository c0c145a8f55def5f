"""The server behind nghttpx with deploy/proxy/nghttpx.conf, as the Kubernetes pod runs it
(deploy/k8s/base: the proxy is the pod's only gRPC port). Calls of every kind pass through it
(unary, streamed, deadlines, cancellation, status codes, health, reflection), and an HTTP/2
rapid-reset burst at it (CVE-2023-44487: 4 connections x 25,000 HEADERS + RST_STREAM, 14 MB)
raises neither the server's nor the proxy's peak memory by 256 MB, where the server alone on
Debian's gRPC 1.51 peaked 1.5 GB above idle (docs/reliability.md).

Env: as the other end-to-end tests (server_harness.py); nghttpx from Debian's nghttp2-proxy
(scripts/install-deps.sh)."""
import time
import unittest
import urllib.request

import grpc

from proxy_harness import PeakSampler, Proxy, rapid_reset, resident_megabytes
from server_harness import (Server, health_pb2, pb, pb_grpc, reflection_pb2,
                            reflection_pb2_grpc)

MODEL = "demo"
BURST_CONNECTIONS, BURST_STREAMS = 4, 25000
PEAK_ABOVE_IDLE_MB = 256


def next_token_request(text="The meaning of life is"):
    return pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text=text)])


class ThroughTheProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        try:
            cls.proxy = Proxy("nghttpx", cls.server.port, metrics_port=cls.server.metrics_port)
        except Exception:
            cls.server.stop()
            raise
        cls.channel = grpc.insecure_channel(cls.proxy.target)
        cls.stub = pb_grpc.InferenceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proxy.stop()
        cls.server.stop()

    def test_unary_calls_and_their_status_codes(self):
        direct = self.server.stub.NextToken(next_token_request(), timeout=10)
        proxied = self.stub.NextToken(next_token_request(), timeout=10)
        self.assertEqual(proxied, direct)
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.NextToken(pb.NextTokenRequest(model="nope"), timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("nope", raised.exception.details())

    def test_a_stream_arrives_token_by_token(self):
        request = pb.GenerateRequest(model=MODEL, prompt=pb.Sequence(text="Once upon"),
                                     max_tokens=30, seed=1, temperature=0.8)
        direct = list(self.server.stub.Generate(request, timeout=30))
        proxied = list(self.stub.Generate(request, timeout=30))
        self.assertEqual(len(proxied), 31)  # 30 tokens, then why it stopped
        self.assertEqual(proxied, direct)

    def test_the_deadline_reaches_the_server(self):
        # grpc-timeout passes through: the server ends a 1000-token stream at 0.3 s.
        started = time.monotonic()
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in self.stub.Generate(pb.GenerateRequest(
                    model=MODEL, prompt=pb.Sequence(text="x"), max_tokens=1000), timeout=0.3):
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - started, 2)

    def test_a_cancelled_stream_is_dropped_by_the_server(self):
        stream = self.stub.Generate(pb.GenerateRequest(
            model=MODEL, prompt=pb.Sequence(text="y"), max_tokens=1000), timeout=60)
        next(stream)
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 1)
        stream.cancel()
        deadline = time.time() + 5
        while time.time() < deadline and \
                self.server.metric_value("attnserve_active_sequences") > 0:
            time.sleep(0.05)
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 0)

    def test_metrics_pass_at_their_own_port(self):
        self.stub.NextToken(next_token_request(), timeout=10)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.proxy.metrics_port}/metrics",
                                    timeout=5) as response:
            text = response.read().decode()
        self.assertIn('attnserve_requests_total{code="OK",method="NextToken",model="demo"}', text)

    def test_health_and_reflection(self):
        from grpc_health.v1 import health_pb2_grpc
        health = health_pb2_grpc.HealthStub(self.channel)
        for service in ("", "attnserve.v1.Inference"):
            self.assertEqual(health.Check(health_pb2.HealthCheckRequest(service=service),
                                          timeout=5).status,
                             health_pb2.HealthCheckResponse.SERVING)
        reply = next(reflection_pb2_grpc.ServerReflectionStub(self.channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
        names = {s.name for s in reply.list_services_response.service}
        self.assertIn("attnserve.v1.Inference", names)


class RapidResetTest(unittest.TestCase):
    def test_a_rapid_reset_burst_stops_at_the_proxy(self):
        server = Server()
        proxy = None
        try:
            proxy = Proxy("nghttpx", server.port)
            with grpc.insecure_channel(proxy.target) as channel:  # warm both up
                pb_grpc.InferenceStub(channel).NextToken(next_token_request(), timeout=10)
            pids = {"server": [server.process.pid], "proxy": proxy.pids()}
            idle = {name: resident_megabytes(p) for name, p in pids.items()}
            sampler = PeakSampler(pids, interval=0.05)
            sampler.start()
            started = time.monotonic()
            outcomes = rapid_reset(proxy.port, BURST_CONNECTIONS, BURST_STREAMS)
            sent = time.monotonic() - started
            time.sleep(2)  # whatever the burst left queued
            peaks = sampler.stop()
            report = (f"{BURST_CONNECTIONS} x {BURST_STREAMS} HEADERS + RST_STREAM in "
                      f"{sent:.1f} s ({', '.join(outcomes)}); " +
                      ", ".join(f"{name} idle {idle[name]:.0f} MB, peak {peaks[name]:.0f} MB"
                                for name in pids) + f" ({sampler.samples} samples)")
            print(f"\n{report}")
            for name in pids:
                self.assertLess(peaks[name] - idle[name], PEAK_ABOVE_IDLE_MB, report)
            # Still serving, through the proxy, on a new connection.
            with grpc.insecure_channel(proxy.target) as channel:
                self.assertEqual(len(pb_grpc.InferenceStub(channel).NextToken(
                    next_token_request("still serving"), timeout=10).results), 1)
        finally:
            if proxy:
                proxy.stop()
            server.stop()


if __name__ == "__main__":
    unittest.main()
