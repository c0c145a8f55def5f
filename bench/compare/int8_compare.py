"""int8 weights against their peers (issue 21), same run, 2 threads each: the comparison suite's
gpt2_small (GPT-2-small's shape, random weights; models.py builds it), decode at contexts 128,
512 and 2048 and prefill of 32, 128 and 512 tokens, by

  attnserve      float32 and int8 (engine_runner --weights int8: groups of 32, the default),
                 prefill through the CPU's best tiles (bf16 where it has AVX512_BF16) and
                 through float32 tiles (ATTNSERVE_BF16=0)
  ONNX Runtime   float32 and its dynamic int8 quantization of the same graph
                 (onnxruntime.quantization.quantize_dynamic, QInt8 weights, from .venv)
  PyTorch        float32 and its dynamic int8 quantization of every nn.Linear (fbgemm)

  ggml           f32, q8_0 and q4_0 decoding (its GPT-2 example), when GGML_DIR names a ggml
                 source tree: ggml is not in Debian and nothing is downloaded, so it is built
                 from that tree (ggml_peer.py); without it, ggml is skipped and the report says so

with the machine's memory read bandwidth (machine_peaks) and the bytes a decode step must read,
and each attnserve format's resident memory after loading.

Usage: [GGML_DIR=~/src/ggml] int8_compare.py BUILD_DIR [--out bench/results/compare] [--runs 10]
                                             [--rounds 3]
Writes int8.json and int8.md to OUT.
"""
import argparse
import json
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
import ggml_peer  # noqa: E402
import models  # noqa: E402

MODEL = "gpt2_small"
CASES = ["decode:128", "decode:512", "decode:2048", "prefill:1x32", "prefill:1x128",
         "prefill:1x512"]
VENV_PYTHON = os.path.join(repo, ".venv", "bin", "python")
# The check every runner makes first allows int8's error: 5% (ours, PyTorch's) or 25% (ONNX
# Runtime's per-tensor activation scales) of the largest logit; the report gives the real one.
QUANTIZE_ONNX = """
import sys
from onnxruntime.quantization import QuantType, quantize_dynamic
quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8)
"""


