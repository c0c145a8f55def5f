// Runs a model directory for tests/engine/hf_model_reference_test.py: reads one JSON object from
// stdin, {"sequences": [[ids], ...]}, runs the model on them as one padded batch and prints a JSON
// object. An encoder gives each sequence's states ([T][dim], unpadded) and pooled embedding, and
// with a classification head each sequence's logits and the labels' names ("token_types":
// [[type per token], ...] gives the tokens their types, a pair's segments); a
// causal LM gives each sequence's logits at every position ([T][vocab]) from one pass, and those
// of each position again from decoding with the cache (the prompt's first token, then one token at
// a time). With "generate": N, a causal LM also gives each sequence's N greedy continuation
// tokens, the prompt fed in one step. With "scores_only": true, a causal LM gives only each
// sequence's scores (the log-probability of every token after the first given the ones before,
// from the full pass), for sequences too long to print every logit of. With
// "rotary": {"positions": [...], "context": L}, a rotary model gives instead its θ_i for a
// sequence of L tokens and the cos and sin (attention factor included) by which the kernel turns
// each pair at each position, read off unit vectors it rotates. With "cached": {"prefill": P,
// "chunk": C, "kv_cache": "float32", "f16" or "bf16"}, a causal LM is fed each sequence's first P
// tokens in chunks of C through a KV cache of that type, then the rest one token at a time, and
// gives the scores of those tokens and its most likely next token at each ("top"). With
// "weights": "int8" or "int4", the model's linear layers are quantized at load, "bf16" rounded to
// bfloat16 ("int8_activations":
// false keeps int8 weights' activations float where the CPU has VNNI; "int4_lm_head": true puts
// the token table and LM head in int4 too). A model that does not load: its error on
// stderr, exit code 2.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/architectures/causal_lm.h"
#include "engine/architectures/model.h"
#include "engine/kernels/rotary.h"

namespace {

using nlohmann::json;

json Rows(const attnserve::Tensor& matrix, int64_t rows) {
  json out = json::array();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = matrix.row(r);
    out.push_back(std::vector<float>(row, row + matrix.dim(-1)));
  }
  return out;
}

int Fail(const absl::Status& status) {
  std::cerr << status.message() << "\n";
  return 3;
}

// The kernel's θ_i and, per position, its cos_i and sin_i: pair i of a head holding 1 in its first
// element and 0 in its second becomes (cos_i, sin_i).
json RotaryTables(const attnserve::RotaryConfig& config, int64_t head_dim, const json& request) {
  const attnserve::RotaryEmbedding rotary(config);
  const int64_t context = request["context"].get<int64_t>();
  const int64_t pairs = config.dims / 2;
  const int64_t first_step = config.interleaved ? 2 : 1, partner = config.interleaved ? 1 : pairs;
  json out = {{"inverse_frequencies", rotary.InverseFrequencies(context)}};
  for (const json& position : request["positions"]) {
    std::vector<float> head(head_dim, 0.0f);
    for (int64_t i = 0; i < pairs; ++i) head[i * first_step] = 1.0f;
    rotary.Apply(head.data(), head_dim, 1, 1, head_dim, position.get<int64_t>(), context);
    std::vector<float> cosines(pairs), sines(pairs);
    for (int64_t i = 0; i < pairs; ++i) {
      cosines[i] = head[i * first_step];
      sines[i] = head[i * first_step + partner];
    }
    out["cos"].push_back(cosines);
    out["sin"].push_back(sines);
  }
  return out;
}

// log p(token t | tokens before it) for t >= 1, from logits [T][vocab], in double.
std::vector<double> Scores(const attnserve::Tensor& logits, const std::vector<int64_t>& tokens) {
  std::vector<double> scores;
  for (size_t t = 1; t < tokens.size(); ++t) {
    const float* row = logits.row(static_cast<int64_t>(t - 1));
    const double top = *std::max_element(row, row + logits.dim(-1));
    double sum = 0;
    for (int64_t v = 0; v < logits.dim(-1); ++v) sum += std::exp(row[v] - top);
    scores.push_back(row[tokens[t]] - top - std::log(sum));
  }
  return scores;
}

