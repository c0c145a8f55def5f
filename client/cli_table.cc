#include "client/cli_table.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::client {
namespace {

// Display width: UTF-8 continuation bytes take no column.
size_t Width(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; });
}

}  // namespace

Table::Table(std::vector<std::string> headers, std::vector<bool> right)
    : headers_(std::move(headers)), right_(std::move(right)) {
  right_.resize(headers_.size(), false);
}

void Table::Add(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> widths;
  for (const auto& header : headers_) widths.push_back(Width(header));
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], Width(row[c]));
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string padding(widths[c] - Width(row[c]), ' ');
      if (c > 0) out << "  ";
      if (right_[c]) {
        out << padding << row[c];
      } else if (c + 1 < row.size()) {
        out << row[c] << padding;
      } else {
        out << row[c];  // no trailing spaces
      }
    }
    out << "\n";
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

namespace {

// The length of the valid UTF-8 character at the start of `text`, or 0.
size_t CharLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    low = lead == 0xE0 ? 0xA0 : 0x80;
    high = lead == 0xED ? 0x9F : 0xBF;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    low = lead == 0xF0 ? 0x90 : 0x80;
    high = lead == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

std::string Quoted(const std::string& text) {
  // Escapes control characters and quotes, and bytes that are not UTF-8 as \xNN (a byte
  // tokenizer's token may be part of a character); leaves valid UTF-8 as it is.
  std::string out = "\"";
  absl::string_view rest = text;
  while (!rest.empty()) {
    const size_t length = CharLength(rest);
    if (length == 0) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02X", static_cast<unsigned char>(rest[0])));
      rest.remove_prefix(1);
    } else {
      absl::StrAppend(&out, absl::Utf8SafeCEscape(rest.substr(0, length)));
      rest.remove_prefix(length);
    }
  }
  return out + "\"";
}

}  // namespace attnserve::client
