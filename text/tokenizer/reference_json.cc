#include "text/tokenizer/reference_json.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve {
namespace {

// Whether a * 10 + digit would exceed `max` (serde_json's overflow! macro).
template <typename T>
bool Overflows(T a, T digit, T max) {
  return a >= max / 10 && (a > max / 10 || digit > max % 10);
}

// 1e0 to 1e308, each the double nearest to it (as a Rust literal is).
const std::array<double, 309> kPowersOfTen = [] {
  std::array<double, 309> powers{};
  for (size_t i = 0; i < powers.size(); ++i) {
    powers[i] = std::strtod(absl::StrCat("1e", i).c_str(), nullptr);
  }
  return powers;
}();

// serde_json's f64_from_parts: the significand times or over an exact power of ten (a double
// literal), in steps of 1e308 below that.
absl::StatusOr<double> FromParts(bool positive, uint64_t significand, int32_t exponent) {
  double f = static_cast<double>(significand);
  while (true) {
    const int32_t magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude <= 308) {
      const double power = kPowersOfTen[magnitude];
      if (exponent >= 0) {
        f *= power;
        if (std::isinf(f)) return absl::OutOfRangeError("number out of range");
      } else {
        f /= power;
      }
      break;
    }
    if (f == 0.0) break;
    if (exponent >= 0) return absl::OutOfRangeError("number out of range");
    f /= 1e308;
    exponent += 308;
  }
  return positive ? f : -f;
}

// Builds the document from the parser's events, numbers with a fraction or exponent (and
// integers too long for 64 bits) converted as the reference converts them.
class DomBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  nlohmann::json root;
  absl::Status status;

  bool null() override { return Add(nullptr); }
  bool boolean(bool value) override { return Add(value); }
  bool number_integer(number_integer_t value) override { return Add(value); }
  bool number_unsigned(number_unsigned_t value) override { return Add(value); }
  bool number_float(number_float_t, const string_t& text) override {
    absl::StatusOr<double> value = ReferenceDouble(text);
    if (!value.ok()) {
      status = value.status();
      return false;
    }
    return Add(*value);
  }
  bool string(string_t& value) override { return Add(std::move(value)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return Open(nlohmann::json::object()); }
  bool key(string_t& name) override {
    key_ = std::move(name);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(nlohmann::json::array()); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    status = absl::InvalidArgumentError(
        absl::StrCat("not valid JSON at byte ", position, ": ", error.what()));
    return false;
  }

 private:
  nlohmann::json* Insert(nlohmann::json value) {
    if (open_.empty()) {
      root = std::move(value);
      return &root;
    }
    nlohmann::json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    nlohmann::json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }
  bool Add(nlohmann::json value) {
    Insert(std::move(value));
    return true;
  }
  bool Open(nlohmann::json value) {
    open_.push_back(Insert(std::move(value)));
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  std::vector<nlohmann::json*> open_;
  std::string key_;
};

}  // namespace

absl::StatusOr<double> ReferenceDouble(const std::string& number) {
  size_t at = 0;
  const auto digit_at = [&](size_t i) {
    return i < number.size() && number[i] >= '0' && number[i] <= '9';
  };
  const bool positive = !(at < number.size() && number[at] == '-');
  if (!positive) ++at;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t significand = 0;
  int32_t exponent = 0;
  bool overflowed = false;
  // Integer digits: once the significand is full, each further digit is a power of ten.
  for (; digit_at(at); ++at) {
    const uint64_t digit = number[at] - '0';
    if (overflowed || Overflows<uint64_t>(significand, digit, kMax)) {
      overflowed = true;
      ++exponent;
    } else {
      significand = significand * 10 + digit;
    }
  }
  // Fraction digits: once the significand is full, the rest are ignored.
  if (at < number.size() && number[at] == '.') {
    for (++at; digit_at(at); ++at) {
      const uint64_t digit = number[at] - '0';
      if (Overflows<uint64_t>(significand, digit, kMax)) {
        while (digit_at(at)) ++at;
        break;
      }
      significand = significand * 10 + digit;
      --exponent;
    }
  }
  if (at < number.size() && (number[at] == 'e' || number[at] == 'E')) {
    ++at;
    bool positive_exponent = true;
    if (at < number.size() && (number[at] == '+' || number[at] == '-')) {
      positive_exponent = number[at++] == '+';
    }
    int32_t written = 0;
    for (; digit_at(at); ++at) {
      const int32_t digit = number[at] - '0';
      if (Overflows<int32_t>(written, digit, std::numeric_limits<int32_t>::max())) {
        if (significand == 0 || !positive_exponent) return positive ? 0.0 : -0.0;
        return absl::OutOfRangeError(absl::StrCat("number ", number, " out of range"));
      }
      written = written * 10 + digit;
    }
    const int64_t total =
        static_cast<int64_t>(exponent) + (positive_exponent ? written : -int64_t{written});
    exponent = static_cast<int32_t>(std::clamp<int64_t>(total, std::numeric_limits<int32_t>::min(),
                                                        std::numeric_limits<int32_t>::max()));
  }
  absl::StatusOr<double> value = FromParts(positive, significand, exponent);
  if (!value.ok()) return absl::OutOfRangeError(absl::StrCat("number ", number, " out of range"));
  return value;
}

absl::StatusOr<nlohmann::json> ParseReferenceJson(const std::string& text) {
  DomBuilder builder;
  if (!nlohmann::json::sax_parse(text, &builder)) {
    if (builder.status.ok()) return absl::InvalidArgumentError("not valid JSON");
    return builder.status;
  }
  return std::move(builder.root);
}

}  // namespace attnserve
