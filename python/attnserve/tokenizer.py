"""The tokenizers a model directory can name: the byte-level tokenizer (ids 0-255 are UTF-8 bytes,
special tokens follow) and a Hugging Face tokenizer.json, which the server runs itself."""
import json
import os
import shutil

DEFAULT_SPECIAL_TOKENS = {"<|endoftext|>": 256}


class ByteTokenizer:
    def __init__(self, special_tokens=None):
        self.special_tokens = dict(special_tokens or DEFAULT_SPECIAL_TOKENS)
        assert all(i >= 256 for i in self.special_tokens.values())
        self.vocab_size = 256 + len(self.special_tokens)
        self.by_id = {i: t for t, i in self.special_tokens.items()}

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        out, pending = [], bytearray()
        for i in ids:
            if i < 256:
                pending.append(i)
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending = bytearray()
            out.append(self.by_id[i])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def config(self):
        return {"type": "byte", "special_tokens": self.special_tokens}


class HuggingFaceTokenizer:
    """A Hugging Face tokenizer.json (the `tokenizers` library's format), copied into the model
    directory; the server runs it as that library does. `end_of_text` names the token that ends
    generation (default: <|endoftext|> when the tokenizer has it)."""

    def __init__(self, path, end_of_text=None):
        self.path = path
        self.end_of_text = end_of_text
        with open(path) as f:
            tokenizer = json.load(f)
        vocab = tokenizer["model"]["vocab"]
        ids = [i for _, i in vocab.items()] if isinstance(vocab, dict) else range(len(vocab))
        ids = list(ids) + [t["id"] for t in tokenizer.get("added_tokens") or []]
        self.vocab_size = max(ids) + 1 if ids else 0

    def config(self):
        config = {"type": "huggingface", "file": "tokenizer.json"}
        if self.end_of_text:
            config["end_of_text"] = self.end_of_text
        return config

    def save(self, directory):
        shutil.copyfile(self.path, os.path.join(directory, "tokenizer.json"))
