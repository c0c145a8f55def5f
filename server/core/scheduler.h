// One model's scheduling policy, with no threads and no model: what each engine step runs.
// The model's engine loop (server/core/engine_loop.h) adds admitted requests, asks for a plan,
// has the executor run it, and hands the results back (vLLM v1's Scheduler: schedule() and
// update_from_output()). Everything here is testable with requests alone
// (tests/server/scheduler_test.cc).
//
// A step runs, within the budgets:
//   - unary requests (NextToken, Score, Embed), FIFO, up to max_batch_size of them, within
//     their share of the step's tokens (padded: what the engine computes) and one engine
//     call's activation memory; the first always goes, so that a large request cannot starve;
//   - one token for each decoding generation whose client keeps reading, up to max_batch_size;
//   - chunks of prompts, so that a long prompt shares steps with the decoding sequences.
// The step's token budget is small while generations decode (paced by the step's measured
// times, at most prefill_chunk_tokens: server/core/prefill_pacing.h), so that their next token
// waits for little else; unary requests get half of it while prompts wait, and prompts what the
// requests leave, at least that half: neither starves the other.
//
// Fairness between clients: decode slots and new generations are shared out evenly among the
// clients (connections) with work, oldest first within each, so that one client's many
// streams cannot hold every slot while another's wait.
//
// The KV cache: a generation holds the blocks of the tokens it has computed. New generations
// start when blocks for their prompt are free. When the pool runs short, paused streams give
// theirs up first (newest first), then generations newer than the one that needs them: the
// oldest always progresses. A preempted generation is computed again from its tokens (reusing
// published prefix blocks) once blocks are free.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/architectures/activation_memory.h"
#include "engine/attention/kv_cache.h"
#include "server/core/kv_cache_manager.h"
#include "server/core/prefill_pacing.h"
#include "server/core/task.h"

namespace attnserve::server {

enum class SequenceState {
  kWaiting,     // admitted, not yet started
  kPrefilling,  // its prompt (or, after a preemption, all its tokens) being computed
  kDecoding,    // one token a step
  kPaused,      // its client is not reading: no slot, no compute
  kPreempted,   // its blocks were taken; computed again once blocks are free
  kFinished,
};
const char* SequenceStateName(SequenceState state);

// One Generate request in the scheduler.
struct Sequence {
  uint64_t id = 0;  // for the executor's own per-sequence state
  std::shared_ptr<Task> task;
  SequenceState state = SequenceState::kWaiting;
  std::vector<int64_t> tokens;  // the prompt, then every token sampled
  int64_t prompt_tokens = 0;
  int64_t computed = 0;  // leading tokens whose keys and values are cached
  std::unique_ptr<BlockTable> table;
  std::unique_ptr<BlockTable> source_table;  // encoder-decoders: the encoded source's blocks
  bool started = false;  // the executor holds an engine state for it (dropped on preemption)
  int64_t feeding = 0;   // tokens planned for this step
  int64_t preemptions = 0;
  bool cancelled = false;  // its caller left (Scheduler::Cancel): it ends at the next step

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_tokens; }
  int64_t unfed() const { return static_cast<int64_t>(tokens.size()) - computed; }
  int64_t held_blocks() const;
};

struct SchedulerOptions {
  int64_t max_batch_size = 32;  // decoding sequences per step; unary requests per step
  int64_t step_tokens = 2048;
  int64_t prefill_chunk_tokens = 256;
  // While generations decode, the step's other work takes about this many times its decode
  // call (server/core/prefill_pacing.h), within prefill_chunk_tokens; 0: always
  // prefill_chunk_tokens.
  double prefill_pacing = 1.3;
  int64_t max_unsent_events = 4;  // a stream with this many events unsent is paused
  int64_t activation_budget = INT64_MAX;
  // The activation memory of one engine call (ActivationBytes for the model's config).
  std::function<int64_t(const EngineCall&)> activation_bytes = [](const EngineCall&) {
    return int64_t{0};
  };
  bool takes_sources = false;  // encoder-decoders: each generation has a source
};

// A generation's tokens to feed in this step.
struct Feed {
  Sequence* sequence;
  std::vector<int64_t> tokens;
};

// What one step runs, for the executor. Pointers stay valid until the next Schedule.
struct StepPlan {
  // Requests that leave without running (cancelled, or past their deadline), with their answer.
  std::vector<std::pair<std::shared_ptr<Task>, absl::Status>> ended;
  std::vector<std::shared_ptr<Task>> unary;  // FIFO
  std::vector<Sequence*> admitted;           // generations taken from the queue
  std::vector<Sequence*> start;              // need an engine state before they are fed
  std::vector<uint64_t> dropped;             // engine states to drop (preempted)
  std::vector<uint64_t> removed;             // generations that ended here (in `ended`)
  std::vector<Feed> decode, prefill;
  // Input tokens of the requests taken from the queue (to run or to end): what the loop's
  // completion estimate learns from.
  int64_t taken_tokens = 0;
  int64_t unary_tokens = 0;  // padded tokens of the unary requests
  int64_t prefill_tokens = 0;
  int64_t reused_tokens = 0;  // prompt tokens found in published blocks
  int64_t preemptions = 0;
  int64_t paused = 0;  // streams paused now
  bool empty() const {
    return ended.empty() && unary.empty() && start.empty() && decode.empty() && prefill.empty();
  }
};

