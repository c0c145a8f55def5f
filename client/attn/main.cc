// attn: attnserve from the command line. `attn --help` lists the commands and flags.
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli_arguments.h"
#include "client/cli_connection.h"
#include "client/cli_table.h"
#include "client/client.h"
#include "client/exit_codes.h"
#include "client/openai_chat.h"

namespace attnserve::client {
namespace {

constexpr char kUsage[] = R"(attn: call an attnserve server

Usage: attn COMMAND [ARGS] [--flags]

Commands:
  health [SERVICE]       SERVING (exit 0) or NOT_SERVING (exit 5), by grpc.health.v1
  models                 the served models, and those that failed to load
  info MODEL             one model: architecture, vocabulary, context, what it answers
  next-token             the most probable next tokens after --text or --tokens
  generate               stream a continuation of --text or --tokens
  score                  the log-probability of every token of --text or --tokens
  embed                  the embedding of --text or --tokens
  tokenize               the tokens of --text, each with its bytes of the text
  detokenize             the text of --tokens
  chat                   talk with a chat model, a line a turn, through the server's OpenAI
                         API at --http_target (its chat template renders the conversation)

--model may be left out when the server serves exactly one model.
)";

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> flags = ConnectionFlags();
  const std::vector<FlagSpec> own = {
      {"json", FlagKind::kSwitch, "false",
       "print the response as JSON (generate: one JSON object per line)"},
      {"model", FlagKind::kString, "", "the model to call"},
      {"text", FlagKind::kString, "", "the input as text, tokenized by the model"},
      {"tokens", FlagKind::kString, "", "the input as comma-separated token ids"},
      {"source", FlagKind::kString, "", "encoder-decoder models: the source text"},
      {"top_k", FlagKind::kInteger, "0",
       "next-token: tokens listed (0: 10); generate: sample from the k likeliest (0: all)"},
      {"temperature", FlagKind::kNumber, "0",
       "next-token: divides the logits (0: 1); generate: 0 is greedy"},
      {"max_tokens", FlagKind::kInteger, "64", "generate: most tokens to generate"},
      {"top_p", FlagKind::kNumber, "0", "generate: nucleus sampling (0: off)"},
      {"seed", FlagKind::kInteger, "-1", "generate: a seed for reproducible sampling (-1: none)"},
      {"stop", FlagKind::kString, "", "generate: comma-separated stop sequences"},
      {"min_tokens", FlagKind::kInteger, "0",
       "generate: tokens before end-of-text or a stop sequence may end it"},
      {"ignore_eos", FlagKind::kSwitch, "false",
       "generate: never draw end-of-text, so that max_tokens are generated"},
      {"pooling", FlagKind::kString, "default", "embed: default, mean, first, last, pma or none"},
      {"normalize", FlagKind::kSwitch, "false", "embed: L2-normalize"},
      {"omit_special_tokens", FlagKind::kSwitch, "false",
       "tokenize: leave out what the tokenizer adds around the text ([CLS], <s>)"},
      {"skip_special_tokens", FlagKind::kSwitch, "false",
       "detokenize: leave special tokens out of the text"},
      {"http_target", FlagKind::kString, "localhost:8000",
       "chat: the server's OpenAI-compatible API, host:port (attnserve --http_port)"},
      {"system", FlagKind::kString, "", "chat: a system message to begin with"},
      {"help", FlagKind::kSwitch, "false", "this help"},
  };
  flags.insert(flags.end(), own.begin(), own.end());
  return flags;
}

// A failure with its exit code: usage errors and server errors end the same way.
struct Failure {
  ExitCode code;
  std::string message;
};
Failure UsageError(const std::string& message) { return {kExitUsage, message}; }
Failure ServerError(const absl::Status& status) {
  return {ExitCodeFor(status),
          absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message())};
}

class Command {
 public:
  Command(const Arguments& arguments, Client& client)
      : arguments_(arguments), client_(client), call_(CallOptionsFrom(arguments)) {}

