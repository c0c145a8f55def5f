#include "text/structured/constraint_compiler.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "llguidance.h"
#include "nlohmann/json.hpp"
#include "text/structured/gbnf_to_lark.h"
#include "text/tokenizer/reference_json.h"

namespace attnserve::structured {
namespace {

// JSON may put whitespace between its tokens, as pretty-printing models do, but at most this
// much at a time: unlimited whitespace (llguidance's default) lets an answer that keeps drawing
// spaces run to max_tokens without ever closing its JSON.
constexpr const char* kJsonWhitespace = R"((?:\x20|\x0A[\x20\x09]{0,20}))";

// llguidance's tokenize callback: the ids of `bytes` as the model's tokenizer encodes them in
// the middle of a text. Called from any thread; the tokenizer is immutable.
size_t Tokenize(const void* user_data, const uint8_t* bytes, size_t bytes_len, uint32_t* output,
                size_t output_len) {
  const auto& tokenizer = *static_cast<const Tokenizer*>(user_data);
  auto encoding = tokenizer.Encode(std::string(reinterpret_cast<const char*>(bytes), bytes_len),
                                   /*add_special_tokens=*/false);
  if (!encoding.ok()) return 0;
  const std::vector<int64_t>& ids = encoding->ids;
  for (size_t i = 0; i < std::min(output_len, ids.size()); ++i) {
    output[i] = static_cast<uint32_t>(ids[i]);
  }
  return ids.size();
}

// A JSON schema with the server's whitespace policy, unless the schema sets its own.
absl::StatusOr<std::string> WithWhitespacePolicy(const std::string& schema_text) {
  absl::StatusOr<nlohmann::json> parsed = ParseReferenceJson(schema_text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the JSON schema is ", parsed.status().message()));
  }
  nlohmann::json schema = *std::move(parsed);
  if (schema.is_boolean()) {
    if (!schema.get<bool>())
      return absl::InvalidArgumentError("the JSON schema `false` admits nothing");
    schema = nlohmann::json::object();
  }
  if (!schema.is_object()) {
    return absl::InvalidArgumentError("the JSON schema must be an object or a boolean");
  }
  if (!schema.contains("x-guidance")) {
    schema["x-guidance"] = {{"whitespace_pattern", kJsonWhitespace}};
  }
  return schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A Lark grammar whose answers are exactly the choices.
absl::StatusOr<std::string> ChoiceGrammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("the choice lists no strings");
  std::vector<std::string> literals;
  for (const std::string& choice : choices) {
    if (choice.empty()) return absl::InvalidArgumentError("a choice is the empty string");
    literals.push_back(
        nlohmann::json(choice).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return absl::StrCat("start: ", absl::StrJoin(literals, " | "), "\n");
}

int64_t SpecBytes(const ConstraintSpec& spec) {
  int64_t bytes = static_cast<int64_t>(spec.text.size());
  for (const std::string& choice : spec.choices) bytes += static_cast<int64_t>(choice.size()) + 1;
  return bytes;
}

std::string CacheKey(const ConstraintSpec& spec) {
  std::string key = absl::StrCat(KindName(spec.kind), "\n", spec.text);
  for (const std::string& choice : spec.choices)
    absl::StrAppend(&key, "\n", choice.size(), ":", choice);
  return key;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(
    const Tokenizer& tokenizer, int64_t vocab_size, const std::vector<int64_t>& end_of_text,
    Limits limits) {
  // Each token's bytes; special tokens, ids the tokenizer does not know and tokens of no bytes
  // are marked as llguidance's special tokens (a leading 0xFF), which a grammar allows only by
  // name. A model without end-of-text gets one past its vocabulary, which is never drawn.
  const bool own_end = end_of_text.empty();
  const int64_t size = vocab_size + (own_end ? 1 : 0);
  std::vector<uint32_t> lengths(static_cast<size_t>(size));
  std::string bytes;
  for (int64_t id = 0; id < size; ++id) {
    std::optional<std::string> token;
    if (id < tokenizer.vocab_size()) token = tokenizer.TokenBytes(id);
    if (!token || token->empty()) {
      token = absl::StrCat("\xFF", id < tokenizer.vocab_size() ? tokenizer.TokenText(id)
                                                               : absl::StrFormat("<[%d]>", id));
    }
    lengths[static_cast<size_t>(id)] = static_cast<uint32_t>(token->size());
    bytes += *token;
  }
  std::vector<uint32_t> extra_ends;
  for (size_t i = 1; i < end_of_text.size(); ++i) {
    extra_ends.push_back(static_cast<uint32_t>(end_of_text[i]));
  }
  LlgTokenizerInitV2 init;
  std::memset(&init, 0, sizeof(init));
  init.struct_size = sizeof(init);
  init.vocab_size = static_cast<uint32_t>(size);
  init.tok_eos = static_cast<uint32_t>(own_end ? vocab_size : end_of_text[0]);
  init.token_lens = lengths.data();
  init.token_bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  init.tokenize_fn = Tokenize;
  init.tokenize_user_data = &tokenizer;
  init.tokenize_assumes_string = true;
  init.tok_eos_extra = extra_ends.data();
  init.tok_eos_extra_count = static_cast<uint32_t>(extra_ends.size());
  char error[1024] = {};
  LlgTokenizer* llg = llg_new_tokenizer_v2(&init, error, sizeof(error));
  if (llg == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the vocabulary cannot be used for constrained decoding: ", error));
  }
  return std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler(llg, vocab_size, limits));
}

ConstraintCompiler::~ConstraintCompiler() {
  for (auto& [key, matcher] : cache_) llg_free_matcher(matcher);
  llg_free_tokenizer(tokenizer_);
}

absl::StatusOr<std::unique_ptr<TokenMatcher>> ConstraintCompiler::Compile(
    const ConstraintSpec& spec) {
  const int64_t bytes = SpecBytes(spec);
  if (bytes > limits_.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the ", KindName(spec.kind), " is ", bytes,
                                                   " bytes, more than the ", limits_.max_bytes,
                                                   " a constraint may be"));
  }
  const std::string key = CacheKey(spec);
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      cache_.splice(cache_.begin(), cache_, it->second);
      return std::make_unique<TokenMatcher>(llg_clone_matcher(it->second->second));
    }
  }
  absl::StatusOr<LlgMatcher*> built = Build(spec);
  if (!built.ok()) return built.status();
  std::lock_guard lock(mutex_);
  if (index_.contains(key) || limits_.cached == 0) return std::make_unique<TokenMatcher>(*built);
  cache_.emplace_front(key, *built);
  index_[key] = cache_.begin();
  while (cache_.size() > limits_.cached) {
    index_.erase(cache_.back().first);
    llg_free_matcher(cache_.back().second);
    cache_.pop_back();
  }
  return std::make_unique<TokenMatcher>(llg_clone_matcher(*built));
}

