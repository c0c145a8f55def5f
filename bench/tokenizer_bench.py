"""The engine's tokenizer.json encoding against the reference library (Hugging Face tokenizers
0.20.3 from PyPI, Rust called from Python), same texts, same run, same machine.

    .venv/bin/python bench/tokenizer_bench.py [BUILD_DIR] [--rounds N]

Texts: the paragraphs of Debian's license texts (/usr/share/common-licenses, English prose, about
a quarter of a megabyte) and the tokenizer tests' hard corpus (many scripts, emoji, long words).
Tokenizers: all-MiniLM-L6-v2's WordPiece, GPT-2's byte-level BPE, and trained on the texts by
the reference library: two byte-fallback BPEs without a pre-tokenizer (as Llama 2's: one trained
on words as SentencePiece is, one whose merges join across spaces), a BPE with an end-of-word
suffix (as CLIP's) and a Unigram (as T5's). For each, tokens
per second of: the engine, one thread; the reference's encode_batch with its parallelism off
(one thread) and on (every core); the reference's encode called once per text. Every timing is
the best of --rounds; both sides must give the same number of tokens. The reference's BPE and
Unigram keep a cache of the words they encoded (up to 10,000), which a repeated round finds full:
its first round, each text new to it, is reported too ("cold"), as is the engine's (which keeps a
word cache too, text/tokenizer/word_cache.h). Also the engine's cost of
streaming each text's ids back as text (TextStream), per token."""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "engine"))
from hf_tokenizer_reference_test import (CORPUS, MINILM, gpt2, train,  # noqa: E402
                                         with_byte_tokens)
from tokenizers import models, normalizers, pre_tokenizers, trainers  # noqa: E402

REFERENCE = r"""
import json, sys, time
from tokenizers import Tokenizer
tokenizer = Tokenizer.from_file(sys.argv[1])
tokenizer.no_truncation(); tokenizer.no_padding()
texts = [json.loads(line) for line in open(sys.argv[2])]
rounds, mode = int(sys.argv[3]), sys.argv[4]
best, first = float("inf"), None
for round in range(rounds + 1):
    start = time.perf_counter()
    if mode == "batch":
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
    else:
        tokens = sum(len(tokenizer.encode(t).ids) for t in texts)
    seconds = time.perf_counter() - start
    if round:
        best = min(best, seconds)
    else:
        first = seconds
print(json.dumps({"tokens": tokens, "seconds": best, "first_seconds": first}))
"""


def texts():
    paragraphs = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                paragraphs += [p.strip() for p in f.read().split("\n\n") if p.strip()]
    return paragraphs + CORPUS


def tokenizers(training):
    space_as_metaspace = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
    llama = train(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
                  trainers.BpeTrainer(vocab_size=8000, special_tokens=["<unk>", "<s>", "</s>"]),
                  normalizer=space_as_metaspace, text=training)
    # As SentencePiece trains Llama 2's: on words, so that no merge joins across a ▁; served
    # as its converted tokenizer.json is, with no pre-tokenizer (a text is one word).
    llama_words = train(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
                        trainers.BpeTrainer(vocab_size=8000,
                                            special_tokens=["<unk>", "<s>", "</s>"]),
                        pre_tokenizer=pre_tokenizers.Metaspace(), text=training)
    llama_words.update(pre_tokenizer=None, normalizer=json.loads(space_as_metaspace.__getstate__()))
    clip = train(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"),
                 trainers.BpeTrainer(vocab_size=8000, special_tokens=["<unk>"],
                                     end_of_word_suffix="</w>"),
                 pre_tokenizer=pre_tokenizers.Whitespace(), normalizer=normalizers.Lowercase(),
                 text=training)
    unigram = train(models.Unigram(),
                    trainers.UnigramTrainer(vocab_size=8000, special_tokens=["<unk>"],
                                            unk_token="<unk>"),
                    pre_tokenizer=pre_tokenizers.Metaspace(), text=training)
    with open(MINILM) as f:
        minilm = json.load(f)
    return {"WordPiece (all-MiniLM-L6-v2)": minilm, "byte-level BPE (GPT-2)": gpt2(),
            "byte-fallback BPE, merges across spaces": with_byte_tokens(
                llama, ["<unk>", "<s>", "</s>"]),
            "byte-fallback BPE (Llama 2 style: trained on words)": with_byte_tokens(
                llama_words, ["<unk>", "<s>", "</s>"]),
            "BPE with an end-of-word suffix (CLIP style)": clip,
            "Unigram (T5 style)": unigram}


