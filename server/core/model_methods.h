// The methods a model answers, by their attnserve.v1 names ("NextToken", "Tokenize"): what
// routing checks and what the metrics' series start with.
#pragma once

#include <string>
#include <vector>

#include "engine/architectures/model.h"

namespace attnserve::server {

std::vector<std::string> SupportedMethods(const Model& model);

}  // namespace attnserve::server
