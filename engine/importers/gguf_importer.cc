// GGUF's llama and qwen2 architectures, read as hf_llama.cc reads their Hugging Face checkpoints:
// the keys `<arch>.*` of llama.cpp's converter give the config, tensors `blk.N.*` the layers.
#include "engine/importers/gguf_importer.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/gguf/ggml_blocks.h"
#include "engine/importers/field_reader.h"
#include "text/tokenizer/gguf_tokenizer.h"

namespace attnserve {
namespace {

using Json = nlohmann::json;

// llama.cpp's converter permutes the rows of Llama's q and k projections so that each rotary
// pair is adjacent (ggml's rope rotates x[2i], x[2i+1]); the engine rotates pairs half a head
// apart, as transformers does, so the rows go back: row 2i + j of a head was its row j·half + i.
// Qwen2's converter leaves them as they are (its ggml rope is half-split).
Tensor UnpermuteRotaryRows(const Tensor& rows, int64_t heads) {
  const int64_t count = rows.dim(0), width = rows.size() / count, half = count / heads / 2;
  Tensor out(rows.shape());
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = head * 2 * half + 2 * i + j, to = head * 2 * half + j * half + i;
        std::copy_n(rows.data() + from * width, width, out.data() + to * width);
      }
    }
  }
  return out;
}

// Hands the file's tensors to the engine under its names, each checked for its shape now and
// dequantized when taken; remembers which were used, so that a tensor nobody asked for refuses
// the file (a model the config does not describe).
class GgufTensorMap {
 public:
  explicit GgufTensorMap(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {}

  bool Has(const std::string& name) const { return file_->Find(name) != nullptr; }

  // `transform` (if any) rewrites the dequantized tensor (UnpermuteRotaryRows).
  absl::Status Add(const std::string& from, const std::string& to, const Shape& shape,
                   std::function<Tensor(const Tensor&)> transform = nullptr) {
    const GgufTensorInfo* info = file_->Find(from);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file_->path(), ": missing tensor '", from,
                                                     "' of shape ", ShapeToString(shape)));
    }
    if (info->shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_->path(), ": tensor '", from, "' has shape ", ShapeToString(info->shape()),
          ", the metadata implies ", ShapeToString(shape)));
    }
    used_.insert(from);
    ++types_[GgmlTypeName(info->type)];
    out_[to] = LazyTensor{shape,
                          [file = file_, info, transform]() -> absl::StatusOr<Tensor> {
                            ASSIGN_OR_RETURN(Tensor tensor, file->Float32(*info));
                            return transform ? transform(tensor) : tensor;
                          },
                          {}};
    if (!transform && shape.size() == 2) {
      out_[to].rows = [file = file_, info](int64_t first, int64_t count) {
        return file->Float32Rows(*info, first, count);
      };
    }
    out_[to].type = GgmlTypeName(info->type);
    if (shape.size() == 2 && GgmlGrid(info->type).has_value()) {
      // A transform moves rows: the grid's rows move with them.
      out_[to].grid = [file = file_, info, transform]() -> absl::StatusOr<WeightGrid> {
        ASSIGN_OR_RETURN(WeightGrid grid, file->Grid(*info));
        if (transform) {
          grid.scales = transform(grid.scales);
          if (!grid.minimums.empty()) grid.minimums = transform(grid.minimums);
        }
        return grid;
      };
    }
    return absl::OkStatus();
  }

  absl::Status AddZeros(const std::string& to, const Shape& shape) {
    out_[to] =
        LazyTensor{shape, [shape]() -> absl::StatusOr<Tensor> { return Tensor::Zeros(shape); }, {}};
    return absl::OkStatus();
  }

  // Whether a matrix (a layer's weight) is block-quantized in the file.
  // 0 when no matrix is block-quantized; 4 when most of those that are have 4 bits or fewer a
  // weight (Q4_0, Q4_1, Q4_K, Q3_K, Q2_K); else 8.
  int LinearQuantizedBits() const {
    int four_bits = 0, more_bits = 0;
    for (const std::string& name : used_) {
      const GgufTensorInfo* info = file_->Find(name);
      if (info->dims.size() != 2 || !IsQuantized(info->type)) continue;
      switch (info->type) {
        case GgmlType::kQ4_0:
        case GgmlType::kQ4_1:
        case GgmlType::kQ4_K:
        case GgmlType::kQ3_K:
        case GgmlType::kQ2_K:
          ++four_bits;
          break;
        default:
          ++more_bits;
      }
    }
    return four_bits + more_bits == 0 ? 0 : four_bits > more_bits ? 4 : 8;
  }

  absl::Status CheckAllUsed() const {
    for (const GgufTensorInfo& tensor : file_->tensors()) {
      if (!used_.count(tensor.name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_->path(), ": unexpected tensor '", tensor.name, "' (not used by the metadata)"));
      }
    }
    return absl::OkStatus();
  }

  // "210 Q4_1, 61 F32, 1 Q8_0": the most frequent first.
  std::string TypeCounts() const {
    std::vector<std::pair<int, std::string>> counts;
    for (const auto& [type, count] : types_) counts.push_back({-count, type});
    std::sort(counts.begin(), counts.end());
    std::vector<std::string> parts;
    for (const auto& [count, type] : counts) parts.push_back(absl::StrCat(-count, " ", type));
    return absl::StrJoin(parts, ", ");
  }

  std::map<std::string, LazyTensor> Release() { return std::move(out_); }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::set<std::string> used_;
  std::map<std::string, int> types_;
  std::map<std::string, LazyTensor> out_;
};