def run(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    speed = os.path.join(args.build, "bench", "tokenizer_speed")
    all_texts = texts()
    big_text = ""
    for text in all_texts:
        if len((big_text + text).encode()) > 256 << 10:
            break
        big_text += text + "\n\n"
    total_bytes = sum(len(t.encode()) for t in all_texts)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    print(f"{len(all_texts)} texts, {total_bytes} bytes; {cpu}, {os.cpu_count()} cores; "
          f"best of {args.rounds}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        texts_path = os.path.join(scratch, "texts.jsonl")
        with open(texts_path, "w") as f:
            f.writelines(json.dumps(t) + "\n" for t in all_texts)
        script = os.path.join(scratch, "reference.py")
        with open(script, "w") as f:
            f.write(REFERENCE)
        for name, tokenizer in tokenizers(all_texts).items():
            path = os.path.join(scratch, "tokenizer.json")
            with open(path, "w") as f:
                json.dump(tokenizer, f)
            ours = run([speed, path, texts_path, str(args.rounds)])
            reference = {}
            for label, mode, parallel in [("batch, 1 thread", "batch", "false"),
                                          ("batch, all cores", "batch", "true"),
                                          ("encode per text", "single", "false")]:
                env = dict(os.environ, TOKENIZERS_PARALLELISM=parallel,
                           RAYON_NUM_THREADS=str(1 if parallel == "false" else os.cpu_count()))
                reference[label] = run([sys.executable, script, path, texts_path,
                                        str(args.rounds), mode], env)
                assert reference[label]["tokens"] == ours["tokens"], (name, label)
            rate = lambda r: r["tokens"] / r["seconds"]  # noqa: E731
            # Time and memory for one text of --max_text_bytes' default (256 KiB).
            one = os.path.join(scratch, "one.jsonl")
            with open(one, "w") as f:
                f.write(json.dumps(big_text) + "\n")
            big = run([speed, path, one, "1"])
            rows.append({"tokenizer": name, "tokens": ours["tokens"],
                         "attnserve": rate(ours),
                         "attnserve cold": ours["tokens"] / ours["first_seconds"],
                         "stream_us_per_token": ours["stream_seconds"] / ours["tokens"] * 1e6,
                         **{k: rate(v) for k, v in reference.items()},
                         "cold": reference["batch, 1 thread"]["tokens"] /
                         reference["batch, 1 thread"]["first_seconds"],
                         "big_text_seconds": big["seconds"],
                         "big_text_mib": big["peak_growth_kib"] / 1024})
    print("| tokenizer | tokens | attnserve, 1 thread, cold | cached | reference batch, 1 thread, "
          "cold | cached | reference batch, all cores | reference encode per text | attnserve / "
          "reference (1 thread, cold) | (cached) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r['tokens']} | {r['attnserve cold'] / 1e6:.2f} M/s | "
              f"{r['attnserve'] / 1e6:.2f} M/s | "
              f"{r['cold'] / 1e6:.2f} M/s | {r['batch, 1 thread'] / 1e6:.2f} M/s | "
              f"{r['batch, all cores'] / 1e6:.2f} M/s | {r['encode per text'] / 1e6:.2f} M/s | "
              f"{r['attnserve cold'] / r['cold']:.2f}x | "
              f"{r['attnserve'] / r['batch, 1 thread']:.2f}x |")
    print("\nStreamed decoding (TextStream, on the scheduler's thread for each generated token)")
    print("| tokenizer | µs per token |")
    print("|---|---|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r['stream_us_per_token']:.2f} |")
    print(f"\nOne text of {len(big_text.encode()) >> 10} KiB (--max_text_bytes): time and memory "
          "to tokenize it (how much the peak resident memory grew)")
    print("| tokenizer | milliseconds | MiB |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r['big_text_seconds'] * 1e3:.1f} | {r['big_text_mib']:.1f} |")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "tokenizer_bench.json"), "w") as f:
        json.dump({"cpu": cpu, "bytes": total_bytes, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
