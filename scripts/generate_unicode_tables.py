"""Writes text/tokenizer/unicode_tables.inc: the character properties Hugging Face's tokenizers
use, as the installed reference library (tokenizers, PyPI) has them, found by probing it on every
code point.

The reference takes each property from the tables of a different Rust crate, each of its own
Unicode version (unicode_categories, unicode-normalization-alignments, regex, Rust's std), so no
one Unicode version (ICU's) gives its behaviour. Run by hand after changing the reference version,
from the repository root:

    .venv/bin/python scripts/generate_unicode_tables.py

then rebuild; tests/engine/hf_tokenizer_reference_test.py (EveryCodePointTest) checks the engine
against the reference on every code point.
"""
import os
import subprocess
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers, pre_tokenizers

OUTPUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine",
                      "tokenizer", "unicode_tables.inc")
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def words(pre_tokenizer, c):
    """The words `pre_tokenizer` makes of the code point between two letters."""
    return [word for word, _ in pre_tokenizer.pre_tokenize_str(f"a{chr(c)}a")]


def probe():
    """Each property's set of code points, as the reference behaves."""
    clean_text = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                            strip_accents=False, lowercase=False)
    chinese_chars = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                               strip_accents=False, lowercase=False)
    # NFD, then the nonspacing marks (Mn) removed.
    strip_nonspacing = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                                  strip_accents=True, lowercase=False)
    strip_combining = normalizers.StripAccents()  # combining marks (M*) removed, no NFD
    nfd, nfkd = normalizers.NFD(), normalizers.NFKD()
    bert = pre_tokenizers.BertPreTokenizer()  # whitespace removed, punctuation isolated
    whitespace_split = pre_tokenizers.WhitespaceSplit()  # char::is_whitespace
    regex_words = pre_tokenizers.Whitespace()  # the regex crate's \w+|[^\w\s]+
    digits = pre_tokenizers.Digits(individual_digits=True)  # char::is_numeric
    found = {name: set() for name in (
        "removed_by_clean_text", "chinese", "nonspacing_mark", "combining_mark", "whitespace",
        "split_whitespace", "regex_whitespace", "bert_punctuation", "word", "numeric",
        "decomposes", "canonically_decomposes", "combining_class")}
    for c in CODE_POINTS:
        s = chr(c)
        if clean_text.normalize_str(s) == "":
            found["removed_by_clean_text"].add(c)
        if chinese_chars.normalize_str(s) == f" {s} ":
            found["chinese"].add(c)
        canonical = nfd.normalize_str(s)
        if canonical != s:
            found["canonically_decomposes"].add(c)
        elif strip_nonspacing.normalize_str(s) == "":
            found["nonspacing_mark"].add(c)
        if nfkd.normalize_str(s) != s:
            found["decomposes"].add(c)
        if strip_combining.normalize_str(s) == "":
            found["combining_mark"].add(c)
        bert_words = words(bert, c)
        if bert_words == ["a", "a"]:
            found["whitespace"].add(c)
        elif len(bert_words) == 3:
            found["bert_punctuation"].add(c)
        if words(whitespace_split, c) == ["a", "a"]:
            found["split_whitespace"].add(c)
        regex = words(regex_words, c)
        if len(regex) == 1:
            found["word"].add(c)
        elif regex == ["a", "a"]:
            found["regex_whitespace"].add(c)
        if len(words(digits, c)) == 3:
            found["numeric"].add(c)
        # A non-zero combining class reorders against U+0334 (class 1) after it or U+0345
        # (class 240) before it.
        if canonical == s and (nfd.normalize_str(s + "\u0334") != s + "\u0334" or
                               nfd.normalize_str("\u0345" + s) != "\u0345" + s):
            found["combining_class"].add(c)
    return found


def properties(found):
    """The tables unicode.cc reads, each a (name, comment, code points)."""
    if not found["whitespace"] == found["split_whitespace"] == found["regex_whitespace"]:
        sys.exit("char::is_whitespace and the regex crate's \\s differ: IsWhitespace cannot serve "
                 "both")
    ascii_punctuation = {c for c in range(0x80) if unicodedata.category(chr(c)).startswith("P")}
    # Seen only after NFD, which leaves no char that decomposes: those keep their category.
    decomposing_nonspacing = {c for c in found["canonically_decomposes"]
                              if unicodedata.category(chr(c)) == "Mn"}
    return [
        ("kWhitespace", "char::is_whitespace (= the regex crate's \\s)", found["whitespace"]),
        ("kOther", "unicode_categories' is_other (Cc, Cf, Co): what BertNormalizer's clean_text "
         "removes, but U+FFFD, and tab, newline and carriage return, which it keeps",
         (found["removed_by_clean_text"] - {0xFFFD}) | {0x09, 0x0A, 0x0D}),
        ("kPunctuation", "unicode_categories' is_punctuation (P*): BertPreTokenizer's "
         "punctuation (ASCII: by Unicode's category, as ASCII symbols are BERT punctuation too)",
         {c for c in found["bert_punctuation"] if c >= 0x80} | ascii_punctuation),
        ("kNonspacingMark", "unicode_categories' is_mark_nonspacing (Mn): what BertNormalizer's "
         "strip_accents removes after NFD", found["nonspacing_mark"] | decomposing_nonspacing),
        ("kCombiningMark", "unicode-normalization-alignments' is_combining_mark (M*): what "
         "StripAccents removes", found["combining_mark"]),
        ("kNumeric", "char::is_numeric: what the Digits pre-tokenizer splits at",
         found["numeric"]),
        ("kWordChar", "the regex crate's \\w: what the Whitespace pre-tokenizer keeps together",
         found["word"]),
        ("kChineseChar", "BertNormalizer's CJK ranges: the chars handle_chinese_chars spaces",
         found["chinese"]),
        ("kDecomposes", "unicode-normalization-alignments (Unicode 9): the chars with a "
         "(canonical or compatibility) decomposition", found["decomposes"]),
        ("kNonZeroCombiningClass", "unicode-normalization-alignments (Unicode 9): the chars of "
         "a non-zero canonical combining class", found["combining_class"]),
    ]


def ranges(code_points):
    out = []
    for c in sorted(code_points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def write(tables):
    lines = [
        "// Generated by scripts/generate_unicode_tables.py from tokenizers "
        f"{tokenizers.__version__} (PyPI), probed",
        "// on every code point; do not edit. Each table: a property's code points, as sorted",
        "// inclusive ranges. Included by unicode.cc, which defines CodePointRange.",
        "",
    ]
    for name, comment, code_points in tables:
        lines.append(f"// {comment}.")
        lines.append(f"constexpr CodePointRange {name}[] = {{")
        lines += [f"    {{0x{first:04X}, 0x{last:04X}}}," for first, last in ranges(code_points)]
        lines.append("};")
        lines.append("")
    with open(OUTPUT, "w") as f:
        f.write("\n".join(lines))
    # The repository's style (.clang-format), which packs the ranges into lines.
    subprocess.run(["clang-format", "-i", "--assume-filename=unicode_tables.cc", OUTPUT],
                   check=True)
    for name, _, code_points in tables:
        print(f"{name}: {len(code_points)} code points, {len(ranges(code_points))} ranges")


if __name__ == "__main__":
    write(properties(probe()))
