"""The comparison suite's models: built with the python/ reference modules on random weights,
exported to attnserve (config.json, model.safetensors) and to ONNX (model.onnx), with the check
data every runner verifies before it times anything, and manifest.json: each model's cases,
FLOPs per case and bytes read per decoded token, for compare.py.

Usage: models.py OUT_DIR [--only NAME,...]   (a model whose directory is complete is skipped)

ONNX graphs follow the usual KV-cache export (one past/present pair per layer, as Hugging Face
Optimum writes them): causal LMs take ids [B, T] and past_key_N / past_value_N [B, H, P, d]
and return the last position's logits [B, vocab] and present_key_N / present_value_N; a prompt
is the call with P = 0. Perceiver IO and Set Transformer take inputs [B, T, input_dim] and
lengths [B].
"""
import argparse
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from attnserve.export import export  # noqa: E402
from attnserve.models import CausalLM, PerceiverIO, SetTransformer  # noqa: E402

GPT2_SMALL = dict(vocab_size=50257, model_dim=768, num_layers=12, num_heads=12, ffn_dim=3072,
                  positions="learned", max_positions=2100, tie_embeddings=True)
# SmolLM-135M's shape: Llama-style blocks (RMSNorm, rotary positions, 3 key/value heads for 9
# query heads, SwiGLU), a tied 49152-token head.
SMOLLM_135M = dict(vocab_size=49152, model_dim=576, num_layers=30, num_heads=9, num_kv_heads=3,
                   ffn_dim=1536, gated_ffn=True, activation="silu", norm="rms_norm",
                   norm_eps=1e-5, bias=False, positions="rope", rope_theta=10000.0,
                   max_positions=2100, tie_embeddings=True)
LM_PREFILL = ["prefill:1x32", "prefill:1x128", "prefill:1x512",
              "prefill:8x32", "prefill:8x128", "prefill:8x512"]
VARIANT_PREFILL = ["prefill:1x32", "prefill:1x128", "prefill:1x512", "prefill:8x128"]
SET_PREFILL = ["prefill:1x32", "prefill:1x128", "prefill:1x512",
               "prefill:8x32", "prefill:8x128", "prefill:8x512"]

# name: (class, settings, cases)
MODELS = {
    "gpt2_small": (CausalLM, GPT2_SMALL,
                   LM_PREFILL + ["decode:128", "decode:512", "decode:2048"]),
    "gpt2_small_xsa": (CausalLM, dict(GPT2_SMALL, attention="exclusive"),
                       VARIANT_PREFILL + ["decode:128", "decode:2048"]),
    "gpt2_small_alibi": (CausalLM, dict(GPT2_SMALL, positions="alibi"),
                         VARIANT_PREFILL + ["decode:128", "decode:2048"]),
    "gpt2_small_linear": (CausalLM, dict(GPT2_SMALL, attention="linear", max_positions=4200),
                          VARIANT_PREFILL + ["decode:256", "decode:4096"]),
    "smollm_135m": (CausalLM, SMOLLM_135M,
                    LM_PREFILL + ["decode:128", "decode:512", "decode:2048"]),
    "perceiver_io": (PerceiverIO, dict(input_dim=128, model_dim=512, num_heads=8, num_layers=6,
                                       ffn_dim=2048, num_latents=256, num_outputs=16,
                                       output_dim=128, positions="sinusoidal",
                                       max_positions=1024),
                     SET_PREFILL),
    "set_transformer": (SetTransformer, dict(input_dim=64, model_dim=256, num_heads=8,
                                             num_layers=4, ffn_dim=1024, num_inducing=32,
                                             num_seeds=4, output_dim=64),
                        SET_PREFILL),
}
CHECK_BATCH, CHECK_LENGTH = 2, 16


def last_position_logits(lm, ids, caches):
    """What serving a prompt needs: every layer over every position (extending `caches`), the
    LM head at the last position only. [B, vocab]."""
    start = caches[0]["k"].shape[2] if "k" in caches[0] else 0
    lengths = torch.full((ids.shape[0],), ids.shape[1], dtype=torch.int64)
    x = lm.run_layers(lm.embed_inputs(ids, lengths, start), lengths, caches)
    return lm.lm_head(x[:, -1])


