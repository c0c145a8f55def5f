"""Two server binaries on the demo model in one run, rounds alternating, so that a change to the
server's core is judged against the code before it on the same machine at the same time:
- the latency the server adds to a lone NextToken (one client's median, minus the engine's
  median for the same input from bench/engine_next_token);
- NextToken throughput and p50/p99 latency at 1, 8 and 32 concurrent clients (attn-bench);
- Generate at 16 clients: time to first token and inter-token latency, p50 and p99;
- a mixed load (the soak's clients: NextToken 24, Generate 16, Score 12, GetModel 4) for
  --mixed_seconds: answers per second, Generate's time to first token and inter-token latency.
Prints one markdown table, each cell "A / B" as medians over the rounds.
Usage: server_ab.py BUILD_DIR BINARY_A BINARY_B [--rounds 3] [--seconds 4] [--mixed_seconds 20]
The build directory gives attn-bench, engine_next_token and the Python stubs."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MIXED = [("next-token", 24, ["--prompt_tokens=uniform:4:200"]),
         ("generate", 16, ["--prompt_tokens=uniform:4:100", "--max_tokens=32"]),
         ("score", 12, ["--prompt_tokens=uniform:4:300"]),
         ("get-model", 4, [])]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("binary_a")
    parser.add_argument("binary_b")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--mixed_seconds", type=float, default=20.0)
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    os.environ.setdefault("ATTNSERVE_MODELS", os.path.join(ROOT, "models"))
    os.environ["ATTNSERVE_BINARY"] = args.binary_a  # the harness reads it per Server below
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    import server_harness
    bench = os.path.join(build, "client", "attn-bench")

    def attn_bench(port, *flags, seconds):
        out = subprocess.check_output(
            [bench, f"--target=127.0.0.1:{port}", "--model=demo", "--format=json",
             "--warmup=1", f"--duration={seconds}", "--timeout=60", *flags],
            stderr=subprocess.DEVNULL)
        return json.loads(out)["levels"]

    def engine_us():
        out = subprocess.check_output(
            [os.path.join(build, "bench", "engine_next_token"), os.path.join(ROOT, "models", "demo"),
             "8", "2000"], env=dict(os.environ, OMP_NUM_THREADS="1"))
        return float(out) * 1000

    def measure(binary):
        os.environ["ATTNSERVE_BINARY"] = binary
        row = {}
        server = server_harness.Server()
        try:
            for level in attn_bench(server.port, "--concurrency_sweep=1,8,32",
                                    "--prompt_tokens=8", seconds=args.seconds):
                n = level["concurrency"]
                row[f"next_token_{n}_rps"] = level["requests_per_second"]
                row[f"next_token_{n}_p50"] = level["latency_ms"]["p50"]
                row[f"next_token_{n}_p99"] = level["latency_ms"]["p99"]
            g = attn_bench(server.port, "--rpc=generate", "--concurrency=16", "--prompt_tokens=8",
                           "--max_tokens=32", seconds=args.seconds)[0]
            for key in ("time_to_first_token_ms", "inter_token_latency_ms"):
                row[f"generate_{key}_p50"] = g[key]["p50"]
                row[f"generate_{key}_p99"] = g[key]["p99"]
            row["generate_tokens_per_second"] = g["tokens_per_second"]
            mixed = [subprocess.Popen(
                [bench, f"--target=127.0.0.1:{server.port}", "--model=demo", f"--rpc={rpc}",
                 f"--concurrency={n}", "--retries=1", "--timeout=60", "--warmup=2",
                 f"--duration={args.mixed_seconds}", "--format=json", *flags],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for rpc, n, flags in MIXED]
            levels = [json.loads(p.communicate()[0])["levels"][0] for p in mixed]
            row["mixed_answers_per_second"] = sum(l["requests_per_second"] for l in levels)
            row["mixed_errors"] = sum(sum(l["errors"].values()) for l in levels)
            generate = levels[1]
            for key in ("time_to_first_token_ms", "inter_token_latency_ms"):
                row[f"mixed_{key}_p50"] = generate[key]["p50"]
                row[f"mixed_{key}_p99"] = generate[key]["p99"]
        finally:
            server.stop()
        row["lone_overhead_us"] = row["next_token_1_p50"] * 1000 - engine_us()
        return row

    rows = {"A": [], "B": []}
    for _ in range(args.rounds):
        for name, binary in (("A", args.binary_a), ("B", args.binary_b)):
            rows[name].append(measure(binary))
    keys = list(rows["A"][0])
    print(f"| measure (demo model, 1 compute thread, median of {args.rounds} rounds) | A | B | B/A |")
    print("|---|---|---|---|")
    for key in keys:
        a = statistics.median(r[key] for r in rows["A"])
        b = statistics.median(r[key] for r in rows["B"])
        ratio = f"{b / a:.2f}" if a else "-"
        print(f"| {key} | {a:.2f} | {b:.2f} | {ratio} |")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "server_ab.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
