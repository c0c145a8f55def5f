"""Attention modules: the engine's attention variants, same math and tensor names.

Inputs are padded batches: x [B, T, width] with lengths [B]; rows past a sequence's length are
padding, ignored as keys and zero in the output.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import functional

KINDS = ("softmax", "exclusive", "linear")


def _repeat_heads(x, group):
    """[B, Hkv, T, d] -> [B, Hkv * group, T, d], each head repeated `group` times in place (an
    expand, which ONNX export keeps free of fixed sizes, unlike repeat_interleave)."""
    if group == 1:
        return x
    return x.unsqueeze(2).expand(-1, -1, group, -1, -1).flatten(1, 2)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections q_proj, k_proj, v_proj and out_proj.

    kind: "softmax" (scaled dot-product), "exclusive" (XSA: each token's head output loses its
    component along the token's own value vector) or "linear" (softmax-free, with feature map
    elu_plus_one or exp). memory_dim > 0 makes it cross-attention over a memory.
    num_kv_heads < num_heads: grouped-query attention, each key/value head shared by
    num_heads / num_kv_heads query heads (1: multi-query attention).
    rotary: None or a dict of functional.rotate's settings (dims, theta, interleaved, scaling):
    rotary positions on queries and keys (self-attention, softmax or exclusive).
    window > 0 (causal self-attention): each query sees its last `window` keys.
    """

    def __init__(self, model_dim, num_heads, head_dim_qk=None, head_dim_v=None, memory_dim=0,
                 output_dim=0, kind="softmax", causal=False, alibi=False, bias=True,
                 feature_map="elu_plus_one", scale=0.0, num_kv_heads=0, rotary=None, window=0):
        super().__init__()
        assert kind in KINDS, kind
        head_dim_qk = head_dim_qk or model_dim // num_heads
        head_dim_v = head_dim_v or head_dim_qk
        num_kv_heads = num_kv_heads or num_heads
        assert num_heads % num_kv_heads == 0, (num_heads, num_kv_heads)
        assert not rotary or (not memory_dim and kind != "linear"), "rotary: self, softmax"
        assert not window or (causal and kind != "linear"), "window: causal softmax"
        self.model_dim, self.memory_dim = model_dim, memory_dim
        self.num_heads, self.head_dim_qk, self.head_dim_v = num_heads, head_dim_qk, head_dim_v
        self.num_kv_heads, self.rotary, self.window = num_kv_heads, rotary, window
        self.output_dim = output_dim or model_dim
        self.kind, self.causal, self.alibi, self.feature_map = kind, causal, alibi, feature_map
        self.scale = scale or 1.0 / math.sqrt(head_dim_qk)
        key_input = memory_dim or model_dim
        self.q_proj = nn.Linear(model_dim, num_heads * head_dim_qk, bias=bias)
        self.k_proj = nn.Linear(key_input, num_kv_heads * head_dim_qk, bias=bias)
        self.v_proj = nn.Linear(key_input, num_kv_heads * head_dim_v, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim_v, self.output_dim, bias=bias)

    def config(self):
        return {
            "kind": self.kind, "model_dim": self.model_dim, "memory_dim": self.memory_dim,
            "num_heads": self.num_heads, "head_dim_qk": self.head_dim_qk,
            "head_dim_v": self.head_dim_v, "output_dim": self.output_dim,
            "causal": self.causal, "alibi": self.alibi, "feature_map": self.feature_map,
            "scale": self.scale, "bias": self.q_proj.bias is not None,
            "num_kv_heads": self.num_kv_heads, "rotary": self.rotary, "window": self.window,
        }

    @staticmethod
    def _split(x, heads, width):
        b, t, _ = x.shape
        return x.view(b, t, heads, width).transpose(1, 2)

    def heads(self, x, lengths, memory=None, memory_lengths=None, cache=None):
        """The concatenated head outputs before out_proj: [B, Tq, H * dv].

        cache: a dict that self-attention extends with this call's keys and values, so that
        decoding continues a sequence (every sequence of the batch at the same length)."""
        source, source_lengths = (x, lengths) if memory is None else (memory, memory_lengths)
        q = self._split(self.q_proj(x), self.num_heads, self.head_dim_qk)
        k = self._split(self.k_proj(source), self.num_kv_heads, self.head_dim_qk)
        v = self._split(self.v_proj(source), self.num_kv_heads, self.head_dim_v)
        start = cache["k"].shape[2] if cache is not None and "k" in cache else 0
        if self.rotary:
            positions = start + torch.arange(x.shape[1])
            q = functional.rotate(q, positions, lengths + start, **self.rotary)
            k = functional.rotate(k, positions, lengths + start, **self.rotary)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
            source_lengths = lengths + start
        # Each key/value head serves its group of query heads.
        group = self.num_heads // self.num_kv_heads
        k, v = _repeat_heads(k, group), _repeat_heads(v, group)
        if self.kind == "linear":
            y = functional.linear_attention(q, k, v, lengths, source_lengths, self.feature_map,
                                            self.causal)
        else:
            slopes = functional.alibi_slopes(self.num_heads) if self.alibi else None
            y = functional.scaled_dot_product_attention(q, k, v, lengths, source_lengths,
                                                        self.scale, self.causal, slopes,
                                                        self.window)
        if self.kind == "exclusive":
            # As in the XSA paper's algorithm: remove the projection on the own value direction.
            own = functional.positions_of_queries(lengths, source_lengths, x.shape[1])
            own = own.clamp(0, v.shape[2] - 1)
            index = own[:, None, :, None].expand(-1, self.num_heads, -1, self.head_dim_v)
            vn = F.normalize(torch.gather(v, 2, index), dim=-1)
            y = y - (y * vn).sum(-1, keepdim=True) * vn
        y = y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return functional.zero_padding(y, lengths)

    def forward(self, x, lengths, memory=None, memory_lengths=None, cache=None):
        out = self.out_proj(self.heads(x, lengths, memory, memory_lengths, cache))
        return functional.zero_padding(out, lengths)

    def head_contributions(self, heads):
        """o_h = z_h W_O[h]^T for each head h: [B, T, H, output_dim]. They sum, plus the
        out_proj bias, to the layer output."""
        b, t, _ = heads.shape
        z = heads.view(b, t, self.num_heads, self.head_dim_v)
        w = self.out_proj.weight.view(self.output_dim, self.num_heads, self.head_dim_v)
        return torch.einsum("bthv,dhv->bthd", z, w)


