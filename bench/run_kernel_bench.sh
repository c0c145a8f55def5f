#!/usr/bin/env bash
# Runs the engine's micro-benchmarks and the PyTorch peers in the same run, same thread count,
# and prints a markdown table of the attention-layer ratios. Results go to bench/results/.
# Usage: bench/run_kernel_bench.sh [BUILD_DIR]   (make bench runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
threads=${THREADS:-2}
out=bench/results
mkdir -p "$out"
export OMP_NUM_THREADS=$threads

"$build_dir/bench/kernels_bench" --benchmark_min_time=1 --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/engine.json" \
  --benchmark_out_format=json
/usr/bin/python3 bench/torch_attention.py --threads "$threads" --runs 30 > "$out/torch.json"

/usr/bin/python3 - "$out/engine.json" "$out/torch.json" <<'PY'
import json, sys
engine = json.load(open(sys.argv[1]))["benchmarks"]
torch = json.load(open(sys.argv[2]))
def engine_ms(causal, batch, time):
    name = (f"BM_AttentionLayer/kind:0/causal:{causal}/batch:{batch}/time:{time}"
            "/process_time/real_time_median")
    for b in engine:
        if b["name"] == name:
            return b["real_time"]
    raise SystemExit(f"missing {name}")
print("| case (d=768, 12 heads) | attnserve ms | reference module ms | nn.MultiheadAttention ms | speed-up vs fastest PyTorch |")
print("|---|---|---|---|---|")
for causal, batch, time in ((1, 1, 512), (0, 1, 512), (1, 8, 128)):
    tag = f"causal={causal}/batch={batch}/time={time}"
    ours = engine_ms(causal, batch, time)
    ref, native = torch["reference_module/" + tag], torch["nn.MultiheadAttention/" + tag]
    print(f"| {'causal' if causal else 'full'}, batch {batch}, T={time} | {ours:.2f} | "
          f"{ref:.2f} | {native:.2f} | {min(ref, native) / ours:.2f}x |")
PY
