// StartModelInfer's body (server/open_inference/infer_call.h), a template over the binding's call.
#pragma once

#include "server/frontend/request_validation.h"
#include "server/frontend/tokenization.h"
#include "server/open_inference/infer_answers.h"

namespace attnserve::server {

template <typename Call>
void StartModelInfer(
    const Admission& admission, const absl::StatusOr<CallOrigin>& origin, InferStart& start,
    Call* call, int64_t answer_scale,
    const std::function<void(absl::StatusOr<inference::ModelInferResponse>)>& answer_now) {
  const InferAnswer& answer = *start.answer;
  const InferFieldNames names(answer);
  if (!start.prepared.ok()) {
    admission.Start(
        origin, "", "", TaskKind::kNextToken, start.prepared,
        [](const EngineLoop&, Task&) { return absl::OkStatus(); }, call);
    return;
  }
  const std::string model = answer.model.worker->name();
  // Validation names the request's tensors and parameters.
  auto validating = [&](auto validate, const auto& input) {
    return [&, validate](const EngineLoop& worker, Task& task) {
      task.answer_scale = answer_scale;
      if (task.kind == TaskKind::kEmbed) task.embed().pad_token_states = answer.token_states;
      if (task.kind == TaskKind::kGenerate) task.generate().collect_events = true;
      return validate(input, names, worker, task);
    };
  };
  const InferCall& input = start.call;
  switch (answer.model.method) {
    case InferMethod::kNextToken:
      admission.Start(origin, model, "NextToken", TaskKind::kNextToken, start.prepared,
                      validating(ValidateNextToken, input.next_token), call);
      break;
    case InferMethod::kEmbed:
      admission.Start(origin, model, "Embed", TaskKind::kEmbed, start.prepared,
                      validating(ValidateEmbed, input.embed), call);
      break;
    case InferMethod::kScore:
      admission.Start(origin, model, "Score", TaskKind::kScore, start.prepared,
                      validating(ValidateScore, input.score), call);
      break;
    case InferMethod::kClassify:
      admission.Start(origin, model, "Classify", TaskKind::kClassify, start.prepared,
                      validating(ValidateClassify, input.classify), call);
      break;
    case InferMethod::kGenerate:
      admission.Start(origin, model, "Generate", TaskKind::kGenerate, start.prepared,
                      validating(ValidateGenerate, input.generate), call);
      break;
    // Answered here, on the calling thread, as on attnserve.v1.
    case InferMethod::kTokenize: {
      auto tokens = Tokenize(input.tokenize, names, *answer.model.worker);
      if (!tokens.ok()) return answer_now(tokens.status());
      answer_now(InferResponse(answer, *tokens));
      break;
    }
    case InferMethod::kDetokenize: {
      auto text = Detokenize(input.detokenize, names, *answer.model.worker);
      if (!text.ok()) return answer_now(text.status());
      answer_now(InferResponse(answer, *text));
      break;
    }
  }
}

}  // namespace attnserve::server
