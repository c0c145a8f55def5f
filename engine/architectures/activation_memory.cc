#include "engine/architectures/activation_memory.h"

#include <omp.h>

#include <algorithm>

#include "engine/matmul.h"

namespace attnserve {
namespace {

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

int64_t ActivationBytes(const ModelConfig& c, const EngineCall& call) {
  const int64_t d = c.model_dim;
  const int64_t kv_heads = c.num_kv_heads > 0 ? c.num_kv_heads : c.num_heads;
  // The softmax kernel pads each head's values to whole 16-column tiles.
  const int64_t head_v =
      c.attention == AttentionKind::kLinear ? c.head_dim_v : RoundUp(c.head_dim_v, 16);
  const int64_t query_width = c.num_heads * c.head_dim_qk, heads_width = c.num_heads * head_v;
  // Keys and values: of the key/value heads only (grouped-query attention).
  const int64_t kv_width = kv_heads * (c.head_dim_qk + head_v);
  // Floats per token alive at once in a layer: the residual stream, its copy, the normed input
  // and the sublayer's output; the fused projections and the heads, or the feed-forward hidden
  // layer (three times F when gated: fc1 and gate from one matmul, then their product). The
  // measured peak of the demo model is 8·d per token: within this.
  const int64_t ffn_hidden = (c.gated_ffn ? 3 : 1) * c.ffn_dim;
  const int64_t per_token = 4 * d + ffn_hidden + query_width + kv_width + heads_width;
  // Rows that go through the layers: the inputs, or a Perceiver's latents and output queries
  // (its inputs are only attended to), plus a Set Transformer's inducing points and seeds.
  const bool perceiver = c.num_latents > 0;
  const int64_t layer_rows = call.batch * (perceiver ? c.num_latents + c.num_outputs
                                                     : call.time + c.num_inducing + c.num_seeds);
  const int64_t input_rows = call.batch * call.time;
  int64_t floats = layer_rows * per_token;
  // Keys transposed and values copied for the tiled kernel, over every key a query sees.
  floats += call.batch * RoundUp(call.cached + call.time, 16) * kv_width;
  // Input features, embeddings and pooling.
  floats += input_rows * (std::max<int64_t>(c.input_dim, 0) + 2 * d);
  if (call.source_time > 0) {
    // The encoder's pass over the sources (freed as the decoder starts), then each decoder
    // layer's projection of them, kept for the whole call.
    const int64_t source_rows = call.batch * call.source_time;
    floats += source_rows * (per_token / 2 + kv_width * c.num_decoder_layers / 2);
  }
  floats += call.logits_rows * c.vocab_size;
  floats += call.head_layers * input_rows * (c.num_heads * d + heads_width);
  int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
  // Int8 weights: each compute thread's tile of dequantized weights; int8 and bf16 weights: the
  // calling thread's bf16 copy of a matmul's input (BestInt8TileFormat), all kept between calls.
  const int64_t deepest = std::max({d, c.ffn_dim, c.input_dim, c.num_heads * c.head_dim_v});
  if (c.weights.quantized) {
    bytes += omp_get_max_threads() *
             std::max<int64_t>(kDequantizedTileBytes, deepest * 64 * sizeof(float));
  }
  if (c.weights.quantized || c.weights.bf16) {
    const int64_t widest_rows =
        std::max({layer_rows, input_rows, call.batch * call.source_time, call.logits_rows});
    bytes += widest_rows * deepest * static_cast<int64_t>(sizeof(uint16_t));
  }
  return bytes + bytes / 4 + (1 << 20);
}

EngineCall Merge(const EngineCall& a, const EngineCall& b) {
  EngineCall merged;
  merged.batch = a.batch + b.batch;
  merged.time = std::max(a.time, b.time);
  merged.cached = std::max(a.cached, b.cached);
  merged.source_time = std::max(a.source_time, b.source_time);
  // Rows of logits: one per sequence, or one per token of the longest.
  merged.logits_rows = a.logits_rows == a.batch && b.logits_rows == b.batch
                           ? merged.batch
                           : merged.batch * merged.time;
  merged.head_layers = std::max(a.head_layers, b.head_layers);
  return merged;
}

}  // namespace attnserve
