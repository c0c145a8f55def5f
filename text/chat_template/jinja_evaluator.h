// Renders a parsed template: statements write text, expressions compute values with jinja2's
// (Python's) semantics, all within the caller's budgets of steps, output bytes and nesting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "text/chat_template/jinja_ast.h"
#include "text/chat_template/jinja_value.h"

namespace attnserve::jinja {

struct RenderBudget {
  int64_t max_output_bytes = 1 << 20;
  int64_t max_steps = 10'000'000;
  int max_depth = 64;
};

// A level of variables: the render's context at the root, then one per loop iteration, macro
// call, with block or generation block. Lookups walk up; assignments stay in this level (which
// is why templates need namespace() to carry values out of loops, as in jinja2).
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
  // Drops the variables: a macro keeps the scope it was defined in, which holds the macro, so
  // the render breaks these cycles when it ends.
  void Clear() { variables_.clear(); }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> variables_;
};

// Renders `root` (a kBody) with the variables of `context` (a dict). Errors are
// "<origin>:<line>: <what>": InvalidArgument for what the template does wrong (raise_exception
// carries its message), ResourceExhausted when a budget runs out (naming it).
absl::StatusOr<std::string> Render(const Node& root, std::string_view origin, const Value& context,
                                   absl::Time now, const RenderBudget& budget);

}  // namespace attnserve::jinja
