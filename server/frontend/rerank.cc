#include "server/frontend/rerank.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/frontend/request_validation.h"

namespace attnserve::server {
namespace {

using Field = FieldPath::Field;
using Part = FieldPath::Part;

// Classify's words for a pair, in the protocol's words for the query and the documents.
class RerankFieldNames final : public FieldNames {
 public:
  explicit RerankFieldNames(const FieldNames& names) : names_(names) {}
  std::string Name(const FieldPath& path) const override {
    if (path.field != Field::kSequences) return names_.Name(path);
    if (path.part == Part::kText) return names_.Name({Field::kQuery});
    return names_.Name({Field::kDocuments, path.row});
  }

 private:
  const FieldNames& names_;
};

}  // namespace

absl::Status ValidateRerank(const RerankInput& input, const FieldNames& names,
                            const EngineLoop& worker, Task& task) {
  const int64_t labels = worker.model().config.classifier.num_labels;
  if (labels != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", worker.name(), " has ", labels,
                     " labels; a reranker (a cross-encoder) gives one score: classify with it"));
  }
  if (input.documents.empty()) return InvalidField(names, {Field::kDocuments}, "is empty");
  ClassifyInput pairs;
  pairs.raw_scores = input.raw_scores;
  pairs.truncation = {.enabled = input.truncate,
                      .strategy = Truncation::Strategy::kOnlySecond,
                      .from_left = input.truncate_from_left};
  pairs.items.reserve(input.documents.size());
  for (const std::string& document : input.documents) {
    pairs.items.push_back({SequenceInput::Text(input.query), document});
    pairs.echoed_bytes += input.echo_scale * static_cast<int64_t>(document.size());
  }
  return ValidateClassify(pairs, RerankFieldNames(names), worker, task);
}

std::vector<RankedDocument> Rank(const std::vector<std::vector<float>>& scores, int64_t top_n) {
  std::vector<RankedDocument> ranked(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    ranked[i] = {static_cast<int64_t>(i), scores[i].empty() ? 0.0f : scores[i][0]};
  }
  std::stable_sort(
      ranked.begin(), ranked.end(),
      [](const RankedDocument& a, const RankedDocument& b) { return a.score > b.score; });
  if (top_n > 0 && top_n < static_cast<int64_t>(ranked.size())) ranked.resize(top_n);
  return ranked;
}

}  // namespace attnserve::server
