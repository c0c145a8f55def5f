"""Models assembled from a config: the same architectures, math and tensor names as the engine.

Every model takes a padded batch (token ids [B, T] int64, or feature vectors [B, T, input_dim])
with lengths [B], and carries the flat settings dict that the exporter writes as config.json
(docs/model-format.md).
"""
import torch
import torch.nn.functional as F
from torch import nn

from . import functional
from .blocks import InducedSetAttention, PoolingByAttention, TransformerBlock, make_norm

FORMAT_VERSION = 1
POSITIONS = ("sinusoidal", "learned", "alibi", "rope", "none")
ROPE_SETTINGS = ("rope_theta", "rope_dims", "rope_interleaved", "rope_scaling")
POOLINGS = ("mean", "first", "last", "pma", "none")


def _settings(architecture, **values):
    defaults = dict(
        format_version=FORMAT_VERSION, architecture=architecture, vocab_size=0, input_dim=0,
        model_dim=64, num_layers=2, num_heads=4, head_dim_qk=0, head_dim_v=0, ffn_dim=0,
        activation="gelu", attention="softmax", feature_map="elu_plus_one", bias=True,
        norm="layer_norm", norm_eps=1e-5, norm_position="pre", embed_norm=False,
        positions="sinusoidal", max_positions=512, num_kv_heads=0, gated_ffn=False,
        attention_window=0)
    unknown = set(values) - set(defaults) - set(ROPE_SETTINGS) - {
        "tie_embeddings", "pooling", "normalize", "num_seeds", "num_decoder_layers",
        "num_latents", "num_outputs", "output_dim", "num_inducing", "token_types", "classifier"}
    assert not unknown, f"unknown settings {unknown}"
    s = dict(defaults, **values)
    s["head_dim_qk"] = s["head_dim_qk"] or s["model_dim"] // s["num_heads"]
    s["head_dim_v"] = s["head_dim_v"] or s["head_dim_qk"]
    s["ffn_dim"] = s["ffn_dim"] or 4 * s["model_dim"]
    s["num_kv_heads"] = s["num_kv_heads"] or s["num_heads"]
    assert s["positions"] in POSITIONS, s["positions"]
    if s["positions"] == "rope":
        s.setdefault("rope_theta", 10000.0)
        s.setdefault("rope_interleaved", False)
        s["rope_dims"] = s.get("rope_dims") or s["head_dim_qk"]
    else:
        assert not set(ROPE_SETTINGS) & set(s), "rope settings need positions \"rope\""
    assert not s["attention_window"] or architecture == "causal_lm", "window: causal_lm only"
    assert s["positions"] != "rope" or architecture not in ("perceiver_io", "set_transformer")
    assert (s["vocab_size"] > 0) != (s["input_dim"] > 0), "tokens or feature vectors, not both"
    return s


class Model(nn.Module):
    """Input embedding shared by every architecture: embed_tokens (ids) or input_proj
    (feature vectors), then sinusoidal or learned positions (embed_positions), then embed_norm
    when the settings ask for it (BERT's embedding LayerNorm)."""

    def __init__(self, settings):
        super().__init__()
        self.settings = settings
        d = settings["model_dim"]
        if settings["vocab_size"]:
            self.embed_tokens = nn.Embedding(settings["vocab_size"], d)
            nn.init.normal_(self.embed_tokens.weight, std=0.02)
        else:
            self.input_proj = nn.Linear(settings["input_dim"], d, bias=settings["bias"])
        if settings["positions"] == "learned":
            self.embed_positions = nn.Parameter(torch.randn(settings["max_positions"], d) * 0.02)
        elif settings["positions"] == "sinusoidal":
            self.register_buffer(
                "sinusoid", functional.sinusoidal_positions(settings["max_positions"], d),
                persistent=False)
        if settings["embed_norm"]:
            self.embed_norm = make_norm(settings["norm"], d, settings["norm_eps"])

    def config(self):
        return dict(self.settings)

    def rotary(self):
        """functional.rotate's settings, or None without rotary positions."""
        s = self.settings
        if s["positions"] != "rope":
            return None
        return dict(dims=s["rope_dims"], theta=s["rope_theta"], interleaved=s["rope_interleaved"],
                    scaling=s.get("rope_scaling"))

    def block_args(self, **overrides):
        s = self.settings
        args = dict(num_heads=s["num_heads"], ffn_dim=s["ffn_dim"], head_dim_qk=s["head_dim_qk"],
                    head_dim_v=s["head_dim_v"], attention=s["attention"], norm=s["norm"],
                    norm_eps=s["norm_eps"], norm_position=s["norm_position"],
                    alibi=s["positions"] == "alibi", activation=s["activation"],
                    feature_map=s["feature_map"], bias=s["bias"], num_kv_heads=s["num_kv_heads"],
                    rotary=self.rotary(), window=s["attention_window"],
                    gated_ffn=s["gated_ffn"])
        args.update(overrides)
        return args

    def final_norm_or_none(self):
        """Pre-norm stacks end with a norm (their residual stream is never normalized)."""
        s = self.settings
        return make_norm(s["norm"], s["model_dim"], s["norm_eps"]) \
            if s["norm_position"] == "pre" else None

    def embed_inputs(self, inputs, lengths, start=0, types=None):
        """types: embeddings [B, T, model_dim] added to the tokens' (an encoder's token types)."""
        x = self.embed_tokens(inputs) if self.settings["vocab_size"] else self.input_proj(inputs)
        if types is not None:
            x = x + types.to(x.dtype)
        t = x.shape[1]
        if self.settings["positions"] == "learned":
            x = x + self.embed_positions[start : start + t].to(x.dtype)
        elif self.settings["positions"] == "sinusoidal":
            x = x + self.sinusoid[start : start + t].to(x.dtype)
        if self.settings["embed_norm"]:
            x = self.embed_norm(x)
        return functional.zero_padding(x, lengths)

    def run_layers(self, x, lengths, caches=None, **memory):
        for i, layer in enumerate(self.layers):
            cache = {} if caches is None else {"cache": caches[i]}
            x = layer(x, lengths, **cache, **memory)
        if self.final_norm is not None:
            x = functional.zero_padding(self.final_norm(x), lengths)
        return x


