"""Writes the golden cases: random inputs and weights, and the reference outputs computed in
float64 by the modules in attnserve/, one safetensors file per case. The C++ golden test
(tests/golden/golden_test.cc) runs the engine on each case and compares.

Usage: make_golden.py OUTPUT_DIR
"""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnserve import functional, norms  # noqa: E402
from attnserve.attention import MultiHeadAttention, PointerAttention, SimpleSelfAttention  # noqa
from attnserve.export import export  # noqa: E402
from attnserve.models import (CausalLM, Encoder, NextWordModel, PerceiverIO,  # noqa: E402
                              Seq2Seq, SetTransformer)
from attnserve.safetensors import save  # noqa: E402

LENGTH_POOL = [1, 2, 7, 16, 33, 64, 129, 200, 300]
HEAD_WIDTHS = [8, 13, 16, 31, 64, 24, 9, 48]


def lengths_mix(gen, batch):
    """A batch that mixes short and long sequences, always holding a 1 or a 300."""
    picks = torch.randint(len(LENGTH_POOL), (batch,), generator=gen).tolist()
    lengths = [LENGTH_POOL[i] for i in picks]
    lengths[0] = 300 if lengths[0] < 100 else 1
    return torch.tensor(lengths, dtype=torch.int64)


def padded(gen, lengths, width, scale=1.0):
    x = torch.randn(len(lengths), int(lengths.max()), width, generator=gen) * scale
    return functional.zero_padding(x, lengths)


def write(out_dir, name, variant, tensors, **metadata):
    metadata = {k: (int(v) if isinstance(v, bool) else v) for k, v in metadata.items()}
    tensors = {k: (v.float() if v.is_floating_point() else v) for k, v in tensors.items()}
    save(tensors, os.path.join(out_dir, name + ".safetensors"), {"variant": variant, **metadata})


def add_reference_outputs(layer, tensors, x, lengths, memory, memory_lengths):
    """The layer's output and per-head contributions, computed in float64."""
    layer = layer.double()
    with torch.no_grad():
        heads_out = layer.heads(x.double(), lengths,
                                None if memory is None else memory.double(), memory_lengths)
        tensors["output"] = functional.zero_padding(layer.out_proj(heads_out), lengths)
        tensors["head_contributions"] = layer.head_contributions(heads_out)


def attention_cases(out_dir, gen):
    grid = []
    for kind in ("softmax", "exclusive", "linear"):
        for heads, causal in itertools.product((1, 2, 12), (False, True)):
            for alibi in ((False,) if kind == "linear" else (False, True)):
                for cross in ((False,) if kind == "exclusive" else (False, True)):
                    grid.append((kind, heads, causal, alibi, cross))
    for n, (kind, heads, causal, alibi, cross) in enumerate(grid):
        dk = HEAD_WIDTHS[n % len(HEAD_WIDTHS)]
        dv = HEAD_WIDTHS[(n + 3) % len(HEAD_WIDTHS)] if n % 3 else dk
        if heads == 12 and n % 4:  # keep most 12-head cases small enough to generate quickly
            dk, dv = min(dk, 16), min(dv, 16)
        model_dim = 32 + 8 * (n % 5)
        memory_dim = 24 + 4 * (n % 3) if cross else 0
        batch = 1 + n % 3
        lengths = lengths_mix(gen, batch)
        feature_map = "exp" if (kind == "linear" and n % 2) else "elu_plus_one"
        layer = MultiHeadAttention(model_dim, heads, dk, dv, memory_dim=memory_dim,
                                   output_dim=model_dim + (4 if n % 4 == 1 else 0), kind=kind,
                                   causal=causal, alibi=alibi, bias=n % 5 != 2,
                                   feature_map=feature_map)
        tensors = {name: p for name, p in layer.state_dict().items()}
        x = padded(gen, lengths, model_dim)
        tensors.update(x=x, x_lengths=lengths)
        memory = memory_lengths = None
        if cross:
            extra = torch.randint(0, 40, (batch,), generator=gen)
            memory_lengths = lengths + extra if causal else lengths_mix(gen, batch)
            memory = padded(gen, memory_lengths, memory_dim)
            tensors.update(memory=memory, memory_lengths=memory_lengths)
        add_reference_outputs(layer, tensors, x, lengths, memory, memory_lengths)
        name = f"attention_{n:02d}_{kind}_h{heads}_dk{dk}_dv{dv}" + ("_causal" if causal else "") \
            + ("_alibi" if alibi else "") + ("_cross" if cross else "")
        config = layer.config()
        write(out_dir, name, "attention", tensors, **{k: config[k] for k in (
            "kind", "model_dim", "memory_dim", "num_heads", "head_dim_qk", "head_dim_v",
            "output_dim", "causal", "alibi", "feature_map")})


