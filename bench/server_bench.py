"""Server benchmarks on the demo model, driven by attn-bench (C++, a thread per client, far
cheaper per call than a Python client on these two shared cores):
1. Throughput of 32 concurrent NextToken clients with dynamic batching against
   --max_batch_size=1, same run (issue 4's 2x target).
2. Server overhead: one client's median NextToken latency minus the engine's median time for
   the same input (bench/engine_next_token), beside a bare RPC that never reaches the scheduler
   (GetModel) (issue 4's 200 µs target).
3. A concurrency sweep of NextToken and of Generate: throughput, latency percentiles, time to
   first token and inter-token latency, as markdown tables and PNG plots.
Usage: server_bench.py BUILD_DIR [--seconds 6] [--threads 1] [--prompt 8] [--runs 3]
                       [--plots docs/img]"""
import argparse
import json
import os
import subprocess

from build_harness import server_harness

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SWEEP = [1, 2, 4, 8, 16, 32, 64]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--threads", type=int, default=1, help="server compute threads")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length in tokens")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--plots", default=os.path.join(ROOT, "docs", "img"))
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    Server = server_harness(build).Server

    bench = os.path.join(build, "client", "attn-bench")

    def load(server_flags, *bench_flags, seconds=args.seconds):
        """attn-bench's JSON levels for one fresh server."""
        server = Server(f"--threads={args.threads}", *server_flags)
        try:
            out = subprocess.check_output(
                [bench, f"--target=127.0.0.1:{server.port}", "--format=json", "--warmup=1",
                 f"--duration={seconds}", f"--prompt_tokens={args.prompt}", *bench_flags],
                stderr=subprocess.DEVNULL)
            return json.loads(out)["levels"]
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
        batched = load([], "--concurrency=32")[0]["requests_per_second"]
        unbatched = load(["--max_batch_size=1"], "--concurrency=32")[0]["requests_per_second"]
        rpc = load([], "--concurrency=1")[0]["latency_ms"]["p50"] * 1000
        engine = engine_us()
        bare = load([], "--concurrency=1", "--rpc=get-model")[0]["latency_ms"]["p50"] * 1000
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

    sweep = ",".join(map(str, SWEEP))
    seconds = max(2.0, args.seconds / 2)
    next_token = load([], f"--concurrency_sweep={sweep}", seconds=seconds)
    generate = load([], f"--concurrency_sweep={sweep}", "--rpc=generate", "--max_tokens=32",
                    seconds=seconds)
    print()
    print("| clients | NextToken req/s | p50 ms | p90 ms | p99 ms | Generate req/s | tokens/s "
          "| TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, g in zip(next_token, generate):
        print(f"| {n['concurrency']} | {n['requests_per_second']:.0f} | "
              f"{n['latency_ms']['p50']:.2f} | {n['latency_ms']['p90']:.2f} | "
              f"{n['latency_ms']['p99']:.2f} | {g['requests_per_second']:.1f} | "
              f"{g['tokens_per_second']:.0f} | {g['time_to_first_token_ms']['p50']:.2f} | "
              f"{g['time_to_first_token_ms']['p99']:.2f} | "
              f"{g['inter_token_latency_ms']['p50']:.2f} | "
              f"{g['inter_token_latency_ms']['p99']:.2f} |")
    plot(next_token, generate, args.plots)


def plot(next_token, generate, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    clients = [level["concurrency"] for level in next_token]
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(10, 4))
    throughput.plot(clients, [level["requests_per_second"] for level in next_token], "o-",
                    label="NextToken requests/s")
    throughput.plot(clients, [level["tokens_per_second"] for level in generate], "s-",
                    label="Generate tokens/s")
    throughput.set_xscale("log", base=2)
    throughput.set_xlabel("concurrent clients")
    throughput.set_title("Throughput (demo model, 1 compute thread)")
    throughput.legend()
    for key, style in (("p50", "o-"), ("p99", "o--")):
        latency.plot(clients, [level["latency_ms"][key] for level in next_token], style,
                     label=f"NextToken {key}")
        latency.plot(clients, [level["time_to_first_token_ms"][key] for level in generate],
                     style.replace("o", "s"), label=f"Generate first token {key}")
    latency.set_xscale("log", base=2)
    latency.set_yscale("log")
    latency.set_xlabel("concurrent clients")
    latency.set_ylabel("ms")
    latency.set_title("Latency")
    latency.legend()
    figure.tight_layout()
    path = os.path.join(directory, "server_sweep.png")
    figure.savefig(path, dpi=110)
    print(f"\nplot: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