class CausalLM(Model):
    """Decoder-only language model: embeddings, causal blocks, final norm, LM head
    (lm_head.weight, or the token embedding when tie_embeddings)."""

    def __init__(self, vocab_size, tie_embeddings=True, **settings):
        super().__init__(_settings("causal_lm", vocab_size=vocab_size,
                                   tie_embeddings=tie_embeddings, **settings))
        s = self.settings
        self.layers = nn.ModuleList(TransformerBlock(s["model_dim"], causal=True,
                                                     **self.block_args())
                                    for _ in range(s["num_layers"]))
        self.final_norm = self.final_norm_or_none()
        self.lm_head = nn.Linear(s["model_dim"], vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids, lengths, caches=None):
        """Next-token logits [B, T, vocab] at every position (zero on padding).

        caches: one dict per layer (start with empty dicts) to decode incrementally: each call
        continues the sequences from what the caches hold (equal lengths across the batch)."""
        start = caches[0]["k"].shape[2] if caches and "k" in caches[0] else 0
        x = self.run_layers(self.embed_inputs(ids, lengths, start), lengths, caches)
        return functional.zero_padding(self.lm_head(x), lengths)

    def new_caches(self):
        return [{} for _ in self.layers]


CLASSIFIER_DEFAULTS = dict(pooling="first", dense=False, dense_activation="tanh", out_bias=True)
DENSE_ACTIVATIONS = {"none": lambda x: x, "tanh": torch.tanh, "relu": F.relu,
                     "gelu": F.gelu}


class Encoder(Model):
    """Bidirectional encoder: per-token states and a pooled embedding (mean, first, last or PMA
    with one seed), optionally L2-normalized.

    token_types > 0: that many rows of embed_token_types, each token's added to its embedding
    (BERT's segments: a pair's second text has type 1; type 0 when none are given).
    classifier: a sequence classification head, {"num_labels": N, "pooling": "first" | "mean" |
    "last", "dense": bool, "dense_activation": "tanh" | "relu" | "gelu" | "none", "out_bias":
    bool, "labels": [names], "score_activation": "sigmoid" | "softmax" | "none"}: the pooled
    state, through classifier.dense and its activation when dense, then classifier.out, gives
    the logits; the server applies score_activation (sigmoid for one label by default, else
    softmax) unless asked for raw scores."""

    def __init__(self, pooling="mean", normalize=False, token_types=0, classifier=None,
                 **settings):
        assert pooling in POOLINGS, pooling
        extra = {}
        if token_types:
            assert settings.get("vocab_size"), "token types need token inputs"
            extra["token_types"] = token_types
        if classifier:
            classifier = dict(CLASSIFIER_DEFAULTS, **classifier)
            assert classifier["pooling"] in ("first", "mean", "last"), classifier["pooling"]
            assert classifier["dense_activation"] in DENSE_ACTIVATIONS
            extra["classifier"] = classifier
        super().__init__(_settings("encoder", pooling=pooling, normalize=normalize, **extra,
                                   **settings))
        s = self.settings
        if token_types:
            self.embed_token_types = nn.Parameter(torch.randn(token_types, s["model_dim"]) * 0.02)
        self.layers = nn.ModuleList(TransformerBlock(s["model_dim"], **self.block_args())
                                    for _ in range(s["num_layers"]))
        self.final_norm = self.final_norm_or_none()
        if pooling == "pma":
            self.pool = PoolingByAttention(s["model_dim"], 1, **self.block_args(alibi=False))
        if classifier:
            d = s["model_dim"]
            self.classifier = nn.ModuleDict(dict(
                **({"dense": nn.Linear(d, d)} if classifier["dense"] else {}),
                out=nn.Linear(d, classifier["num_labels"], bias=classifier["out_bias"])))

    def forward(self, inputs, lengths, token_types=None):
        """Per-token states [B, T, model_dim]; token_types [B, T] (type 0 where None)."""
        types = None
        if self.settings.get("token_types"):
            types = self.embed_token_types[
                torch.zeros_like(inputs) if token_types is None else token_types]
        return self.run_layers(self.embed_inputs(inputs, lengths, types=types), lengths)

    def embed(self, inputs, lengths, token_types=None):
        """Pooled embedding [B, model_dim]."""
        return pool(self.forward(inputs, lengths, token_types), lengths, self.settings["pooling"],
                    self.settings["normalize"], getattr(self, "pool", None))

    def classify(self, inputs, lengths, token_types=None):
        """The classification head's logits [B, num_labels]."""
        head = self.settings["classifier"]
        x = pool(self.forward(inputs, lengths, token_types), lengths, head["pooling"], False)
        if head["dense"]:
            x = DENSE_ACTIVATIONS[head["dense_activation"]](self.classifier["dense"](x))
        return self.classifier["out"](x)


