#include "client/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace attnserve::client {

absl::StatusOr<PromptLengths> PromptLengths::Parse(const std::string& spec) {
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  PromptLengths lengths;
  auto bad = [&spec]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt lengths \"", spec, "\": want N, uniform:LO:HI or normal:MEAN:STDDEV, positive"));
  };
  std::vector<double> numbers;
  for (size_t i = parts.size() == 1 ? 0 : 1; i < parts.size(); ++i) {
    double value;
    if (!absl::SimpleAtod(parts[i], &value) || !(value >= 0)) return bad();
    numbers.push_back(value);
  }
  if (parts.size() == 1 && numbers[0] >= 1) {
    lengths.a_ = std::floor(numbers[0]);
  } else if (parts.size() == 3 && parts[0] == "uniform" && numbers[0] >= 1 &&
             numbers[1] >= numbers[0]) {
    lengths.kind_ = Kind::kUniform;
    lengths.a_ = std::floor(numbers[0]);
    lengths.b_ = std::floor(numbers[1]);
  } else if (parts.size() == 3 && parts[0] == "normal" && numbers[0] >= 1) {
    lengths.kind_ = Kind::kNormal;
    lengths.a_ = numbers[0];
    lengths.b_ = numbers[1];
  } else {
    return bad();
  }
  return lengths;
}

int64_t PromptLengths::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int64_t>(a_);
    case Kind::kUniform:
      return std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a_),
                                                    static_cast<int64_t>(b_))(rng);
    case Kind::kNormal:
      return std::clamp<int64_t>(std::llround(std::normal_distribution<double>(a_, b_)(rng)), 1,
                                 max());
  }
  return 1;
}

int64_t PromptLengths::max() const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int64_t>(a_);
    case Kind::kUniform:
      return static_cast<int64_t>(b_);
    case Kind::kNormal:
      return std::max<int64_t>(1, std::llround(a_ + 4 * b_));
  }
  return 1;
}

namespace {

// Each RPC kind: its --rpc name and the method name models list in ModelInfo.methods.
struct RpcNames {
  Rpc rpc;
  const char* flag;
  const char* method;
};
constexpr RpcNames kRpcs[] = {{Rpc::kNextToken, "next-token", "NextToken"},
                              {Rpc::kGenerate, "generate", "Generate"},
                              {Rpc::kScore, "score", "Score"},
                              {Rpc::kEmbed, "embed", "Embed"},
                              {Rpc::kGetModel, "get-model", "GetModel"}};

const RpcNames& NamesOf(Rpc rpc) {
  return *std::find_if(std::begin(kRpcs), std::end(kRpcs),
                       [rpc](const RpcNames& names) { return names.rpc == rpc; });
}

}  // namespace

absl::StatusOr<Rpc> ParseRpc(const std::string& name) {
  for (const RpcNames& names : kRpcs) {
    if (name == names.flag) return names.rpc;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--rpc \"", name, "\" is not one of next-token, generate, score, embed, get-model"));
}

absl::StatusOr<Workload> Workload::Create(Client& client, Options options) {
  auto info = client.GetModel(options.model, options.call);
  if (!info.ok()) return info.status();
  // Every model answers GetModel; the others only when the model lists them.
  const std::string method = NamesOf(options.rpc).method;
  if (options.rpc != Rpc::kGetModel &&
      std::find(info->methods().begin(), info->methods().end(), method) == info->methods().end()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", options.model, " does not answer ",
                                                   method, "; it answers ",
                                                   absl::StrJoin(info->methods(), ", ")));
  }
  const int64_t room =
      info->max_context() - (options.rpc == Rpc::kGenerate ? options.max_tokens : int64_t{1});
  if (options.rpc != Rpc::kGetModel && options.lengths.max() > room) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompts of up to ", options.lengths.max(), " tokens do not fit model ",
                     options.model, "'s context of ", info->max_context(),
                     options.rpc == Rpc::kGenerate ? " with --max_tokens" : ""));
  }
  return Workload(client, std::move(options), *std::move(info));
}

v1::Sequence Workload::Prompt(std::mt19937_64& rng) const {
  // Printable ASCII when the vocabulary has it (byte tokenizers), so prompts look like text.
  const int64_t vocab = info_.vocab_size();
  const int64_t low = vocab > 127 ? 32 : 0, high = vocab > 127 ? 126 : vocab - 1;
  std::uniform_int_distribution<int64_t> id(low, high);
  v1::Sequence sequence;
  const int64_t length = options_.lengths.Sample(rng);
  for (int64_t i = 0; i < length; ++i) sequence.mutable_tokens()->add_ids(id(rng));
  return sequence;
}

Sample Workload::Call(std::mt19937_64& rng, absl::Time due) const {
  Sample sample;
  sample.due = due;
  absl::Status status;
  switch (options_.rpc) {
    case Rpc::kNextToken: {
      v1::NextTokenRequest request;
      request.set_model(options_.model);
      *request.add_sequences() = Prompt(rng);
      status = client_->NextToken(request, options_.call).status();
      break;
    }
    case Rpc::kScore: {
      v1::ScoreRequest request;
      request.set_model(options_.model);
      *request.mutable_sequence() = Prompt(rng);
      status = client_->Score(request, options_.call).status();
      break;
    }
    case Rpc::kEmbed: {
      v1::EmbedRequest request;
      request.set_model(options_.model);
      if (info_.vocab_size() > 0) {
        *request.add_sequences() = Prompt(rng);
      } else {  // a model of feature vectors: a random set of prompt-length rows
        v1::FeatureSet& set = *request.add_feature_sets();
        set.set_width(info_.input_dim());
        std::normal_distribution<float> value;
        const int64_t rows = options_.lengths.Sample(rng);
        for (int64_t i = 0; i < rows * info_.input_dim(); ++i) set.add_values(value(rng));
      }
      status = client_->Embed(request, options_.call).status();
      break;
    }
    case Rpc::kGetModel:
      status = client_->GetModel(options_.model, options_.call).status();
      break;
    case Rpc::kGenerate: {
      v1::GenerateRequest request;
      request.set_model(options_.model);
      *request.mutable_prompt() = Prompt(rng);
      request.set_max_tokens(options_.max_tokens);
      absl::Time last = absl::Now();
      bool first = true;
      status = client_->Generate(
          request,
          [&](const v1::GenerateResponse& event) {
            if (!event.has_token()) return;
            const absl::Time now = absl::Now();
            ++sample.tokens;
            if (first) {
              sample.first_token = now - due;
              first = false;
            } else {
              sample.token_gaps.push_back(now - last);
            }
            last = now;
          },
          options_.call);
      break;
    }
  }
  sample.latency = absl::Now() - due;
  sample.code = status.code();
  return sample;
}

}  // namespace attnserve::client
