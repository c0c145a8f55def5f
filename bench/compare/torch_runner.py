"""PyTorch's side of the comparison suite: the same model directory, checks and cases as
engine_runner (bench/engine_runner.cc), run by the python/ reference modules in eager mode under
torch.no_grad(), decoding with the reference's own KV cache.

Usage: torch_runner.py MODEL_DIR [--runs N] [--cases prefill:1x128,decode:512,...] [--threads 2]
                       [--int8]
Prints {"case": median ms, ...}; the check's result goes to stderr.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
from timing import median_ms  # noqa: E402
from models import last_position_logits  # noqa: E402
from attnserve.export import load  # noqa: E402
from attnserve.models import CausalLM  # noqa: E402


TOLERANCE = 1e-3  # the check's largest error, relative to the largest logit (--int8: 5e-2)


def check_close(actual, expected_file, what):
    expected = torch.from_numpy(np.fromfile(expected_file, dtype=np.float32))
    actual = actual.flatten()
    assert actual.numel() == expected.numel(), f"{what}: {actual.numel()} values, " \
        f"the reference has {expected.numel()}"
    worst = (actual - expected).abs().max().item()
    largest = max(1.0, expected.abs().max().item())
    assert worst <= TOLERANCE * largest, f"{what} differs from the reference by {worst}"
    print(f"{what} matches the reference: max |diff| {worst}", file=sys.stderr)


def check(model, directory):
    """The export round trip: what load() gives computes what models.py saved."""
    with open(os.path.join(directory, "check.json")) as f:
        spec = json.load(f)
    batch, length = spec["batch"], spec["length"]
    expected = os.path.join(directory, "check_output.bin")
    if isinstance(model, CausalLM):
        ids = torch.tensor(spec["ids"]).view(batch, length)
        check_close(last_position_logits(model, ids, model.new_caches()), expected, "prefill")
        caches = model.new_caches()
        last_position_logits(model, ids[:1], caches)
        check_close(last_position_logits(model, torch.tensor([[spec["decode_token"]]]), caches),
                    os.path.join(directory, "check_decode_output.bin"), "decode")
    else:
        inputs = torch.tensor(spec["inputs"]).view(batch, length, -1)
        check_close(model(inputs, torch.full((batch,), length)), expected, "forward")


def time_case(model, name, runs):
    kind, shape = name.split(":")
    generator = torch.Generator().manual_seed(7)
    if kind == "prefill":
        batch, length = map(int, shape.split("x"))
        if isinstance(model, CausalLM):
            ids = torch.randint(0, 256, (batch, length), generator=generator)
            return median_ms(lambda: last_position_logits(model, ids, model.new_caches()), runs,
                             warmup=2)
        inputs = torch.randn(batch, length, model.settings["input_dim"], generator=generator)
        lengths = torch.full((batch,), length)
        return median_ms(lambda: model(inputs, lengths), runs, warmup=2)
    assert kind == "decode" and isinstance(model, CausalLM), f"unknown case {name}"
    # Each timed step adds a token to the context, as in engine_runner.
    caches = model.new_caches()
    last_position_logits(model, torch.randint(0, 256, (1, int(shape)), generator=generator),
                         caches)
    token = torch.tensor([[42]])
    return median_ms(lambda: last_position_logits(model, token, caches), runs, warmup=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cases", default="")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int8", action="store_true",
                        help="PyTorch's dynamic int8 quantization of every nn.Linear (fbgemm)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.directory)
    if args.int8:
        global TOLERANCE
        TOLERANCE = 5e-2
        model = torch.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    results = {}
    with torch.no_grad():
        check(model, args.directory)
        for name in filter(None, args.cases.split(",")):
            results[name] = time_case(model, name, args.runs)
            print(f"{name}: {results[name]:.3f} ms", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