class CachedLM(nn.Module):
    """The ONNX face of a CausalLM: explicit per-layer past and present keys and values."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, *past):
        layers = len(self.lm.layers)
        caches = [{"k": past[i], "v": past[layers + i]} for i in range(layers)]
        logits = last_position_logits(self.lm, ids, caches)
        return (logits, *[c["k"] for c in caches], *[c["v"] for c in caches])


def lm_io_names(layers):
    past = [f"past_key_{i}" for i in range(layers)] + [f"past_value_{i}" for i in range(layers)]
    present = [name.replace("past", "present") for name in past]
    return past, present


def export_onnx(model, directory):
    path = os.path.join(directory, "model.onnx")
    s = model.settings
    if isinstance(model, CausalLM):
        layers, heads = s["num_layers"], s["num_kv_heads"]
        past_names, present_names = lm_io_names(layers)
        dims = [s["head_dim_qk"]] * layers + [s["head_dim_v"]] * layers
        # A non-empty dummy past, so that tracing keeps the concatenation and the position offset.
        past = [torch.zeros(3, heads, 2, d) for d in dims]
        axes = {"ids": {0: "batch", 1: "time"}, "logits": {0: "batch"}}
        axes.update({name: {0: "batch", 2: "past"} for name in past_names})
        axes.update({name: {0: "batch", 2: "total"} for name in present_names})
        torch.onnx.export(CachedLM(model), (torch.zeros(3, 5, dtype=torch.int64), *past), path,
                          input_names=["ids", *past_names],
                          output_names=["logits", *present_names], dynamic_axes=axes,
                          opset_version=14)
    else:
        inputs = torch.randn(3, 5, s["input_dim"])
        lengths = torch.full((3,), 5, dtype=torch.int64)
        torch.onnx.export(model, (inputs, lengths), path, input_names=["inputs", "lengths"],
                          output_names=["output"], opset_version=14,
                          dynamic_axes={"inputs": {0: "batch", 1: "time"},
                                        "lengths": {0: "batch"}, "output": {0: "batch"}})


def write_floats(path, tensor):
    tensor.detach().to(torch.float32).contiguous().numpy().tofile(path)


def write_check(model, directory):
    """check.json and check_*.bin: the reference's outputs on random inputs (batch 2, 16
    tokens), and for causal LMs one more token decoded after the first prompt."""
    generator = torch.Generator().manual_seed(1)
    check = {"batch": CHECK_BATCH, "length": CHECK_LENGTH}
    if isinstance(model, CausalLM):
        ids = torch.randint(0, 256, (CHECK_BATCH, CHECK_LENGTH), generator=generator)
        lengths = torch.full((CHECK_BATCH,), CHECK_LENGTH)
        write_floats(os.path.join(directory, "check_output.bin"), model(ids, lengths)[:, -1])
        token = 97
        continued = torch.cat([ids[:1], torch.tensor([[token]])], dim=1)
        write_floats(os.path.join(directory, "check_decode_output.bin"),
                     model(continued, torch.tensor([CHECK_LENGTH + 1]))[:, -1])
        check.update(ids=ids.flatten().tolist(), decode_token=token)
    else:
        inputs = torch.randn(CHECK_BATCH, CHECK_LENGTH, model.settings["input_dim"],
                             generator=generator)
        output = model(inputs, torch.full((CHECK_BATCH,), CHECK_LENGTH))
        write_floats(os.path.join(directory, "check_output.bin"), output)
        check["inputs"] = inputs.flatten().tolist()
    with open(os.path.join(directory, "check.json"), "w") as f:
        json.dump(check, f)


def attention_block_flops(s, queries, keys, causal=False):
    """2 x the multiply-adds of one attention block (q/k/v/out projections, q.k and p.v, the
    FFN) with `queries` rows attending to `keys` rows; under a causal mask, over half the keys
    on average. Norms, softmax and activations are not counted."""
    d, heads, kv_heads = s["model_dim"], s["num_heads"], s["num_kv_heads"]
    qk, v = heads * s["head_dim_qk"], heads * s["head_dim_v"]
    kv = kv_heads * (s["head_dim_qk"] + s["head_dim_v"])
    products = (qk + v) * queries * (keys - queries / 2 if causal else keys)
    ffn_matrices = 3 if s["gated_ffn"] else 2
    return 2 * (d * qk * queries + d * kv * keys + v * d * queries + products
                + ffn_matrices * d * s["ffn_dim"] * queries)


def case_flops(model, case):
    """FLOPs of a case: every attention block, the input projection, the output projection or
    the LM head (at the last position only). Linear attention is counted like softmax
    attention: its products are a small share either way."""
    s = model.settings
    kind, shape = case.split(":")
    d = s["model_dim"]
    if kind == "decode":  # one new token's projections and FFN, its products over the context
        context = int(shape)
        new_token = attention_block_flops(s, 1, 1)
        products = 2 * s["num_heads"] * (s["head_dim_qk"] + s["head_dim_v"]) * context
        return s["num_layers"] * (new_token + products) + 2 * d * s["vocab_size"]
    batch, tokens = map(int, shape.split("x"))
    if isinstance(model, CausalLM):
        per_sequence = s["num_layers"] * attention_block_flops(s, tokens, tokens, causal=True)
        return batch * (per_sequence + 2 * d * s["vocab_size"])
    inputs = 2 * s["input_dim"] * d * tokens
    if isinstance(model, PerceiverIO):
        n, m = s["num_latents"], s["num_outputs"]
        flops = (inputs + attention_block_flops(s, n, tokens)
                 + s["num_layers"] * attention_block_flops(s, n, n)
                 + attention_block_flops(s, m, n) + 2 * d * s["output_dim"] * m)
        return batch * flops
    # Set Transformer with ISAB layers (MAB(I, X), then MAB(X, H)), then PMA (rFF, MAB(S, Z)).
    i, k = s["num_inducing"], s["num_seeds"]
    isab = attention_block_flops(s, i, tokens) + attention_block_flops(s, tokens, i)
    pma = 4 * d * s["ffn_dim"] * tokens + attention_block_flops(s, k, tokens)
    return batch * (inputs + s["num_layers"] * isab + pma + 2 * d * s["output_dim"] * k)


def decode_bytes(model, directory, context):
    """Bytes a decode step must read: every weight once (the token and position tables give one
    row; a tied embedding is read whole as the LM head) and the keys and values of the context
    (or, for linear attention, each layer's recurrent state)."""
    s = model.settings
    weights = os.path.getsize(os.path.join(directory, "model.safetensors"))
    if s["positions"] == "learned":
        weights -= 4 * s["max_positions"] * s["model_dim"]
    if not s.get("tie_embeddings"):
        weights -= 4 * s["vocab_size"] * s["model_dim"]
    heads, dk, dv = s["num_kv_heads"], s["head_dim_qk"], s["head_dim_v"]
    if s["attention"] == "linear":
        cache = 4 * s["num_layers"] * heads * (dk * dv + dk)
    else:
        cache = 4 * s["num_layers"] * heads * (dk + dv) * context
    return weights, cache


def build(name, out):
    cls, settings, cases = MODELS[name]
    directory = os.path.join(out, name)
    manifest_path = os.path.join(directory, "manifest.json")
    torch.manual_seed(0)
    model = cls(**settings).eval()
    if not os.path.exists(manifest_path):
        os.makedirs(directory, exist_ok=True)
        with torch.no_grad():
            export(model, directory)
            write_check(model, directory)
            export_onnx(model, directory)
    manifest = {"name": name, "architecture": model.settings["architecture"], "cases": {}}
    for case in cases:
        entry = {"flops": case_flops(model, case)}
        if case.startswith("decode:"):
            entry["weight_bytes"], entry["cache_bytes"] = decode_bytes(
                model, directory, int(case.split(":")[1]))
        manifest["cases"][case] = entry
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"models.py: {directory}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--only", default=",".join(MODELS))
    args = parser.parse_args()
    for name in args.only.split(","):
        build(name, args.out)


if __name__ == "__main__":
    main()
