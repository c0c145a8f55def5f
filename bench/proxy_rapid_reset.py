"""An HTTP/2 rapid-reset burst against the server directly and through HAProxy and nghttpx
(docs/deploy.md, "The HTTP/2 proxy"): how it was chosen.

    python3 bench/proxy_rapid_reset.py build [--only direct,haproxy,nghttpx] [--calls 300]
        [--streams 25000] [--connections 4] [--nghttpx_config F] [--haproxy_config F]

For each path it starts build/server/attnserve on models/ (1 compute thread), and the proxy in
front of it (nghttpx on deploy/proxy/nghttpx.conf, the one deployed; HAProxy on
bench/proxy_haproxy.cfg), then:
  - latency: `--calls` NextToken calls one after another, alternating direct and through the
    proxy (p50, p90, p99 of each);
  - what passes: a Generate stream, a deadline the server enforces (DEADLINE_EXCEEDED), a
    cancelled stream (the server's active sequences back to 0), grpc.health.v1 and server
    reflection;
  - the burst: `--connections` x `--streams` HEADERS + RST_STREAM (tests/e2e/server_test.py's
    rapid_reset) at the proxy's port, with the RSS of the server and of the proxy's processes
    sampled every 50 ms; their peaks above idle, and whether the server answers afterwards.
Prints a table and the CPU it ran on.
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--only", default="direct,haproxy,nghttpx")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--streams", type=int, default=25000)
    parser.add_argument("--nghttpx_config",
                        default=os.path.join(ROOT, "deploy", "proxy", "nghttpx.conf"))
    parser.add_argument("--haproxy_config",
                        default=os.path.join(ROOT, "bench", "proxy_haproxy.cfg"))
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    os.environ.setdefault("ATTNSERVE_BINARY", os.path.join(build, "server", "attnserve"))
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    os.environ.setdefault("ATTNSERVE_MODELS", os.path.join(ROOT, "models"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    import grpc
    from proxy_harness import PeakSampler, Proxy, rapid_reset, resident_megabytes
    from server_harness import Server, health_pb2, pb, pb_grpc, reflection_pb2, \
        reflection_pb2_grpc

    with open("/proc/cpuinfo") as f:
        cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs; {args.connections} x {args.streams} "
          f"HEADERS + RST_STREAM", flush=True)
    rows = []
    request = pb.NextTokenRequest(model="demo", sequences=[pb.Sequence(text="The meaning of")])
    for kind in args.only.split(","):
        server = Server()
        proxy = None
        try:
            if kind != "direct":
                config = args.haproxy_config if kind == "haproxy" else args.nghttpx_config
                proxy = Proxy(kind, server.port, config)
            target = proxy.target if proxy else f"127.0.0.1:{server.port}"
            channel = grpc.insecure_channel(target)
            stub = pb_grpc.InferenceStub(channel)
            row = {"path": kind}

            # Latency: alternate the direct channel and this path's.
            times = {"direct": [], kind: []}
            for i in range(args.calls * (2 if proxy else 1)):
                which = kind if (proxy and i % 2) else "direct"
                s = stub if which == kind else server.stub
                start = time.perf_counter()
                s.NextToken(request, timeout=10)
                times[which].append((time.perf_counter() - start) * 1e3)

            def pct(values, q):
                return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else 0
            row["latency"] = {w: (pct(v, 50), pct(v, 90), pct(v, 99))
                              for w, v in times.items() if v}

            # What passes through.
            passes = []
            tokens = sum(1 for r in stub.Generate(pb.GenerateRequest(
                model="demo", prompt=pb.Sequence(text="Once"), max_tokens=20), timeout=30)
                if r.HasField("token"))
            passes.append(f"Generate {tokens} tokens")
            try:  # 1000 tokens take seconds: the server ends the call at its deadline
                for _ in stub.Generate(pb.GenerateRequest(
                        model="demo", prompt=pb.Sequence(text="x"), max_tokens=1000),
                        timeout=0.3):
                    pass
                passes.append("deadline: not enforced")
            except grpc.RpcError as e:
                passes.append(f"deadline: {e.code().name}")
            stream = stub.Generate(pb.GenerateRequest(
                model="demo", prompt=pb.Sequence(text="y"), max_tokens=1000), timeout=60)
            next(stream)
            stream.cancel()
            deadline = time.time() + 5
            while time.time() < deadline and \
                    server.metric_value("attnserve_active_sequences") > 0:
                time.sleep(0.05)
            passes.append("cancel: freed" if server.metric_value(
                "attnserve_active_sequences") == 0 else "cancel: NOT freed")
            from grpc_health.v1 import health_pb2_grpc
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="attnserve.v1.Inference"), timeout=5)
            name = health_pb2.HealthCheckResponse.ServingStatus.Name(status.status)
            passes.append(f"health {name}")
            services = next(reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
            passes.append(f"reflection {len(services.list_services_response.service)} services")
            row["passes"] = passes

            # The burst.
            time.sleep(1)
            pids = {"server": [server.process.pid]}
            if proxy:
                pids["proxy"] = proxy.pids()
            idle = {name: resident_megabytes(p) for name, p in pids.items()}
            sampler = PeakSampler(pids)
            sampler.start()
            start = time.monotonic()
            port = proxy.port if proxy else server.port
            outcomes = rapid_reset(port, args.connections, args.streams)
            sent = time.monotonic() - start
            time.sleep(3)  # what was queued behind the burst
            peaks = sampler.stop()
            row["burst"] = {name: (idle[name], peaks[name]) for name in pids}
            row["sent_s"] = sent
            row["samples"] = sampler.samples
            try:
                answered = len(grpc_call(grpc, pb_grpc, target, request).results) == 1
            except grpc.RpcError as e:
                answered = e.code().name
            row["after"] = answered
            row["outcomes"] = outcomes
            channel.close()
            rows.append(row)
            print(format_row(row), flush=True)
        finally:
            if proxy:
                proxy.stop()
            server.stop()


def grpc_call(grpc, pb_grpc, target, request):
    with grpc.insecure_channel(target) as channel:
        return pb_grpc.InferenceStub(channel).NextToken(request, timeout=30)


def format_row(row):
    lines = [f"== {row['path']}"]
    for which, (p50, p90, p99) in row["latency"].items():
        lines.append(f"  NextToken {which:8s}: p50 {p50:.3f} ms, p90 {p90:.3f} ms, "
                     f"p99 {p99:.3f} ms")
    lines.append("  passes: " + "; ".join(row["passes"]))
    for name, (idle, peak) in row["burst"].items():
        lines.append(f"  burst {name:6s}: idle {idle:.1f} MB, peak {peak:.1f} MB "
                     f"(+{peak - idle:.1f} MB)")
    lines.append(f"  burst sent in {row['sent_s']:.1f} s ({', '.join(row['outcomes'])}), "
                 f"{row['samples']} samples; answers afterwards: {row['after']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
