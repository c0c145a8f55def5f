"""Server benchmarks on the demo model (issue 4):
1. Throughput of 32 concurrent NextToken clients with dynamic batching against
   --max_batch_size=1, same run.
2. Server overhead: the median latency of one client's sequential NextToken calls
   (--max_queue_delay_ms=0) minus the engine's median time for the same input.
Usage: server_bench.py BUILD_DIR [--seconds 10] [--threads 1]. Prints a markdown table."""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=1, help="server compute threads")
    parser.add_argument("--prompt", type=int, default=64, help="prompt length in tokens")
    parser.add_argument("--batch_flags", default="", help="server flags for the batching run")
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    os.environ.setdefault("ATTNSERVE_BINARY", os.path.join(build, "server", "attnserve"))
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    os.environ.setdefault("ATTNSERVE_MODELS", os.path.join(ROOT, "models"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    from server_harness import Server, pb

    request = pb.NextTokenRequest(model="demo", sequences=[pb.Sequence(text="a" * args.prompt)],
                                  top_k=5)

    def throughput(*flags):
        """32 concurrent callers on one asyncio loop (grpc.aio): far less client CPU per call
        than 32 threads, which matters when client and server share two cores."""
        import asyncio

        import grpc
        from attnserve.v1 import inference_pb2_grpc

        server = Server(f"--threads={args.threads}", *flags)
        try:
            for _ in range(3):
                server.stub.NextToken(request)  # warm-up

            async def run():
                async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                    stub = inference_pb2_grpc.InferenceStub(channel)
                    stop = time.time() + args.seconds
                    done = [0]

                    async def client():
                        while time.time() < stop:
                            await stub.NextToken(request, timeout=30)
                            done[0] += 1

                    start = time.time()
                    await asyncio.gather(*(client() for _ in range(32)))
                    return done[0] / (time.time() - start)

            return asyncio.run(run())
        finally:
            server.stop()

    batched = throughput(*args.batch_flags.split())
    unbatched = throughput("--max_batch_size=1")

    server = Server(f"--threads={args.threads}", "--max_queue_delay_ms=0")
    try:
        for _ in range(20):
            server.stub.NextToken(request)
        latencies, baseline = [], []
        for _ in range(300):
            start = time.perf_counter()
            server.stub.NextToken(request)
            latencies.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            server.stub.ListModels(pb.ListModelsRequest())
            baseline.append((time.perf_counter() - start) * 1e3)
    finally:
        server.stop()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    engine_ms = float(subprocess.check_output(
        [os.path.join(build, "bench", "engine_next_token"), os.path.join(ROOT, "models", "demo"),
         str(args.prompt), "300"], env=env))
    rpc_ms = statistics.median(latencies)

    print(f"| measure (demo model, {args.prompt}-token prompts, {args.threads} compute thread) "
          "| value |")
    print("|---|---|")
    print(f"| NextToken throughput, 32 concurrent clients, batching | {batched:.0f} requests/s |")
    print(f"| same, --max_batch_size=1 | {unbatched:.0f} requests/s |")
    print(f"| batching speed-up | **{batched / unbatched:.2f}x** |")
    print(f"| median RPC latency, one client | {rpc_ms * 1000:.0f} µs |")
    print(f"| engine time for the same input | {engine_ms * 1000:.0f} µs |")
    print(f"| server overhead (RPC - engine) | **{(rpc_ms - engine_ms) * 1000:.0f} µs** |")
    base_ms = statistics.median(baseline)
    print(f"| of which a bare RPC (ListModels: gRPC and the Python client, no scheduler) | "
          f"{base_ms * 1000:.0f} µs |")


if __name__ == "__main__":
    main()
