#include "client/cli_arguments.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace attnserve::client {
namespace {

absl::Status Check(const FlagSpec& spec, const std::string& value) {
  int64_t integer;
  double number;
  switch (spec.kind) {
    case FlagKind::kInteger:
      if (!absl::SimpleAtoi(value, &integer)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", spec.name, " wants an integer, not \"", value, "\""));
      }
      break;
    case FlagKind::kNumber:
      if (!absl::SimpleAtod(value, &number)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", spec.name, " wants a number, not \"", value, "\""));
      }
      break;
    case FlagKind::kSwitch:
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("--", spec.name, " is a switch: true or false, not \"", value, "\""));
      }
      break;
    case FlagKind::kString:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Arguments> Arguments::Parse(int argc, const char* const* argv,
                                           const std::vector<FlagSpec>& specs) {
  Arguments arguments;
  std::map<std::string, const FlagSpec*> by_name;
  for (const FlagSpec& spec : specs) {
    by_name[spec.name] = &spec;
    arguments.values_[spec.name] = spec.default_value;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.size() < 3 || argument.compare(0, 2, "--") != 0) {
      arguments.positional_.push_back(argument);
      continue;
    }
    const size_t equals = argument.find('=');
    const std::string name =
        argument.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    auto spec = by_name.find(name);
    if (spec == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string value;
    if (equals != std::string::npos) {
      value = argument.substr(equals + 1);
    } else if (spec->second->kind == FlagKind::kSwitch) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    if (auto status = Check(*spec->second, value); !status.ok()) return status;
    arguments.values_[name] = value;
    arguments.given_.insert(name);
  }
  return arguments;
}

int64_t Arguments::integer(const std::string& name) const {
  int64_t value = 0;
  (void)absl::SimpleAtoi(values_.at(name), &value);  // checked by Parse (defaults by the author)
  return value;
}

double Arguments::number(const std::string& name) const {
  double value = 0;
  (void)absl::SimpleAtod(values_.at(name), &value);
  return value;
}

std::string FlagHelp(const std::vector<FlagSpec>& specs) {
  std::string help;
  for (const FlagSpec& spec : specs) {
    absl::StrAppend(&help, "  --", spec.name, "  ", spec.help);
    if (!spec.default_value.empty() && spec.kind != FlagKind::kSwitch) {
      absl::StrAppend(&help, " (default: ", spec.default_value, ")");
    }
    absl::StrAppend(&help, "\n");
  }
  return help;
}

}  // namespace attnserve::client
