#!/usr/bin/env bash
# The GPT-2-small shape (12 layers, d=768, 12 heads, vocab 50257, learned positions) on random
# weights: exported once, then loaded by the engine and by PyTorch in the same run, 2 threads.
# Prints a markdown table. Usage: bench/run_model_bench.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
threads=${THREADS:-2}
out=bench/results
model=$out/gpt2_small
mkdir -p "$out"
export OMP_NUM_THREADS=$threads PYTHONDONTWRITEBYTECODE=1

if [[ ! -f $model/model.safetensors ]]; then
  /usr/bin/python3 - "$model" <<'PY'
import sys
sys.path.insert(0, "python")
import torch
from attnserve.models import CausalLM
from attnserve.export import export
torch.manual_seed(0)
model = CausalLM(50257, model_dim=768, num_layers=12, num_heads=12, ffn_dim=3072,
                 positions="learned", max_positions=2100, tie_embeddings=True)
export(model.eval(), sys.argv[1])
PY
fi

"$build_dir/bench/model_bench" "$model" --runs 10 > "$out/model_engine.json"
/usr/bin/python3 bench/torch_model.py "$model" --threads "$threads" --runs 10 > "$out/model_torch.json"

/usr/bin/python3 - "$out/model_engine.json" "$out/model_torch.json" <<'PY'
import json, sys
engine, torch = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bound = 1.2 * engine["weights_mb"] + 50
print(f"weights {engine['weights_mb']:.0f} MB; resident memory: after load "
      f"{engine['rss_after_load_mb']:.0f} MB (mapped, not yet read), after a 128-token prefill "
      f"{engine['rss_after_prefill_mb']:.0f} MB (bound 1.2 x weights + 50 = {bound:.0f} MB), "
      f"at the end with a 2048-token cache {engine['rss_end_mb']:.0f} MB\n")
print("| case | attnserve ms | PyTorch ms | speed-up |")
print("|---|---|---|---|")
for key in torch:
    label = key.replace("_ms", "").replace("_", " ")
    print(f"| {label} | {engine[key]:.2f} | {torch[key]:.2f} | {torch[key] / engine[key]:.2f}x |")
PY