class SimpleSelfAttention(nn.Module):
    """softmax(X X^T s) X without projections; s = 1/sqrt(d) when scaled, else 1."""

    def __init__(self, scaled=True, causal=False):
        super().__init__()
        self.scaled, self.causal = scaled, causal

    def forward(self, x, lengths):
        scale = 1.0 / math.sqrt(x.shape[-1]) if self.scaled else 1.0
        y = functional.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], lengths,
                                                    lengths, scale, self.causal)
        return y[:, 0]


class PointerAttention(nn.Module):
    """Vinyals et al. (2015): u_ij = v^T tanh(W1 e_j + W2 d_i), log-softmax over memory j.
    Returns [B, Tq, Tm]: -inf at padded memory positions, 0 on padded query rows."""

    def __init__(self, query_dim, memory_dim, attention_dim):
        super().__init__()
        self.memory_proj = nn.Linear(memory_dim, attention_dim, bias=False)
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.score = nn.Linear(attention_dim, 1, bias=False)

    def forward(self, queries, lengths, memory, memory_lengths):
        e = self.memory_proj(memory)[:, None, :, :]
        d = self.query_proj(queries)[:, :, None, :]
        scores = self.score(torch.tanh(e + d)).squeeze(-1)
        allowed = functional.attention_mask(lengths, memory_lengths, queries.shape[1],
                                            memory.shape[1], causal=False)
        log_probs = torch.log_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        query_valid = (torch.arange(queries.shape[1])[None, :] < lengths[:, None])[..., None]
        return torch.where(query_valid, log_probs, torch.zeros_like(log_probs))
