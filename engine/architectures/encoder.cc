#include "engine/architectures/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/attention/head_contributions.h"
#include "engine/kernels/vector_ops.h"

namespace attnserve {

absl::StatusOr<std::unique_ptr<Encoder>> Encoder::Load(const ModelConfig& config,
                                                       WeightReader& weights) {
  auto model = std::unique_ptr<Encoder>(new Encoder());
  model->config_ = config;
  ASSIGN_OR_RETURN(model->embedding_, InputEmbedding::Load(weights, config));
  const BlockConfig block = BlockConfigFor(config);
  ASSIGN_OR_RETURN(model->stack_, LayerStack::Load(weights, "", config, block, config.num_layers));
  if (config.pooling == Pooling::kPma) {
    ASSIGN_OR_RETURN(model->pma_, PoolingByAttention::Load(weights, "pool", block, 1));
  }
  if (config.classifier.num_labels > 0) {
    ASSIGN_OR_RETURN(model->head_, ClassificationHead::Load(weights, config));
  }
  return model;
}

absl::StatusOr<PaddedBatch> EmbedInputs(const InputEmbedding& embedding, const ModelConfig& config,
                                        const ModelInputs& inputs) {
  return config.token_inputs() ? embedding.EmbedTokens(inputs.tokens, {}, inputs.token_types)
                               : embedding.EmbedFeatures(inputs.features);
}

absl::StatusOr<PaddedBatch> Encoder::States(const ModelInputs& inputs,
                                            std::map<int64_t, Tensor>* contributions) const {
  ASSIGN_OR_RETURN(PaddedBatch x, EmbedInputs(embedding_, config_, inputs));
  ASSIGN_OR_RETURN(PaddedBatch states, stack_->Forward(std::move(x), {}, {}, contributions));
  if (contributions == nullptr) return states;
  for (auto& [layer, heads] : *contributions) {
    const MultiHeadAttention& attention = *stack_->layers()[layer].self_attention();
    ASSIGN_OR_RETURN(
        heads, HeadContributions(heads, attention.OutputWeight(), attention.config().num_heads));
  }
  return states;
}

absl::StatusOr<Tensor> Encoder::Embed(const ModelInputs& inputs,
                                      std::optional<Pooling> pooling) const {
  const Pooling mode = pooling.value_or(config_.pooling);
  if (mode == Pooling::kNone) {
    return absl::InvalidArgumentError("pooling none gives per-token states, not one vector");
  }
  if (mode == Pooling::kCls) {
    return absl::InvalidArgumentError("CLS pooling belongs to next_word models");
  }
  if (mode == Pooling::kPma && !pma_) {
    return absl::InvalidArgumentError("PMA pooling needs a model trained with it");
  }
  ASSIGN_OR_RETURN(PaddedBatch states, States(inputs));
  return Pool(states, mode);
}

namespace {

// Padded tokens one pass takes at most (one longer sequence runs alone): past a few thousand
// tokens a larger pass gains no speed, and its activations (attention scores grow with the
// square of the length) would bound what a request of many long texts may hold.
constexpr int64_t kPassTokens = 8192;

// The sequences' indices in groups of similar length, shortest first. A padded batch costs the
// engine its padding's work too: a group's padding stays under a quarter of its tokens.
std::vector<std::vector<size_t>> LengthGroups(const TokenSequences& sequences) {
  std::vector<size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sequences[a].size() < sequences[b].size(); });
  std::vector<std::vector<size_t>> groups(1);
  int64_t tokens = 0;
  for (size_t i : order) {
    const auto length = static_cast<int64_t>(sequences[i].size());
    const auto padded = static_cast<int64_t>(groups.back().size() + 1) * length;
    if (!groups.back().empty() && (4 * padded > 5 * (tokens + length) || padded > kPassTokens)) {
      groups.emplace_back();
      tokens = 0;
    }
    groups.back().push_back(i);
    tokens += length;
  }
  return groups;
}

}  // namespace

std::vector<std::vector<size_t>> Encoder::EmbedPasses(const ModelInputs& inputs,
                                                      bool contributions) const {
  if (!config_.token_inputs() || contributions) {
    return ServableModel::EmbedPasses(inputs, contributions);
  }
  return LengthGroups(inputs.tokens);
}

