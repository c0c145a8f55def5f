"""Exports a small random encoder-decoder with the reference modules and writes what the
server must answer for fixed inputs (reference computed in float64) to expected.json.
Usage: make_seq2seq.py REPOSITORY  (writes REPOSITORY/translator and REPOSITORY/expected.json)"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from attnserve.export import export  # noqa: E402
from attnserve.models import Seq2Seq  # noqa: E402


def main():
    repository = sys.argv[1]
    torch.manual_seed(5)
    model = Seq2Seq(257, model_dim=32, num_layers=2, num_decoder_layers=2, num_heads=4,
                    attention="softmax", positions="learned", max_positions=64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.3)
    export(model, os.path.join(repository, "translator"))
    model = model.double()
    source, target = list(b"hello world"), [256] + list(b"bon")

    def logits(src, tgt):
        with torch.no_grad():
            return model(torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([tgt]),
                         torch.tensor([len(tgt)]))[0]

    full = torch.log_softmax(logits(source, target), dim=-1)
    greedy = list(target)
    for _ in range(8):
        greedy.append(int(logits(source, greedy)[-1].argmax()))
    expected = {
        "source": source, "target": target,
        "next_log_probs": full[-1].tolist(),
        "score": [float(full[t - 1, target[t]]) for t in range(1, len(target))],
        "greedy": greedy[len(target):],
    }
    with open(os.path.join(repository, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
