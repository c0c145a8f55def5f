#include "text/chat_template/jinja_evaluator.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_filters.h"
#include "text/chat_template/jinja_format.h"
#include "text/chat_template/jinja_methods.h"
#include "text/chat_template/jinja_parser.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
    for (const auto& [variable, value] : scope->variables_) {
      if (variable == name) return &value;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [variable, current] : variables_) {
    if (variable == name) {
      current = std::move(value);
      return;
    }
  }
  variables_.emplace_back(std::string(name), std::move(value));
}

namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

absl::Status UndefinedError(const Value& undefined) {
  const std::string& message = undefined.undefined_message();
  return absl::InvalidArgumentError(message.empty() ? "'undefined' is undefined" : message);
}

absl::Status OperandError(std::string_view op, const Value& left, const Value& right) {
  return absl::InvalidArgumentError(StrCat("unsupported operand type(s) for ", op, ": '",
                                           TypeName(left), "' and '", TypeName(right), "'"));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError("integer overflow (outside the 64-bit range)");
}

// Python's floor division and modulo on ints (rounding toward negative infinity).
int64_t FloorDivide(int64_t a, int64_t b) {
  const int64_t quotient = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? quotient - 1 : quotient;
}
int64_t FloorModulo(int64_t a, int64_t b) {
  const int64_t remainder = a % b;
  return (remainder != 0 && ((remainder < 0) != (b < 0))) ? remainder + b : remainder;
}
double FloatModulo(double a, double b) {
  double remainder = std::fmod(a, b);
  if (remainder != 0) {
    if ((remainder < 0) != (b < 0)) remainder += b;
  } else {
    remainder = std::copysign(0.0, b);
  }
  return remainder;
}

// CPython's float floor division (float_floor_div), exact at the edges.
double FloatFloorDivide(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1.0;
  return floor_div;
}

class Evaluator : public FilterHost {
 public:
  Evaluator(std::string_view origin, absl::Time now, const RenderBudget& budget)
      : origin_(origin), now_(now), budget_(budget) {}

  // Macros hold their defining scope and namespaces may hold themselves: clearing every scope
  // and namespace still alive frees those cycles.
  ~Evaluator() {
    scope_.reset();
    for (const std::weak_ptr<Scope>& weak : scopes_) {
      if (std::shared_ptr<Scope> scope = weak.lock()) scope->Clear();
    }
    for (const std::weak_ptr<ObjectData>& weak : namespaces_) {
      if (std::shared_ptr<ObjectData> object = weak.lock()) object->attributes.clear();
    }
  }

  absl::StatusOr<std::string> Run(const Node& root, const Value& context) {
    scope_ = NewScope(nullptr);
    if (context.is_dict()) {
      for (const auto& [key, value] : context.dict().entries) {
        if (key.is_string()) scope_->Set(key.string_value(), value);
      }
    }
    std::string output;
    out_ = &output;
    ASSIGN_OR_RETURN(Flow flow, Execute(root));
    (void)flow;
    return output;
  }

