"""export(model, directory): writes config.json and model.safetensors for the engine.

Command line: python3 -m attnserve.export CHECKPOINT.pt DIRECTORY, where the checkpoint is a
torch.save()d model built from attnserve.models.
"""
import argparse
import json
import os
import re

import torch

from . import safetensors
from .tokenizer import ByteTokenizer


def storage_order(names):
    """Data order in model.safetensors: by name, except that each attention layer's q, k and v
    projection weights lie back to back (likewise its biases), and a gated feed-forward
    network's fc1 and gate, so the engine uses them as one fused matrix straight from the
    mapped file, without a copy."""
    def key(indexed):
        index, name = indexed
        match = re.match(r"(.*)\.([qkv])_proj\.(weight|bias)$", name)
        if match:
            return (match.group(1), match.group(3), "qkv".index(match.group(2)))
        match = re.match(r"(.*\.(?:ffn|rff))\.(fc1|gate)\.(weight|bias)$", name)
        if match:
            return (match.group(1), match.group(3), ("fc1", "gate").index(match.group(2)))
        return (name, "", index)
    return [name for _, name in sorted(enumerate(names), key=key)]


def export(model, directory, tokenizer=None):
    """Writes the model directory; tied weights are stored once (under embed_tokens.weight).
    `tokenizer`: a ByteTokenizer (the default) or a HuggingFaceTokenizer (its tokenizer.json is
    copied into the directory)."""
    os.makedirs(directory, exist_ok=True)
    config = model.config()
    if config.get("vocab_size"):
        tokenizer = tokenizer or ByteTokenizer()
        config["tokenizer"] = tokenizer.config()
        assert tokenizer.vocab_size <= config["vocab_size"], "tokenizer exceeds the vocabulary"
        if hasattr(tokenizer, "save"):
            tokenizer.save(directory)
    state = model.state_dict()
    tensors = {}
    for name in storage_order(list(state)):
        if name == "lm_head.weight" and config.get("tie_embeddings"):
            continue
        tensors[name] = state[name].detach().to(torch.float32).contiguous()
    safetensors.save(tensors, os.path.join(directory, "model.safetensors"),
                     {"format": "attnserve"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def load(directory):
    """The inverse of export(): the PyTorch model of a model directory."""
    from .models import CausalLM, Encoder, NextWordModel, PerceiverIO, Seq2Seq, SetTransformer

    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    tensors, _ = safetensors.load(os.path.join(directory, "model.safetensors"))
    settings = {k: v for k, v in config.items()
                if k not in ("format_version", "architecture", "tokenizer")}
    architectures = {"causal_lm": CausalLM, "encoder": Encoder, "next_word": NextWordModel,
                     "seq2seq": Seq2Seq, "perceiver_io": PerceiverIO,
                     "set_transformer": SetTransformer}
    model = architectures[config["architecture"]](**settings)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = ["lm_head.weight"] if config.get("tie_embeddings") else []
    if unexpected or set(missing) - set(tied):
        raise ValueError(f"{directory}: missing {missing}, unexpected {unexpected}")
    return model.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a torch.save()d attnserve model")
    parser.add_argument("directory", help="the model directory to write")
    args = parser.parse_args()
    model = torch.load(args.checkpoint)
    export(model, args.directory)
    print(f"exported {type(model).__name__} to {args.directory}")


if __name__ == "__main__":
    main()
