"""Time to first token of a 900-token shared prefix plus a 20-token suffix, cold (the prefix
never seen) and warm (another suffix after the same prefix: its published KV blocks are
reused). One server on the demo model, --threads=2, one request at a time.
Usage: prefix_reuse.py BUILD_DIR [--rounds 10]"""
import argparse
import random
import statistics
import time

from build_harness import server_harness


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    harness = server_harness(args.build_dir)
    Server, pb = harness.Server, harness.pb

    server = Server("--threads=2")
    rng = random.Random(1)

    def first_token(ids):
        start = time.perf_counter()
        stream = server.stub.Generate(pb.GenerateRequest(
            model="demo", prompt=pb.Sequence(tokens=pb.TokenIds(ids=ids)), max_tokens=1),
            timeout=60)
        next(stream)
        elapsed = time.perf_counter() - start
        list(stream)
        return elapsed * 1000

    try:
        first_token([rng.randrange(256) for _ in range(920)])  # warm-up
        cold, warm = [], []
        for _ in range(args.rounds):
            prefix = [rng.randrange(256) for _ in range(900)]
            cold.append(first_token(prefix + [rng.randrange(256) for _ in range(20)]))
            warm.append(first_token(prefix + [rng.randrange(256) for _ in range(20)]))
        reused = server.metric_value("attnserve_prefix_reused_tokens_total")
    finally:
        server.stop()
    print(f"prefix reuse: 900-token prefix + 20-token suffix, {args.rounds} rounds: time to first "
          f"token cold median {statistics.median(cold):.1f} ms (min {min(cold):.1f}), warm median "
          f"{statistics.median(warm):.1f} ms (min {min(warm):.1f}), "
          f"{statistics.median(cold) / statistics.median(warm):.1f}x; "
          f"{reused:.0f} prompt tokens reused")


if __name__ == "__main__":
    main()