ROPE_VARIANTS = {
    "half": dict(theta=10000.0, interleaved=False),
    "interleaved": dict(theta=500.0, interleaved=True),
    "partial": dict(theta=10000.0, interleaved=False, fraction=0.5),
    "linear": dict(theta=10000.0, interleaved=False, scaling=dict(type="linear", factor=2.0)),
    "llama3": dict(theta=10000.0, interleaved=False,
                   scaling=dict(type="llama3", factor=8.0, low_freq_factor=1.0,
                                high_freq_factor=4.0, original_max_positions=64)),
    "dynamic": dict(theta=10000.0, interleaved=False,
                    scaling=dict(type="dynamic", factor=2.0, original_max_positions=16)),
}


def rotary_settings(variant, head_dim):
    """functional.rotate's settings for a variant of ROPE_VARIANTS (None: no rotary)."""
    if variant is None:
        return None
    v = dict(ROPE_VARIANTS[variant])
    dims = int(head_dim * v.pop("fraction", 1.0)) // 2 * 2
    return dict(dims=dims, theta=v["theta"], interleaved=v["interleaved"],
                scaling=v.get("scaling"))


def modern_attention_cases(out_dir, gen):
    """Grouped-query attention x rotary positions x sliding windows, and the rotary scalings:
    written after every other case, so that those keep their random draws."""
    grid = []
    for kind, kv_heads, causal in itertools.product(("softmax", "exclusive"), (4, 2, 1),
                                                    (False, True)):
        grid.append((kind, kv_heads, causal, (None, "half", "interleaved", "partial")[len(grid) % 4],
                     8 if causal and len(grid) % 3 else 0, False))
    for kv_heads, causal in itertools.product((2, 1), (False, True)):
        grid.append(("linear", kv_heads, causal, None, 0, False))
        grid.append(("softmax", kv_heads, causal, None, 0, True))
    for variant in ("linear", "llama3", "dynamic"):
        grid.append(("softmax", 2, True, variant, 0, False))
    for n, (kind, kv_heads, causal, rope, window, cross) in enumerate(grid):
        dk = (16, 24, 64, 10)[n % 4]
        dv = dk if n % 3 else 8
        model_dim = 32 + 8 * (n % 3)
        memory_dim = 24 if cross else 0
        batch = 1 + n % 3
        lengths = lengths_mix(gen, batch)
        rotary = rotary_settings(rope, dk)
        layer = MultiHeadAttention(model_dim, 4, dk, dv, memory_dim=memory_dim, kind=kind,
                                   causal=causal, bias=n % 2 == 0, num_kv_heads=kv_heads,
                                   rotary=rotary, window=window)
        tensors = dict(layer.state_dict())
        x = padded(gen, lengths, model_dim)
        tensors.update(x=x, x_lengths=lengths)
        memory = memory_lengths = None
        if cross:
            memory_lengths = lengths + 7 if causal else lengths_mix(gen, batch)
            memory = padded(gen, memory_lengths, memory_dim)
            tensors.update(memory=memory, memory_lengths=memory_lengths)
        add_reference_outputs(layer, tensors, x, lengths, memory, memory_lengths)
        name = f"attention_gqa_{n:02d}_{kind}_kv{kv_heads}_dk{dk}_dv{dv}" \
            + ("_causal" if causal else "") + (f"_rope_{rope}" if rope else "") \
            + (f"_window{window}" if window else "") + ("_cross" if cross else "")
        scaling = (rotary or {}).get("scaling") or {}
        write(out_dir, name, "attention", tensors, kind=kind, model_dim=model_dim,
              memory_dim=memory_dim, num_heads=4, head_dim_qk=dk, head_dim_v=dv,
              output_dim=model_dim, causal=causal, alibi=False, feature_map="elu_plus_one",
              num_kv_heads=kv_heads, window=window, rope_dims=(rotary or {}).get("dims", 0),
              rope_theta=repr((rotary or {}).get("theta", 10000.0)),
              rope_interleaved=(rotary or {}).get("interleaved", False),
              rope_scaling=scaling.get("type", "none"), rope_factor=repr(scaling.get("factor", 1.0)),
              rope_low_freq_factor=repr(scaling.get("low_freq_factor", 1.0)),
              rope_high_freq_factor=repr(scaling.get("high_freq_factor", 4.0)),
              rope_original_max_positions=scaling.get("original_max_positions", 0))


