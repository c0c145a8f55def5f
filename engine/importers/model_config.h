// config.json of a model directory (docs/model-format.md): one flat object of settings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_config.h"
#include "engine/matmul.h"

namespace attnserve {

enum class NormKind { kLayerNorm, kRmsNorm, kScaleNorm };
enum class PositionKind { kSinusoidal, kLearned, kAlibi, kRope, kNone };
enum class Pooling { kMean, kFirst, kLast, kPma, kNone, kCls };

struct TokenizerConfig {
  std::string type;                               // "byte" or "huggingface"
  std::map<std::string, int64_t> special_tokens;  // byte: text -> id (>= 256)
  std::string file;                               // huggingface: tokenizer.json in the directory
  std::string end_of_text;  // the token that ends generation; "" for <|endoftext|> if any
  // A Hugging Face config's eos_token_id (one or several, as Llama 3's instruct models list
  // <|end_of_text|>, <|eom_id|> and <|eot_id|>), used before end_of_text.
  std::vector<int64_t> end_of_text_ids;
};

// A sequence classification head (a cross-encoder's, a classifier's): one vector per sequence
// (its first or last token's state, or their mean), through an optional dense layer and
// activation (BERT's pooler: tanh; RoBERTa's classifier.dense: tanh; DistilBERT's
// pre_classifier: relu), to num_labels logits. Tensors classifier.dense.{weight,bias} and
// classifier.out.{weight,bias} (the bias optional).
struct ClassifierConfig {
  enum class DenseActivation { kNone, kTanh, kRelu, kGelu };
  // What turns logits into the scores a caller gets unless it asks for raw ones.
  enum class ScoreActivation { kNone, kSigmoid, kSoftmax };

  int64_t num_labels = 0;  // 0: the model has no classification head
  Pooling pooling = Pooling::kFirst;
  bool dense = false;
  DenseActivation dense_activation = DenseActivation::kTanh;
  bool out_bias = true;
  std::vector<std::string> labels;  // the name of each logit (id2label); may be empty
  ScoreActivation score_activation = ScoreActivation::kSoftmax;
};

struct ModelConfig {
  static constexpr int kFormatVersion = 1;

  // causal_lm | encoder | next_word | seq2seq | perceiver_io | set_transformer
  std::string architecture;
  int64_t vocab_size = 0;  // > 0: token ids in; else feature vectors of input_dim
  int64_t input_dim = 0;
  int64_t model_dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // grouped-query attention: key/value heads; 0 = num_heads
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  int64_t ffn_dim = 0;
  Activation activation = Activation::kGeluErf;
  bool gated_ffn = false;  // fc2(activation(gate(x)) ⊙ fc1(x)): SwiGLU with silu, GEGLU with gelu
  AttentionKind attention = AttentionKind::kSoftmax;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  bool bias = true;
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  bool pre_norm = true;
  // GPT-2's scale_attn_by_inverse_layer_idx: layer l's attention scores are also divided by l + 1.
  bool scale_scores_by_inverse_layer = false;
  bool embed_norm = false;  // a norm over the input embedding (BERT's), before the first block
  PositionKind positions = PositionKind::kSinusoidal;
  int64_t max_positions = 0;
  RotaryConfig rotary;               // positions "rope"
  int64_t attention_window = 0;      // causal self-attention's sliding window (Mistral); 0 = none
  bool tie_embeddings = false;       // causal_lm, seq2seq
  Pooling pooling = Pooling::kMean;  // encoder (mean|first|last|pma|none), next_word (cls|pma)
  bool normalize = false;            // encoder
  // sentence-transformers' named prompts (config_sentence_transformers.json's "prompts", e.g.
  // "query" -> "query: "), put before a text whose request names one; and the one every text
  // gets unless a request names another (default_prompt_name; empty: none).
  std::map<std::string, std::string> prompts;
  std::string default_prompt_name;
  // encoder: rows of embed_token_types, each token's added to it (BERT's token_type_ids: 1 for
  // the second text of a pair); 0: none.
  int64_t token_types = 0;
  ClassifierConfig classifier;     // encoder
  int64_t num_decoder_layers = 0;  // seq2seq
  int64_t num_latents = 0;         // perceiver_io
  int64_t num_outputs = 0;         // perceiver_io: output queries
  int64_t output_dim = 0;          // perceiver_io, set_transformer
  int64_t num_inducing = 0;        // set_transformer: ISAB inducing points; 0 = SAB blocks
  int64_t num_seeds = 0;           // set_transformer: PMA seeds
  TokenizerConfig tokenizer;
  WeightFormat weights;  // a load option (LoadOptions), not read from config.json

  bool token_inputs() const { return vocab_size > 0; }
};

// Parses and validates config.json text; errors name `path` and the field.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& text, const std::string& path);

}  // namespace attnserve