  std::optional<Failure> Run(const std::string& name) {
    const auto& args = arguments_.positional();
    if (name == "models") {
      if (args.size() > 1) return UsageError("models takes no arguments");
      return Models();
    }
    if (name == "health") {
      if (args.size() > 2) return UsageError("health takes at most one service name");
      return Health(args.size() == 2 ? args[1] : "");
    }
    if (name == "info") {
      if (args.size() != 2) return UsageError("info takes one model name: attn info MODEL");
      return Info(args[1]);
    }
    if (args.size() > 1) return UsageError(absl::StrCat("unexpected argument \"", args[1], "\""));
    if (name == "next-token") return NextToken();
    if (name == "generate") return Generate();
    if (name == "score") return Score();
    if (name == "embed") return Embed();
    if (name == "tokenize") return Tokenize();
    if (name == "detokenize") return Detokenize();
    if (name == "chat") return Chat();
    return UsageError(absl::StrCat("unknown command \"", name, "\"; see attn --help"));
  }

 private:
  bool json() const { return arguments_.on("json"); }

  void PrintJson(const google::protobuf::Message& message, bool one_line = false) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = !one_line;
    options.preserve_proto_field_names = true;
    std::string out;
    (void)google::protobuf::util::MessageToJsonString(message, &out, options);
    std::cout << out << (one_line || out.empty() || out.back() != '\n' ? "\n" : "");
  }

  // --model, or the only model served.
  std::optional<Failure> ResolveModel(std::string& model) {
    model = arguments_.text("model");
    if (!model.empty()) return std::nullopt;
    auto models = client_.ListModels(call_);
    if (!models.ok()) return ServerError(models.status());
    if (models->models_size() != 1) {
      std::vector<std::string> names;
      for (const auto& info : models->models()) names.push_back(info.name());
      return UsageError(models->models().empty()
                            ? "the server serves no model"
                            : absl::StrCat("the server serves several models; pick one with "
                                           "--model: ",
                                           absl::StrJoin(names, ", ")));
    }
    model = models->models(0).name();
    return std::nullopt;
  }

  // --text or --tokens, exactly one.
  std::optional<Failure> Input(v1::Sequence& sequence) {
    const bool text = arguments_.given("text"), tokens = arguments_.given("tokens");
    if (text == tokens) return UsageError("give the input as --text or as --tokens");
    if (text) {
      sequence.set_text(arguments_.text("text"));
      return std::nullopt;
    }
    for (absl::string_view id : absl::StrSplit(arguments_.text("tokens"), ',')) {
      int64_t value;
      if (!absl::SimpleAtoi(id, &value)) {
        return UsageError(absl::StrCat("--tokens: \"", id, "\" is not a token id"));
      }
      sequence.mutable_tokens()->add_ids(value);
    }
    return std::nullopt;
  }

  std::optional<Failure> Health(const std::string& service) {
    auto serving = client_.Serving(service, call_);
    if (!serving.ok()) return ServerError(serving.status());
    std::cout << (*serving ? "SERVING" : "NOT_SERVING") << "\n";
    if (!*serving) {
      return Failure{kExitUnavailable, "NOT_SERVING: the server is draining or not yet ready"};
    }
    return std::nullopt;
  }

  std::optional<Failure> Models() {
    auto models = client_.ListModels(call_);
    if (!models.ok()) return ServerError(models.status());
    if (json()) {
      PrintJson(*models);
      return std::nullopt;
    }
    Table table({"MODEL", "ARCHITECTURE", "ATTENTION", "VOCAB", "CONTEXT", "ANSWERS"},
                {false, false, false, true, true, false});
    for (const auto& info : models->models()) {
      table.Add({info.name(), info.architecture(), info.attention(),
                 absl::StrCat(info.vocab_size()), absl::StrCat(info.max_context()),
                 absl::StrJoin(info.methods(), " ")});
    }
    table.Print(std::cout);
    for (const auto& failed : models->failed()) {
      std::cout << "not loaded: " << failed.name() << ": " << failed.error() << "\n";
    }
    return std::nullopt;
  }

  std::optional<Failure> Info(const std::string& model) {
    auto info = client_.GetModel(model, call_);
    if (!info.ok()) return ServerError(info.status());
    if (json()) {
      PrintJson(*info);
      return std::nullopt;
    }
    Table table({"FIELD", "VALUE"}, {false, false});
    table.Add({"name", info->name()});
    table.Add({"architecture", info->architecture()});
    table.Add({"attention", info->attention()});
    table.Add({"positions", info->positions()});
    table.Add({"norm", info->norm()});
    table.Add({"layers", absl::StrCat(info->num_layers())});
    table.Add({"heads", absl::StrCat(info->num_heads())});
    if (info->num_kv_heads() > 0 && info->num_kv_heads() < info->num_heads()) {
      table.Add({"key/value heads", absl::StrCat(info->num_kv_heads())});
    }
    table.Add({"model dim", absl::StrCat(info->model_dim())});
    if (!info->weights().empty()) {
      table.Add({"weights",
                 info->weights() == "int8"
                     ? absl::StrCat("int8, ", info->int8_group_size() > 0
                                                  ? absl::StrCat("a scale per ",
                                                                 info->int8_group_size(), " inputs")
                                                  : "a scale per output")
                     : info->weights()});
    }
    if (info->vocab_size() > 0) table.Add({"vocabulary", absl::StrCat(info->vocab_size())});
    if (info->input_dim() > 0) table.Add({"input dim", absl::StrCat(info->input_dim())});
    table.Add({"max context", absl::StrCat(info->max_context())});
    if (!info->tokenizer().type().empty()) {
      table.Add({"tokenizer", absl::StrCat(info->tokenizer().type(), ", ",
                                           info->tokenizer().vocab_size(), " tokens")});
    }
    table.Add({"answers", absl::StrJoin(info->methods(), " ")});
    table.Print(std::cout);
    return std::nullopt;
  }

  std::optional<Failure> NextToken() {
    v1::NextTokenRequest request;
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    if (auto failure = Input(*request.add_sequences())) return failure;
    if (arguments_.given("source")) request.add_sources()->set_text(arguments_.text("source"));
    request.set_top_k(static_cast<int32_t>(arguments_.integer("top_k")));
    request.set_temperature(static_cast<float>(arguments_.number("temperature")));
    auto response = client_.NextToken(request, call_);
    if (!response.ok()) return ServerError(response.status());
    if (json()) {
      PrintJson(*response);
      return std::nullopt;
    }
    const v1::NextTokenResult& result = response->results(0);
    std::cout << "model " << response->model() << ", " << result.input_tokens()
              << " input tokens\n";
    Table table({"RANK", "TOKEN", "ID", "PROBABILITY", "LOG-PROB"},
                {true, false, true, true, true});
    int rank = 0;
    for (const auto& top : result.top()) {
      table.Add({absl::StrCat(++rank), Quoted(top.text()), absl::StrCat(top.id()),
                 absl::StrFormat("%.4f", top.probability()),
                 absl::StrFormat("%.3f", top.log_probability())});
    }
    table.Print(std::cout);
    return std::nullopt;
  }

  std::optional<Failure> Generate() {
    v1::GenerateRequest request;
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    if (auto failure = Input(*request.mutable_prompt())) return failure;
    if (arguments_.given("source")) request.mutable_source()->set_text(arguments_.text("source"));
    request.set_max_tokens(static_cast<int32_t>(arguments_.integer("max_tokens")));
    request.set_temperature(static_cast<float>(arguments_.number("temperature")));
    request.set_top_k(static_cast<int32_t>(arguments_.integer("top_k")));
    request.set_top_p(static_cast<float>(arguments_.number("top_p")));
    if (arguments_.integer("seed") >= 0) request.set_seed(arguments_.integer("seed"));
    request.set_min_tokens(static_cast<int32_t>(arguments_.integer("min_tokens")));
    request.set_ignore_eos(arguments_.on("ignore_eos"));
    if (!arguments_.text("stop").empty()) {
      for (absl::string_view stop : absl::StrSplit(arguments_.text("stop"), ',')) {
        request.add_stop(std::string(stop));
      }
    }
    v1::GenerateFinish finish;
    bool printed = false;
    const absl::Status status = client_.Generate(
        request,
        [&](const v1::GenerateResponse& event) {
          if (json()) {
            PrintJson(event, /*one_line=*/true);
          } else if (event.has_token()) {
            std::cout << event.token().text() << std::flush;
            printed = true;
          } else if (event.has_finish() && !event.finish().text().empty()) {
            std::cout << event.finish().text() << std::flush;  // the end of a cut character
            printed = true;
          }
          if (event.has_finish()) finish = event.finish();
        },
        call_);
    if (printed) std::cout << "\n" << std::flush;
    if (!status.ok()) return ServerError(status);
    if (!json()) {
      std::cerr << "[" << FinishName(finish.reason()) << ": " << finish.prompt_tokens()
                << " prompt tokens, " << finish.generated_tokens() << " generated]\n";
    }
    return std::nullopt;
  }

  static std::string FinishName(v1::FinishReason reason) {
    switch (reason) {
      case v1::FINISH_REASON_MAX_TOKENS:
        return "max tokens";
      case v1::FINISH_REASON_STOP_SEQUENCE:
        return "stop sequence";
      case v1::FINISH_REASON_END_OF_TEXT:
        return "end of text";
      case v1::FINISH_REASON_CONTEXT_FULL:
        return "context full";
      default:
        return "finished";
    }
  }

  std::optional<Failure> Score() {
    v1::ScoreRequest request;
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    if (auto failure = Input(*request.mutable_sequence())) return failure;
    if (arguments_.given("source")) request.mutable_source()->set_text(arguments_.text("source"));
    auto response = client_.Score(request, call_);
    if (!response.ok()) return ServerError(response.status());
    if (json()) {
      PrintJson(*response);
      return std::nullopt;
    }
    Table table({"POSITION", "TOKEN", "ID", "LOG-PROB"}, {true, false, true, true});
    int position = 0;
    for (const auto& token : response->tokens()) {
      table.Add({absl::StrCat(++position), Quoted(token.text()), absl::StrCat(token.id()),
                 absl::StrFormat("%.3f", token.log_probability())});
    }
    table.Print(std::cout);
    const int count = response->tokens_size();
    std::cout << absl::StrFormat("total log-probability %.3f over %d tokens",
                                 response->total_log_probability(), count);
    if (count > 0) {
      std::cout << absl::StrFormat(", perplexity %.3f",
                                   std::exp(-response->total_log_probability() / count));
    }
    std::cout << "\n";
    return std::nullopt;
  }

  std::optional<Failure> Tokenize() {
    v1::TokenizeRequest request;
    if (!arguments_.given("text")) return UsageError("tokenize takes --text");
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    request.set_text(arguments_.text("text"));
    request.set_omit_special_tokens(arguments_.on("omit_special_tokens"));
    auto response = client_.Tokenize(request, call_);
    if (!response.ok()) return ServerError(response.status());
    if (json()) {
      PrintJson(*response);
      return std::nullopt;
    }
    Table table({"POSITION", "ID", "TOKEN", "BYTES", "TEXT"}, {true, true, false, true, false});
    int position = 0;
    const std::string& text = request.text();
    for (const auto& token : response->tokens()) {
      const bool covers = token.end() > token.start();
      table.Add({absl::StrCat(position++), absl::StrCat(token.id()), Quoted(token.text()),
                 covers ? absl::StrCat(token.start(), "-", token.end()) : "",
                 covers ? Quoted(text.substr(token.start(), token.end() - token.start()))
                        : (token.special() ? "(added)" : "")});
    }
    table.Print(std::cout);
    std::cout << response->tokens_size() << " tokens\n";
    return std::nullopt;
  }

  // One turn a line of standard input, until its end; the replies stream to standard output.
  std::optional<Failure> Chat() {
    ChatOptions options;
    const std::string target = arguments_.text("http_target");
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(target.substr(colon + 1), &options.port)) {
      return UsageError(absl::StrCat("--http_target: \"", target, "\" is not host:port"));
    }
    options.host = target.substr(0, colon);
    options.api_key = call_.api_key;
    if (auto failure = ResolveModel(options.model)) return failure;
    options.max_tokens = arguments_.given("max_tokens") ? arguments_.integer("max_tokens") : 0;
    options.temperature = arguments_.given("temperature") ? arguments_.number("temperature") : 0.7;
    nlohmann::json messages = nlohmann::json::array();
    if (arguments_.given("system")) {
      messages.push_back({{"role", "system"}, {"content", arguments_.text("system")}});
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      auto reply = StreamChatTurn(options, messages,
                                  [](const std::string& text) { std::cout << text << std::flush; });
      std::cout << "\n";
      if (!reply.ok()) return ServerError(reply.status());
      messages.push_back({{"role", "assistant"}, {"content", *reply}});
    }
    return std::nullopt;
  }

  std::optional<Failure> Detokenize() {
    v1::DetokenizeRequest request;
    if (!arguments_.given("tokens")) return UsageError("detokenize takes --tokens");
    v1::Sequence sequence;
    if (auto failure = Input(sequence)) return failure;
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    *request.mutable_ids() = sequence.tokens().ids();
    request.set_skip_special_tokens(arguments_.on("skip_special_tokens"));
    auto response = client_.Detokenize(request, call_);
    if (!response.ok()) return ServerError(response.status());
    if (json()) {
      PrintJson(*response);
    } else {
      std::cout << response->text() << "\n";
    }
    return std::nullopt;
  }

  std::optional<Failure> Embed() {
    v1::EmbedRequest request;
    v1::Pooling pooling;
    const std::string name = "POOLING_" + absl::AsciiStrToUpper(arguments_.text("pooling"));
    if (!v1::Pooling_Parse(name, &pooling)) {
      return UsageError(absl::StrCat("--pooling: \"", arguments_.text("pooling"),
                                     "\" is not one of default, mean, first, last, pma, none"));
    }
    if (auto failure = Input(*request.add_sequences())) return failure;
    if (auto failure = ResolveModel(*request.mutable_model())) return failure;
    request.set_pooling(pooling);
    request.set_normalize(arguments_.on("normalize"));
    auto response = client_.Embed(request, call_);
    if (!response.ok()) return ServerError(response.status());
    if (json()) {
      PrintJson(*response);
      return std::nullopt;
    }
    const v1::Embedding& embedding = response->embeddings(0);
    std::cout << "model " << response->model() << ": " << embedding.rows() << " x "
              << embedding.width() << " (rows x width)\n";
    Table table({"ROW", "L2 NORM", "FIRST VALUES"}, {true, true, false});
    for (int64_t row = 0; row < embedding.rows(); ++row) {
      double norm = 0;
      std::vector<std::string> first;
      for (int64_t i = 0; i < embedding.width(); ++i) {
        const float value = embedding.values(static_cast<int>(row * embedding.width() + i));
        norm += static_cast<double>(value) * value;
        if (i < 6) first.push_back(absl::StrFormat("%.4f", value));
      }
      table.Add({absl::StrCat(row), absl::StrFormat("%.4f", std::sqrt(norm)),
                 absl::StrCat(absl::StrJoin(first, " "), embedding.width() > 6 ? " ..." : "")});
    }
    table.Print(std::cout);
    return std::nullopt;
  }

  const Arguments& arguments_;
  Client& client_;
  const CallOptions call_;
};

