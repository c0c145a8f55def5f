#include "engine/architectures/input_embedding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/vector_ops.h"
#include "engine/matmul.h"

namespace attnserve {

absl::StatusOr<InputEmbedding> InputEmbedding::Load(WeightReader& weights,
                                                    const ModelConfig& config) {
  InputEmbedding embedding;
  embedding.dim_ = config.model_dim;
  embedding.max_positions_ = config.max_positions;
  if (config.token_inputs()) {
    const Shape shape = {config.vocab_size, config.model_dim};
    if (weights.format().quantized) {
      // Each token's row has its own scales, as an output column of a linear layer does.
      ASSIGN_OR_RETURN(
          embedding.quantized_tokens_,
          weights.TakeQuantized("embed_tokens.weight", shape, LmHeadFormat(weights.format())));
    } else {
      ASSIGN_OR_RETURN(embedding.tokens_, weights.Take("embed_tokens.weight", shape));
    }
  } else {
    ASSIGN_OR_RETURN(embedding.input_proj_, weights.TakeLinear("input_proj", config.model_dim,
                                                               config.input_dim, config.bias));
  }
  if (config.positions == PositionKind::kLearned) {
    ASSIGN_OR_RETURN(embedding.positions_,
                     weights.Take("embed_positions", {config.max_positions, config.model_dim}));
  } else if (config.positions == PositionKind::kSinusoidal) {
    embedding.positions_ = SinusoidalPositions(config.max_positions, config.model_dim);
  }
  if (config.token_types > 0) {
    ASSIGN_OR_RETURN(embedding.types_,
                     weights.Take("embed_token_types", {config.token_types, config.model_dim}));
  }
  if (config.embed_norm) {
    ASSIGN_OR_RETURN(embedding.norm_, Norm::Load(weights, "embed_norm", config.norm,
                                                 config.model_dim, config.norm_eps));
  }
  return embedding;
}

absl::Status InputEmbedding::Finish(const std::vector<int64_t>& starts, PaddedBatch& x) const {
  // Every position kind stops at max_positions: the context the model is served with.
  for (int64_t b = 0; b < x.batch(); ++b) {
    const int64_t end = (starts.empty() ? 0 : starts[b]) + x.lengths[b];
    if (end > max_positions_) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " reaches position ", end,
                                                     ", beyond the model's max_positions ",
                                                     max_positions_));
    }
  }
  for (int64_t b = 0; b < x.batch() && !positions_.empty(); ++b) {
    Tensor row = x.values.Slice(0, b, 1);
    const int64_t start = starts.empty() ? 0 : starts[b];
    if (auto status = AddPositions(positions_, {&x.lengths[b], 1}, start, row); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, ": ", status.message()));
    }
  }
  if (norm_) {
    RETURN_IF_ERROR(norm_->Apply(x.values, x.values));
    ZeroPadding(x.values, x.lengths);  // the norm's bias would fill the padding
  }
  return absl::OkStatus();
}

int64_t LongestSequence(const TokenSequences& sequences) {
  int64_t longest = 0;
  for (const auto& ids : sequences) longest = std::max<int64_t>(longest, ids.size());
  return longest;
}

int64_t TokenCount(const TokenSequences& sequences) {
  int64_t tokens = 0;
  for (const auto& ids : sequences) tokens += static_cast<int64_t>(ids.size());
  return tokens;
}

absl::StatusOr<PaddedBatch> InputEmbedding::EmbedTokens(
    const TokenSequences& sequences, const std::vector<int64_t>& starts,
    const std::vector<std::vector<uint8_t>>& token_types) const {
  if (tokens_.empty() && quantized_tokens_.empty()) {
    return absl::InvalidArgumentError("this model takes feature vectors");
  }
  if (!token_types.empty() && token_types.size() != sequences.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(token_types.size(), " token type lists for ", sequences.size(), " sequences"));
  }
  PaddedBatch x{
      Tensor::Zeros({static_cast<int64_t>(sequences.size()), LongestSequence(sequences), dim_}),
      {}};
  for (size_t b = 0; b < sequences.size(); ++b) {
    const int64_t length = sequences[b].size();
    x.lengths.push_back(length);
    Tensor rows = x.values.Select(b).Slice(0, 0, length);
    const absl::Status status = quantized_tokens_.empty()
                                    ? attnserve::EmbedTokens(tokens_, sequences[b], rows)
                                    : attnserve::EmbedTokens(quantized_tokens_, sequences[b], rows);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, ": ", status.message()));
    }
    if (!types_.empty()) RETURN_IF_ERROR(AddTokenTypes(b, token_types, rows));
  }
  RETURN_IF_ERROR(Finish(starts, x));
  return x;
}

absl::Status InputEmbedding::AddTokenTypes(size_t b,
                                           const std::vector<std::vector<uint8_t>>& token_types,
                                           Tensor& rows) const {
  const int64_t length = rows.dim(0);
  const std::vector<uint8_t>* types = token_types.empty() ? nullptr : &token_types[b];
  if (types != nullptr && static_cast<int64_t>(types->size()) != length) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", b, ": ", types->size(), " token types for ", length, " tokens"));
  }
  for (int64_t t = 0; t < length; ++t) {
    const int64_t type = types == nullptr ? 0 : (*types)[t];
    if (type >= types_.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", b, ": token type ", type, " of a model with ", types_.dim(0)));
    }
    vec::Axpy(1.0f, types_.row(type), rows.row(t), dim_);
  }
  return absl::OkStatus();
}

absl::StatusOr<PaddedBatch> InputEmbedding::EmbedFeatures(const PaddedBatch& features) const {
  if (input_proj_.empty()) {
    return absl::InvalidArgumentError("this model takes token ids");
  }
  RETURN_IF_ERROR(CheckPaddedBatch("features", features, input_proj_.in_features()));
  ASSIGN_OR_RETURN(Tensor projected, LinearRows(features.values, input_proj_));
  PaddedBatch x{std::move(projected), features.lengths};
  ZeroPadding(x.values, x.lengths);
  RETURN_IF_ERROR(Finish({}, x));
  return x;
}

}  // namespace attnserve

namespace attnserve {

absl::StatusOr<LinearWeights> LoadLmHead(WeightReader& weights, const ModelConfig& config,
                                         const InputEmbedding& embedding) {
  if (config.tie_embeddings) {
    return LinearWeights{embedding.token_table(), {}, {}, embedding.quantized_token_table()};
  }
  const Shape shape = {config.vocab_size, config.model_dim};
  if (weights.format().quantized) {
    ASSIGN_OR_RETURN(QuantizedWeight head, weights.TakeQuantized("lm_head.weight", shape,
                                                                 LmHeadFormat(weights.format())));
    return LinearWeights{Tensor(), Tensor(), {}, std::move(head)};
  }
  ASSIGN_OR_RETURN(Tensor head, weights.Take("lm_head.weight", shape));
  return LinearWeights{std::move(head), {}, {}, {}};
}

}  // namespace attnserve
