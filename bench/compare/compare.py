"""The comparison suite's driver (make bench-compare): builds the models (models.py), then for
each one measures the machine's peaks (machine_peaks: one large oneDNN sgemm, memory read
bandwidth) and runs attnserve's engine, ONNX Runtime and PyTorch on the same cases, one after
another, 2 threads each. Writes results.json and report.md to OUT and the plots to docs/img/.

Usage: compare.py BUILD_DIR [--out bench/results/compare] [--runs 10] [--only NAME,...]
"""
import argparse
import json
import os
import platform
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
from models import MODELS  # noqa: E402

RUNNERS = ("attnserve", "onnxruntime", "pytorch")


def run_json(command, env):
    print("+", " ".join(command), file=sys.stderr, flush=True)
    out = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(build, out, names, runs, threads, decode_rounds):
    """Per model: peaks, the three runners on every case, then `decode_rounds` - 1 more rounds
    of the short decode cases (each runner's fastest median kept: on a shared machine a
    neighbour's burst can take a whole case), then the peaks again (the better of the two)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONDONTWRITEBYTECODE="1")
    threads_flag = ["--threads", str(threads)]
    commands = {  # (program, flags after the common ones)
        "attnserve": ([os.path.join(build, "bench", "engine_runner")], []),
        "onnxruntime": (["node", os.path.join(here, "ort_runner.js")], threads_flag),
        "pytorch": (["/usr/bin/python3", os.path.join(here, "torch_runner.py")], threads_flag),
    }
    peaks_command = [os.path.join(build, "bench", "machine_peaks")]
    results = {"runs": runs, "threads": threads, "decode_rounds": decode_rounds, "models": {}}
    for name in names:
        directory = os.path.join(out, name)
        with open(os.path.join(directory, "manifest.json")) as f:
            manifest = json.load(f)
        entry = {"manifest": manifest, "peaks": run_json(peaks_command, env)}

        def run(runner, cases):
            program, flags = commands[runner]
            return run_json([*program, directory, "--runs", str(runs), "--cases",
                             ",".join(cases), *flags], env)

        for runner in RUNNERS:
            entry[runner] = run(runner, manifest["cases"])
        decode = [case for case in manifest["cases"] if case.startswith("decode:")]
        for _ in range(decode_rounds - 1 if decode else 0):
            for runner in RUNNERS:
                for case, ms in run(runner, decode).items():
                    entry[runner][case] = min(entry[runner][case], ms)
        later = run_json(peaks_command, env)
        entry["peaks"] = {key: max(value, later[key]) for key, value in entry["peaks"].items()}
        results["models"][name] = entry
    return results


def versions():
    def first_line(command):
        try:
            return subprocess.run(command, capture_output=True, text=True,
                                  check=True).stdout.strip().splitlines()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            return "unknown"

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return {
        "cpu": cpu, "cpus": os.cpu_count(),
        "pytorch": first_line(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"]),
        "onnxruntime": first_line(["node", "-p", "require('" + os.path.join(
            here, "node_modules", "onnxruntime-node", "package.json") + "').version"]),
        "onednn": first_line(["dpkg-query", "-W", "-f=${Version}", "libdnnl-dev"]),
        "gcc": first_line(["gcc", "-dumpfullversion"]),
    }


def report(results):
    """Markdown: one table per model, then the decode bound table and the targets."""
    lines = []
    decode_rows = []
    for name, entry in results["models"].items():
        peaks = entry["peaks"]
        lines += [f"### {name}", "",
                  f"Same run: sgemm {peaks['sgemm_gflops']:.0f} GFLOP/s, memory read "
                  f"{peaks['read_gbs']:.1f} GB/s.", "",
                  "| case | attnserve ms | ONNX Runtime ms | PyTorch ms | vs ORT | vs PyTorch "
                  "| attnserve GFLOP/s | % of sgemm |",
                  "|---|---|---|---|---|---|---|---|"]
        for case, info in entry["manifest"]["cases"].items():
            ms = {runner: entry[runner][case] for runner in RUNNERS}
            gflops = info["flops"] / ms["attnserve"] / 1e6
            lines.append(
                f"| {case} | {ms['attnserve']:.2f} | {ms['onnxruntime']:.2f} | "
                f"{ms['pytorch']:.2f} | {ms['onnxruntime'] / ms['attnserve']:.2f}x | "
                f"{ms['pytorch'] / ms['attnserve']:.2f}x | {gflops:.0f} | "
                f"{100 * gflops / peaks['sgemm_gflops']:.0f}% |")
            if case.startswith("decode:"):
                total = info["weight_bytes"] + info["cache_bytes"]
                bound = total / peaks["read_gbs"] / 1e6
                decode_rows.append(
                    f"| {name} | {case.split(':')[1]} | {info['weight_bytes'] / 1e6:.0f} | "
                    f"{info['cache_bytes'] / 1e6:.1f} | {peaks['read_gbs']:.1f} | {bound:.2f} | "
                    f"{ms['attnserve']:.2f} | {ms['attnserve'] / bound:.2f}x |")
        lines.append("")
    if decode_rows:
        lines += ["### Decode against the memory-bandwidth bound", "",
                  "| model | context | weights MB | cache MB | read GB/s | bound ms "
                  "| attnserve ms | / bound |", "|---|---|---|---|---|---|---|---|",
                  *decode_rows, ""]
    return "\n".join(lines)


def targets(results):
    """Issue 7's targets, each with the ratio measured in this run."""
    rows = []

    def add(target, measured, met):
        rows.append(f"| {target} | {measured} | {'met' if met else '**not met**'} |")

    models = results["models"]
    if "gpt2_small" in models:
        m = models["gpt2_small"]
        case = "prefill:1x128"
        if case in m["attnserve"]:
            over_ort = m["onnxruntime"][case] / m["attnserve"][case]
            over_torch = m["pytorch"][case] / m["attnserve"][case]
            add("prefill 128 tokens, batch 1: >= 1.15x ONNX Runtime", f"{over_ort:.2f}x",
                over_ort >= 1.15)
            add("prefill 128 tokens, batch 1: >= 1.6x PyTorch", f"{over_torch:.2f}x",
                over_torch >= 1.6)
        case = "prefill:1x512"
        if case in m["attnserve"]:
            share = m["manifest"]["cases"][case]["flops"] / m["attnserve"][case] / 1e6 / \
                m["peaks"]["sgemm_gflops"]
            add("prefill 512 tokens: >= 80% of the sgemm GFLOP/s", f"{100 * share:.0f}%",
                share >= 0.8)
        for case, info in m["manifest"]["cases"].items():
            if not case.startswith("decode:") or case not in m["attnserve"]:
                continue
            speedup = m["pytorch"][case] / m["attnserve"][case]
            bound = (info["weight_bytes"] + info["cache_bytes"]) / m["peaks"]["read_gbs"] / 1e6
            context = case.split(":")[1]
            add(f"decode at context {context}: >= 2x PyTorch", f"{speedup:.2f}x", speedup >= 2)
            add(f"decode at context {context}: <= 1.5x the bandwidth bound",
                f"{m['attnserve'][case] / bound:.2f}x", m["attnserve"][case] / bound <= 1.5)
    if "gpt2_small_linear" in models:
        engine = models["gpt2_small_linear"]["attnserve"]
        if "decode:256" in engine and "decode:4096" in engine:
            growth = engine["decode:4096"] / engine["decode:256"]
            add("linear attention decode: context 4096 within 10% of 256",
                f"{growth:.2f}x", growth <= 1.10)
    if not rows:
        return ""
    return "\n".join(["### Targets", "", "| target | measured | |", "|---|---|---|", *rows, ""])


