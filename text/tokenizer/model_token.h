// A token as a tokenizer model produces it: its id, its text (the vocabulary's key) and the byte
// range of the word it covers.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer/normalized_text.h"

namespace attnserve {

struct ModelToken {
  int64_t id = 0;
  std::string value;
  ByteRange range;
};

}  // namespace attnserve
