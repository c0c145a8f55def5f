"""ggml (the engine of llama.cpp) as a peer of bench/compare/int8_compare.py, from a ggml source
tree the user names (GGML_DIR): nothing is downloaded, and ggml is not in Debian. Its own GPT-2
example (examples/gpt-2: gpt-2-backend, gpt-2-quantize) is built in OUT/ggml-build, the
comparison's gpt2_small (GPT-2-small's shape, random weights) is written in the example's model
file format, quantized to q8_0 and q4_0 with its tool, and timed from outside:

  decode at context C: two runs of gpt-2-backend on a prompt of C tokens, generating N1 and N2
  tokens (--ignore-eos); the difference of their "predict time" over N2 - N1 is the time of one
  decoded token at a context of C + N1 .. C + N2 (the prompt's cost is the same in both runs).

The example computes GPT-2's block (its GELU is the tanh form; the others' is erf, the same
work), with its KV cache in float32 as ours is. Its answers are not compared: this is timing.
"""
import json
import os
import re
import statistics
import struct
import subprocess
import sys

import numpy as np

GGML_FILE_MAGIC = 0x67676D6C  # "ggml"
TARGETS = ("gpt-2-backend", "gpt-2-quantize")


def build(ggml_dir, out):
    """Builds the example's two programs from the user's tree; returns their directory."""
    build_dir = os.path.join(out, "ggml-build")
    subprocess.run(["cmake", "-S", ggml_dir, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_BUILD_EXAMPLES=ON", "-DGGML_BUILD_TESTS=OFF"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "-j", str(os.cpu_count()), "--target",
                    *TARGETS], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(build_dir, "bin")


def read_safetensors(path):
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"])
    return tensors


def write_model(model_dir, path):
    """The model in the GPT-2 example's file format, float32 (ftype 0). Its byte-level vocabulary:
    ids 0-255 are the bytes, the rest placeholders, so a prompt of C letters is C tokens."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    assert config["positions"] == "learned" and config["tie_embeddings"], "a GPT-2 shape"
    t = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    vocab, ctx = config["vocab_size"], config["max_positions"]
    names = {"model/wte": t["embed_tokens.weight"], "model/wpe": t["embed_positions"],
             "model/ln_f/g": t["final_norm.weight"], "model/ln_f/b": t["final_norm.bias"]}
    for i in range(config["num_layers"]):
        p, h = f"layers.{i}.", f"model/h{i}/"
        attention = [t[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]
        names.update({
            h + "ln_1/g": t[p + "self_attn_norm.weight"], h + "ln_1/b": t[p + "self_attn_norm.bias"],
            h + "ln_2/g": t[p + "ffn_norm.weight"], h + "ln_2/b": t[p + "ffn_norm.bias"],
            h + "attn/c_attn/w": np.concatenate(attention),
            h + "attn/c_attn/b": np.concatenate([t[p + f"self_attn.{x}_proj.bias"] for x in "qkv"]),
            h + "attn/c_proj/w": t[p + "self_attn.out_proj.weight"],
            h + "attn/c_proj/b": t[p + "self_attn.out_proj.bias"],
            h + "mlp/c_fc/w": t[p + "ffn.fc1.weight"], h + "mlp/c_fc/b": t[p + "ffn.fc1.bias"],
            h + "mlp/c_proj/w": t[p + "ffn.fc2.weight"], h + "mlp/c_proj/b": t[p + "ffn.fc2.bias"],
        })
    with open(path, "wb") as f:
        f.write(struct.pack("<I", GGML_FILE_MAGIC))
        f.write(struct.pack("<6i", vocab, ctx, config["model_dim"], config["num_heads"],
                            config["num_layers"], 0))
        f.write(struct.pack("<i", vocab))
        for i in range(vocab):
            word = bytes([i]) if i < 256 else f"<{i}>".encode()
            f.write(struct.pack("<i", len(word)) + word)
        for name, array in names.items():
            # ggml lists dimensions fastest first: a [rows, columns] array is (columns, rows).
            dims = list(reversed(array.shape))
            encoded = name.encode()
            f.write(struct.pack("<3i", len(dims), len(encoded), 0))
            f.write(struct.pack(f"<{len(dims)}i", *dims) + encoded)
            f.write(np.ascontiguousarray(array, dtype=np.float32).tobytes())


def predict_ms(binary, model, context, tokens, threads, cache):
    """The example's "predict time": the prompt of `context` tokens (in batches of 128) and then
    `tokens` decoded one at a time, with a KV cache of `cache` tokens."""
    out = subprocess.run([binary, "-m", model, "-p", "a" * context, "-n", str(tokens), "-t",
                          str(threads), "-c", str(cache), "-b", "128", "--ignore-eos", "-s", "1"],
                         check=True, capture_output=True, text=True).stdout
    generated = re.search(r"sample time =\s*([0-9.]+) ms", out)
    assert generated and float(generated.group(1)) > 0, f"nothing generated: {out[-2000:]}"
    found = re.search(r"predict time =\s*([0-9.]+) ms", out)
    assert found, out[-2000:]
    return float(found.group(1))


def decode_ms(binary, model, context, threads, rounds, cache, short=4, long=36):
    """The median over `rounds` of (predict(long) - predict(short)) / (long - short)."""
    samples = []
    for _ in range(rounds):
        samples.append((predict_ms(binary, model, context, long, threads, cache) -
                        predict_ms(binary, model, context, short, threads, cache)) / (long - short))
    return statistics.median(samples)


def measure(ggml_dir, out, model_dir, contexts, threads=2, rounds=3):
    """{"ggml f32": {"decode:C": ms}, "ggml q8_0": ..., "ggml q4_0": ...}."""
    binaries = build(ggml_dir, out)
    with open(os.path.join(model_dir, "config.json")) as f:
        cache = json.load(f)["max_positions"]
    f32 = os.path.join(out, "ggml-f32.bin")
    if not os.path.exists(f32):
        write_model(model_dir, f32)
    results = {}
    for kind in ("f32", "q8_0", "q4_0"):
        path = f32 if kind == "f32" else os.path.join(out, f"ggml-{kind}.bin")
        if not os.path.exists(path):
            subprocess.run([os.path.join(binaries, "gpt-2-quantize"), f32, path, kind],
                           check=True, stdout=subprocess.DEVNULL)
        results[f"ggml {kind}"] = {
            f"decode:{c}": decode_ms(os.path.join(binaries, "gpt-2-backend"), path, c, threads,
                                     rounds, cache) for c in contexts}
        print(f"ggml {kind}: {results[f'ggml {kind}']}", file=sys.stderr, flush=True)
    return results
