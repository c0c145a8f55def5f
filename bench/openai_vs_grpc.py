"""What the OpenAI-compatible HTTP API costs beside gRPC, in the same run against one server.

1. Added latency: a lone client's one-token completion over HTTP/1.1 (keep-alive, JSON) against
   the same Generate over gRPC (protobuf), alternating, medians of each as the client sees them,
   and the mean time inside the server as its own metrics count it (from admission to the
   answer handed to the transport), which leaves the clients' costs out.
2. Streaming: 16 concurrent clients each streaming 64-token generations over HTTP (server-sent
   events) and over gRPC (server streams), in turn; generated tokens per second of each.

Both clients are Python (http.client and grpcio), so the client side costs alike.
  python3 bench/openai_vs_grpc.py build/server/attnserve models   [--requests 300]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("models")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    stubs = tempfile.mkdtemp()
    proto = os.path.join(os.path.dirname(__file__), "..", "proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{proto}",
                    f"--python_out={stubs}", f"--grpc_python_out={stubs}",
                    "attnserve/v1/inference.proto"], check=True)
    sys.path.insert(0, stubs)
    import grpc
    from attnserve.v1 import inference_pb2 as pb
    from attnserve.v1 import inference_pb2_grpc as pb_grpc

    port, http_port, metrics_port = free_port(), free_port(), free_port()
    server = subprocess.Popen([args.binary, f"--port={port}", f"--http_port={http_port}",
                               f"--metrics_port={metrics_port}", "--host=127.0.0.1",
                               f"--model_repository={args.models}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.InferenceStub(channel)
        model = stub.ListModels(pb.ListModelsRequest()).models[0].name
        deadline = time.time() + 30
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", http_port)
                connection.request("GET", "/health")
                connection.getresponse().read()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

        def grpc_one():
            list(stub.Generate(pb.GenerateRequest(model=model, prompt=pb.Sequence(text="Hello"),
                                                  max_tokens=1)))

        body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1,
                           "temperature": 0})

        def http_one():
            connection.request("POST", "/v1/completions", body,
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200

        def server_seconds():
            """Per method: (sum, count) of attnserve_request_duration_seconds."""
            import urllib.request
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read()
            totals = {}
            for line in text.decode().splitlines():
                for suffix, index in (("_sum", 0), ("_count", 1)):
                    name = "attnserve_request_duration_seconds" + suffix
                    if line.startswith(name + "{"):
                        method = line.split('method="')[1].split('"')[0]
                        entry = totals.setdefault(method, [0.0, 0.0])
                        entry[index] += float(line.rsplit(" ", 1)[1])
            return totals

        for call in (grpc_one, http_one):
            for _ in range(20):
                call()  # warm up
        before = server_seconds()
        times = {"grpc": [], "http": []}
        for _ in range(args.requests):
            for name, call in (("grpc", grpc_one), ("http", http_one)):
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
        after = server_seconds()
        g, h = statistics.median(times["grpc"]), statistics.median(times["http"])
        print(f"lone request, 1 token, {args.requests} each, alternating: clients' medians gRPC "
              f"{g * 1e6:.0f} µs, HTTP {h * 1e6:.0f} µs ({h / g:.2f}x)")

        def mean(method):
            return ((after[method][0] - before[method][0]) /
                    (after[method][1] - before[method][1]))
        sg, sh = mean("Generate"), mean("openai.completions")
        print(f"  inside the server (its request_duration metric): Generate {sg * 1e6:.0f} µs, "
              f"openai.completions {sh * 1e6:.0f} µs: HTTP adds {(sh - sg) * 1e6:.0f} µs")

        def grpc_stream():
            events = list(stub.Generate(pb.GenerateRequest(
                model=model, prompt=pb.Sequence(text="Once"), max_tokens=args.stream_tokens,
                temperature=1.0)))
            return len(events) - 1

        def http_stream(conn):
            conn.request("POST", "/v1/completions", json.dumps(
                {"model": model, "prompt": "Once", "max_tokens": args.stream_tokens,
                 "temperature": 1.0, "stream": True}), {"Content-Type": "application/json"})
            response = conn.getresponse()
            tokens = 0
            for line in response:
                if line.startswith(b"data: {"):
                    tokens += 1
            return tokens - 1  # the last event is the finish

        def run_streams(name):
            totals = [0] * args.streams
            connections = [http.client.HTTPConnection("127.0.0.1", http_port)
                           for _ in range(args.streams)]

            def client(i):
                for _ in range(args.rounds):
                    totals[i] += grpc_stream() if name == "grpc" else http_stream(connections[i])

            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.streams)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(totals) / (time.perf_counter() - start)

        rates = {"grpc": [], "http": []}
        for _ in range(2):
            for name in ("grpc", "http"):
                rates[name].append(run_streams(name))
        g, h = max(rates["grpc"]), max(rates["http"])
        print(f"{args.streams} concurrent streams of {args.stream_tokens} tokens: gRPC "
              f"{g:.0f} tokens/s, HTTP (SSE) {h:.0f} tokens/s ({h / g:.2f}x)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