int Main(int argc, char** argv) {
  QuietGrpcLogs();
  const std::vector<FlagSpec> flags = Flags();
  auto arguments = Arguments::Parse(argc, argv, flags);
  if (!arguments.ok()) {
    std::cerr << "attn: " << arguments.status().message() << "; see attn --help\n";
    return kExitUsage;
  }
  if (arguments->on("help") || arguments->positional().empty()) {
    (arguments->on("help") ? std::cout : std::cerr) << kUsage << "\nFlags:\n"
                                                    << FlagHelp(flags) << "\n"
                                                    << ExitCodeHelp();
    return arguments->on("help") ? kExitOk : kExitUsage;
  }
  // 4: a call needs time to run.
  if (arguments->number("timeout") <= 0) {
    std::cerr << "attn: --timeout must be positive\n";
    return kExitUsage;
  }
  auto client = Client::Connect(ChannelOptionsFrom(*arguments));
  if (!client.ok()) {
    std::cerr << "attn: " << client.status().message() << "\n";
    return kExitUsage;  // inconsistent TLS flags or an unreadable file
  }
  Command command(*arguments, **client);
  if (auto failure = command.Run(arguments->positional()[0])) {
    std::cerr << "attn: " << failure->message << "\n";
    return failure->code;
  }
  return kExitOk;
}

}  // namespace
}  // namespace attnserve::client

int main(int argc, char** argv) { return attnserve::client::Main(argc, argv); }
