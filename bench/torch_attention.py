"""PyTorch peers for the engine's attention-layer micro-benchmark, same shapes, same threads.

Prints JSON: {case: median milliseconds}. Usage: torch_attention.py [--threads N] [--runs N]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from timing import median_ms  # noqa: E402
from attnserve.attention import MultiHeadAttention  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d, heads = 768, 12
    results = {}
    with torch.no_grad():
        for causal, batch, t in ((True, 1, 512), (False, 1, 512), (True, 8, 128)):
            x = torch.randn(batch, t, d)
            lengths = torch.full((batch,), t)
            reference = MultiHeadAttention(d, heads, causal=causal).eval()
            native = torch.nn.MultiheadAttention(d, heads, batch_first=True).eval()
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1) if causal else None
            tag = f"causal={int(causal)}/batch={batch}/time={t}"
            results["reference_module/" + tag] = median_ms(lambda: reference(x, lengths),
                                                           args.runs)
            results["nn.MultiheadAttention/" + tag] = median_ms(
                lambda: native(x, x, x, attn_mask=mask, need_weights=False), args.runs)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
