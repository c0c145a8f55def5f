"""Soak: one server, 64 concurrent clients mixing every RPC for ten minutes; no call may fail
and the server's resident memory after warm-up, outside the KV cache's pool, may grow by less
than 5%. The pool's written part (attnserve_kv_cache_touched_bytes) grows by design, up to the
most blocks in use plus the cached prefixes (a quarter of the pool); it is reported beside.

The clients are attn-bench processes, one per RPC (NextToken 24, Generate 16, Score 12, Embed 8,
GetModel 4: 64 in all, retries off so that no refusal hides), plus a Python caller of
ListModels, the health service and /metrics every 100 ms. The repository holds the demo model
and a small encoder (exported by the reference, for Embed). The server's RSS is sampled every
5 s from /proc, with the pool's written bytes from /metrics; growth is measured from the end of
the warm-up to the largest later sample.
Writes bench/results/soak.json and prints a summary.
It also prints Generate's time to first token and inter-token latency, the figures chunked
prefill is for. ATTNSERVE_BINARY picks another server binary (bench/build_harness.py).
Usage: soak.py BUILD_DIR [--seconds 600] [--warmup 60]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from build_harness import server_harness

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CLIENTS = [  # (rpc, model, concurrency, extra flags)
    ("next-token", "demo", 24, ["--prompt_tokens=uniform:4:200"]),
    ("generate", "demo", 16, ["--prompt_tokens=uniform:4:100", "--max_tokens=32"]),
    ("score", "demo", 12, ["--prompt_tokens=uniform:4:300"]),
    ("embed", "embedder", 8, ["--prompt_tokens=uniform:2:60"]),
    ("get-model", "demo", 4, []),
]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "soak.json"))
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    harness = server_harness(build)
    Server, health_pb2, pb = harness.Server, harness.health_pb2, harness.pb

    repository = tempfile.mkdtemp(prefix="attnserve-soak-")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "e2e",
                                                 "make_reference_models.py"), repository],
                   check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    os.symlink(os.path.join(ROOT, "models", "demo"), os.path.join(repository, "demo"))
    server = Server("--threads=2", models=repository)
    total = args.warmup + args.seconds
    try:
        benches = [subprocess.Popen(
            [os.path.join(build, "client", "attn-bench"), f"--target=127.0.0.1:{server.port}",
             f"--model={model}", f"--rpc={rpc}", f"--concurrency={n}", "--retries=1",
             "--timeout=60", f"--warmup={args.warmup}", f"--duration={args.seconds}",
             "--format=json", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for rpc, model, n, flags in CLIENTS]

        side = {"calls": 0, "errors": []}
        stop = threading.Event()

        def side_caller():
            while not stop.wait(0.1):
                try:
                    server.stub.ListModels(pb.ListModelsRequest(), timeout=10)
                    server.health.Check(health_pb2.HealthCheckRequest(), timeout=10)
                    server.metrics()
                    side["calls"] += 3
                except Exception as e:  # noqa: BLE001: every failure is a finding
                    side["errors"].append(repr(e))
        caller = threading.Thread(target=side_caller)
        caller.start()

        samples, start = [], time.time()
        while any(b.poll() is None for b in benches):
            samples.append((round(time.time() - start, 1), rss_bytes(server.process.pid),
                            server.metric_value("attnserve_kv_cache_touched_bytes")))
            time.sleep(5)
        stop.set()
        caller.join()
        results = {}
        for (rpc, model, n, _), bench in zip(CLIENTS, benches):
            level = json.loads(bench.stdout.read())["levels"][0]
            results[rpc] = {"model": model, "clients": n, "ok": level["ok"],
                            "errors": level["errors"],
                            "requests_per_second": level["requests_per_second"],
                            "p99_ms": level["latency_ms"]["p99"]}
            for key in ("time_to_first_token_ms", "inter_token_latency_ms", "tokens_per_second"):
                if key in level:
                    results[rpc][key] = level[key]
        alive = server.process.poll() is None
    finally:
        server.stop()

    after_warmup = [rss for t, rss, _ in samples if t >= args.warmup]
    outside_pool = [rss - kv for t, rss, kv in samples if t >= args.warmup]
    base = after_warmup[0]
    growth = (max(outside_pool) - outside_pool[0]) / outside_pool[0]
    kv_growth = (max(kv for t, _, kv in samples if t >= args.warmup) -
                 next(kv for t, _, kv in samples if t >= args.warmup))
    errors = sum(sum(r["errors"].values()) for r in results.values()) + len(side["errors"])
    report = {"seconds": args.seconds, "warmup_seconds": args.warmup,
              "clients": sum(n for _, _, n, _ in CLIENTS), "rpcs": results,
              "side_calls": side["calls"], "side_errors": side["errors"][:10],
              "errors": errors, "server_alive": alive,
              "rss_after_warmup_mb": base / 2**20, "rss_max_mb": max(after_warmup) / 2**20,
              "rss_end_mb": after_warmup[-1] / 2**20, "rss_growth_outside_kv_pool": growth,
              "kv_pool_growth_mb": kv_growth / 2**20,
              "rss_samples": samples}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    calls = sum(r["ok"] for r in results.values()) + side["calls"]
    per_rpc = ", ".join(f"{rpc} {r['ok']}" for rpc, r in results.items())
    print(f"soak: {args.seconds:.0f} s at {report['clients']} clients, {calls} calls "
          f"({per_rpc}, side {side['calls']}), "
          f"{errors} errors; RSS {report['rss_after_warmup_mb']:.1f} MB after warm-up, max "
          f"{report['rss_max_mb']:.1f} MB, end {report['rss_end_mb']:.1f} MB; outside the KV "
          f"pool {100 * growth:+.2f}%, the pool's written part {kv_growth / 2**20:+.1f} MB")
    ok = errors == 0 and alive and growth < 0.05
    if "time_to_first_token_ms" in results.get("generate", {}):
        g = results["generate"]
        print(f"soak: Generate time to first token p50 {g['time_to_first_token_ms']['p50']:.0f} "
              f"ms, p99 {g['time_to_first_token_ms']['p99']:.0f} ms; inter-token p50 "
              f"{g['inter_token_latency_ms']['p50']:.1f} ms, p99 "
              f"{g['inter_token_latency_ms']['p99']:.1f} ms; "
              f"{sum(r['requests_per_second'] for r in results.values()):.0f} calls/s in all")
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
