#include "server/core/model_methods.h"

namespace attnserve::server {

std::vector<std::string> SupportedMethods(const Model& model) {
  std::vector<std::string> methods;
  for (const auto& [method, name] : {std::pair{ModelMethod::kNextToken, "NextToken"},
                                     {ModelMethod::kGenerate, "Generate"},
                                     {ModelMethod::kScore, "Score"},
                                     {ModelMethod::kEmbed, "Embed"}}) {
    if (model.servable->Answers(method)) methods.push_back(name);
  }
  if (model.tokenizer) methods.insert(methods.end(), {"Tokenize", "Detokenize"});
  return methods;
}

}  // namespace attnserve::server