// Feeds `tokens` through a KV cache as described above.
absl::StatusOr<json> CachedScores(const attnserve::CausalLM& lm, const std::vector<int64_t>& tokens,
                                  const json& request) {
  const auto prefill = request["prefill"].get<size_t>(), chunk = request["chunk"].get<size_t>();
  attnserve::KvBlockShape shape = *lm.CacheShape(32);
  const auto type = attnserve::KvCacheTypeNamed(request["kv_cache"].get<std::string>());
  if (!type) return absl::InvalidArgumentError("kv_cache: float32, f16 or bf16");
  shape.type = *type;
  auto pool =
      attnserve::KvBlockPool::Create(shape, shape.BlocksFor(static_cast<int64_t>(tokens.size())));
  if (!pool.ok()) return pool.status();
  auto state = lm.NewState(pool->get());
  json out = {{"scores", json::array()}, {"top", json::array()}};
  for (size_t start = 0; start + 1 < tokens.size();) {
    const size_t end = start < prefill ? std::min(prefill, start + chunk) : start + 1;
    if (!state->table->Reserve(static_cast<int64_t>(end))) {
      return absl::ResourceExhaustedError("the pool is too small");
    }
    attnserve::DecoderState* states[] = {state.get()};
    auto step =
        lm.Advance(states, {std::vector<int64_t>(tokens.begin() + start, tokens.begin() + end)});
    if (!step.ok()) return step.status();
    start = end;
    if (end < prefill) continue;
    const float* row = step->row(0);
    out["scores"].push_back(Scores(*step, {0, tokens[end]})[0]);
    out["top"].push_back(std::max_element(row, row + step->dim(-1)) - row);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hf_model_tool MODEL_DIR < request.json\n";
    return 1;
  }
  std::stringstream text;
  text << std::cin.rdbuf();
  const json request = json::parse(text.str());
  attnserve::WeightFormat weights;
  weights = attnserve::WeightFormatNamed(request.value("weights", "float32"), weights).value();
  weights.int8_activations = request.value("int8_activations", true);
  weights.int4_lm_head = request.value("int4_lm_head", false);
  auto model = attnserve::LoadModel(argv[1], {weights});
  if (!model.ok()) {
    std::cerr << model.status().message() << "\n";
    return 2;
  }
  const auto sequences = request["sequences"].get<std::vector<std::vector<int64_t>>>();
  const int64_t generate = request.value("generate", 0);
  json out;
  out["weights_as_stored"] = (*model)->weights_as_stored;
  if (const attnserve::Encoder* encoder = (*model)->As<attnserve::Encoder>()) {
    attnserve::ModelInputs inputs{sequences, {}, {}};
    if (request.contains("token_types")) {
      inputs.token_types = request["token_types"].get<std::vector<std::vector<uint8_t>>>();
    }
    auto states = encoder->States(inputs);
    if (!states.ok()) return Fail(states.status());
    auto pooled = encoder->Pool(*states);
    if (!pooled.ok()) return Fail(pooled.status());
    for (size_t b = 0; b < sequences.size(); ++b) {
      out["states"].push_back(Rows(states->values.Select(b), states->lengths[b]));
    }
    out["embeddings"] = Rows(*pooled, pooled->dim(0));
    if (encoder->has_classifier()) {
      auto logits = encoder->Classify(inputs);
      if (!logits.ok()) return Fail(logits.status());
      out["logits"] = Rows(*logits, logits->dim(0));
      out["labels"] = encoder->config().classifier.labels;
    }
  } else if (const attnserve::CausalLM* lm = (*model)->As<attnserve::CausalLM>();
             lm != nullptr && lm->Answers(attnserve::ModelMethod::kClassify)) {
    // A decoder's sequence classifier: its logits alone.
    auto logits = lm->Classify({sequences, {}, {}});
    if (!logits.ok()) return Fail(logits.status());
    out["logits"] = Rows(*logits, logits->dim(0));
    out["labels"] = lm->config().classifier.labels;
  } else if (lm != nullptr && request.contains("rotary")) {
    const attnserve::ModelConfig& config = lm->config();
    if (!config.rotary.enabled()) {
      return Fail(absl::InvalidArgumentError("no rotary positions"));
    }
    out = RotaryTables(config.rotary, config.head_dim_qk, request["rotary"]);
  } else if (lm != nullptr && request.contains("cached")) {
    for (const std::vector<int64_t>& sequence : sequences) {
      auto scores = CachedScores(*lm, sequence, request["cached"]);
      if (!scores.ok()) return Fail(scores.status());
      out["cached"].push_back(*scores);
    }
  } else if (lm != nullptr) {
    auto logits = lm->Logits(sequences);
    if (!logits.ok()) return Fail(logits.status());
    if (request.value("scores_only", false)) {
      for (size_t b = 0; b < sequences.size(); ++b) {
        out["scores"].push_back(Scores(logits->Select(b), sequences[b]));
      }
      std::cout << out.dump() << "\n";
      return 0;
    }
    for (size_t b = 0; b < sequences.size(); ++b) {
      out["logits"].push_back(Rows(logits->Select(b), sequences[b].size()));
      auto state = lm->NewState(static_cast<int64_t>(sequences[b].size()));
      json decoded = json::array();
      for (int64_t id : sequences[b]) {
        attnserve::DecoderState* states[] = {state.get()};
        auto step = lm->Advance(states, {{id}});
        if (!step.ok()) return Fail(step.status());
        decoded.push_back(Rows(*step, 1)[0]);
      }
      out["decoded"].push_back(decoded);
      if (generate == 0) continue;
      auto generator = lm->NewState(static_cast<int64_t>(sequences[b].size()) + generate);
      std::vector<int64_t> feed = sequences[b], generated;
      while (static_cast<int64_t>(generated.size()) < generate) {
        attnserve::DecoderState* states[] = {generator.get()};
        auto step = lm->Advance(states, {feed});
        if (!step.ok()) return Fail(step.status());
        const float* row = step->row(0);
        feed = {std::max_element(row, row + step->dim(-1)) - row};
        generated.push_back(feed[0]);
      }
      out["generated"].push_back(generated);
    }
  } else {
    return Fail(absl::InvalidArgumentError("not an encoder or a causal LM"));
  }
  std::cout << out.dump() << "\n";
  return 0;
}
