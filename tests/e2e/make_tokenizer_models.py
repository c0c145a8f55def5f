"""Exports small random models with Hugging Face tokenizers for tests/e2e/tokenizers_test.py:
gpt2_lm (GPT-2's byte-level BPE), minilm_embedder (all-MiniLM-L6-v2's WordPiece), llama_lm (a
byte-fallback BPE trained here), llama_hf (a Hugging Face Llama snapshot with random weights,
saved by transformers, with that tokenizer) and broken (a tokenizer.json with a pre-tokenizer
attnserve does not have, which the server must refuse at load).
Usage: make_tokenizer_models.py REPOSITORY"""
import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from attnserve.export import export  # noqa: E402
from attnserve.models import CausalLM, Encoder  # noqa: E402
from attnserve.tokenizer import HuggingFaceTokenizer  # noqa: E402
from hf_tokenizer_reference_test import MINILM, gpt2, llama2  # noqa: E402


def random_model(cls, directory, tokenizer_json, vocab_size, end_of_text=None, **settings):
    torch.manual_seed(11)
    model = cls(vocab_size=vocab_size, model_dim=16, num_layers=1, num_heads=2, head_dim_qk=8,
                max_positions=256, **settings).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.5)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(tokenizer_json, f)
        f.flush()
        export(model, directory, tokenizer=HuggingFaceTokenizer(f.name, end_of_text))


def llama_snapshot(directory, tokenizer_json):
    """A Llama checkpoint as save_pretrained writes it: grouped-query attention, an untied head,
    </s> (id 2) ending generation."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(12)
    config = LlamaConfig(vocab_size=900, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.3)
        # Zero logits for the byte tokens (<0x00>...): random weights would otherwise pick bytes
        # that are not UTF-8, whose streamed text may differ from the whole decoding.
        for token, id in tokenizer_json["model"]["vocab"].items():
            if token.startswith("<0x"):
                model.lm_head.weight[id] = 0.0
    # A second token ends generation too (as Llama 3 instruct models list <|eot_id|> beside
    # <|end_of_text|>): the one this model picks fourth after "The quick brown fox".
    from tokenizers import Tokenizer
    prompt = Tokenizer.from_str(json.dumps(tokenizer_json)).encode("The quick brown fox").ids
    with torch.no_grad():
        greedy = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=4,
                                min_new_tokens=4, pad_token_id=0)[0, len(prompt):].tolist()
    model.config.eos_token_id = [2, greedy[3]] if greedy[3] not in greedy[:3] + [2] else 2
    model.save_pretrained(directory, safe_serialization=True)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json, f)


def main():
    root = sys.argv[1]
    with open(MINILM) as f:
        minilm = json.load(f)
    random_model(CausalLM, os.path.join(root, "gpt2_lm"), gpt2(), 50257, "<|endoftext|>")
    random_model(Encoder, os.path.join(root, "minilm_embedder"), minilm, 30522, pooling="mean")
    random_model(CausalLM, os.path.join(root, "llama_lm"), llama2(), 900, "</s>")
    llama_snapshot(os.path.join(root, "llama_hf"), llama2())
    broken = dict(minilm, pre_tokenizer={"type": "FixedLength", "length": 3})
    random_model(Encoder, os.path.join(root, "broken"), broken, 30522)


if __name__ == "__main__":
    main()