// `<arch>.rope.*`: no scaling or linear scaling (and the older rope.scale_linear); yarn and
// Llama 3's frequency factors (a rope_freqs tensor) are refused.
void ReadRopeScaling(FieldReader& read, const std::string& arch, ModelConfig& c) {
  const std::string type = read.String(arch + ".rope.scaling.type", "none");
  double factor = read.Real(arch + ".rope.scale_linear", 1.0, 1e6, 1.0);
  if (type == "linear") {
    factor = read.Real(arch + ".rope.scaling.factor", 1.0, 1e6, 1.0);
  } else if (type != "none") {
    read.Fail(arch + ".rope.scaling.type",
              absl::StrCat("is \"", type, "\": only none and linear are supported"));
  }
  if (factor != 1.0) {
    c.rotary.scaling = RopeScaling::kLinear;
    c.rotary.factor = factor;
  }
}

absl::StatusOr<ChatTemplates> ReadChatTemplates(const GgufFile& file) {
  const Json& metadata = file.metadata();
  ChatTemplates templates;
  auto add = [&](const std::string& name, const std::string& key) -> absl::Status {
    const auto it = metadata.find(key);
    if (it == metadata.end()) return absl::OkStatus();
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": key ", key, " must be a string"));
    }
    ASSIGN_OR_RETURN(ChatTemplate parsed,
                     ChatTemplate::Parse(it->get<std::string>(), file.path() + " " + key));
    templates.by_name.insert_or_assign(name, std::move(parsed));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(add("default", "tokenizer.chat_template"));
  // Named templates (tool_use, rag): their names listed, each under its own key.
  if (const auto names = metadata.find("tokenizer.chat_templates"); names != metadata.end()) {
    if (!names->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": key tokenizer.chat_templates must be a list of names"));
    }
    for (const Json& name : *names) {
      if (!name.is_string() || name.get<std::string>().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.path(), ": key tokenizer.chat_templates must be a list of names"));
      }
      RETURN_IF_ERROR(
          add(name.get<std::string>(), "tokenizer.chat_template." + name.get<std::string>()));
    }
  }
  // The template's bos_token and eos_token: the tokens the file names.
  const auto tokens = metadata.find("tokenizer.ggml.tokens");
  auto token = [&](const std::string& key) -> std::string {
    const auto id = metadata.find(key);
    if (tokens == metadata.end() || !tokens->is_array() || id == metadata.end() ||
        !id->is_number_unsigned() || id->get<uint64_t>() >= tokens->size() ||
        !(*tokens)[id->get<uint64_t>()].is_string()) {
      return "";
    }
    return (*tokens)[id->get<uint64_t>()].get<std::string>();
  };
  templates.bos_token = token("tokenizer.ggml.bos_token_id");
  templates.eos_token = token("tokenizer.ggml.eos_token_id");
  return templates;
}