absl::StatusOr<EmbedOutput> Encoder::Embed(const ModelInputs& inputs,
                                           std::optional<Pooling> pooling,
                                           const std::vector<int64_t>& contribution_layers) const {
  const bool per_token = pooling.value_or(config_.pooling) == Pooling::kNone;
  EmbedOutput out;
  const auto groups = EmbedPasses(inputs, !contribution_layers.empty());
  if (groups.size() > 1) {
    // Each group in one pass, its rows put back in the request's order.
    const auto batch = static_cast<int64_t>(inputs.tokens.size());
    const int64_t longest = LongestSequence(inputs.tokens), dim = config_.model_dim;
    out.values = Tensor::Zeros({batch, per_token ? longest : 1, dim});
    for (const TokenSequences::value_type& ids : inputs.tokens) {
      out.lengths.push_back(static_cast<int64_t>(ids.size()));
    }
    out.rows = per_token ? out.lengths : std::vector<int64_t>(batch, 1);
    for (const std::vector<size_t>& group : groups) {
      ModelInputs part;
      for (size_t i : group) part.tokens.push_back(inputs.tokens[i]);
      ASSIGN_OR_RETURN(PaddedBatch states, States(part));
      ASSIGN_OR_RETURN(Tensor pooled, per_token ? states.values : Pool(states, pooling));
      for (size_t j = 0; j < group.size(); ++j) {
        const Tensor rows = per_token ? pooled.Select(static_cast<int64_t>(j))
                                      : pooled.Slice(0, static_cast<int64_t>(j), 1);
        const int64_t count = per_token ? out.lengths[group[j]] : 1;
        std::memcpy(out.values.Select(static_cast<int64_t>(group[j])).data(), rows.data(),
                    count * dim * sizeof(float));
      }
    }
    return out;
  }
  // One pass gives the states, the contributions asked for, and the pooled vectors.
  for (int64_t layer : contribution_layers) out.contributions[layer] = Tensor();
  ASSIGN_OR_RETURN(PaddedBatch states,
                   States(inputs, out.contributions.empty() ? nullptr : &out.contributions));
  out.lengths = states.lengths;
  if (per_token) {
    out.rows = states.lengths;
    out.values = states.values;
    return out;
  }
  ASSIGN_OR_RETURN(Tensor pooled, Pool(states, pooling));
  out.rows.assign(states.batch(), 1);
  out.values = pooled.Reshape({states.batch(), 1, pooled.dim(1)});
  return out;
}

absl::StatusOr<Tensor> Encoder::Classify(const ModelInputs& inputs) const {
  if (!head_) return absl::FailedPreconditionError("the model has no classification head");
  const auto batch = static_cast<int64_t>(inputs.tokens.size());
  Tensor logits = Tensor::Zeros({batch, head_->config().num_labels});
  for (const std::vector<size_t>& group : EmbedPasses(inputs, false)) {
    ModelInputs part;
    for (size_t i : group) {
      part.tokens.push_back(inputs.tokens[i]);
      if (!inputs.token_types.empty()) part.token_types.push_back(inputs.token_types[i]);
    }
    ASSIGN_OR_RETURN(PaddedBatch states, States(part));
    ASSIGN_OR_RETURN(Tensor pooled, Gather(states, head_->config().pooling));
    ASSIGN_OR_RETURN(Tensor part_logits, head_->Logits(pooled));
    for (size_t j = 0; j < group.size(); ++j) {
      std::memcpy(logits.row(static_cast<int64_t>(group[j])),
                  part_logits.row(static_cast<int64_t>(j)), logits.dim(1) * sizeof(float));
    }
  }
  return logits;
}

absl::StatusOr<Tensor> Encoder::Pool(const PaddedBatch& states,
                                     std::optional<Pooling> pooling) const {
  ASSIGN_OR_RETURN(Tensor pooled, Gather(states, pooling.value_or(config_.pooling)));
  if (config_.normalize) {
    for (int64_t b = 0; b < pooled.dim(0); ++b) {
      // As torch.nn.functional.normalize: x / max(||x||, 1e-12).
      const int64_t dim = pooled.dim(1);
      const float norm = std::sqrt(vec::Dot(pooled.row(b), pooled.row(b), dim));
      vec::Scale(pooled.row(b), dim, 1.0f / std::max(norm, 1e-12f));
    }
  }
  return pooled;
}

absl::StatusOr<Tensor> Encoder::Gather(const PaddedBatch& states_batch, Pooling mode) const {
  if (mode == Pooling::kNone || mode == Pooling::kCls) {
    return absl::InvalidArgumentError("this pooling does not give one vector per sequence");
  }
  if (mode == Pooling::kPma && !pma_) {
    return absl::InvalidArgumentError("PMA pooling needs a model trained with it");
  }
  const PaddedBatch* states = &states_batch;
  const int64_t batch = states->batch(), dim = states->width();
  for (int64_t b = 0; b < batch; ++b) {
    if (states->lengths[b] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " is empty"));
    }
  }
  Tensor pooled = Tensor::Zeros({batch, dim});
  if (mode == Pooling::kPma) {
    ASSIGN_OR_RETURN(Tensor seeds, pma_->Forward(*states));
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(pooled.row(b), seeds.Select(b).row(0), dim * sizeof(float));
    }
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor rows = states->values.Select(b);
      const int64_t length = states->lengths[b];
      if (mode == Pooling::kMean) {
        for (int64_t t = 0; t < length; ++t) vec::Axpy(1.0f, rows.row(t), pooled.row(b), dim);
        vec::Scale(pooled.row(b), dim, 1.0f / static_cast<float>(length));
      } else {
        const int64_t t = mode == Pooling::kFirst ? 0 : length - 1;
        std::memcpy(pooled.row(b), rows.row(t), dim * sizeof(float));
      }
    }
  }
  return pooled;
}

}  // namespace attnserve
