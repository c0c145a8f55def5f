#include "text/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/tokenizer/unicode.h"

namespace attnserve {
namespace {

// The char ending text[..end], and the one starting text[begin..].
char32_t CharBefore(const std::string& text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return unicode::DecodeUtf8(std::string_view(text).substr(start, end - start)).code_point;
}
char32_t CharAt(const std::string& text, size_t begin) {
  return unicode::DecodeUtf8(std::string_view(text).substr(begin)).code_point;
}

}  // namespace

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(
    const nlohmann::json& added_tokens, const std::function<int64_t(const std::string&)>& model_id,
    int64_t model_size, const std::function<std::string(const std::string&)>& normalize) {
  AddedVocabulary vocabulary;
  if (added_tokens.is_null()) return vocabulary;
  if (!added_tokens.is_array()) {
    return absl::InvalidArgumentError("added_tokens: an array is required");
  }
  std::vector<AddedToken> special, others;
  std::map<std::string, int64_t> ids;
  int64_t max_id = -1;
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const nlohmann::json& entry = added_tokens[i];
    AddedToken token;
    const auto read_flag = [&](const char* name, bool& flag) -> absl::Status {
      if (!entry.contains(name) || !entry[name].is_boolean()) {
        return absl::InvalidArgumentError(
            absl::StrCat("added_tokens[", i, "].", name, ": a boolean is required"));
      }
      flag = entry[name].get<bool>();
      return absl::OkStatus();
    };
    if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens[", i, "].content: a string is required"));
    }
    token.content = entry["content"].get<std::string>();
    for (auto [name, flag] : {std::pair{"special", &token.special},
                              {"single_word", &token.single_word},
                              {"lstrip", &token.lstrip},
                              {"rstrip", &token.rstrip},
                              {"normalized", &token.normalized}}) {
      RETURN_IF_ERROR(read_flag(name, *flag));
    }
    if (token.content.empty()) continue;
    auto& list = token.special ? special : others;
    const auto same = [&](const AddedToken& t) {
      return t.content == token.content && t.special == token.special &&
             t.single_word == token.single_word && t.lstrip == token.lstrip &&
             t.rstrip == token.rstrip && t.normalized == token.normalized;
    };
    if (std::any_of(list.begin(), list.end(), same)) continue;
    if (auto it = ids.find(token.content); it != ids.end()) {
      token.id = it->second;
    } else if (const int64_t id = model_id(token.content); id >= 0) {
      token.id = id;
    } else if (max_id < 0) {
      token.id = model_size;
    } else {
      token.id = max_id >= model_size || model_size == 0 ? max_id + 1 : model_size;
    }
    if (!ids.count(token.content)) {
      ids[token.content] = token.id;
      max_id = std::max(max_id, token.id);
    }
    list.push_back(token);
  }
  vocabulary.tokens_ = std::move(special);
  vocabulary.tokens_.insert(vocabulary.tokens_.end(), others.begin(), others.end());
  for (size_t i = 0; i < vocabulary.tokens_.size(); ++i) {
    vocabulary.by_id_.emplace(vocabulary.tokens_[i].id, i);
    const AddedToken& token = vocabulary.tokens_[i];
    if (token.special) vocabulary.special_.insert(token.content);
    // The first of equal patterns wins, as in the reference's automaton.
    vocabulary.tries_[token.normalized].Insert(
        token.normalized ? normalize(token.content) : token.content, static_cast<int32_t>(i));
  }
  return vocabulary;
}

void AddedVocabulary::Trie::Insert(const std::string& pattern, int32_t index) {
  if (pattern.empty()) return;
  starts[static_cast<uint8_t>(pattern[0])] = true;
  int32_t node = 0;
  for (char c : pattern) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    auto [it, inserted] = children.try_emplace(key, static_cast<int32_t>(token.size()));
    if (inserted) token.push_back(-1);
    node = it->second;
  }
  if (token[node] < 0) token[node] = index;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::Longest(const std::string& text,
                                                          size_t at) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    auto it = children.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    if (token[node] >= 0) best = {token[node], i + 1 - at};
  }
  return best;
}

const AddedToken* AddedVocabulary::ById(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::vector<AddedVocabulary::Match> AddedVocabulary::Find(const std::string& text,
                                                          bool normalized) const {
  std::vector<Match> matches;
  size_t previous = 0;
  const Trie& trie = tries_[normalized];
  for (size_t at = 0; at < text.size();) {
    if (!trie.starts[static_cast<uint8_t>(text[at])]) {
      ++at;
      continue;
    }
    const auto [best, length] = trie.Longest(text, at);
    if (best < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[best];
    size_t start = at, stop = at + length;
    at = stop;  // the next search starts after this match, whatever becomes of it
    if (token.single_word && ((start > 0 && unicode::IsWordChar(CharBefore(text, start))) ||
                              (stop < text.size() && unicode::IsWordChar(CharAt(text, stop))))) {
      continue;
    }
    if (token.lstrip) {
      while (start > previous && unicode::IsWhitespace(CharBefore(text, start))) {
        size_t before = start - 1;
        while (before > 0 && (static_cast<uint8_t>(text[before]) & 0xC0) == 0x80) --before;
        start = before;
      }
    }
    if (token.rstrip) {
      while (stop < text.size() && unicode::IsWhitespace(CharAt(text, stop))) {
        stop += unicode::DecodeUtf8(std::string_view(text).substr(stop)).bytes;
      }
    }
    if (previous < start) matches.push_back({{previous, start}, -1});
    matches.push_back({{start, stop}, best});
    previous = stop;
  }
  if (previous < text.size() || text.empty()) matches.push_back({{previous, text.size()}, -1});
  return matches;
}

}  // namespace attnserve
