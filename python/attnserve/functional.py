"""Reference math for the engine's kernels, written from the papers' definitions."""
import math

import torch
import torch.nn.functional as F


def layer_norm(x, gamma, beta, eps):
    """(x - mean) / sqrt(var + eps) * gamma + beta (Ba et al. 2016), biased variance."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    out = (x - mean) / torch.sqrt(var + eps) * gamma
    return out if beta is None else out + beta


def rms_norm(x, gain, eps):
    """x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019): the RMS is ||x|| / sqrt(dim)."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


def scale_norm(x, g, eps):
    """g * x / max(||x||, eps) with one learned scalar g (Nguyen & Salazar 2019)."""
    return g * x / torch.clamp(x.norm(dim=-1, keepdim=True), min=eps)


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    """x * sigmoid(x) (Elfwing et al. 2018; swish with beta 1)."""
    return x * torch.sigmoid(x)


def elu_plus_one(x):
    """Katharopoulos et al. (2020)'s feature map."""
    return F.elu(x) + 1.0


FEATURE_MAPS = {"elu_plus_one": elu_plus_one, "exp": torch.exp}


def sinusoidal_positions(positions, dim, dtype=torch.float32):
    """PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(same) (Vaswani et al. 2017)."""
    p = torch.arange(positions, dtype=torch.float64)[:, None]
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    angle = p / torch.pow(10000.0, i / dim)
    table = torch.zeros(positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)[:, : dim // 2]
    return table.to(dtype)


def alibi_slopes(num_heads):
    """Press et al. (2022): geometric slopes 2^(-8i/n); for n not a power of two, the slopes of
    the largest power of two m below n, then every other slope of 2m until there are n."""

    def power_of_two(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    m = 1 << (num_heads.bit_length() - 1)
    slopes = power_of_two(m)
    if m < num_heads:
        slopes += power_of_two(2 * m)[0::2][: num_heads - m]
    return torch.tensor(slopes, dtype=torch.float64)


def rotary_inverse_frequencies(dims, theta=10000.0, scaling=None, context=0):
    """theta_i = 1 / theta^(2i / dims) for i < dims / 2 (Su et al. 2021), in float64, with the
    context-extension scalings of transformers' modeling_rope_utils.py. scaling: None or a dict
    with "type" linear (theta_i / factor), dynamic (a larger base once `context` passes
    original_max_positions) or llama3 (long wavelengths slowed by the factor, short ones kept,
    the band between blended)."""
    scaling = scaling or {}
    kind, factor = scaling.get("type"), scaling.get("factor", 1.0)
    original = scaling.get("original_max_positions", 0)
    if kind == "dynamic" and context > original:
        theta = theta * (factor * context / original - (factor - 1)) ** (dims / (dims - 2))
    inv = 1.0 / theta ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        wavelength = 2 * math.pi / inv
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelength > original / low, inv / factor,
                          torch.where(wavelength < original / high, inv, blended))
    return inv


def rotate(x, positions, contexts, dims, theta=10000.0, interleaved=False, scaling=None):
    """Rotary position embedding of x [B, H, T, d] at positions [T] (the same for every
    sequence); contexts [B]: each sequence's length, for dynamic scaling. Pairs (2i, 2i + 1)
    when interleaved (the paper), else (i, i + dims/2) (GPT-NeoX, Llama); dimensions past `dims`
    stay as they are."""
    if (scaling or {}).get("type") == "dynamic":  # frequencies of each sequence's length
        inv = torch.stack([rotary_inverse_frequencies(dims, theta, scaling, int(c))
                           for c in contexts])                        # [B, dims/2]
    else:
        inv = rotary_inverse_frequencies(dims, theta, scaling)[None]  # [1, dims/2]
    # In x's precision: float64 for the golden references, float32 (as transformers) otherwise.
    angle = positions.to(x.dtype)[None, :, None] * inv.to(x.dtype)[:, None, :]  # [B, T, dims/2]
    cos, sin = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
    rotated, rest = x[..., :dims], x[..., dims:]
    if interleaved:
        a, b = rotated[..., 0::2], rotated[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    else:
        a, b = rotated[..., : dims // 2], rotated[..., dims // 2 :]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    return torch.cat([out, rest], dim=-1)


def positions_of_queries(q_lengths, k_lengths, q_time):
    """Key position of every query: query i of a sequence sits at k_len - q_len + i, so causal
    masks cover self-attention (q_len == k_len) and decoding against a cache alike."""
    i = torch.arange(q_time)[None, :]
    return (k_lengths - q_lengths)[:, None] + i


def attention_mask(q_lengths, k_lengths, q_time, k_time, causal, window=0):
    """[B, Tq, Tk] booleans: which keys each query may attend to. window > 0 (causal only): the
    query at position p sees keys p - window < j <= p (Mistral's sliding window)."""
    i = torch.arange(q_time)[None, :, None]
    j = torch.arange(k_time)[None, None, :]
    allowed = (j < k_lengths[:, None, None]) & (i < q_lengths[:, None, None])
    if causal:
        position = positions_of_queries(q_lengths, k_lengths, q_time)[:, :, None]
        allowed = allowed & (j <= position)
        if window:
            allowed = allowed & (j > position - window)
    return allowed


def alibi_bias(slopes, q_lengths, k_lengths, q_time, k_time):
    """[B, H, Tq, Tk]: -slope_h * |position_i - j|."""
    pos = positions_of_queries(q_lengths, k_lengths, q_time)[:, None, :, None]
    j = torch.arange(k_time)[None, None, None, :]
    return -slopes.to(torch.float64)[None, :, None, None] * (pos - j).abs().to(torch.float64)


def masked_softmax(scores, allowed):
    """Softmax over allowed entries; rows with none allowed are all zero."""
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.where(allowed, probs, torch.zeros_like(probs))


def zero_padding(x, lengths):
    t = torch.arange(x.shape[1])[None, :]
    return x * (t < lengths[:, None]).to(x.dtype)[..., None]


def scaled_dot_product_attention(q, k, v, q_lengths, k_lengths, scale, causal, slopes=None,
                                 window=0):
    """q: [B, H, Tq, dk], k: [B, H, Tk, dk], v: [B, H, Tk, dv] -> [B, H, Tq, dv]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if slopes is not None:
        scores = scores + alibi_bias(slopes, q_lengths, k_lengths, q.shape[2], k.shape[2]).to(
            scores.dtype
        )
    allowed = attention_mask(q_lengths, k_lengths, q.shape[2], k.shape[2], causal,
                             window)[:, None]
    return torch.matmul(masked_softmax(scores, allowed), v)


def linear_attention(q, k, v, q_lengths, k_lengths, feature_map, causal, eps=1e-6):
    """Katharopoulos et al. (2020) in its quadratic form:
    out_i = sum_j phi(q_i).phi(k_j) v_j / (sum_j phi(q_i).phi(k_j) + eps) over allowed j.
    The engine computes the same sums as a recurrence; this form checks it independently."""
    phi = FEATURE_MAPS[feature_map]
    weights = torch.matmul(phi(q), phi(k).transpose(-1, -2))
    allowed = attention_mask(q_lengths, k_lengths, q.shape[2], k.shape[2], causal)[:, None]
    weights = torch.where(allowed, weights, torch.zeros_like(weights))
    out = torch.matmul(weights, v) / (weights.sum(-1, keepdim=True) + eps)
    return torch.where(allowed.any(-1, keepdim=True), out, torch.zeros_like(out))
