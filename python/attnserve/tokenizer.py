"""Byte-level tokenizer: ids 0-255 are UTF-8 bytes, special tokens follow."""

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