absl::StatusOr<LlgMatcher*> ConstraintCompiler::Build(const ConstraintSpec& spec) const {
  std::string type = "lark";
  absl::StatusOr<std::string> data;
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      type = "json_schema";
      data = WithWhitespacePolicy(R"({"type": "object"})");
      break;
    case ConstraintSpec::Kind::kJsonSchema:
      type = "json_schema";
      data = WithWhitespacePolicy(spec.text);
      break;
    case ConstraintSpec::Kind::kRegex:
      type = "regex";
      data = spec.text;
      break;
    case ConstraintSpec::Kind::kLark:
      data = spec.text;
      break;
    case ConstraintSpec::Kind::kGbnf:
      data = GbnfToLark(spec.text);
      break;
    case ConstraintSpec::Kind::kChoice:
      data = ChoiceGrammar(spec.choices);
      break;
  }
  if (!data.ok()) return data.status();
  if (data->find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", KindName(spec.kind), " holds a NUL character"));
  }
  LlgConstraintInit init;
  std::memset(&init, 0, sizeof(init));
  llg_constraint_init_set_defaults(&init, tokenizer_);
  init.log_buffer_level = 0;
  init.log_stderr_level = 0;
  init.limits.verbose_errors = false;
  LlgMatcher* matcher = llg_new_matcher(&init, type.c_str(), data->c_str());
  if (const char* error = llg_matcher_get_error(matcher); error != nullptr) {
    std::string message = absl::StrCat("the ", KindName(spec.kind), " is not valid: ", error);
    llg_free_matcher(matcher);
    return absl::InvalidArgumentError(message);
  }
  return matcher;
}

}  // namespace attnserve::structured