def plot(results, image_dir):
    """One figure: each case's speed-up of attnserve over ONNX Runtime and over PyTorch."""
    labels, over_ort, over_torch = [], [], []
    for name, entry in results["models"].items():
        for case in entry["manifest"]["cases"]:
            labels.append(f"{name} {case}")
            over_ort.append(entry["onnxruntime"][case] / entry["attnserve"][case])
            over_torch.append(entry["pytorch"][case] / entry["attnserve"][case])
    height = 0.4
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(labels) + 1.2))
    rows = range(len(labels))
    ax.barh([r - height / 2 for r in rows], over_ort, height, label="vs ONNX Runtime 1.30")
    ax.barh([r + height / 2 for r in rows], over_torch, height, label="vs PyTorch 1.13")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yticks(list(rows), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("attnserve speed-up (peer ms / attnserve ms, log scale), same run, "
                  "2 threads")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = os.path.join(image_dir, "compare_speedup.png")
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--out", default=os.path.join(repo, "bench", "results", "compare"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode_rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(MODELS))
    args = parser.parse_args()
    names = args.only.split(",")
    subprocess.run(["/usr/bin/python3", os.path.join(here, "models.py"), args.out, "--only",
                    args.only], check=True)
    results = measure(args.build, args.out, names, args.runs, args.threads,
                      args.decode_rounds)
    results["versions"] = versions()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = targets(results) + "\n" + report(results)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"plot: {plot(results, os.path.join(repo, 'docs', 'img'))}", file=sys.stderr)


if __name__ == "__main__":
    main()
