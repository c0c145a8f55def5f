#include "client/cli_table.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

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

std::string Quoted(const std::string& text) {
  // Escapes control characters and quotes; leaves valid UTF-8 as it is.
  return absl::StrCat("\"", absl::Utf8SafeCEscape(text), "\"");
}

}  // namespace attnserve::client
