// How many tokens of prompt chunks and unary requests a scheduler step may carry while
// generations decode. Every decoding stream waits for the whole step, so a step that prefills a
// 256-token chunk beside a 16-row decode call delays all 16 next tokens by the chunk's time:
// that step is the streams' p99 inter-token latency. Here the step's other work is paced to
// take about `ratio` times its decode call, from the times measured on this machine and model
// (Sarathi-Serve's stall-free batching sizes the budget from a latency target the same way; the
// target here follows the decode call itself). Prompt work is spread over more steps rather than
// lost: a prompt token costs about the same in a 32-token chunk as in a 256-token one, and the
// budget never goes below `min_tokens`, so that prompts keep up with the streams they join.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace attnserve::server {

class PrefillPacing {
 public:
  // ratio 0: no pacing, always max_tokens.
  PrefillPacing(double ratio, int64_t min_tokens, int64_t max_tokens);

  // A step ran: its decode call took `decode` (zero: none), its other calls `other` for
  // `other_tokens` tokens.
  void Observe(absl::Duration decode, absl::Duration other, int64_t other_tokens);
  // The budget of the next step that decodes: max_tokens until both are measured.
  int64_t tokens() const;

 private:
  const double ratio_;
  const int64_t min_tokens_, max_tokens_;
  // Moving averages (each step a quarter): the decode call's seconds, and the other calls'
  // seconds and tokens, whose ratio is a token's cost with the calls' fixed costs shared out.
  double decode_seconds_ = 0, other_seconds_ = 0, other_tokens_ = 0;
};

}  // namespace attnserve::server
