// What encoding a text gives: per token its id, its text, the byte range of the input it covers
// ((0, 0) for tokens the post-processor inserted) and whether it is special.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer/normalized_text.h"

namespace attnserve {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  std::vector<ByteRange> offsets;  // in the text of the token's own sequence, for a pair
  std::vector<uint8_t> special;    // 1: inserted by the post-processor
  // The token type (segment) the post-processor gives: 0, and 1 for the second text of a pair
  // where the template says so (BERT's token_type_ids).
  std::vector<uint8_t> type_ids;

  size_t size() const { return ids.size(); }

  void Add(int64_t id, std::string token, ByteRange offset, bool is_special, uint8_t type_id = 0) {
    ids.push_back(id);
    tokens.push_back(std::move(token));
    offsets.push_back(offset);
    special.push_back(is_special ? 1 : 0);
    type_ids.push_back(type_id);
  }
  // Token i of `other`, with `type_id`.
  void AddFrom(Encoding& other, size_t i, uint8_t type_id) {
    Add(other.ids[i], std::move(other.tokens[i]), other.offsets[i], other.special[i] != 0, type_id);
  }
  // Keeps `count` tokens: the last ones when `from_left` (the first ones go), else the first.
  void Truncate(size_t count, bool from_left) {
    if (count >= size()) return;
    const auto keep = [&](auto& values) {
      if (from_left) {
        values.erase(values.begin(), values.end() - static_cast<std::ptrdiff_t>(count));
      } else {
        values.resize(count);
      }
    };
    keep(ids);
    keep(tokens);
    keep(offsets);
    keep(special);
    keep(type_ids);
  }
};

}  // namespace attnserve