def pool(states, lengths, pooling, normalize, pma=None):
    if pooling == "mean":
        out = states.sum(1) / lengths[:, None].to(states.dtype)
    elif pooling == "first":
        out = states[:, 0]
    elif pooling == "last":
        out = states[torch.arange(states.shape[0]), lengths - 1]
    elif pooling == "pma":
        out = pma(states, lengths)[:, 0]
    else:
        raise ValueError(f"pooling {pooling} gives no single vector")
    return F.normalize(out, dim=-1) if normalize else out


class NextWordModel(Model):
    """BERT-style next-word model: bidirectional encoder blocks over the context ("BERT",
    Devlin et al., 2019), pooled by an appended learned CLS token (cls_token, [D]) or by PMA with
    one seed (pool.*; "Set Transformer", Lee et al., 2019), then lm_head over the vocabulary:
    next-token logits [B, vocab]."""

    def __init__(self, vocab_size, pooling="cls", **settings):
        assert pooling in ("cls", "pma"), pooling
        super().__init__(_settings("next_word", vocab_size=vocab_size, pooling=pooling,
                                   **settings))
        s = self.settings
        d = s["model_dim"]
        self.layers = nn.ModuleList(TransformerBlock(d, **self.block_args())
                                    for _ in range(s["num_layers"]))
        self.final_norm = self.final_norm_or_none()
        if pooling == "cls":
            self.cls_token = nn.Parameter(torch.randn(d) * 0.02)
        else:
            self.pool = PoolingByAttention(d, 1, **self.block_args(alibi=False))
        self.lm_head = nn.Linear(d, vocab_size, bias=s["bias"])

    def forward(self, ids, lengths):
        x = self.embed_inputs(ids, lengths)
        if self.settings["pooling"] == "cls":
            # The CLS token goes right after each sequence's last token, without a position.
            x = torch.cat([x, torch.zeros_like(x[:, :1])], dim=1)
            x[torch.arange(x.shape[0]), lengths] = self.cls_token.to(x.dtype)
            lengths = lengths + 1
            states = self.run_layers(x, lengths)
            pooled = states[torch.arange(x.shape[0]), lengths - 1]
        else:
            pooled = self.pool(self.run_layers(x, lengths), lengths)[:, 0]
        return self.lm_head(pooled)


