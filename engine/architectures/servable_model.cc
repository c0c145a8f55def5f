#include "engine/architectures/servable_model.h"

#include <numeric>

#include "common/status_macros.h"

namespace attnserve {
namespace {

absl::Status NotAnswered(const char* method) {
  return absl::UnimplementedError(std::string("this model does not answer ") + method);
}

}  // namespace

absl::StatusOr<EmbedOutput> VectorSets(absl::StatusOr<Tensor> output) {
  ASSIGN_OR_RETURN(Tensor values, std::move(output));
  EmbedOutput out;
  out.rows.assign(values.dim(0), values.dim(1));
  out.values = std::move(values);
  return out;
}

absl::StatusOr<Tensor> ServableModel::NextTokenLogits(const TokenSequences&,
                                                      const TokenSequences&) const {
  return NotAnswered("NextToken");
}

absl::StatusOr<Tensor> ServableModel::Logits(const TokenSequences&, const TokenSequences&) const {
  return NotAnswered("Score");
}

std::vector<std::vector<size_t>> ServableModel::EmbedPasses(const ModelInputs& inputs,
                                                            bool /*contributions*/) const {
  std::vector<size_t> all(inputs.tokens.empty() ? static_cast<size_t>(inputs.features.batch())
                                                : inputs.tokens.size());
  std::iota(all.begin(), all.end(), 0);
  return {all};
}

absl::StatusOr<EmbedOutput> ServableModel::Embed(const ModelInputs&, std::optional<Pooling>,
                                                 const std::vector<int64_t>&) const {
  return NotAnswered("Embed");
}

absl::StatusOr<Tensor> ServableModel::Classify(const ModelInputs&) const {
  return NotAnswered("Classify");
}

std::optional<KvBlockShape> ServableModel::CacheShape(int64_t) const { return std::nullopt; }

absl::StatusOr<std::unique_ptr<GenerationState>> ServableModel::Start(const std::vector<int64_t>&,
                                                                      BlockTable*) const {
  return NotAnswered("Generate");
}

absl::StatusOr<Tensor> ServableModel::Advance(std::span<GenerationState* const>,
                                              const TokenSequences&) const {
  return NotAnswered("Generate");
}

}  // namespace attnserve