// The ids that end generation: the file's end-of-sequence token and, where it names them, its
// end-of-turn and end-of-message tokens (Llama 3's <|eot_id|>, <|eom_id|>).
absl::Status ReadEndOfText(FieldReader& read, int64_t vocab_size, ModelConfig& c) {
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = read.Int(key, -1, vocab_size - 1, -1);
    std::vector<int64_t>& ids = c.tokenizer.end_of_text_ids;
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return read.status();
}

}  // namespace

absl::StatusOr<std::string> GgufFileOf(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(model_path, error)) {
    return fs::path(model_path).extension() == ".gguf" ? model_path : "";
  }
  if (!fs::is_directory(model_path, error) || fs::exists(model_path + "/config.json", error)) {
    return std::string();
  }
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(model_path, error)) {
    if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
  }
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    return absl::InvalidArgumentError(absl::StrCat(model_path, ": holds several GGUF files (",
                                                   absl::StrJoin(found, ", "),
                                                   "); a model directory holds one"));
  }
  return found.empty() ? "" : found.front();
}

absl::StatusOr<GgufImport> ImportGguf(const std::string& path) {
  ASSIGN_OR_RETURN(GgufFile opened, GgufFile::Open(path));
  auto file = std::make_shared<const GgufFile>(std::move(opened));
  FieldReader read(file->metadata(), path);
  const std::string arch = read.String("general.architecture", "");
  RETURN_IF_ERROR(read.status());
  if (arch != "llama" && arch != "qwen2") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": general.architecture \"", arch,
                     "\" is not supported; supported: llama (Llama, Mistral, SmolLM, "
                     "TinyLlama), qwen2"));
  }
  GgufImport model;
  ModelConfig& c = model.config;
  c.architecture = "causal_lm";
  c.model_dim = read.Int(arch + ".embedding_length", 1, 1 << 16, std::nullopt);
  c.num_layers = read.Int(arch + ".block_count", 1, 1024, std::nullopt);
  c.num_heads = read.Int(arch + ".attention.head_count", 1, 1024, std::nullopt);
  c.num_kv_heads = read.Int(arch + ".attention.head_count_kv", 1, 1024, c.num_heads);
  c.ffn_dim = read.Int(arch + ".feed_forward_length", 1, 1 << 20, std::nullopt);
  c.max_positions = read.Int(arch + ".context_length", 1, 1 << 24, std::nullopt);
  c.norm_eps =
      static_cast<float>(read.Real(arch + ".attention.layer_norm_rms_epsilon", 0, 1, 1e-6));
  c.rotary.theta = read.Real(arch + ".rope.freq_base", 1.0, 1e12, 10000.0);
  c.attention_window = read.Int(arch + ".attention.sliding_window", 0, 1 << 24, 0);
  if (read.Int(arch + ".expert_count", 0, 1 << 16, 0) > 0) {
    read.Fail(arch + ".expert_count", "is set: mixtures of experts are not supported");
  }
  RETURN_IF_ERROR(read.status());
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    read.Fail(
        arch + ".attention.head_count_kv",
        absl::StrCat("is ", c.num_kv_heads, ", which does not divide the ", c.num_heads, " heads"));
  }
  c.head_dim_qk = read.Int(arch + ".attention.key_length", 1, 1 << 16, c.model_dim / c.num_heads);
  c.head_dim_v = read.Int(arch + ".attention.value_length", 1, 1 << 16, c.head_dim_qk);
  if (c.head_dim_v != c.head_dim_qk) {
    read.Fail(arch + ".attention.value_length",
              absl::StrCat("is ", c.head_dim_v, ", not the key length ", c.head_dim_qk));
  }
  c.rotary.dims = read.Int(arch + ".rope.dimension_count", 1, 1 << 16, c.head_dim_qk);
  if (c.rotary.dims != c.head_dim_qk) {
    read.Fail(arch + ".rope.dimension_count",
              absl::StrCat("is ", c.rotary.dims, ": rotary positions over part of a head (",
                           c.head_dim_qk, " dimensions) are not supported"));
  }
  ReadRopeScaling(read, arch, c);
  RETURN_IF_ERROR(read.status());
  if (file->Find("rope_freqs.weight") != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": tensor 'rope_freqs.weight' (Llama 3's rotary frequency factors) is not "
                     "supported"));
  }
  const GgufTensorInfo* embedding = file->Find("token_embd.weight");
  if (embedding == nullptr || embedding->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor 'token_embd.weight' is missing or not a matrix"));
  }
  c.vocab_size = embedding->dims[1];
  c.activation = Activation::kSilu;
  c.positions = PositionKind::kRope;
  c.norm = NormKind::kRmsNorm;
  c.pre_norm = true;
  c.gated_ffn = true;
  c.tie_embeddings = file->Find("output.weight") == nullptr;
  // Qwen2's q, k and v biases (and Llama's, where attention_bias was set): the engine's bias
  // setting covers every projection of a layer, the others get zeros.
  c.bias = false;
  for (const GgufTensorInfo& tensor : file->tensors()) {
    if (tensor.name.ends_with(".bias")) c.bias = true;
  }

  GgufTensorMap tensors(file);
  const int64_t d = c.model_dim, f = c.ffn_dim;
  const int64_t q = c.num_heads * c.head_dim_qk, kv = c.num_kv_heads * c.head_dim_qk;
  const bool permuted = arch == "llama";
  auto unpermute = [permuted](int64_t heads) -> std::function<Tensor(const Tensor&)> {
    if (!permuted) return nullptr;
    return [heads](const Tensor& t) { return UnpermuteRotaryRows(t, heads); };
  };
  // A projection and, where the engine expects one, its bias: from the file or zero.
  auto linear = [&](const std::string& from, const std::string& to, int64_t outs, int64_t in,
                    std::function<Tensor(const Tensor&)> transform = nullptr) -> absl::Status {
    RETURN_IF_ERROR(tensors.Add(from + ".weight", to + ".weight", {outs, in}, transform));
    if (!c.bias) return absl::OkStatus();
    if (!tensors.Has(from + ".bias")) return tensors.AddZeros(to + ".bias", {outs});
    return tensors.Add(from + ".bias", to + ".bias", {outs}, transform);
  };
  for (const absl::Status& status :
       {tensors.Add("token_embd.weight", "embed_tokens.weight", {c.vocab_size, d}),
        tensors.Add("output_norm.weight", "final_norm.weight", {d}),
        c.tie_embeddings ? absl::OkStatus()
                         : tensors.Add("output.weight", "lm_head.weight", {c.vocab_size, d})}) {
    RETURN_IF_ERROR(status);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = absl::StrCat("blk.", i, "."), to = absl::StrCat("layers.", i, ".");
    for (const absl::Status& status :
         {tensors.Add(from + "attn_norm.weight", to + "self_attn_norm.weight", {d}),
          linear(from + "attn_q", to + "self_attn.q_proj", q, d, unpermute(c.num_heads)),
          linear(from + "attn_k", to + "self_attn.k_proj", kv, d, unpermute(c.num_kv_heads)),
          linear(from + "attn_v", to + "self_attn.v_proj", kv, d),
          linear(from + "attn_output", to + "self_attn.out_proj", d, q),
          tensors.Add(from + "ffn_norm.weight", to + "ffn_norm.weight", {d}),
          linear(from + "ffn_gate", to + "ffn.gate", f, d),
          linear(from + "ffn_up", to + "ffn.fc1", f, d),
          linear(from + "ffn_down", to + "ffn.fc2", d, f)}) {
      RETURN_IF_ERROR(status);
    }
  }
  RETURN_IF_ERROR(tensors.CheckAllUsed());
  model.quantized_bits = tensors.LinearQuantizedBits();
  model.tensor_types = tensors.TypeCounts();
  model.tensors = tensors.Release();

  ASSIGN_OR_RETURN(model.tokenizer_json, TokenizerJsonFromGguf(file->metadata(), path));
  RETURN_IF_ERROR(ReadEndOfText(read, c.vocab_size, c));
  ASSIGN_OR_RETURN(model.chat_templates, ReadChatTemplates(*file));
  c.tokenizer.type = "huggingface";
  return model;
}

}  // namespace attnserve
