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


def measure(build, out, names, runs, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONDONTWRITEBYTECODE="1")
    results = {"runs": runs, "threads": threads, "models": {}}
    for name in names:
        directory = os.path.join(out, name)
        with open(os.path.join(directory, "manifest.json")) as f:
            manifest = json.load(f)
        cases = ",".join(manifest["cases"])
        common = [directory, "--runs", str(runs), "--cases", cases]
        entry = {"manifest": manifest,
                 "peaks": run_json([os.path.join(build, "bench", "machine_peaks")], env)}
        entry["attnserve"] = run_json([os.path.join(build, "bench", "engine_runner"), *common],
                                      env)
        entry["onnxruntime"] = run_json(["node", os.path.join(here, "ort_runner.js"), *common,
                                         "--threads", str(threads)], env)
        entry["pytorch"] = run_json(["/usr/bin/python3", os.path.join(here, "torch_runner.py"),
                                     *common, "--threads", str(threads)], env)
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
    ax.set_yticks(list(rows), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("attnserve speed-up (peer ms / attnserve ms), same run, 2 threads")
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
    parser.add_argument("--only", default=",".join(MODELS))
    args = parser.parse_args()
    names = args.only.split(",")
    subprocess.run(["/usr/bin/python3", os.path.join(here, "models.py"), args.out, "--only",
                    args.only], check=True)
    results = measure(args.build, args.out, names, args.runs, args.threads)
    results["versions"] = versions()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = report(results)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"plot: {plot(results, os.path.join(repo, 'docs', 'img'))}", file=sys.stderr)


if __name__ == "__main__":
    main()
