"""PyTorch peer of bench/model_bench.cc: the same model directory (loaded with the reference's
load()), the same prompts' shapes, prefill and per-token decode with the reference's cache.
Prints JSON. Usage: torch_model.py MODEL_DIR [--threads 2] [--runs 10]"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from timing import median_ms  # noqa: E402
from attnserve.export import load  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.directory)
    max_positions = model.settings["max_positions"]
    results = {}
    with torch.no_grad():
        for batch, length in ((1, 128), (8, 128), (1, 512)):
            ids = torch.randint(0, 256, (batch, length))
            lengths = torch.full((batch,), length)
            results[f"prefill_b{batch}_t{length}_ms"] = median_ms(
                lambda: model(ids, lengths, model.new_caches())[:, -1], args.runs, warmup=1)
        for context in (128, 512, 2048):
            if context + args.runs + 2 > max_positions:
                continue
            caches = model.new_caches()
            model(torch.randint(0, 256, (1, context)), torch.tensor([context]), caches)
            token = torch.tensor([[42]])

            def step():
                model(token, torch.tensor([1]), caches)

            results[f"decode_context{context}_ms"] = median_ms(step, args.runs, warmup=1)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
