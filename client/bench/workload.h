// What attn-bench sends: one RPC kind, prompts whose lengths follow a distribution, and the
// measurement of one call.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace attnserve::client {

// Prompt lengths in tokens: "N" (fixed), "uniform:LO:HI" (inclusive) or "normal:MEAN:STDDEV"
// (rounded, at least 1).
class PromptLengths {
 public:
  static absl::StatusOr<PromptLengths> Parse(const std::string& spec);
  int64_t Sample(std::mt19937_64& rng) const;
  int64_t max() const;  // the longest a sample can be (normal: mean + 4 stddev)

 private:
  enum class Kind { kFixed, kUniform, kNormal } kind_ = Kind::kFixed;
  double a_ = 8, b_ = 0;
};

enum class Rpc { kNextToken, kGenerate, kScore, kEmbed, kGetModel };
// The kind named by attn-bench's --rpc flag (next-token, generate, score, embed, get-model).
absl::StatusOr<Rpc> ParseRpc(const std::string& name);

// One call's measurements. Times are from when the call was due (open loop) or sent (closed).
struct Sample {
  absl::Time due;
  absl::Duration latency;
  absl::StatusCode code = absl::StatusCode::kOk;
  int64_t tokens = 0;                      // Generate only: tokens received
  absl::Duration first_token;              // Generate only: time to the first token
  std::vector<absl::Duration> token_gaps;  // Generate only: between consecutive tokens
};

class Workload {
 public:
  struct Options {
    Rpc rpc = Rpc::kNextToken;
    std::string model;
    PromptLengths lengths;
    int32_t max_tokens = 32;  // Generate
    CallOptions call;
  };
  // Asks the server about the model: the vocabulary (or feature width) and context bound the
  // prompts. INVALID_ARGUMENT when the prompts could not fit.
  static absl::StatusOr<Workload> Create(Client& client, Options options);

  // Makes one call, due at `due` (it may start later if the caller is behind).
  Sample Call(std::mt19937_64& rng, absl::Time due) const;

 private:
  Workload(Client& client, Options options, v1::ModelInfo info)
      : client_(&client), options_(std::move(options)), info_(std::move(info)) {}
  v1::Sequence Prompt(std::mt19937_64& rng) const;

  Client* client_;
  Options options_;
  v1::ModelInfo info_;
};

}  // namespace attnserve::client