class Seq2Seq(Model):
    """Encoder-decoder (Vaswani et al. 2017): the source is encoded once (encoder.layers.N,
    encoder.final_norm); decoder blocks (decoder.layers.N: causal self-attention,
    cross-attention to the encoded source, FFN; decoder.final_norm) predict the next target
    token through lm_head (or the tied token embedding). Source and target share
    embed_tokens and the positions."""

    def __init__(self, vocab_size, num_decoder_layers=None, tie_embeddings=True, **settings):
        super().__init__(_settings("seq2seq", vocab_size=vocab_size,
                                   tie_embeddings=tie_embeddings, **settings))
        s = self.settings
        s["num_decoder_layers"] = num_decoder_layers or s["num_layers"]
        d = s["model_dim"]
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(TransformerBlock(d, **self.block_args())
                                            for _ in range(s["num_layers"]))
        self.encoder.final_norm = self.final_norm_or_none()
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(
            TransformerBlock(d, causal=True, cross_attention=True, **self.block_args())
            for _ in range(s["num_decoder_layers"]))
        self.decoder.final_norm = self.final_norm_or_none()
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @staticmethod
    def _stack(stack, x, lengths, **memory):
        for layer in stack.layers:
            x = layer(x, lengths, **memory)
        if stack.final_norm is not None:
            x = functional.zero_padding(stack.final_norm(x), lengths)
        return x

    def encode(self, source, source_lengths):
        return self._stack(self.encoder, self.embed_inputs(source, source_lengths),
                           source_lengths)

    def forward(self, source, source_lengths, target, target_lengths):
        """Next-token logits [B, T_target, vocab] at every target position."""
        memory = self.encode(source, source_lengths)
        x = self._stack(self.decoder, self.embed_inputs(target, target_lengths), target_lengths,
                        memory=memory, memory_lengths=source_lengths)
        return functional.zero_padding(self.lm_head(x), target_lengths)


class PerceiverIO(Model):
    """Perceiver IO (Jaegle et al. 2022): a learned latent array (latents, [N, D]) reads the
    inputs through a cross-attention block (encode.*), a stack of latent self-attention blocks
    (layers.N, then final_norm when pre-norm) processes it, and learned output queries
    (output_queries, [M, D]) read it through another cross-attention block (decode.*);
    output_proj maps to output_dim."""

    def __init__(self, num_latents=16, num_outputs=1, output_dim=0, **settings):
        super().__init__(_settings("perceiver_io", num_latents=num_latents,
                                   num_outputs=num_outputs, output_dim=output_dim, **settings))
        s = self.settings
        d = s["model_dim"]
        assert s["positions"] != "alibi", "Perceiver IO has no self-attention over the inputs"
        s["output_dim"] = output_dim or s["vocab_size"]
        self.latents = nn.Parameter(torch.randn(num_latents, d) * 0.1)
        self.output_queries = nn.Parameter(torch.randn(num_outputs, d) * 0.1)
        cross = self.block_args(alibi=False)
        self.encode = TransformerBlock(d, self_attention=False, cross_attention=True, **cross)
        self.layers = nn.ModuleList(TransformerBlock(d, **self.block_args(alibi=False))
                                    for _ in range(s["num_layers"]))
        self.decode = TransformerBlock(d, self_attention=False, cross_attention=True, **cross)
        self.final_norm = self.final_norm_or_none()
        self.output_proj = nn.Linear(d, s["output_dim"], bias=s["bias"])

    def forward(self, inputs, lengths):
        """[B, num_outputs, output_dim]."""
        batch = lengths.shape[0]
        x = self.embed_inputs(inputs, lengths)
        latents = self.latents.expand(batch, -1, -1).to(x.dtype)
        n = torch.full((batch,), latents.shape[1], dtype=torch.int64)
        h = self.run_layers(self.encode(latents, n, x, lengths), n)  # final_norm: pre-norm only
        queries = self.output_queries.expand(batch, -1, -1).to(x.dtype)
        m = torch.full((batch,), queries.shape[1], dtype=torch.int64)
        return self.output_proj(self.decode(queries, m, h, n))


class SetTransformer(Model):
    """Set Transformer (Lee et al. 2019): an encoder of ISAB blocks (num_inducing > 0;
    layers.N.inducing_points, .induce, .attend) or SAB blocks (num_inducing = 0; layers.N is
    an encoder block), then PMA with num_seeds seeds (pool.*) and output_proj: a set embedding
    [B, num_seeds, output_dim]. Permutation-invariant, so positions must be "none"."""

    def __init__(self, num_inducing=0, num_seeds=1, output_dim=0, **settings):
        settings.setdefault("positions", "none")
        super().__init__(_settings("set_transformer", num_inducing=num_inducing,
                                   num_seeds=num_seeds, output_dim=output_dim, **settings))
        s = self.settings
        assert s["positions"] == "none", "a set has no order"
        d = s["model_dim"]
        s["output_dim"] = output_dim or d
        if num_inducing:
            self.layers = nn.ModuleList(InducedSetAttention(d, num_inducing, **self.block_args())
                                        for _ in range(s["num_layers"]))
        else:
            self.layers = nn.ModuleList(TransformerBlock(d, **self.block_args())
                                        for _ in range(s["num_layers"]))
        self.final_norm = self.final_norm_or_none()
        self.pool = PoolingByAttention(d, num_seeds, **self.block_args())
        self.output_proj = nn.Linear(d, s["output_dim"], bias=s["bias"])

    def forward(self, inputs, lengths):
        x = self.run_layers(self.embed_inputs(inputs, lengths), lengths)
        return self.output_proj(self.pool(x, lengths))
