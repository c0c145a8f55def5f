"""Server benchmarks on the demo model (issue 4), driven by the C++ load driver
bench/next_token_load (synchronous stubs, a thread per client), which costs far less per call
than a Python client on these two shared cores:
1. Throughput of 32 concurrent NextToken clients with dynamic batching against
   --max_batch_size=1, same run.
2. Server overhead: the median latency of one client's sequential NextToken calls minus the
   engine's median time for the same input (bench/engine_next_token), beside a bare RPC that
   never reaches the scheduler (GetModel).
Usage: server_bench.py BUILD_DIR [--seconds 6] [--threads 1] [--prompt 8] [--runs 3].
Prints a markdown table; each cell lists every run."""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--threads", type=int, default=1, help="server compute threads")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length in tokens")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    os.environ.setdefault("ATTNSERVE_BINARY", os.path.join(build, "server", "attnserve"))
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    os.environ.setdefault("ATTNSERVE_MODELS", os.path.join(ROOT, "models"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    from server_harness import Server

    load = os.path.join(build, "bench", "next_token_load")

    def drive(flags, concurrency, *extra):
        server = Server(f"--threads={args.threads}", *flags)
        try:
            target = f"127.0.0.1:{server.port}"
            subprocess.run([load, target, "1", "0.5", str(args.prompt)], check=True,
                           stdout=subprocess.DEVNULL)  # warm-up
            out = subprocess.check_output(
                [load, target, str(concurrency), str(args.seconds), str(args.prompt), *extra])
            return json.loads(out)
        finally:
            server.stop()

    def engine_us():
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        out = subprocess.check_output(
            [os.path.join(build, "bench", "engine_next_token"),
             os.path.join(ROOT, "models", "demo"), str(args.prompt), "2000"], env=env)
        return float(out) * 1000

    rows = {key: [] for key in ("batched", "unbatched", "speedup", "rpc", "engine", "overhead",
                                "bare")}
    for _ in range(args.runs):
        batched = drive([], 32)["requests_per_second"]
        unbatched = drive(["--max_batch_size=1"], 32)["requests_per_second"]
        rpc = drive([], 1)["median_us"]
        engine = engine_us()
        bare = drive([], 1, "bare")["median_us"]
        for key, value in (("batched", batched), ("unbatched", unbatched),
                           ("speedup", batched / unbatched), ("rpc", rpc), ("engine", engine),
                           ("overhead", rpc - engine), ("bare", bare)):
            rows[key].append(value)

    def cell(key, fmt):
        return ", ".join(fmt.format(v) for v in rows[key])

    print(f"| measure (demo model, {args.prompt}-token prompts, {args.threads} compute thread, "
          f"{args.runs} runs) | value |")
    print("|---|---|")
    print(f"| NextToken throughput, 32 concurrent clients, batching | "
          f"{cell('batched', '{:.0f}')} requests/s |")
    print(f"| same, `--max_batch_size=1` | {cell('unbatched', '{:.0f}')} requests/s |")
    print(f"| batching speed-up (target 2x) | **{cell('speedup', '{:.2f}x')}** |")
    print(f"| median RPC latency, one client | {cell('rpc', '{:.0f}')} µs |")
    print(f"| engine time for the same input | {cell('engine', '{:.0f}')} µs |")
    print(f"| server overhead, RPC minus engine (target 200 µs) | "
          f"**{cell('overhead', '{:.0f}')} µs** |")
    print(f"| of which a bare RPC (GetModel: gRPC both ways, no scheduler) | "
          f"{cell('bare', '{:.0f}')} µs |")


if __name__ == "__main__":
    main()