// A token sampled for a generation fed in full.
struct Sampled {
  Sequence* sequence;
  int64_t token;
  bool end_of_text = false;          // one of the model's end-of-text tokens, which no text shows
  bool constraint_complete = false;  // the answer's constraint admits nothing more
  std::string_view text;             // the generation's text so far, for its stop sequences
};

// What a step's engine calls gave, for Update.
struct StepOutcome {
  std::vector<Sequence*> fed;  // its planned tokens are computed
  std::vector<Sampled> sampled;
  std::vector<Sequence*> failed;  // an engine error ended them; the executor answered them
  // The decode call's time, and the step's other calls' (unary requests, prompt chunks).
  absl::Duration decode_time, other_time;
};

// A generation that reached an end at Update (its end-of-text, max_tokens, a stop sequence),
// for the executor to word its last event.
struct FinishedGeneration {
  uint64_t id;
  std::shared_ptr<Task> task;
  FinishReason reason;
  int64_t prompt_tokens;
  int64_t generated_tokens;
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions options, KvCacheManager cache);

  // Queues an admitted request (its input_tokens and call set), last. When `max_waiting`
  // requests wait already, the newest request of the client with the most waiting gives up its
  // place (fair queuing with push-out: one client's burst cannot fill the queue for everyone)
  // and is returned, to be answered UNAVAILABLE; when no client has more than one beyond this
  // one's, this one is refused instead (UNAVAILABLE).
  absl::StatusOr<std::shared_ptr<Task>> Add(std::shared_ptr<Task> task,
                                            int64_t max_waiting = INT64_MAX);
  // The caller of `task` left: a waiting request leaves the queue and a running generation ends,
  // both answered CANCELLED at the next Schedule. A task no longer here is ignored.
  void Cancel(const Task& task);
  // The client of `task` read: its paused stream runs again once fewer than max_unsent_events
  // of its events are unsent. True when it did.
  bool Resume(const Task& task);
  // Every paused stream with fewer than max_unsent_events unsent runs again (its events left
  // the answer writer, which does not resume streams itself); how many did.
  int64_t ResumeSent();
  // Plans the next step at `now`.
  StepPlan Schedule(absl::Time now);
  // Takes a step's results back and decides which generations end here, where cancellations
  // and deadlines end them too: at an end-of-text token, at max_tokens, at a stop sequence. A
  // stream whose client has max_unsent_events unsent with this step's is paused. Frees what
  // ended (before the caller answers it, so that a caller who has seen the end never sees its
  // sequence still held).
  std::vector<FinishedGeneration> Update(const StepOutcome& outcome);

  // Work waiting: requests not yet taken, their input tokens, and answers to deliver (requests
  // cancelled while they waited).
  bool has_waiting() const { return !waiting_.empty() || !cancelled_.empty(); }
  const std::shared_ptr<Task>& oldest_waiting() const { return waiting_.front(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t waiting_tokens() const { return waiting_tokens_; }
  // Generations started and not finished, and those of them paused.
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t paused() const { return paused_; }
  // A running generation could be fed now (not every one is paused).
  bool HasRunnable() const { return paused_ < running(); }
  // The earliest deadline of the running generations: when a paused one must end.
  absl::Time earliest_deadline() const;
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::list<Sequence>& sequences() const { return running_; }
  const KvCacheManager& cache() const { return cache_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Why g ends with the token just sampled for it, if it does.
  std::optional<FinishReason> Ends(const Sequence& g, const Sampled& sampled) const;
  int64_t SourceTokens(const Task& task) const;
  // Drops cancelled and expired generations, and sets the others' states.
  void Sweep(absl::Time now, StepPlan& plan);
  // Moves waiting requests into the plan: unary ones within `unary_share`, generations for
  // which there are slots and blocks.
  void TakeWaiting(absl::Time now, int64_t unary_share, StepPlan& plan);
  // Gives g an engine state again, and its cached prefix, if it has none.
  bool Start(Sequence& g, StepPlan& plan);
  // Blocks for g's next `tokens`, preempting others when short; false when it still cannot.
  bool Reserve(Sequence& g, int64_t tokens, StepPlan& plan);
  bool Preempting(Sequence& g, bool paused_only, const std::function<bool()>& reserve,
                  StepPlan& plan);
  void Preempt(Sequence& g, StepPlan& plan);
  void Finish(Sequence& g);
  // The sequences this step may feed (a token to decode, or a prompt chunk), at most `slots`,
  // shared out evenly among clients; oldest first.
  std::vector<Sequence*> ShareSlots(int64_t slots) const;

  const SchedulerOptions options_;
  KvCacheManager cache_;
  PrefillPacing pacing_;
  int64_t other_tokens_ = 0;  // of the last plan: unary and prompt tokens
  // Takes a waiting request out of the queue and its counts.
  std::shared_ptr<Task> Unqueue(std::list<std::shared_ptr<Task>>::iterator it);

  std::list<std::shared_ptr<Task>> waiting_;
  int64_t waiting_tokens_ = 0;
  std::unordered_map<std::string, int64_t> waiting_by_client_;
  std::vector<std::shared_ptr<Task>> cancelled_;  // left the queue, to be answered
  std::list<Sequence> running_;                   // oldest first
  uint64_t next_id_ = 1;
  int64_t paused_ = 0;  // running generations in kPaused
};

}  // namespace attnserve::server