def run(command, env):
    print("+", " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--out", default=os.path.join(repo, "bench", "results", "compare"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="2", PYTHONDONTWRITEBYTECODE="1")
    models.build(MODEL, args.out)
    directory = os.path.join(args.out, MODEL)
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    int8_onnx = os.path.join(directory, "model_int8.onnx")
    if not os.path.exists(int8_onnx):
        subprocess.run([VENV_PYTHON, "-c", QUANTIZE_ONNX, os.path.join(directory, "model.onnx"),
                        int8_onnx], check=True)

    engine = [os.path.join(args.build, "bench", "engine_runner"), directory]
    ort = ["node", os.path.join(here, "ort_runner.js"), directory, "--threads", "2"]
    torch_runner = ["/usr/bin/python3", os.path.join(here, "torch_runner.py"), directory,
                    "--threads", "2"]
    runners = {
        "attnserve float32": engine,
        "attnserve int8": engine + ["--weights", "int8"],
        # Prefill through float32 tiles, where the CPU would take bf16 ones (Int8TileFormat).
        "attnserve int8 float tiles": ["env", "ATTNSERVE_BF16=0"] + engine + ["--weights", "int8"],
        "ONNX Runtime float32": ort,
        "ONNX Runtime int8": ort + ["--model", "model_int8.onnx", "--tolerance", "0.25"],
        "PyTorch float32": torch_runner,
        "PyTorch int8": torch_runner + ["--int8"],
    }
    peaks_command = [os.path.join(args.build, "bench", "machine_peaks")]
    peaks, _ = run(peaks_command, env)
    results = {name: {} for name in runners}
    checks, resident, tiles = {}, {}, {}
    # Rounds of every runner in turn; each keeps its best median (a neighbour's burst on a shared
    # machine can cover a whole case).
    for _ in range(args.rounds):
        for name, command in runners.items():
            times, log = run(command + ["--runs", str(args.runs), "--cases", ",".join(CASES)], env)
            for case, ms in times.items():
                results[name][case] = min(results[name].get(case, ms), ms)
            checks[name] = re.findall(r"(\w+) matches the reference: max \|diff\| ([0-9.e+-]+)",
                                      log)
            found = re.search(r"resident after loading: (\d+) MiB", log)
            if found:
                resident[name] = int(found.group(1))
            found = re.search(r"int8 prefill tiles: (.+)", log)
            if found:
                tiles[name] = found.group(1)
    ggml_dir = os.environ.get("GGML_DIR")
    if ggml_dir:
        contexts = [int(c.split(":")[1]) for c in CASES if c.startswith("decode")]
        ggml = ggml_peer.measure(ggml_dir, args.out, directory, contexts, rounds=args.rounds)
        results.update(ggml)
        runners.update({name: None for name in ggml})
        ggml_note = f"ggml built from {ggml_dir} (commit " + subprocess.run(
            ["git", "-C", ggml_dir, "rev-parse", "--short", "HEAD"], capture_output=True,
            text=True).stdout.strip() + "), decode only."
    else:
        ggml_note = "ggml not measured: set GGML_DIR to a ggml source tree to include it."
        print(ggml_note, file=sys.stderr)
    later, _ = run(peaks_command, env)
    peaks = {key: max(value, later[key]) for key, value in peaks.items()}

    # attnserve int8's speed-up over each: peer ms / attnserve int8 ms.
    versus = ["attnserve float32", "ONNX Runtime int8", "PyTorch int8", "ggml q8_0", "ggml q4_0"]
    versus = [name for name in versus if name in results]
    lines = [f"Same run: memory read {peaks['read_gbs']:.1f} GB/s, sgemm "
             f"{peaks['sgemm_gflops']:.0f} GFLOP/s; each figure the best median of "
             f"{args.rounds} rounds. {ggml_note}", "",
             "| case | " + " | ".join(f"{name} ms" for name in runners) + " | " +
             " | ".join(f"int8 vs {name}" for name in versus) + " |",
             "|---|" + "---|" * (len(runners) + len(versus))]

    def cell(name, case, form):
        return form(results[name][case]) if case in results[name] else "—"

    for case in CASES:
        ours = results["attnserve int8"][case]
        lines.append(f"| {case} | " + " | ".join(
            cell(name, case, lambda ms: f"{ms:.2f}") for name in runners) + " | " + " | ".join(
            cell(name, case, lambda ms: f"{ms / ours:.2f}x") for name in versus) + " |")
    lines += ["", "| context | int8 weights MB | cache MB | bound ms | attnserve int8 ms "
              "| / bound |", "|---|---|---|---|---|---|"]
    for case in CASES:
        if not case.startswith("decode"):
            continue
        info = manifest["cases"][case]
        # int8 values plus a float scale per 32 of them; the learned positions stay float.
        weight_bytes = info["weight_bytes"] / 4 * (1 + 4 / 32)
        bound = (weight_bytes + info["cache_bytes"]) / peaks["read_gbs"] / 1e6
        ours = results["attnserve int8"][case]
        lines.append(f"| {case.split(':')[1]} | {weight_bytes / 1e6:.0f} | "
                     f"{info['cache_bytes'] / 1e6:.1f} | {bound:.2f} | {ours:.2f} | "
                     f"{ours / bound:.2f}x |")
    lines += ["", "| runner | check against the float32 reference (max logit difference) |",
              "|---|---|"]
    for name, found in checks.items():
        lines.append(f"| {name} | " + ", ".join(f"{what} {diff}" for what, diff in found) + " |")
    lines += ["", "Resident memory after loading: " + ", ".join(
        f"{name} {mib} MiB" for name, mib in resident.items()) + ".",
              "Int8 prefill tiles: " + ", ".join(
                  f"{name} {form}" for name, form in tiles.items()) + ".", ""]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "int8.json"), "w") as f:
        json.dump({"peaks": peaks, "results": results, "checks": checks, "resident": resident,
                   "tiles": tiles}, f, indent=1)
    with open(os.path.join(args.out, "int8.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
