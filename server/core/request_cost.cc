#include "server/core/request_cost.h"

#include <algorithm>

#include "server/core/responses.h"

namespace attnserve::server {

RequestCost CostOf(const Task& task, const Model& model) {
  RequestCost cost;
  EngineCall& call = cost.call;
  switch (task.kind) {
    case TaskKind::kNextToken:
      call.batch = static_cast<int64_t>(task.next_token().sequences.size());
      call.time = LongestSequence(task.next_token().sequences);
      call.source_time = LongestSequence(task.next_token().sources);
      call.logits_rows = call.batch;
      break;
    case TaskKind::kScore:
      call.batch = 1;
      call.time = LongestSequence(task.score().sequences);
      call.source_time = LongestSequence(task.score().sources);
      call.logits_rows = call.time;
      break;
    case TaskKind::kEmbed: {
      const ModelInputs& inputs = task.embed().inputs;
      if (model.config.token_inputs()) {
        call.batch = static_cast<int64_t>(inputs.tokens.size());
        call.time = LongestSequence(inputs.tokens);
      } else {
        call.batch = inputs.features.batch();
        call.time = inputs.features.time();
      }
      call.head_layers = static_cast<int64_t>(task.embed().head_layers.size());
      break;
    }
    case TaskKind::kClassify:
      call.batch = static_cast<int64_t>(task.classify().inputs.tokens.size());
      call.time = LongestSequence(task.classify().inputs.tokens);
      break;
    case TaskKind::kGenerate:
      call.batch = 1;
      call.time = LongestSequence(task.generate().sequences);
      call.source_time = LongestSequence(task.generate().sources);
      call.logits_rows = 1;
      cost.context_tokens = call.time + task.generate().options.max_tokens;
      break;
  }
  cost.tokens = call.batch * call.time;
  cost.activation_bytes = ActivationBytes(model.config, call);
  // Embed and Classify run sequences of token ids in passes of similar length.
  const ModelInputs* grouped = task.kind == TaskKind::kClassify ? &task.classify().inputs
                               : task.kind == TaskKind::kEmbed  ? &task.embed().inputs
                                                                : nullptr;
  if (grouped != nullptr && model.config.token_inputs()) {
    const auto passes = model.servable->EmbedPasses(*grouped, call.head_layers > 0);
    if (passes.size() > 1) {
      cost.passes = static_cast<int64_t>(passes.size());
      cost.tokens = 0;
      cost.activation_bytes = 0;
      for (const std::vector<size_t>& pass : passes) {
        EngineCall part = call;
        part.batch = static_cast<int64_t>(pass.size());
        part.time = 0;
        for (size_t i : pass) {
          part.time = std::max(part.time, static_cast<int64_t>(grouped->tokens[i].size()));
        }
        cost.tokens += part.batch * part.time;
        cost.activation_bytes =
            std::max(cost.activation_bytes, ActivationBytes(model.config, part));
      }
    }
  }
  cost.response_bytes = ResponseBytesBound(task, model) * task.answer_scale;
  return cost;
}

}  // namespace attnserve::server