def simple_cases(out_dir, gen):
    for n, (scaled, causal, width) in enumerate(
            itertools.product((True, False), (False, True), (8, 33, 64))):
        lengths = lengths_mix(gen, 1 + n % 3)
        x = padded(gen, lengths, width, scale=0.5)
        y = SimpleSelfAttention(scaled, causal)(x.double(), lengths)
        write(out_dir, f"simple_{n:02d}_d{width}" + ("_scaled" if scaled else "")
              + ("_causal" if causal else ""), "simple",
              {"x": x, "x_lengths": lengths, "output": y}, scaled=scaled, causal=causal)


def pointer_cases(out_dir, gen):
    for n, (query_dim, memory_dim, attention_dim) in enumerate(
            [(16, 16, 8), (32, 24, 33), (7, 40, 64), (64, 64, 100)]):
        lengths, memory_lengths = lengths_mix(gen, 1 + n % 3), lengths_mix(gen, 1 + n % 3)
        layer = PointerAttention(query_dim, memory_dim, attention_dim)
        queries, memory = padded(gen, lengths, query_dim), padded(gen, memory_lengths, memory_dim)
        with torch.no_grad():
            y = layer.double()(queries.double(), lengths, memory.double(), memory_lengths)
        tensors = dict(layer.state_dict(), queries=queries, x_lengths=lengths, memory=memory,
                       memory_lengths=memory_lengths, output=y)
        write(out_dir, f"pointer_{n:02d}_a{attention_dim}", "pointer", tensors)


def kernel_cases(out_dir, gen):
    for dim in (1, 7, 64, 768):
        x = torch.randn(37, dim, generator=gen) * 3 + 1
        gamma, beta = torch.randn(dim, generator=gen), torch.randn(dim, generator=gen)
        xd = x.double()
        write(out_dir, f"kernel_layer_norm_d{dim}", "layer_norm",
              {"x": x, "gamma": gamma, "beta": beta,
               "output": functional.layer_norm(xd, gamma.double(), beta.double(), 1e-5)},
              eps=1e-5)
        write(out_dir, f"kernel_rms_norm_d{dim}", "rms_norm",
              {"x": x, "gain": gamma, "output": functional.rms_norm(xd, gamma.double(), 1e-6)},
              eps=1e-6)
        g = float(norms.ScaleNorm(dim).g)
        write(out_dir, f"kernel_scale_norm_d{dim}", "scale_norm",
              {"x": x, "output": functional.scale_norm(xd, g, 1e-5)}, g=repr(g), eps=1e-5)
    x = torch.linspace(-12, 12, 1001)
    small = torch.linspace(-6, 6, 1001)
    for name, fn, inputs in (("relu", torch.relu, x), ("gelu_erf", functional.gelu_erf, x),
                             ("gelu_tanh", functional.gelu_tanh, x),
                             ("elu_plus_one", functional.elu_plus_one, x),
                             ("exp", torch.exp, small)):
        write(out_dir, f"kernel_activation_{name}", "activation",
              {"x": inputs, "output": fn(inputs.double())}, function=name)
    for width in (1, 5, 64, 1000):
        scores = torch.randn(23, width, generator=gen) * 40
        lengths = torch.randint(0, width + 1, (23,), generator=gen)
        allowed = torch.arange(width)[None, :] < lengths[:, None]
        sd = scores.double().masked_fill(~allowed, float("-inf"))
        probs = torch.where(allowed, torch.softmax(sd, -1), torch.zeros_like(sd))
        log_probs = torch.where(allowed, torch.log_softmax(sd, -1), sd)
        write(out_dir, f"kernel_softmax_w{width}", "softmax",
              {"x": scores, "lengths": lengths, "output": probs, "log_output": log_probs})
    for positions, dim in ((2048, 768), (10, 7), (300, 64)):
        write(out_dir, f"kernel_sinusoidal_p{positions}_d{dim}", "sinusoidal",
              {"output": functional.sinusoidal_positions(positions, dim, torch.float64)},
              positions=positions, dim=dim)
    slopes = {f"slopes_{n}": functional.alibi_slopes(n) for n in list(range(1, 17)) + [24, 48]}
    write(out_dir, "kernel_alibi_slopes", "alibi", slopes)
    table = torch.randn(50, 24, generator=gen)
    ids = torch.randint(0, 50, (77,), generator=gen)
    positions = torch.randn(64, 24, generator=gen)
    lengths = torch.tensor([5, 40, 1])
    x = padded(gen, lengths, 24)
    start = 3
    expected = functional.zero_padding(x.double() + positions[start : start + 40].double(),
                                       lengths)
    write(out_dir, "kernel_embedding", "embedding",
          {"table": table, "ids": ids, "output": table[ids], "positions": positions, "x": x,
           "x_lengths": lengths, "positioned": expected}, start=start)


