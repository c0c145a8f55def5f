// Admission shared by every protocol the server speaks (attnserve.v1 and the Open Inference
// Protocol): the call gate, routing to a model that answers the method, validation, and the
// model's one queue. A request takes the same path whichever protocol carried it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "server/core/answer_writer.h"
#include "server/core/call_gate.h"
#include "server/core/task.h"
#include "server/frontend/api_keys.h"
#include "server/frontend/model_repository.h"
#include "server/ops/server_metrics.h"

namespace attnserve::server {

// Who sent a call and until when it may take, in no protocol's terms.
struct CallOrigin {
  absl::Time deadline = absl::InfiniteFuture();
  // Who asked, as fair shares count clients: the API key's identity when keys are required,
  // else the connection (gRPC, whose channels multiplex) or the peer's address (HTTP/1.1, whose
  // clients open a connection a request): queue places and decoding slots are shared out among
  // clients.
  std::string client;
};

class Admission {
 public:
  // Inference calls are admitted through `gate`, which shutdown closes. Large answers are built
  // on `answers`' thread (inline when null).
  // Inference calls are let in only with one of `keys` (when not null and required).
  Admission(const ModelRepository& repository, ServerMetrics& metrics, CallGate& gate,
            AnswerWriter* answers = nullptr, const ApiKeys* keys = nullptr)
      : repository_(repository), metrics_(metrics), gate_(gate), answers_(answers), keys_(keys) {}

  const ModelRepository& repository() const { return repository_; }
  AnswerWriter* answers() const { return answers_; }
  ServerMetrics& metrics() const { return metrics_; }
  // Admitting calls: shutdown has not begun.
  bool accepting() const { return gate_.open(); }
  // The caller of an `authorization` header or metadata: its key's identity ("" when the
  // server takes calls without keys), or UNAUTHENTICATED.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization) const {
    if (keys_ == nullptr) return std::string();
    return keys_->Check(authorization);
  }

  // The metrics label for a request naming `model`: the model, or "_unknown" for a name the
  // server does not serve (a caller's arbitrary string would create unbounded series).
  std::string ModelLabel(const std::string& model) const;
  // The worker for `model` if it exists and answers `method` (e.g. "NextToken").
  absl::StatusOr<EngineLoop*> Route(const std::string& model, const std::string& method) const;

  // Every inference call: admit, route, validate, queue; the scheduler answers `call` from then
  // on. A request refused on the way (`prepared` not OK: it did not decode or translate) is
  // answered here. `validate(worker, task)` checks the method's input, in the words of the
  // protocol that carried it, and fills in the task's inputs.
  template <typename Validate, typename Call>
  void Start(const absl::StatusOr<CallOrigin>& origin, const std::string& model,
             const std::string& method, TaskKind kind, const absl::Status& prepared,
             Validate validate, Call* call) const {
    const bool admitted = gate_.Enter();
    call->Admitted(&gate_);
    if (!admitted) return call->Complete(ShuttingDownError());
    if (!origin.ok()) return call->Complete(origin.status());
    if (!prepared.ok()) return call->Complete(prepared);
    auto worker = Route(model, method);
    if (!worker.ok()) return call->Complete(worker.status());
    auto task = std::make_shared<Task>(kind, call);
    if (auto status = validate(**worker, *task); !status.ok()) return call->Complete(status);
    task->deadline = origin->deadline;
    task->client = origin->client;
    task->resume = [worker = *worker, task = task.get()] { worker->Resume(*task); };
    task->cancel = [worker = *worker, task = task.get()] { worker->Cancel(*task); };
    call->Attach(task);
    // Once queued, the task is the scheduler's: it completes the call, this thread never again.
    if (auto status = (*worker)->Submit(task); !status.ok()) call->Complete(status);
  }

 private:
  const ModelRepository& repository_;
  ServerMetrics& metrics_;
  CallGate& gate_;
  AnswerWriter* const answers_;
  const ApiKeys* const keys_;
};

}  // namespace attnserve::server
