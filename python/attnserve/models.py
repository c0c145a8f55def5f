"""Models assembled from a config: the same architectures, math and tensor names as the engine.

Every model takes a padded batch (token ids [B, T] int64, or feature vectors [B, T, input_dim])
with lengths [B], and carries the flat settings dict that the exporter writes as config.json
(docs/model-format.md).
"""
import torch
import torch.nn.functional as F
from torch import nn

from . import functional
from .blocks import PoolingByAttention, TransformerBlock, make_norm

FORMAT_VERSION = 1
POSITIONS = ("sinusoidal", "learned", "alibi", "none")
POOLINGS = ("mean", "first", "last", "pma", "none")


def _settings(architecture, **values):
    defaults = dict(
        format_version=FORMAT_VERSION, architecture=architecture, vocab_size=0, input_dim=0,
        model_dim=64, num_layers=2, num_heads=4, head_dim_qk=0, head_dim_v=0, ffn_dim=0,
        activation="gelu", attention="softmax", feature_map="elu_plus_one", bias=True,
        norm="layer_norm", norm_eps=1e-5, norm_position="pre", positions="sinusoidal",
        max_positions=512)
    unknown = set(values) - set(defaults) - {
        "tie_embeddings", "pooling", "normalize", "num_seeds"}
    assert not unknown, f"unknown settings {unknown}"
    s = dict(defaults, **values)
    s["head_dim_qk"] = s["head_dim_qk"] or s["model_dim"] // s["num_heads"]
    s["head_dim_v"] = s["head_dim_v"] or s["head_dim_qk"]
    s["ffn_dim"] = s["ffn_dim"] or 4 * s["model_dim"]
    assert s["positions"] in POSITIONS, s["positions"]
    assert (s["vocab_size"] > 0) != (s["input_dim"] > 0), "tokens or feature vectors, not both"
    return s


class Model(nn.Module):
    """Input embedding shared by every architecture: embed_tokens (ids) or input_proj
    (feature vectors), then sinusoidal or learned positions (embed_positions)."""

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

    def config(self):
        return dict(self.settings)

    def block_args(self, **overrides):
        s = self.settings
        args = dict(num_heads=s["num_heads"], ffn_dim=s["ffn_dim"], head_dim_qk=s["head_dim_qk"],
                    head_dim_v=s["head_dim_v"], attention=s["attention"], norm=s["norm"],
                    norm_eps=s["norm_eps"], norm_position=s["norm_position"],
                    alibi=s["positions"] == "alibi", activation=s["activation"],
                    feature_map=s["feature_map"], bias=s["bias"])
        args.update(overrides)
        return args

    def final_norm_or_none(self):
        """Pre-norm stacks end with a norm (their residual stream is never normalized)."""
        s = self.settings
        return make_norm(s["norm"], s["model_dim"], s["norm_eps"]) \
            if s["norm_position"] == "pre" else None

    def embed_inputs(self, inputs, lengths, start=0):
        x = self.embed_tokens(inputs) if self.settings["vocab_size"] else self.input_proj(inputs)
        t = x.shape[1]
        if self.settings["positions"] == "learned":
            x = x + self.embed_positions[start : start + t].to(x.dtype)
        elif self.settings["positions"] == "sinusoidal":
            x = x + self.sinusoid[start : start + t].to(x.dtype)
        return functional.zero_padding(x, lengths)

    def run_layers(self, x, lengths, caches=None, **memory):
        for i, layer in enumerate(self.layers):
            x = layer(x, lengths, cache=None if caches is None else caches[i], **memory)
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


class Encoder(Model):
    """Bidirectional encoder: per-token states and a pooled embedding (mean, first, last or PMA
    with one seed), optionally L2-normalized."""

    def __init__(self, pooling="mean", normalize=False, **settings):
        assert pooling in POOLINGS, pooling
        super().__init__(_settings("encoder", pooling=pooling, normalize=normalize, **settings))
        s = self.settings
        self.layers = nn.ModuleList(TransformerBlock(s["model_dim"], **self.block_args())
                                    for _ in range(s["num_layers"]))
        self.final_norm = self.final_norm_or_none()
        if pooling == "pma":
            self.pool = PoolingByAttention(s["model_dim"], 1, **self.block_args(alibi=False))

    def forward(self, inputs, lengths):
        """Per-token states [B, T, model_dim]."""
        return self.run_layers(self.embed_inputs(inputs, lengths), lengths)

    def embed(self, inputs, lengths):
        """Pooled embedding [B, model_dim]."""
        return pool(self.forward(inputs, lengths), lengths, self.settings["pooling"],
                    self.settings["normalize"], getattr(self, "pool", None))


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
