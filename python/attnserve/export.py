"""export(model, directory): writes config.json and model.safetensors for the engine.

Command line: python3 -m attnserve.export CHECKPOINT.pt DIRECTORY, where the checkpoint is a
torch.save()d model built from attnserve.models.
"""
import argparse
import json
import os

import torch

from . import safetensors
from .tokenizer import ByteTokenizer


def export(model, directory, tokenizer=None):
    """Writes the model directory; tied weights are stored once (under embed_tokens.weight)."""
    os.makedirs(directory, exist_ok=True)
    config = model.config()
    if config.get("vocab_size"):
        tokenizer = tokenizer or ByteTokenizer()
        config["tokenizer"] = tokenizer.config()
        assert tokenizer.vocab_size <= config["vocab_size"], "tokenizer exceeds the vocabulary"
    tensors = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.get("tie_embeddings"):
            continue
        tensors[name] = tensor.detach().to(torch.float32).contiguous()
    safetensors.save(tensors, os.path.join(directory, "model.safetensors"),
                     {"format": "attnserve"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


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