def randomize(model, gen):
    """Moves every parameter off its initial value (norm gains included), so a swapped or
    ignored tensor changes the output."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)


def model_grid():
    """(name, class, settings): causal LMs over attention x norm x pre/post x positions; encoders
    over attention x positions x pooling with the norms cycling; feature-input encoders."""
    norms = ("layer_norm", "rms_norm", "scale_norm")
    for attention, norm, position, positions in itertools.product(
            ("softmax", "exclusive", "linear"), norms, ("pre", "post"),
            ("sinusoidal", "learned", "alibi", "none")):
        if attention == "linear" and positions == "alibi":
            continue
        yield (f"causal_lm_{attention}_{norm}_{position}_{positions}", CausalLM,
               dict(vocab_size=300, attention=attention, norm=norm, norm_position=position,
                    positions=positions, tie_embeddings=positions != "learned"))
    for n, (attention, positions, pooling) in enumerate(itertools.product(
            ("softmax", "exclusive", "linear"), ("sinusoidal", "learned", "alibi", "none"),
            ("mean", "first", "last", "pma"))):
        if attention == "linear" and positions == "alibi":
            continue
        norm, position = norms[n % 3], ("pre", "post")[n % 2]
        yield (f"encoder_{attention}_{positions}_{pooling}_{norm}_{position}", Encoder,
               dict(vocab_size=300, attention=attention, norm=norm, norm_position=position,
                    positions=positions, pooling=pooling, normalize=n % 3 == 0))
    for pooling in ("mean", "pma"):
        yield (f"encoder_features_{pooling}", Encoder,
               dict(input_dim=11, pooling=pooling, normalize=True, positions="none"))
    attentions = ("softmax", "exclusive", "linear")
    for n, (attention, pooling) in enumerate(itertools.product(attentions, ("cls", "pma"))):
        positions = ("learned", "sinusoidal", "none")[n % 3] if attention == "linear" else \
            ("alibi", "learned", "sinusoidal")[n % 3]
        yield (f"next_word_{attention}_{pooling}_{positions}", NextWordModel,
               dict(vocab_size=300, attention=attention, pooling=pooling, positions=positions,
                    norm=norms[n % 3], norm_position=("pre", "post")[n % 2]))
    for n, attention in enumerate(attentions * 2):
        positions = ("sinusoidal", "learned", "none")[n % 3]
        yield (f"seq2seq_{attention}_{positions}_{n}", Seq2Seq,
               dict(vocab_size=300, attention=attention, positions=positions,
                    num_decoder_layers=1 + n % 2, tie_embeddings=n % 2 == 0,
                    norm=norms[n % 3], norm_position=("pre", "post")[n // 3]))
    for n, attention in enumerate(attentions * 2):
        inputs = dict(vocab_size=300, positions="learned") if n < 3 else \
            dict(input_dim=9, positions="none", output_dim=5)
        yield (f"perceiver_io_{attention}_{'tokens' if n < 3 else 'features'}", PerceiverIO,
               dict(attention=attention, num_latents=6, num_outputs=1 + n % 3,
                    norm=norms[n % 3], norm_position=("pre", "post")[n % 2], **inputs))
    for n, (attention, inducing) in enumerate(itertools.product(attentions, (0, 4))):
        inputs = dict(input_dim=9) if n % 2 == 0 else dict(vocab_size=300)
        yield (f"set_transformer_{attention}_{'isab' if inducing else 'sab'}", SetTransformer,
               dict(attention=attention, num_inducing=inducing, num_seeds=1 + n % 2,
                    output_dim=7, norm=norms[n % 3], norm_position=("pre", "post")[n % 2],
                    **inputs))
    # A norm over the input embedding (BERT's): last, so the cases above keep their draws.
    for norm, position in (("layer_norm", "post"), ("rms_norm", "pre")):
        yield (f"causal_lm_embed_norm_{norm}_{position}", CausalLM,
               dict(vocab_size=300, norm=norm, norm_position=position, positions="learned",
                    embed_norm=True))
        yield (f"encoder_embed_norm_{norm}_{position}", Encoder,
               dict(vocab_size=300, norm=norm, norm_position=position, positions="learned",
                    embed_norm=True))
    # Rotary positions, grouped-query attention, gated feed-forward networks and sliding
    # windows: after the cases above, so that those keep their draws.
    def rope(variant, head_dim=8):
        r = rotary_settings(variant, head_dim)
        settings = dict(positions="rope", rope_theta=r["theta"], rope_dims=r["dims"],
                        rope_interleaved=r["interleaved"])
        if r["scaling"]:
            settings["rope_scaling"] = r["scaling"]
        return settings
    for n, (attention, variant, kv_heads, ffn) in enumerate(itertools.product(
            ("softmax", "exclusive"), ("half", "interleaved", "partial"), (2, 1),
            ("silu", "gelu"))):
        if n % 2:  # half the grid keeps every combination small
            continue
        yield (f"causal_lm_rope_{attention}_{variant}_kv{kv_heads}_{ffn}_glu", CausalLM,
               dict(vocab_size=300, attention=attention, num_heads=4, num_kv_heads=kv_heads,
                    gated_ffn=True, activation=ffn, norm="rms_norm", bias=n % 4 == 0,
                    tie_embeddings=n % 3 == 0, **rope(variant)))
    for variant in ("linear", "llama3"):
        yield (f"causal_lm_rope_{variant}_scaling", CausalLM,
               dict(vocab_size=300, num_heads=4, num_kv_heads=2, gated_ffn=True,
                    activation="silu", norm="rms_norm", bias=False, **rope(variant)))
    for attention in ("softmax", "exclusive"):
        yield (f"causal_lm_window_{attention}", CausalLM,
               dict(vocab_size=300, attention=attention, num_heads=4, num_kv_heads=2,
                    attention_window=5, gated_ffn=True, activation="silu", norm="rms_norm",
                    **rope("half")))
    yield ("causal_lm_linear_gqa_glu", CausalLM,
           dict(vocab_size=300, attention="linear", num_heads=4, num_kv_heads=1,
                gated_ffn=True, activation="silu", positions="none"))
    yield ("causal_lm_alibi_gqa", CausalLM,
           dict(vocab_size=300, num_heads=4, num_kv_heads=2, positions="alibi"))
    for attention, variant in (("softmax", "half"), ("exclusive", "interleaved"),
                               ("softmax", "dynamic")):
        yield (f"encoder_rope_{attention}_{variant}", Encoder,
               dict(vocab_size=300, attention=attention, num_heads=4, num_kv_heads=2,
                    gated_ffn=True, activation="gelu", pooling="mean", **rope(variant)))
    yield ("seq2seq_rope_gqa_glu", Seq2Seq,
           dict(vocab_size=300, num_heads=4, num_kv_heads=2, gated_ffn=True, activation="silu",
                **rope("half")))
    yield ("next_word_rope_gqa_glu", NextWordModel,
           dict(vocab_size=300, num_heads=4, num_kv_heads=1, gated_ffn=True, activation="gelu",
                **rope("interleaved")))
    yield ("set_transformer_gqa_glu", SetTransformer,
           dict(input_dim=9, num_heads=4, num_kv_heads=2, gated_ffn=True, activation="silu",
                num_inducing=4, output_dim=7))
    # Classification heads (cross-encoders, classifiers), with token types and without.
    yield ("encoder_classifier_pairs", Encoder,
           dict(vocab_size=300, token_types=2, positions="learned", embed_norm=True,
                norm_position="post", classifier=dict(
                    num_labels=3, pooling="first", dense=True, dense_activation="tanh",
                    labels=["no", "maybe", "yes"])))
    yield ("encoder_classifier_relevance", Encoder,
           dict(vocab_size=300, classifier=dict(num_labels=1, pooling="mean", out_bias=False)))
    yield ("encoder_classifier_last_gelu", Encoder,
           dict(vocab_size=300, token_types=3, attention="linear", classifier=dict(
               num_labels=2, pooling="last", dense=True, dense_activation="gelu",
               score_activation="none")))


def model_cases(out_dir, gen):
    """Each case is a model directory written by the exporter, plus NAME.expected.safetensors
    with inputs and the reference outputs."""
    for n, (name, cls, settings) in enumerate(model_grid()):
        params = dict(model_dim=32, num_layers=2, num_heads=4 if n % 2 else 3,
                      head_dim_qk=8, head_dim_v=8 if n % 3 else 6, ffn_dim=48,
                      activation=("gelu", "relu", "gelu_tanh")[n % 3], max_positions=64)
        model = cls(**dict(params, **settings))
        randomize(model, gen)
        model.eval()
        directory = os.path.join(out_dir, "model_" + name)
        export(model, directory)
        lengths = torch.tensor([23, 5, 1][: 1 + n % 3], dtype=torch.int64)
        if settings.get("input_dim"):
            inputs = padded(gen, lengths, settings["input_dim"])
        else:
            inputs = torch.randint(0, 300, (len(lengths), int(lengths.max())), generator=gen)
            inputs = inputs * (torch.arange(inputs.shape[1])[None, :] < lengths[:, None])
        model = model.double()
        tensors = {"inputs": inputs.double() if inputs.is_floating_point() else inputs,
                   "lengths": lengths}
        with torch.no_grad():
            x = tensors["inputs"]
            if cls is CausalLM:
                tensors["logits"] = model(x, lengths)
            elif cls is Encoder:
                types = None
                if settings.get("token_types"):
                    types = torch.randint(0, settings["token_types"], x.shape, generator=gen)
                    types = types * (torch.arange(x.shape[1])[None, :] < lengths[:, None])
                    tensors["token_types"] = types
                tensors["states"] = model(x, lengths, types)
                tensors["embedding"] = model.embed(x, lengths, types)
                if settings.get("classifier"):
                    tensors["logits"] = model.classify(x, lengths, types)
            elif cls is Seq2Seq:
                target_lengths = torch.tensor([9, 1, 4][: len(lengths)], dtype=torch.int64)
                targets = torch.randint(0, 300, (len(lengths), 9), generator=gen)
                targets = targets * (torch.arange(9)[None, :] < target_lengths[:, None])
                tensors.update(targets=targets, target_lengths=target_lengths,
                               logits=model(x, lengths, targets, target_lengths))
            else:
                tensors["output"] = model(x, lengths)
        write(out_dir, "model_" + name + ".expected", "model", tensors)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    for make in (kernel_cases, attention_cases, simple_cases, pointer_cases, model_cases,
                 modern_attention_cases):
        make(out_dir, gen)
    print(f"golden cases written to {out_dir}: {len(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
