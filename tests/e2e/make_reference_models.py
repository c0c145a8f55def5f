"""Exports small random models with the reference modules, an encoder-decoder ("translator")
and an encoder ("embedder"), and writes what the server must answer for fixed inputs
(reference computed in float64) to expected.json.
Usage: make_reference_models.py REPOSITORY"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from attnserve.export import export  # noqa: E402
from attnserve.models import Encoder, Seq2Seq  # noqa: E402
from attnserve import functional  # noqa: E402


def embedder(repository):
    """An encoder with mean pooling; its pooled embeddings, states and layer 1's per-head
    contributions for two token sequences."""
    torch.manual_seed(6)
    model = Encoder(vocab_size=257, model_dim=24, num_layers=2, num_heads=3, head_dim_qk=8,
                    attention="exclusive", norm="rms_norm", positions="sinusoidal",
                    max_positions=64, pooling="mean").eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.2)
    export(model, os.path.join(repository, "embedder"))
    model = model.double()
    texts = [list(b"attention"), list(b"is all")]
    lengths = torch.tensor([len(t) for t in texts])
    ids = torch.tensor([t + [0] * (9 - len(t)) for t in texts])
    with torch.no_grad():
        x = model.embed_inputs(ids, lengths)
        for i, layer in enumerate(model.layers):
            if i == 1:
                normed = layer.self_attn_norm(x)  # pre-norm: attention reads the normed stream
                contributions = layer.self_attn.head_contributions(
                    layer.self_attn.heads(normed, lengths))
            x = layer(x, lengths)
        states = functional.zero_padding(model.final_norm(x), lengths)
        pooled = model.embed(ids, lengths)
    return {"texts": texts, "pooled": pooled.tolist(), "states": states.tolist(),
            "contributions": contributions.tolist()}


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
    expected = {"embedder": embedder(repository)}
    expected.update({
        "source": source, "target": target,
        "next_log_probs": full[-1].tolist(),
        "score": [float(full[t - 1, target[t]]) for t in range(1, len(target))],
        "greedy": greedy[len(target):],
    })
    with open(os.path.join(repository, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