  // FilterHost.
  absl::Status Charge(int64_t steps) override {
    steps_ += steps;
    if (steps_ > budget_.max_steps) {
      return absl::ResourceExhaustedError(
          StrCat("template evaluation exceeded max_steps (", budget_.max_steps, " steps)"));
    }
    return absl::OkStatus();
  }
  absl::Status CheckSize(size_t bytes) override {
    if (bytes > static_cast<size_t>(budget_.max_output_bytes)) {
      return absl::ResourceExhaustedError(StrCat("a string of ", bytes,
                                                 " bytes exceeds max_output_bytes (",
                                                 budget_.max_output_bytes, ")"));
    }
    return absl::OkStatus();
  }
  size_t MaxBytes() const override { return static_cast<size_t>(budget_.max_output_bytes); }
  absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name) override {
    return jinja::GetAttribute(object, name);
  }
  absl::StatusOr<Value> GetItem(const Value& object, const Value& key) override {
    return jinja::GetItem(object, key);
  }
  absl::StatusOr<Value> Filter(std::string_view name, const Value& operand,
                               const CallArgs& args) override {
    DepthGuard guard(*this);
    RETURN_IF_ERROR(guard.Check());
    RETURN_IF_ERROR(Charge(1));
    return ApplyFilter(*this, name, operand, args);
  }
  absl::StatusOr<bool> Test(std::string_view name, const Value& operand,
                            const CallArgs& args) override {
    RETURN_IF_ERROR(Charge(1));
    return ApplyTest(*this, name, operand, args);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  class DepthGuard {
   public:
    explicit DepthGuard(Evaluator& evaluator) : evaluator_(evaluator) { ++evaluator_.depth_; }
    ~DepthGuard() { --evaluator_.depth_; }
    absl::Status Check() const {
      if (evaluator_.depth_ > evaluator_.budget_.max_depth) {
        return absl::ResourceExhaustedError(
            StrCat("template evaluation nested deeper than max_depth (",
                   evaluator_.budget_.max_depth, ")"));
      }
      return absl::OkStatus();
    }

   private:
    Evaluator& evaluator_;
  };

  std::shared_ptr<Scope> NewScope(std::shared_ptr<Scope> parent) {
    auto scope = std::make_shared<Scope>(std::move(parent));
    scopes_.push_back(scope);
    return scope;
  }

  // Prefixes the first error with the place it happened; outer nodes pass it on unchanged.
  absl::Status Locate(absl::Status status, const Node& node) {
    if (status.ok() || located_) return status;
    located_ = true;
    return absl::Status(status.code(), StrCat(origin_, ":", node.line, ": ", status.message()));
  }

  absl::Status Append(std::string_view text) {
    out_->append(text);
    if (out_->size() > static_cast<size_t>(budget_.max_output_bytes)) {
      return absl::ResourceExhaustedError(
          StrCat("rendering exceeds max_output_bytes (", budget_.max_output_bytes, ")"));
    }
    return Charge(1 + static_cast<int64_t>(text.size() / 64));
  }

  // Renders `body` into a string of its own (block set, filter block, macro call).
  absl::StatusOr<std::pair<std::string, Flow>> Capture(const Node& body) {
    std::string captured;
    std::string* outer = std::exchange(out_, &captured);
    absl::StatusOr<Flow> flow = Execute(body);
    out_ = outer;
    if (!flow.ok()) return flow.status();
    return std::make_pair(std::move(captured), *flow);
  }

  // ---- Statements.

  absl::StatusOr<Flow> Execute(const Node& node) {
    DepthGuard guard(*this);
    if (absl::Status status = guard.Check(); !status.ok()) return Locate(status, node);
    absl::StatusOr<Flow> flow = ExecuteNode(node);
    if (!flow.ok()) return Locate(flow.status(), node);
    return flow;
  }

  absl::StatusOr<Flow> ExecuteBody(const Node& body) {
    for (const auto& statement : body.children) {
      ASSIGN_OR_RETURN(Flow flow, Execute(*statement));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecuteNode(const Node& node) {
    switch (node.kind) {
      case NodeKind::kBody:
        return ExecuteBody(node);
      case NodeKind::kOutput:
        RETURN_IF_ERROR(Append(node.name));
        return Flow::kNormal;
      case NodeKind::kPrint: {
        ASSIGN_OR_RETURN(Value value, Eval(*node.children[0]));
        RETURN_IF_ERROR(Append(ToStr(value)));
        return Flow::kNormal;
      }
      case NodeKind::kIf: {
        const auto& children = node.children;
        size_t i = 0;
        for (; i + 1 < children.size(); i += 2) {
          ASSIGN_OR_RETURN(Value condition, Eval(*children[i]));
          if (Truthy(condition)) return Execute(*children[i + 1]);
        }
        if (i < children.size()) return Execute(*children[i]);
        return Flow::kNormal;
      }
      case NodeKind::kFor:
        return ExecuteFor(node);
      case NodeKind::kSet: {
        ASSIGN_OR_RETURN(Value value, Eval(*node.children[0]));
        RETURN_IF_ERROR(Assign(node, std::move(value)));
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        ASSIGN_OR_RETURN(auto captured, Capture(*node.children[0]));
        Value value = Value::String(std::move(captured.first));
        if (node.children[1]) {
          ASSIGN_OR_RETURN(value, EvalFilter(*node.children[1], &value));
        }
        RETURN_IF_ERROR(Assign(node, std::move(value)));
        return captured.second;
      }
      case NodeKind::kMacro: {
        auto macro = std::make_shared<CallableData>();
        macro->type = CallableData::Type::kMacro;
        macro->name = node.name;
        macro->macro = &node;
        macro->macro_scope = scope_;
        scope_->Set(node.name, Value::Callable(std::move(macro)));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        ASSIGN_OR_RETURN(auto captured, Capture(*node.children[1]));
        const Value body = Value::String(std::move(captured.first));
        ASSIGN_OR_RETURN(Value filtered, EvalFilter(*node.children[0], &body));
        RETURN_IF_ERROR(Append(ToStr(filtered)));
        return captured.second;
      }
      case NodeKind::kWith: {
        std::vector<Value> values;
        for (const auto& value_node : node.defaults) {
          ASSIGN_OR_RETURN(Value value, Eval(*value_node));
          values.push_back(std::move(value));
        }
        auto inner = NewScope(scope_);
        for (size_t i = 0; i < node.names.size(); ++i) inner->Set(node.names[i], values[i]);
        return ExecuteInScope(*node.children[0], std::move(inner));
      }
      case NodeKind::kScopedBody:
        return ExecuteInScope(*node.children[0], NewScope(scope_));
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      default:
        return absl::InternalError("expression where a statement was expected");
    }
  }

  absl::StatusOr<Flow> ExecuteInScope(const Node& body, std::shared_ptr<Scope> scope) {
    std::shared_ptr<Scope> outer = std::exchange(scope_, std::move(scope));
    absl::StatusOr<Flow> flow = Execute(body);
    scope_ = std::move(outer);
    return flow;
  }

  absl::Status BindTargets(Scope& scope, const Node& node, const Value& value) {
    if (!node.flag) {
      scope.Set(node.names[0], value);
      return absl::OkStatus();
    }
    if (value.is_undefined()) return UndefinedError(value);
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.size() != node.names.size()) {
      if (items.size() < node.names.size()) {
        return absl::InvalidArgumentError(StrCat("not enough values to unpack (expected ",
                                                 node.names.size(), ", got ", items.size(), ")"));
      }
      return absl::InvalidArgumentError(
          StrCat("too many values to unpack (expected ", node.names.size(), ")"));
    }
    for (size_t i = 0; i < items.size(); ++i) scope.Set(node.names[i], items[i]);
    return absl::OkStatus();
  }

  absl::Status Assign(const Node& node, Value value) {
    if (node.name.empty()) return BindTargets(*scope_, node, value);
    const Value* target = scope_->Find(node.names[0]);
    if (target == nullptr || !target->is_object() ||
        target->object().type != ObjectData::Type::kNamespace) {
      return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
    }
    target->object().Set(node.name, std::move(value));
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecuteFor(const Node& node) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*node.children[0]));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
    RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size())));
    const Node* filter = node.children[1].get();
    if (filter != nullptr) {
      std::vector<Value> kept;
      for (Value& item : items) {
        auto scope = NewScope(scope_);
        RETURN_IF_ERROR(BindTargets(*scope, node, item));
        std::shared_ptr<Scope> outer = std::exchange(scope_, std::move(scope));
        absl::StatusOr<Value> condition = Eval(*filter);
        scope_ = std::move(outer);
        if (!condition.ok()) return condition.status();
        if (Truthy(*condition)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (node.children[3]) return Execute(*node.children[3]);
      return Flow::kNormal;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      RETURN_IF_ERROR(Charge(1));
      auto loop = std::make_shared<ObjectData>();
      loop->type = ObjectData::Type::kLoop;
      loop->attributes = {
          {"index", Value::Int(i + 1)},
          {"index0", Value::Int(i)},
          {"revindex", Value::Int(length - i)},
          {"revindex0", Value::Int(length - i - 1)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == length - 1)},
          {"length", Value::Int(length)},
          {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)},
          {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                             : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                      : Value::Undefined("there is no next item")},
      };
      auto scope = NewScope(scope_);
      RETURN_IF_ERROR(BindTargets(*scope, node, items[static_cast<size_t>(i)]));
      scope->Set("loop", Value::Object(std::move(loop)));
      ASSIGN_OR_RETURN(Flow flow, ExecuteInScope(*node.children[2], std::move(scope)));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // ---- Expressions.

  absl::StatusOr<Value> Eval(const Node& node) {
    DepthGuard guard(*this);
    absl::Status status = guard.Check();
    if (status.ok()) status = Charge(1);
    if (!status.ok()) return Locate(status, node);
    absl::StatusOr<Value> value = EvalNode(node);
    if (!value.ok()) return Locate(value.status(), node);
    return value;
  }

  absl::StatusOr<Value> Lookup(const std::string& name) {
    if (const Value* value = scope_->Find(name)) return *value;
    if (IsGlobalFunction(name)) {
      auto function = std::make_shared<CallableData>();
      function->type = CallableData::Type::kGlobal;
      function->name = name;
      return Value::Callable(std::move(function));
    }
    return Value::Undefined(StrCat("'", name, "' is undefined"));
  }

  absl::Status CollectArguments(const Node& node, size_t first, CallArgs& args) {
    const size_t keyword_start = node.children.size() - node.names.size();
    for (size_t i = first; i < node.children.size(); ++i) {
      ASSIGN_OR_RETURN(Value value, Eval(*node.children[i]));
      if (i < keyword_start) {
        args.positional.push_back(std::move(value));
      } else {
        args.keywords.emplace_back(node.names[i - keyword_start], std::move(value));
      }
    }
    return absl::OkStatus();
  }

  // A filter node; `block_value` feeds the innermost filter of a filter block or block set.
  absl::StatusOr<Value> EvalFilter(const Node& node, const Value* block_value) {
    Value operand;
    if (node.children[0] == nullptr) {
      operand = *block_value;
    } else if (node.children[0]->kind == NodeKind::kFilter && block_value != nullptr) {
      ASSIGN_OR_RETURN(operand, EvalFilter(*node.children[0], block_value));
    } else {
      ASSIGN_OR_RETURN(operand, Eval(*node.children[0]));
    }
    CallArgs args;
    RETURN_IF_ERROR(CollectArguments(node, 1, args));
    absl::StatusOr<Value> result = Filter(node.name, operand, args);
    if (!result.ok()) return Locate(result.status(), node);
    return result;
  }

  absl::StatusOr<Value> EvalNode(const Node& node) {
    switch (node.kind) {
      case NodeKind::kLiteral:
        return node.literal;
      case NodeKind::kName:
        return Lookup(node.name);
      case NodeKind::kList:
      case NodeKind::kTuple: {
        std::vector<Value> items;
        items.reserve(node.children.size());
        for (const auto& child : node.children) {
          ASSIGN_OR_RETURN(Value item, Eval(*child));
          items.push_back(std::move(item));
        }
        return node.kind == NodeKind::kList ? Value::List(std::move(items))
                                            : Value::Tuple(std::move(items));
      }
      case NodeKind::kDict: {
        auto dict = std::make_shared<DictData>();
        for (size_t i = 0; i + 1 < node.children.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*node.children[i]));
          ASSIGN_OR_RETURN(Value value, Eval(*node.children[i + 1]));
          if (key.is_list() || key.is_dict() || key.is_undefined()) {
            if (key.is_undefined()) return UndefinedError(key);
            return absl::InvalidArgumentError(StrCat("unhashable type: '", TypeName(key), "'"));
          }
          dict->Set(std::move(key), std::move(value));
        }
        return Value::Dict(std::move(dict));
      }
      case NodeKind::kGetAttr: {
        ASSIGN_OR_RETURN(Value object, Eval(*node.children[0]));
        return jinja::GetAttribute(object, node.name);
      }
      case NodeKind::kGetItem: {
        ASSIGN_OR_RETURN(Value object, Eval(*node.children[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*node.children[1]));
        return jinja::GetItem(object, key);
      }
      case NodeKind::kSlice: {
        ASSIGN_OR_RETURN(Value object, Eval(*node.children[0]));
        Value bounds[3] = {Value::None(), Value::None(), Value::None()};
        for (int i = 0; i < 3; ++i) {
          if (node.children[i + 1]) {
            ASSIGN_OR_RETURN(bounds[i], Eval(*node.children[i + 1]));
          }
        }
        ASSIGN_OR_RETURN(Value sliced, jinja::Slice(object, bounds[0], bounds[1], bounds[2]));
        if (sliced.is_sequence())
          RETURN_IF_ERROR(Charge(static_cast<int64_t>(sliced.items().size())));
        if (sliced.is_string())
          RETURN_IF_ERROR(Charge(static_cast<int64_t>(sliced.string_value().size() / 4)));
        return sliced;
      }
      case NodeKind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*node.children[0]));
        CallArgs args;
        RETURN_IF_ERROR(CollectArguments(node, 1, args));
        return Call(callee, args);
      }
      case NodeKind::kFilter:
        return EvalFilter(node, nullptr);
      case NodeKind::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0]));
        CallArgs args;
        RETURN_IF_ERROR(CollectArguments(node, 1, args));
        ASSIGN_OR_RETURN(bool passed, Test(node.name, operand, args));
        return Value::Bool(passed != node.flag);
      }
      case NodeKind::kNegate:
      case NodeKind::kPlus: {
        ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0]));
        if (operand.is_undefined()) return UndefinedError(operand);
        if (!operand.is_number()) {
          return absl::InvalidArgumentError(StrCat("bad operand type for unary ",
                                                   node.kind == NodeKind::kNegate ? "-" : "+",
                                                   ": '", TypeName(operand), "'"));
        }
        if (node.kind == NodeKind::kPlus) {
          return operand.is_float() ? operand : Value::Int(operand.int_value());
        }
        if (operand.is_float()) return Value::Float(-operand.number_value());
        if (operand.int_value() == INT64_MIN) return Overflow();
        return Value::Int(-operand.int_value());
      }
      case NodeKind::kNot: {
        ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0]));
        return Value::Bool(!Truthy(operand));
      }
      case NodeKind::kAnd:
      case NodeKind::kOr: {
        ASSIGN_OR_RETURN(Value left, Eval(*node.children[0]));
        if (Truthy(left) == (node.kind == NodeKind::kOr)) return left;
        return Eval(*node.children[1]);
      }
      case NodeKind::kBinary: {
        ASSIGN_OR_RETURN(Value left, Eval(*node.children[0]));
        ASSIGN_OR_RETURN(Value right, Eval(*node.children[1]));
        return BinaryOperation(node.name, left, right);
      }
      case NodeKind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*node.children[0]));
        for (size_t i = 0; i < node.names.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*node.children[i + 1]));
          ASSIGN_OR_RETURN(bool holds, Compare(node.names[i], left, right));
          if (!holds) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case NodeKind::kConcat: {
        std::string text;
        for (const auto& child : node.children) {
          ASSIGN_OR_RETURN(Value part, Eval(*child));
          text += ToStr(part);
          RETURN_IF_ERROR(CheckSize(text.size()));
        }
        RETURN_IF_ERROR(Charge(static_cast<int64_t>(text.size() / 4)));
        return Value::String(std::move(text));
      }
      case NodeKind::kCondition: {
        ASSIGN_OR_RETURN(Value condition, Eval(*node.children[1]));
        if (Truthy(condition)) return Eval(*node.children[0]);
        if (node.children[2]) return Eval(*node.children[2]);
        return Value::Undefined(StrCat("the inline if-expression on line ", node.line,
                                       " evaluated to false and no else section was "
                                       "defined."));
      }
      default:
        return absl::InternalError("statement where an expression was expected");
    }
  }

  absl::StatusOr<bool> Compare(std::string_view op, const Value& left, const Value& right) {
    if (op == "==") return Equals(left, right);
    if (op == "!=") return !Equals(left, right);
    if (op == "in") return Contains(right, left);
    if (op == "notin") {
      ASSIGN_OR_RETURN(bool contained, Contains(right, left));
      return !contained;
    }
    if (left.is_undefined()) return UndefinedError(left);
    if (right.is_undefined()) return UndefinedError(right);
    if (op == "<") return LessThan(left, right);
    if (op == ">") return LessThan(right, left);
    ASSIGN_OR_RETURN(bool less, op == "<=" ? LessThan(right, left) : LessThan(left, right));
    return !less;
  }

  absl::StatusOr<Value> Repeat(const Value& sequence, int64_t count) {
    count = std::max<int64_t>(count, 0);
    if (sequence.is_string()) {
      const std::string& text = sequence.string_value();
      const size_t size = static_cast<size_t>(count) * text.size();
      if (!text.empty() &&
          (count > budget_.max_output_bytes || size / text.size() != static_cast<size_t>(count))) {
        return CheckSize(SIZE_MAX);
      }
      RETURN_IF_ERROR(CheckSize(size));
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(size / 4)));
      std::string out;
      out.reserve(size);
      for (int64_t i = 0; i < count; ++i) out += text;
      return Value::String(std::move(out));
    }
    const std::vector<Value>& items = sequence.items();
    if (!items.empty()) {
      if (count > budget_.max_steps) return Charge(budget_.max_steps + 1);
      RETURN_IF_ERROR(Charge(count * static_cast<int64_t>(items.size())));
    }
    std::vector<Value> out;
    for (int64_t i = 0; i < count && !items.empty(); ++i)
      out.insert(out.end(), items.begin(), items.end());
    return sequence.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }

  absl::StatusOr<Value> BinaryOperation(std::string_view op, const Value& left,
                                        const Value& right) {
    if (op == "%" && left.is_string()) {
      ASSIGN_OR_RETURN(std::string text, PythonPercentFormat(*this, left.string_value(), right));
      return Value::String(std::move(text));
    }
    if (left.is_undefined()) return UndefinedError(left);
    if (right.is_undefined()) return UndefinedError(right);
    const bool numbers = left.is_number() && right.is_number();
    const bool integers = left.is_integral() && right.is_integral();
    if (op == "+") {
      if (integers) {
        int64_t result = 0;
        if (__builtin_add_overflow(left.int_value(), right.int_value(), &result)) return Overflow();
        return Value::Int(result);
      }
      if (numbers) return Value::Float(left.number_value() + right.number_value());
      if (left.is_string() && right.is_string()) {
        RETURN_IF_ERROR(CheckSize(left.string_value().size() + right.string_value().size()));
        RETURN_IF_ERROR(Charge(
            static_cast<int64_t>((left.string_value().size() + right.string_value().size()) / 4)));
        return Value::String(left.string_value() + right.string_value());
      }
      if (left.kind() == right.kind() && left.is_sequence()) {
        RETURN_IF_ERROR(Charge(static_cast<int64_t>(left.items().size() + right.items().size())));
        std::vector<Value> items = left.items();
        items.insert(items.end(), right.items().begin(), right.items().end());
        return left.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      if (left.is_string()) {
        return absl::InvalidArgumentError(
            StrCat("can only concatenate str (not \"", TypeName(right), "\") to str"));
      }
      return OperandError(op, left, right);
    }
    if (op == "*") {
      if (integers) {
        int64_t result = 0;
        if (__builtin_mul_overflow(left.int_value(), right.int_value(), &result)) return Overflow();
        return Value::Int(result);
      }
      if (numbers) return Value::Float(left.number_value() * right.number_value());
      if ((left.is_string() || left.is_sequence()) && right.is_integral()) {
        return Repeat(left, right.int_value());
      }
      if (left.is_integral() && (right.is_string() || right.is_sequence())) {
        return Repeat(right, left.int_value());
      }
      return OperandError(op, left, right);
    }
    if (!numbers) return OperandError(op, left, right);
    if (op == "-") {
      if (integers) {
        int64_t result = 0;
        if (__builtin_sub_overflow(left.int_value(), right.int_value(), &result)) return Overflow();
        return Value::Int(result);
      }
      return Value::Float(left.number_value() - right.number_value());
    }
    if (op == "/") {
      if (right.number_value() == 0) return absl::InvalidArgumentError("division by zero");
      return Value::Float(left.number_value() / right.number_value());
    }
    if (op == "//" || op == "%") {
      if (right.number_value() == 0) {
        return absl::InvalidArgumentError("integer division or modulo by zero");
      }
      if (integers) {
        if (left.int_value() == INT64_MIN && right.int_value() == -1) {
          if (op == "%") return Value::Int(0);
          return Overflow();
        }
        return Value::Int(op == "//" ? FloorDivide(left.int_value(), right.int_value())
                                     : FloorModulo(left.int_value(), right.int_value()));
      }
      const double a = left.number_value();
      const double b = right.number_value();
      if (op == "%") return Value::Float(FloatModulo(a, b));
      return Value::Float(FloatFloorDivide(a, b));
    }
    if (op == "**") {
      if (integers && right.int_value() >= 0) {
        int64_t result = 1;
        int64_t base = left.int_value();
        int64_t exponent = right.int_value();
        while (exponent > 0) {
          if (exponent & 1) {
            if (__builtin_mul_overflow(result, base, &result)) return Overflow();
          }
          exponent >>= 1;
          if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
        }
        return Value::Int(result);
      }
      const double a = left.number_value();
      const double b = right.number_value();
      if (a == 0 && b < 0) {
        return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
      }
      return Value::Float(std::pow(a, b));
    }
    return absl::InternalError(StrCat("unknown operator ", op));
  }

  // ---- Calls.

  absl::StatusOr<Value> Call(const Value& callee, const CallArgs& args) {
    DepthGuard guard(*this);
    RETURN_IF_ERROR(guard.Check());
    if (callee.is_undefined()) return UndefinedError(callee);
    if (!callee.is_callable()) {
      return absl::InvalidArgumentError(StrCat("'", TypeName(callee), "' object is not callable"));
    }
    const CallableData& callable = callee.callable();
    switch (callable.type) {
      case CallableData::Type::kMacro:
        return CallMacro(callable, args);
      case CallableData::Type::kGlobal:
        return CallGlobal(callable.name, args);
      case CallableData::Type::kMethod:
        return CallMethod(*this, callable, args);
    }
    return absl::InternalError("unknown callable");
  }

  absl::StatusOr<Value> CallMacro(const CallableData& callable, const CallArgs& args) {
    const Node& macro = *callable.macro;
    const size_t parameters = macro.names.size();
    if (args.positional.size() > parameters) {
      return absl::InvalidArgumentError(
          StrCat("macro '", macro.name, "' takes not more than ", parameters, " argument(s)"));
    }
    for (const auto& [keyword, value] : args.keywords) {
      const auto at = std::find(macro.names.begin(), macro.names.end(), keyword);
      if (at == macro.names.end()) {
        return absl::InvalidArgumentError(
            StrCat("macro '", macro.name, "' takes no keyword argument '", keyword, "'"));
      }
      if (static_cast<size_t>(at - macro.names.begin()) < args.positional.size()) {
        return absl::InvalidArgumentError(
            StrCat("macro '", macro.name, "' got multiple values for argument '", keyword, "'"));
      }
    }
    auto scope = NewScope(callable.macro_scope);
    std::shared_ptr<Scope> outer = std::exchange(scope_, scope);
    const size_t first_default = parameters - macro.defaults.size();
    absl::Status status;
    for (size_t i = 0; i < parameters && status.ok(); ++i) {
      const std::string& name = macro.names[i];
      if (i < args.positional.size()) {
        scope->Set(name, args.positional[i]);
        continue;
      }
      const Value* keyword = args.Find(SIZE_MAX, name);
      if (keyword != nullptr) {
        scope->Set(name, *keyword);
      } else if (i >= first_default) {
        absl::StatusOr<Value> value = Eval(*macro.defaults[i - first_default]);
        if (value.ok()) {
          scope->Set(name, *std::move(value));
        } else {
          status = value.status();
        }
      } else {
        scope->Set(name, Value::Undefined(StrCat("parameter '", name, "' was not provided")));
      }
    }
    absl::StatusOr<std::pair<std::string, Flow>> captured =
        status.ok() ? Capture(*macro.children[0])
                    : absl::StatusOr<std::pair<std::string, Flow>>(status);
    scope_ = std::move(outer);
    if (!captured.ok()) return captured.status();
    return Value::String(std::move(captured->first));
  }

  absl::StatusOr<Value> CallGlobal(const std::string& name, const CallArgs& args) {
    if (name == "raise_exception") {
      const Value* message = args.Find(0, "message");
      return absl::InvalidArgumentError(message ? ToStr(*message) : "");
    }
    if (name == "strftime_now") {
      const Value* format = args.Find(0, "format");
      if (format == nullptr || !format->is_string()) {
        return absl::InvalidArgumentError("strftime_now() takes a format string");
      }
      std::string text = absl::FormatTime(format->string_value(), now_, absl::LocalTimeZone());
      RETURN_IF_ERROR(CheckSize(text.size()));
      return Value::String(std::move(text));
    }
    if (name == "range") {
      if (!args.keywords.empty())
        return absl::InvalidArgumentError("range() takes no keyword arguments");
      if (args.positional.empty() || args.positional.size() > 3) {
        return absl::InvalidArgumentError(
            StrCat("range expected at most 3 arguments, got ", args.positional.size()));
      }
      for (const Value& argument : args.positional) {
        if (argument.is_undefined()) return UndefinedError(argument);
        if (!argument.is_integral()) {
          return absl::InvalidArgumentError(
              StrCat("'", TypeName(argument), "' object cannot be interpreted as an integer"));
        }
      }
      int64_t start = 0;
      int64_t stop = 0;
      int64_t step = 1;
      if (args.positional.size() == 1) {
        stop = args.positional[0].int_value();
      } else {
        start = args.positional[0].int_value();
        stop = args.positional[1].int_value();
        if (args.positional.size() == 3) step = args.positional[2].int_value();
      }
      if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
      // The count in 128 bits: the bounds are any 64-bit ints.
      const __int128 span =
          step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      const __int128 magnitude = step > 0 ? step : -static_cast<__int128>(step);
      const __int128 count = span <= 0 ? 0 : (span + magnitude - 1) / magnitude;
      if (count > kMaxRange) {
        return absl::ResourceExhaustedError(
            StrCat("range of ", static_cast<int64_t>(std::min<__int128>(count, INT64_MAX)),
                   " items exceeds the sandbox's MAX_RANGE (", kMaxRange, "), as in jinja2"));
      }
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(count)));
      std::vector<Value> items;
      items.reserve(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) items.push_back(Value::Int(start + i * step));
      return Value::List(std::move(items));
    }
    if (name == "dict" || name == "namespace") {
      std::vector<std::pair<Value, Value>> entries;
      if (args.positional.size() > 1) {
        return absl::InvalidArgumentError(
            StrCat(name, " expected at most 1 argument, got ", args.positional.size()));
      }
      if (!args.positional.empty()) {
        const Value& initial = args.positional[0];
        if (initial.is_dict()) {
          entries = initial.dict().entries;
        } else {
          ASSIGN_OR_RETURN(std::vector<Value> pairs, Iterate(initial));
          for (const Value& pair : pairs) {
            ASSIGN_OR_RETURN(std::vector<Value> parts, Iterate(pair));
            if (parts.size() != 2) {
              return absl::InvalidArgumentError(
                  "dictionary update sequence element has the wrong length; 2 is required");
            }
            entries.emplace_back(parts[0], parts[1]);
          }
        }
      }
      for (const auto& [keyword, value] : args.keywords)
        entries.emplace_back(Value::String(keyword), value);
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(entries.size())));
      if (name == "dict") {
        auto dict = std::make_shared<DictData>();
        for (auto& [key, value] : entries) dict->Set(std::move(key), std::move(value));
        return Value::Dict(std::move(dict));
      }
      auto object = std::make_shared<ObjectData>();
      object->type = ObjectData::Type::kNamespace;
      namespaces_.push_back(object);
      for (auto& [key, value] : entries) {
        if (!key.is_string()) return absl::InvalidArgumentError("namespace keys must be strings");
        object->Set(key.string_value(), std::move(value));
      }
      return Value::Object(std::move(object));
    }
    return absl::InvalidArgumentError(StrCat("unknown function '", name, "'"));
  }

  std::string_view origin_;
  absl::Time now_;
  RenderBudget budget_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
  bool located_ = false;
  std::vector<std::weak_ptr<Scope>> scopes_;
  std::vector<std::weak_ptr<ObjectData>> namespaces_;
};

}  // namespace

absl::StatusOr<std::string> Render(const Node& root, std::string_view origin, const Value& context,
                                   absl::Time now, const RenderBudget& budget) {
  Evaluator evaluator(origin, now, budget);
  return evaluator.Run(root, context);
}

}  // namespace attnserve::jinja
