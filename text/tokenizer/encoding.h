// What encoding a text gives: per token its id, its text, the byte range of the input it covers
// ((0, 0) for tokens the post-processor inserted) and whether it is special.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer/normalized_text.h"

namespace attnserve {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  std::vector<ByteRange> offsets;
  std::vector<uint8_t> special;  // 1: inserted by the post-processor

  void Add(int64_t id, std::string token, ByteRange offset, bool is_special) {
    ids.push_back(id);
    tokens.push_back(std::move(token));
    offsets.push_back(offset);
    special.push_back(is_special ? 1 : 0);
  }
};

}  // namespace attnserve
