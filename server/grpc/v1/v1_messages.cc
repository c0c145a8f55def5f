#include "server/grpc/v1/v1_messages.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/frontend/field_error.h"

namespace attnserve::server {
namespace {

using Field = FieldPath::Field;
using Part = FieldPath::Part;

const char* FieldName(Field field) {
  if (const char* parameter = ParameterName(field)) return parameter;
  switch (field) {
    case Field::kSequences:
      return "sequences";
    case Field::kSequence:
      return "sequence";
    case Field::kPrompt:
      return "prompt";
    case Field::kSources:
      return "sources";
    case Field::kSource:
      return "source";
    case Field::kFeatureSets:
      return "feature_sets";
    case Field::kText:
      return "text";
    case Field::kIds:
      return "ids";
    case Field::kStop:
      return "stop";
    case Field::kQuery:
      return "query";
    case Field::kDocuments:
      return "documents";
    case Field::kTopK:
    case Field::kTemperature:
    case Field::kTopP:
    case Field::kMaxTokens:
    case Field::kMinTokens:
    case Field::kTopLogprobs:
    case Field::kPooling:
    case Field::kHeadLayers:
    case Field::kDimensions:
    case Field::kPromptName:
      break;  // ParameterName's
  }
  return "";
}

SequenceInput ReadSequence(const v1::Sequence& sequence) {
  switch (sequence.input_case()) {
    case v1::Sequence::kText:
      return SequenceInput::Text(sequence.text());
    case v1::Sequence::kTokens:
      return SequenceInput::Tokens(
          {sequence.tokens().ids().begin(), sequence.tokens().ids().end()});
    case v1::Sequence::INPUT_NOT_SET:
      break;
  }
  return {};
}

std::vector<SequenceInput> ReadSequences(
    const google::protobuf::RepeatedPtrField<v1::Sequence>& sequences) {
  std::vector<SequenceInput> inputs;
  inputs.reserve(sequences.size());
  for (const v1::Sequence& sequence : sequences) inputs.push_back(ReadSequence(sequence));
  return inputs;
}

v1::FinishReason FinishReasonOf(FinishReason reason) {
  switch (reason) {
    case FinishReason::kMaxTokens:
      return v1::FINISH_REASON_MAX_TOKENS;
    case FinishReason::kStopSequence:
      return v1::FINISH_REASON_STOP_SEQUENCE;
    case FinishReason::kEndOfText:
      return v1::FINISH_REASON_END_OF_TEXT;
    case FinishReason::kContextFull:
      return v1::FINISH_REASON_CONTEXT_FULL;
    case FinishReason::kConstraintComplete:
      return v1::FINISH_REASON_CONSTRAINT_COMPLETE;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

std::string V1FieldNames::Name(const FieldPath& path) const {
  std::string name = FieldName(path.field);
  if (path.field == Field::kIds) {
    return path.element >= 0 ? absl::StrCat(name, "[", path.element, "]") : name;
  }
  if (path.part == Part::kPairText) return absl::StrCat("text_pairs[", path.row, "]");
  if (path.row >= 0) absl::StrAppend(&name, "[", path.row, "]");
  switch (path.part) {
    case Part::kPairText:
    case Part::kWhole:
      break;
    case Part::kText:
      absl::StrAppend(&name, ".text");
      break;
    case Part::kTokenIds:
      absl::StrAppend(&name, ".tokens.ids[", path.element, "]");
      break;
    case Part::kValues:
      absl::StrAppend(&name, ".values");
      break;
    case Part::kWidth:
      absl::StrAppend(&name, ".width");
      break;
  }
  return name;
}

absl::StatusOr<NextTokenInput> ReadInput(const v1::NextTokenRequest& request) {
  return NextTokenInput{.sequences = ReadSequences(request.sequences()),
                        .sources = ReadSequences(request.sources()),
                        .top_k = request.top_k(),
                        .temperature = request.temperature(),
                        .full_distribution = request.full_distribution()};
}

absl::StatusOr<ScoreInput> ReadInput(const v1::ScoreRequest& request) {
  ScoreInput input;
  input.sequence = ReadSequence(request.sequence());
  if (request.has_source()) input.source = ReadSequence(request.source());
  return input;
}

absl::StatusOr<EmbedInput> ReadInput(const v1::EmbedRequest& request) {
  EmbedInput input;
  input.sequences = ReadSequences(request.sequences());
  for (const v1::FeatureSet& set : request.feature_sets()) {
    input.feature_sets.push_back({set.width(), {set.values().begin(), set.values().end()}});
  }
  switch (request.pooling()) {
    case v1::POOLING_DEFAULT:
      break;
    case v1::POOLING_MEAN:
      input.pooling = Pooling::kMean;
      break;
    case v1::POOLING_FIRST:
      input.pooling = Pooling::kFirst;
      break;
    case v1::POOLING_LAST:
      input.pooling = Pooling::kLast;
      break;
    case v1::POOLING_PMA:
      input.pooling = Pooling::kPma;
      break;
    case v1::POOLING_NONE:
      input.pooling = Pooling::kNone;
      break;
    default:
      return InvalidField(V1FieldNames(), {Field::kPooling},
                          absl::StrCat("= ", request.pooling(), " is not a known pooling"));
  }
  input.normalize = request.normalize();
  input.dimensions = request.dimensions();
  input.head_layers.assign(request.head_contribution_layers().begin(),
                           request.head_contribution_layers().end());
  return input;
}

absl::StatusOr<GenerateInput> ReadInput(const v1::GenerateRequest& request) {
  GenerateInput input;
  input.prompt = ReadSequence(request.prompt());
  if (request.has_source()) input.source = ReadSequence(request.source());
  input.max_tokens = request.max_tokens();
  input.temperature = request.temperature();
  input.top_k = request.top_k();
  input.top_p = request.top_p();
  if (request.sampling_seed_case() == v1::GenerateRequest::kSeed) input.seed = request.seed();
  input.stop.assign(request.stop().begin(), request.stop().end());
  input.ignore_eos = request.ignore_eos();
  input.min_tokens = request.min_tokens();
  if (request.has_constraint()) {
    using Kind = structured::ConstraintSpec::Kind;
    const v1::Constraint& constraint = request.constraint();
    GenerateInput::Constraint& into = input.constraint.emplace();
    switch (constraint.kind_case()) {
      case v1::Constraint::kJsonSchema:
        into = {{Kind::kJsonSchema, constraint.json_schema(), {}}, "constraint.json_schema"};
        break;
      case v1::Constraint::kJsonObject:
        if (!constraint.json_object()) {
          return FieldError("constraint.json_object", "must be true when set");
        }
        into = {{Kind::kJsonObject, "", {}}, "constraint.json_object"};
        break;
      case v1::Constraint::kRegex:
        into = {{Kind::kRegex, constraint.regex(), {}}, "constraint.regex"};
        break;
      case v1::Constraint::kLark:
        into = {{Kind::kLark, constraint.lark(), {}}, "constraint.lark"};
        break;
      case v1::Constraint::kGbnf:
        into = {{Kind::kGbnf, constraint.gbnf(), {}}, "constraint.gbnf"};
        break;
      case v1::Constraint::kChoice:
        into = {{Kind::kChoice,
                 "",
                 {constraint.choice().options().begin(), constraint.choice().options().end()}},
                "constraint.choice.options"};
        break;
      case v1::Constraint::KIND_NOT_SET:
        return FieldError("constraint", "sets none of its kinds");
    }
  }
  return input;
}

namespace {

absl::StatusOr<TextTruncation> ReadTruncation(v1::Truncation truncation) {
  switch (truncation) {
    case v1::TRUNCATION_NONE:
      return TextTruncation{};
    case v1::TRUNCATION_END:
      return TextTruncation{.enabled = true};
    case v1::TRUNCATION_START:
      return TextTruncation{.enabled = true, .from_left = true};
    default:
      break;
  }
  return FieldError("truncation", absl::StrCat("= ", truncation, " is not a known truncation"));
}

}  // namespace

absl::StatusOr<ClassifyInput> ReadInput(const v1::ClassifyRequest& request) {
  ClassifyInput input;
  if (!request.text_pairs().empty() && request.text_pairs_size() != request.sequences_size()) {
    return FieldError("text_pairs", absl::StrCat("has ", request.text_pairs_size(),
                                                 " texts; give one per sequence (",
                                                 request.sequences_size(), ") or none"));
  }
  for (int i = 0; i < request.sequences_size(); ++i) {
    ClassifyInput::Item& item = input.items.emplace_back();
    item.text = ReadSequence(request.sequences(i));
    if (!request.text_pairs().empty()) item.pair = request.text_pairs(i);
  }
  input.raw_scores = request.raw_scores();
  ASSIGN_OR_RETURN(input.truncation, ReadTruncation(request.truncation()));
  return input;
}

absl::StatusOr<RerankInput> ReadInput(const v1::RerankRequest& request) {
  if (request.top_n() < 0) return FieldError("top_n", "must not be negative");
  ASSIGN_OR_RETURN(const TextTruncation truncation, ReadTruncation(request.truncation()));
  return RerankInput{.query = request.query(),
                     .documents = {request.documents().begin(), request.documents().end()},
                     .raw_scores = request.raw_scores(),
                     .truncate = truncation.enabled,
                     .truncate_from_left = truncation.from_left,
                     .echo_scale = request.return_documents() ? 1 : 0};
}

absl::StatusOr<TokenizeInput> ReadInput(const v1::TokenizeRequest& request) {
  return TokenizeInput{request.text(), request.omit_special_tokens()};
}

absl::StatusOr<DetokenizeInput> ReadInput(const v1::DetokenizeRequest& request) {
  return DetokenizeInput{{request.ids().begin(), request.ids().end()},
                         request.skip_special_tokens()};
}

v1::NextTokenResponse NextTokenMessage(std::vector<NextTokenRow>& rows) {
  v1::NextTokenResponse response;
  for (NextTokenRow& row : rows) {
    v1::NextTokenResult* result = response.add_results();
    result->set_input_tokens(row.input_tokens);
    for (TokenChoice& choice : row.top) {
      v1::TokenProbability* top = result->add_top();
      top->set_id(choice.id);
      top->set_text(std::move(choice.text));
      top->set_probability(choice.probability);
      top->set_log_probability(choice.log_probability);
    }
    if (!row.distribution.empty()) {
      std::string packed(row.distribution.size() * sizeof(float), '\0');
      std::memcpy(packed.data(), row.distribution.data(), packed.size());
      result->set_distribution(std::move(packed));
      row.distribution = {};
    }
  }
  return response;
}

v1::ScoreResponse ScoreMessage(ScoreResult& result) {
  v1::ScoreResponse response;
  for (ScoredToken& token : result.tokens) {
    v1::TokenScore* score = response.add_tokens();
    score->set_id(token.id);
    score->set_text(std::move(token.text));
    score->set_log_probability(token.log_probability);
  }
  response.set_total_log_probability(result.total_log_probability);
  return response;
}

v1::EmbedResponse EmbedMessage(std::vector<Embedding>& embeddings) {
  v1::EmbedResponse response;
  for (Embedding& e : embeddings) {
    v1::Embedding* embedding = response.add_embeddings();
    for (HeadContributions& c : e.head_contributions) {
      v1::HeadContributions* heads = embedding->add_head_contributions();
      heads->set_layer(static_cast<int32_t>(c.layer));
      heads->set_heads(c.heads);
      heads->set_rows(c.rows);
      heads->set_width(c.width);
      heads->mutable_values()->Add(c.values.begin(), c.values.end());
      c.values = {};
    }
    embedding->set_rows(e.rows);
    embedding->set_width(e.width);
    embedding->mutable_values()->Add(e.values.begin(), e.values.end());
    e.values = {};
  }
  return response;
}

v1::GenerateResponse GenerateMessage(const GenerationEvent& event) {
  v1::GenerateResponse message;
  if (event.finished) {
    v1::GenerateFinish* finish = message.mutable_finish();
    finish->set_reason(FinishReasonOf(event.reason));
    finish->set_prompt_tokens(event.prompt_tokens);
    finish->set_generated_tokens(event.generated_tokens);
    finish->set_text(event.text);
  } else {
    v1::GeneratedToken* token = message.mutable_token();
    token->set_id(event.id);
    token->set_text(event.text);
    token->set_log_probability(event.log_probability);
  }
  return message;
}

v1::ClassifyResponse ClassifyMessage(const ClassifyJob& job) {
  v1::ClassifyResponse response;
  static const std::vector<std::string> kNoLabels;
  const std::vector<std::string>& labels = job.labels != nullptr ? *job.labels : kNoLabels;
  for (size_t b = 0; b < job.scores.size(); ++b) {
    v1::Classification* classification = response.add_classifications();
    classification->set_tokens(static_cast<int64_t>(job.inputs.tokens[b].size()));
    for (size_t i = 0; i < job.scores[b].size(); ++i) {
      v1::LabelScore* score = classification->add_scores();
      score->set_index(static_cast<int32_t>(i));
      if (i < labels.size()) score->set_label(labels[i]);
      score->set_score(job.scores[b][i]);
    }
  }
  return response;
}

v1::RerankResponse RerankMessage(const ClassifyJob& job, const v1::RerankRequest& request) {
  v1::RerankResponse response;
  for (const RankedDocument& ranked : Rank(job.scores, request.top_n())) {
    v1::RerankResult* result = response.add_results();
    result->set_index(static_cast<int32_t>(ranked.index));
    result->set_score(ranked.score);
    if (request.return_documents()) result->set_document(request.documents(ranked.index));
  }
  response.set_tokens(TokenCount(job.inputs.tokens));
  return response;
}

v1::TokenizeResponse TokenizeMessage(std::vector<TokenSpan>& tokens) {
  v1::TokenizeResponse response;
  response.mutable_tokens()->Reserve(static_cast<int>(tokens.size()));
  for (TokenSpan& span : tokens) {
    v1::Token* token = response.add_tokens();
    token->set_id(span.id);
    token->set_text(std::move(span.text));
    token->set_start(span.start);
    token->set_end(span.end);
    token->set_special(span.special);
  }
  return response;
}

}  // namespace attnserve::server
