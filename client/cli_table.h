// Plain-text tables for the terminal: columns padded to their widest cell, numbers right-aligned.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace attnserve::client {

class Table {
 public:
  // `right` marks the columns to right-align (numbers).
  Table(std::vector<std::string> headers, std::vector<bool> right);
  void Add(std::vector<std::string> cells);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// A token's text as a quoted, escaped literal, so spaces and newlines are visible.
std::string Quoted(const std::string& text);

}  // namespace attnserve::client
