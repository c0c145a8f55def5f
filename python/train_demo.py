"""Trains the bundled demo model (models/demo): a small byte-level causal language model with
exclusive self-attention, on the English fortune-cookie files of Debian's `fortunes` package.

Usage: /usr/bin/python3 python/train_demo.py [--minutes 25] [--out models/demo]
        [--report docs/demo-model.md]
Needs: apt-get install fortunes. Writes the model directory to --out and the report (held-out
loss against a unigram byte model) to --report.
"""
import argparse
import glob
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from attnserve.export import export  # noqa: E402
from attnserve.models import CausalLM  # noqa: E402
from attnserve.tokenizer import ByteTokenizer  # noqa: E402

FORTUNES = "/usr/share/games/fortunes"
SETTINGS = dict(model_dim=192, num_layers=4, num_heads=6, ffn_dim=768, attention="exclusive",
                norm="layer_norm", norm_position="pre", positions="alibi", max_positions=1024,
                activation="gelu")


def load_fortunes():
    """Every fortune of every English file (binary .dat indexes skipped), in file order."""
    fortunes = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            fortunes += [t.strip() for t in f.read().split("\n%\n") if t.strip()]
    return fortunes


def to_stream(fortunes, tokenizer):
    eot = tokenizer.special_tokens["<|endoftext|>"]
    ids = []
    for text in fortunes:
        ids += tokenizer.encode(text) + [eot]
    return torch.tensor(ids, dtype=torch.int64)


def batches(stream, batch, length, rng):
    while True:
        starts = [rng.randrange(0, len(stream) - length - 1) for _ in range(batch)]
        yield torch.stack([stream[s : s + length + 1] for s in starts])


def loss_on(model, stream, length, max_windows=None):
    """Mean next-token cross-entropy (nats) over consecutive windows of the stream."""
    total, count = 0.0, 0
    windows = range(0, len(stream) - length - 1, length)
    if max_windows:
        windows = list(windows)[:max_windows]
    model.eval()
    with torch.no_grad():
        for s in windows:
            chunk = stream[s : s + length + 1][None]
            logits = model(chunk[:, :-1], torch.tensor([length]))
            total += F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum").item()
            count += length
    model.train()
    return total / count


def unigram_loss(train, held_out, vocab):
    counts = torch.bincount(train, minlength=vocab).double() + 1.0  # add-one smoothing
    log_p = torch.log(counts / counts.sum())
    return -log_p[held_out].mean().item()


def main():
    parser = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(__file__), "..")
    parser.add_argument("--minutes", type=float, default=25.0)
    parser.add_argument("--out", default=os.path.join(root, "models", "demo"))
    parser.add_argument("--report", default=os.path.join(root, "docs", "demo-model.md"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = random.Random(0)

    tokenizer = ByteTokenizer()
    fortunes = load_fortunes()
    rng.shuffle(fortunes)
    held = max(1, len(fortunes) // 20)  # 5% of fortunes, never trained on
    train, held_out = to_stream(fortunes[held:], tokenizer), to_stream(fortunes[:held], tokenizer)
    print(f"{len(fortunes)} fortunes: {len(train)} training bytes, {len(held_out)} held out")

    model = CausalLM(tokenizer.vocab_size, tie_embeddings=True, **SETTINGS)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    length, batch = 192, 24
    deadline = time.time() + args.minutes * 60
    step, started = 0, time.time()
    for chunk in batches(train, batch, length, rng):
        elapsed = (time.time() - started) / (args.minutes * 60)
        if elapsed >= 1.0:
            break
        lr = 2e-3 * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * min(elapsed, 1.0)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        lengths = torch.full((batch,), length)
        logits = model(chunk[:, :-1], lengths)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e} "
                  f"{time.time() - started:.0f}s", flush=True)
        step += 1
    assert time.time() <= deadline + 120

    held_loss = loss_on(model, held_out, 256)
    unigram = unigram_loss(train, held_out, tokenizer.vocab_size)
    model.eval()
    export(model, args.out, tokenizer)
    with open(args.report, "w") as f:
        f.write(f"""# Demo model

A byte-level causal language model with exclusive self-attention (XSA), trained by
`python/train_demo.py` on the English fortune files of Debian's `fortunes` package
({len(fortunes)} fortunes; 5% held out, never trained on).

| setting | value |
|---|---|
| parameters | {params:,} ({params * 4 / 1e6:.1f} MB as float32) |
| layers, width, heads | {SETTINGS['num_layers']}, {SETTINGS['model_dim']}, {SETTINGS['num_heads']} |
| attention, positions, norm | XSA, ALiBi, pre-norm LayerNorm |
| training | {step} steps of {batch} x {length} bytes, AdamW, {args.minutes:g} minutes on 2 CPU threads |

| held-out loss | nats/byte | bits/byte |
|---|---|---|
| this model | {held_loss:.3f} | {held_loss / math.log(2):.3f} |
| unigram byte model (add-one smoothed, fitted on the training bytes) | {unigram:.3f} | {unigram / math.log(2):.3f} |
""")
    print(f"held-out loss {held_loss:.3f} nats/byte; unigram {unigram:.3f}; {step} steps")


if __name__ == "__main__":
    main()
