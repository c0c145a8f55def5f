// What each method takes, in no protocol's terms: each protocol's edge reads its own messages
// into these (attnserve.v1 in server/grpc/v1/v1_messages.h, the Open Inference Protocol's tensors
// in server/open_inference/infer_requests.h), one validation checks them
// (server/frontend/request_validation.h), and the engine never sees a protocol. A refusal names the
// field through the protocol's own words for it (FieldNames), so that neither protocol rewrites the
// other's messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/architectures/encoder.h"
#include "text/structured/constraint_spec.h"
#include "text/tokenizer/tokenizer.h"

namespace attnserve::server {

// One sequence as the caller gave it: text for the model's tokenizer, or token ids.
struct SequenceInput {
  enum class Kind { kMissing, kText, kTokens };
  Kind kind = Kind::kMissing;
  std::string text;
  std::vector<int64_t> ids;
  // Text: whether the tokenizer adds its special tokens (a rendered chat template has its own).
  bool add_special_tokens = true;

  static SequenceInput Text(std::string text, bool add_special_tokens = true) {
    return {Kind::kText, std::move(text), {}, add_special_tokens};
  }
  static SequenceInput Tokens(std::vector<int64_t> ids) {
    return {Kind::kTokens, {}, std::move(ids)};
  }
};

// What to do with a text longer than the model's context: refuse it (the default), or cut it as
// the tokenizer library would (a pair's longer text first, or only its second, from either end).
struct TextTruncation {
  bool enabled = false;
  Truncation::Strategy strategy = Truncation::Strategy::kLongestFirst;
  bool from_left = false;
};

struct FeatureSetInput {
  int64_t width = 0;
  std::vector<float> values;  // rows × width
};

struct NextTokenInput {
  std::vector<SequenceInput> sequences;
  std::vector<SequenceInput> sources;  // encoder-decoders: one per sequence
  int64_t top_k = 0;                   // 0: the default
  float temperature = 0.0f;            // 0: 1
  bool full_distribution = false;
};

struct ScoreInput {
  SequenceInput sequence;
  std::optional<SequenceInput> source;
};

struct EmbedInput {
  std::vector<SequenceInput> sequences;       // models of token inputs
  std::vector<FeatureSetInput> feature_sets;  // models of feature-set inputs
  std::optional<Pooling> pooling;             // nullopt: the model's
  bool normalize = false;
  // Keeps each vector's first `dimensions` values (a Matryoshka model's shorter embedding),
  // normalized after the cut when `normalize`; 0: all of them.
  int64_t dimensions = 0;
  std::vector<int64_t> head_layers;  // layers whose per-head contributions to return
  TextTruncation truncation;         // of texts
  // The model's prompt (config_sentence_transformers.json) put before each text; empty: its
  // default prompt, if it has one.
  std::string prompt_name;
};

// Classify: texts (or token ids) for a model's classification head, or pairs of texts (a query
// and a document for a cross-encoder, two sentences), each joined by the tokenizer's pair template.
struct ClassifyInput {
  struct Item {
    SequenceInput text;
    std::optional<std::string> pair = {};  // the second text of a pair
  };
  std::vector<Item> items;
  bool raw_scores = false;  // logits, not the model's activation of them
  TextTruncation truncation;
  // Bytes of the request's texts that its answer repeats (a rerank's returned documents).
  int64_t echoed_bytes = 0;
};

struct GenerateInput {
  SequenceInput prompt;
  std::optional<SequenceInput> source;
  int64_t max_tokens = 0;  // 0: the default
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 0.0f;  // 0: 1
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int64_t top_logprobs = 0;  // the most likely tokens to report beside each generated one
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  // What the answer is constrained to, and the field of the request that said so, in the
  // protocol's words (e.g. "response_format.json_schema.schema", "constraint.regex").
  struct Constraint {
    structured::ConstraintSpec spec;
    std::string field;
  };
  std::optional<Constraint> constraint;
};

struct TokenizeInput {
  std::string text;
  bool omit_special_tokens = false;
};

struct DetokenizeInput {
  std::vector<int64_t> ids;
  bool skip_special_tokens = false;
};

// A field of a method's input, for errors: which one, which row of it, and which part of the
// row (e.g. attnserve.v1's "sequences[2].tokens.ids[5]", the Open Inference Protocol's
// "input 'input_ids' [2, 5]").
struct FieldPath {
  enum class Field {
    kSequences,
    kSequence,
    kPrompt,
    kSources,
    kSource,
    kFeatureSets,
    kText,  // Tokenize's
    kIds,   // Detokenize's
    kTopK,
    kTemperature,
    kTopP,
    kMaxTokens,
    kMinTokens,
    kStop,
    kTopLogprobs,
    kPooling,
    kHeadLayers,
    kDimensions,
    kPromptName,
    kQuery,      // a rerank's
    kDocuments,  // a rerank's
  };
  enum class Part { kWhole, kText, kPairText, kTokenIds, kValues, kWidth };

  Field field;
  int64_t row = -1;  // an entry of a list field
  Part part = Part::kWhole;
  int64_t element = -1;  // a token of kTokenIds, or an id of kIds
};

// The name every protocol gives a parameter field (top_k, temperature, ...); nullptr for the
// fields each protocol names its own way (its sequences, texts, ids and stop sequences).
const char* ParameterName(FieldPath::Field field);

// A protocol's words for the fields of its requests.
class FieldNames {
 public:
  virtual ~FieldNames() = default;
  virtual std::string Name(const FieldPath& path) const = 0;
};

// INVALID_ARGUMENT: the field's name, then the problem ("is empty").
absl::Status InvalidField(const FieldNames& names, const FieldPath& path,
                          absl::string_view problem);

}  // namespace attnserve::server
