#include "server/core/model_methods.h"

namespace attnserve::server {

std::vector<std::string> SupportedMethods(const Model& model) {
  std::vector<std::string> methods;
  for (const auto& [method, name] : {std::pair{ModelMethod::kNextToken, "NextToken"},
                                     {ModelMethod::kGenerate, "Generate"},
                                     {ModelMethod::kScore, "Score"},
                                     {ModelMethod::kEmbed, "Embed"},
                                     {ModelMethod::kClassify, "Classify"}}) {
    if (model.servable->Answers(method)) methods.push_back(name);
  }
  // A head with one score ranks: a cross-encoder's relevance.
  if (model.servable->Answers(ModelMethod::kClassify) && model.config.classifier.num_labels == 1) {
    methods.push_back("Rerank");
  }
  if (model.tokenizer) methods.insert(methods.end(), {"Tokenize", "Detokenize"});
  return methods;
}

}  // namespace attnserve::server
