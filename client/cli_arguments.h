// Command-line parsing for attn and attn-bench: `--name=value`, `--name value` and bare
// `--name` for switches, anywhere among the positional arguments. Values are checked against
// their kind while parsing, so a malformed one is a usage error that names the flag, and the
// getters cannot fail.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::client {

enum class FlagKind { kString, kInteger, kNumber, kSwitch };

struct FlagSpec {
  std::string name;
  FlagKind kind;
  std::string default_value;
  std::string help;
};

class Arguments {
 public:
  static absl::StatusOr<Arguments> Parse(int argc, const char* const* argv,
                                         const std::vector<FlagSpec>& specs);

  const std::vector<std::string>& positional() const { return positional_; }
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  const std::string& text(const std::string& name) const { return values_.at(name); }
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool on(const std::string& name) const { return values_.at(name) == "true"; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> given_;
  std::vector<std::string> positional_;
};

// "  --name  help (default: value)" lines for --help.
std::string FlagHelp(const std::vector<FlagSpec>& specs);

}  // namespace attnserve::client
