#include "text/chat_template/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "text/chat_template/jinja_filters.h"
#include "text/chat_template/jinja_lexer.h"
#include "text/chat_template/jinja_text.h"

namespace attnserve::jinja {
namespace {

// Parsing recurses per nesting level (parentheses, statements), and evaluation per level of
// the tree: both are bounded so that no template can exhaust the stack. jinja2 itself stops
// near these depths (Python's recursion limit).
constexpr int kMaxParseNesting = 100;
constexpr int kMaxTreeDepth = 256;

using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view origin)
      : tokens_(std::move(tokens)), origin_(origin) {}

  absl::StatusOr<NodePtr> Run() {
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({}));
    for (const auto& [name, line] : called_names_) {
      if (!IsGlobalFunction(name) && !assigned_names_.contains(name)) {
        return ErrorAt(line, StrCat("unknown function '", name, "'"));
      }
    }
    return body;
  }

 private:
  const Token& Current() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  static bool IsName(const Token& token, std::string_view name) {
    return token.kind == TokenKind::kName && token.text == name;
  }
  static bool IsOperator(const Token& token, std::string_view op) {
    return token.kind == TokenKind::kOperator && token.text == op;
  }

  absl::Status ErrorAt(int line, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(origin_, ":", line, ": ", what));
  }
  absl::Status Error(std::string_view what) const { return ErrorAt(Current().line, what); }

  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kVariableEnd:
        return "end of print statement";
      case TokenKind::kBlockEnd:
        return "end of statement block";
      case TokenKind::kString:
        return "string";
      case TokenKind::kInteger:
        return "integer";
      case TokenKind::kFloat:
        return "float";
      default:
        return StrCat("'", token.text, "'");
    }
  }

  absl::Status ExpectOperator(std::string_view op) {
    if (!IsOperator(Current(), op)) {
      return Error(StrCat("expected '", op, "', got ", Describe(Current())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Current().kind != TokenKind::kBlockEnd) {
      return Error(StrCat("expected end of statement block, got ", Describe(Current())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Current().kind != TokenKind::kName) {
      return Error(StrCat("expected a name, got ", Describe(Current())));
    }
    std::string name = Current().text;
    Advance();
    return name;
  }

  // Bounds the recursion of the parser itself.
  class NestingGuard {
   public:
    explicit NestingGuard(Parser& parser) : parser_(parser) { ++parser_.nesting_; }
    ~NestingGuard() { --parser_.nesting_; }
    absl::Status Check() const {
      if (parser_.nesting_ > kMaxParseNesting) {
        return parser_.Error(StrCat("template nested deeper than ", kMaxParseNesting, " levels"));
      }
      return absl::OkStatus();
    }

   private:
    Parser& parser_;
  };

  absl::StatusOr<NodePtr> Make(NodeKind kind, int line, std::vector<NodePtr> children = {}) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = line;
    for (const NodePtr& child : children) {
      if (child) node->depth = std::max(node->depth, child->depth + 1);
    }
    node->children = std::move(children);
    if (node->depth > kMaxTreeDepth) {
      return ErrorAt(line, StrCat("expression nested deeper than ", kMaxTreeDepth, " levels"));
    }
    return node;
  }

  static std::vector<NodePtr> Children(NodePtr a, NodePtr b = nullptr) {
    std::vector<NodePtr> children;
    children.push_back(std::move(a));
    if (b) children.push_back(std::move(b));
    return children;
  }

  // ---- Statements.

  // Statements up to a `{% name %}` with name in `end_names` (left unconsumed, positioned at
  // the name) or, with no end names, the end of the template.
  absl::StatusOr<NodePtr> ParseBody(std::initializer_list<std::string_view> end_names) {
    NestingGuard guard(*this);
    RETURN_IF_ERROR(guard.Check());
    ASSIGN_OR_RETURN(NodePtr body, Make(NodeKind::kBody, Current().line));
    while (true) {
      const Token& token = Current();
      if (token.kind == TokenKind::kEnd) {
        if (end_names.size() == 0) return body;
        std::vector<std::string> wanted;
        for (std::string_view name : end_names) wanted.push_back(StrCat("'", name, "'"));
        return Error(StrCat("unexpected end of template; looking for the tags ",
                            absl::StrJoin(wanted, " or ")));
      }
      if (token.kind == TokenKind::kData) {
        ASSIGN_OR_RETURN(NodePtr output, Make(NodeKind::kOutput, token.line));
        output->name = token.text;
        body->children.push_back(std::move(output));
        Advance();
      } else if (token.kind == TokenKind::kVariableBegin) {
        Advance();
        const int line = Current().line;
        ASSIGN_OR_RETURN(NodePtr expr, ParseTuple(true, {}, false));
        if (Current().kind != TokenKind::kVariableEnd) {
          return Error(StrCat("expected end of print statement, got ", Describe(Current())));
        }
        Advance();
        ASSIGN_OR_RETURN(NodePtr print, Make(NodeKind::kPrint, line, Children(std::move(expr))));
        body->children.push_back(std::move(print));
      } else if (token.kind == TokenKind::kBlockBegin) {
        const Token& tag = Peek();
        if (tag.kind == TokenKind::kName &&
            std::find(end_names.begin(), end_names.end(), tag.text) != end_names.end()) {
          Advance();  // at the end tag's name
          return body;
        }
        Advance();
        ASSIGN_OR_RETURN(NodePtr statement, ParseStatement());
        body->children.push_back(std::move(statement));
      } else {
        return Error(StrCat("unexpected ", Describe(token)));
      }
    }
  }

  // Consumes the end tag `{% name %}` the body stopped at.
  absl::Status FinishEndTag() {
    Advance();  // the name
    return ExpectBlockEnd();
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    const Token& token = Current();
    if (token.kind != TokenKind::kName) return Error("tag name expected");
    const std::string tag = token.text;
    if (tag == "for") return ParseFor();
    if (tag == "if") return ParseIf();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "print") return ParsePrint();
    if (tag == "generation") {
      // transformers' assistant-mask tag: the body renders as it is, in a scope of its own
      // (jinja2 renders it as a call block's caller).
      const int line = token.line;
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endgeneration"}));
      RETURN_IF_ERROR(FinishEndTag());
      return Make(NodeKind::kScopedBody, line, Children(std::move(body)));
    }
    if (tag == "break" || tag == "continue") {
      if (loop_nesting_ == 0) return Error(StrCat("'", tag, "' outside of a loop"));
      const int line = token.line;
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return Make(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    static const std::set<std::string, std::less<>> kEndTags = {
        "endfor", "endif", "endset", "endmacro",      "endfilter", "endwith",
        "elif",   "else",  "endraw", "endgeneration", "endblock",  "endcall"};
    if (kEndTags.contains(tag)) return Error(StrCat("unexpected tag '", tag, "'"));
    return Error(StrCat("unsupported tag '", tag, "'"));
  }

  // Assignment targets: a name, or names separated by commas (optionally parenthesized) to
  // unpack into.
  absl::Status ParseTargets(Node& node) {
    const bool parenthesized = IsOperator(Current(), "(");
    if (parenthesized) Advance();
    while (true) {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        return Error(StrCat("can't assign to '", name, "'"));
      }
      assigned_names_.insert(name);
      node.names.push_back(std::move(name));
      if (!IsOperator(Current(), ",")) break;
      node.flag = true;
      Advance();
      if (!(Current().kind == TokenKind::kName)) break;  // a trailing comma
    }
    if (parenthesized) {
      node.flag = true;
      RETURN_IF_ERROR(ExpectOperator(")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> ParseFor() {
    const int line = Current().line;
    Advance();
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kFor, line));
    RETURN_IF_ERROR(ParseTargets(*node));
    if (!IsName(Current(), "in")) return Error("expected 'in' in for loop");
    Advance();
    ASSIGN_OR_RETURN(NodePtr iterable, ParseTuple(false, {"recursive"}, false));
    NodePtr filter;
    if (IsName(Current(), "if")) {
      Advance();
      ASSIGN_OR_RETURN(filter, ParseExpression(true));
    }
    if (IsName(Current(), "recursive")) return Error("unsupported recursive for loop");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_nesting_;
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endfor", "else"}));
    --loop_nesting_;
    NodePtr else_body;
    if (IsName(Current(), "else")) {
      RETURN_IF_ERROR(FinishEndTag());
      ASSIGN_OR_RETURN(else_body, ParseBody({"endfor"}));
    }
    RETURN_IF_ERROR(FinishEndTag());
    node->children.push_back(std::move(iterable));
    node->children.push_back(std::move(filter));
    node->children.push_back(std::move(body));
    node->children.push_back(std::move(else_body));
    return node;
  }

  absl::StatusOr<NodePtr> ParseIf() {
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kIf, Current().line));
    Advance();
    ++conditional_;
    absl::Cleanup leave = [this] { --conditional_; };
    while (true) {
      ASSIGN_OR_RETURN(NodePtr condition, ParseTuple(false, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(NodePtr body, ParseBody({"elif", "else", "endif"}));
      node->children.push_back(std::move(condition));
      node->children.push_back(std::move(body));
      if (IsName(Current(), "elif")) {
        Advance();
        continue;
      }
      if (IsName(Current(), "else")) {
        RETURN_IF_ERROR(FinishEndTag());
        ASSIGN_OR_RETURN(NodePtr else_body, ParseBody({"endif"}));
        node->children.push_back(std::move(else_body));
      }
      RETURN_IF_ERROR(FinishEndTag());
      return node;
    }
  }

  absl::StatusOr<NodePtr> ParseSet() {
    const int line = Current().line;
    Advance();
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kSet, line));
    if (Current().kind == TokenKind::kName && IsOperator(Peek(), ".")) {
      node->names.push_back(Current().text);  // namespace.attribute
      Advance();
      Advance();
      ASSIGN_OR_RETURN(node->name, ExpectName());
    } else {
      RETURN_IF_ERROR(ParseTargets(*node));
    }
    if (IsOperator(Current(), "=")) {
      Advance();
      ASSIGN_OR_RETURN(NodePtr value, ParseTuple(true, {}, false));
      node->children.push_back(std::move(value));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    node->kind = NodeKind::kSetBlock;
    if (node->flag) return Error("a block set takes a single name");
    NodePtr filter;
    if (IsOperator(Current(), "|")) {
      ASSIGN_OR_RETURN(filter, ParseFilters(nullptr, false));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endset"}));
    RETURN_IF_ERROR(FinishEndTag());
    node->children.push_back(std::move(body));
    node->children.push_back(std::move(filter));
    return node;
  }

  absl::StatusOr<NodePtr> ParseMacro() {
    const int line = Current().line;
    Advance();
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kMacro, line));
    ASSIGN_OR_RETURN(node->name, ExpectName());
    assigned_names_.insert(node->name);
    RETURN_IF_ERROR(ExpectOperator("("));
    while (!IsOperator(Current(), ")")) {
      if (!node->names.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      ASSIGN_OR_RETURN(std::string parameter, ExpectName());
      assigned_names_.insert(parameter);
      node->names.push_back(std::move(parameter));
      if (IsOperator(Current(), "=")) {
        Advance();
        ASSIGN_OR_RETURN(NodePtr value, ParseExpression(true));
        node->defaults.push_back(std::move(value));
      } else if (!node->defaults.empty()) {
        return Error("non-default argument follows default argument");
      }
    }
    Advance();
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int loops = std::exchange(loop_nesting_, 0);
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endmacro"}));
    loop_nesting_ = loops;
    RETURN_IF_ERROR(FinishEndTag());
    node->children.push_back(std::move(body));
    return node;
  }

  absl::StatusOr<NodePtr> ParseFilterBlock() {
    const int line = Current().line;
    Advance();
    ASSIGN_OR_RETURN(NodePtr filter, ParseFilters(nullptr, true));
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endfilter"}));
    RETURN_IF_ERROR(FinishEndTag());
    return Make(NodeKind::kFilterBlock, line, Children(std::move(filter), std::move(body)));
  }

  absl::StatusOr<NodePtr> ParseWith() {
    const int line = Current().line;
    Advance();
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kWith, line));
    while (Current().kind != TokenKind::kBlockEnd) {
      if (!node->names.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      assigned_names_.insert(name);
      node->names.push_back(std::move(name));
      RETURN_IF_ERROR(ExpectOperator("="));
      ASSIGN_OR_RETURN(NodePtr value, ParseExpression(true));
      node->defaults.push_back(std::move(value));
    }
    Advance();
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endwith"}));
    RETURN_IF_ERROR(FinishEndTag());
    node->children.push_back(std::move(body));
    return node;
  }

  absl::StatusOr<NodePtr> ParsePrint() {
    ASSIGN_OR_RETURN(NodePtr body, Make(NodeKind::kBody, Current().line));
    Advance();
    while (Current().kind != TokenKind::kBlockEnd) {
      if (!body->children.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      const int line = Current().line;
      ASSIGN_OR_RETURN(NodePtr expr, ParseExpression(true));
      ASSIGN_OR_RETURN(NodePtr print, Make(NodeKind::kPrint, line, Children(std::move(expr))));
      body->children.push_back(std::move(print));
    }
    Advance();
    return body;
  }

  // ---- Expressions, one function per jinja2 precedence level.

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const Token& token = Current();
    if (token.kind == TokenKind::kVariableEnd || token.kind == TokenKind::kBlockEnd ||
        IsOperator(token, ")")) {
      return true;
    }
    for (std::string_view name : extra_end) {
      if (IsName(token, name)) return true;
    }
    return false;
  }

  absl::StatusOr<NodePtr> ParseTuple(bool with_condition,
                                     std::initializer_list<std::string_view> extra_end,
                                     bool explicit_parentheses) {
    const int line = Current().line;
    std::vector<NodePtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      if (IsTupleEnd(extra_end)) break;
      ASSIGN_OR_RETURN(NodePtr item, ParseExpression(with_condition));
      items.push_back(std::move(item));
      if (IsOperator(Current(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) {
        return Error(StrCat("expected an expression, got ", Describe(Current())));
      }
    }
    return Make(NodeKind::kTuple, line, std::move(items));
  }

  absl::StatusOr<NodePtr> ParseExpression(bool with_condition) {
    NestingGuard guard(*this);
    RETURN_IF_ERROR(guard.Check());
    if (!with_condition) return ParseOr();
    // `value if test else other`: an unknown filter or test in `value` waits for the `if`.
    std::vector<absl::Status> unknown;
    std::vector<absl::Status>* outer = std::exchange(unknown_, &unknown);
    absl::StatusOr<NodePtr> parsed = ParseOr();
    unknown_ = outer;
    if (!parsed.ok()) return parsed.status();
    NodePtr expr = *std::move(parsed);
    if (!unknown.empty() && !IsName(Current(), "if")) {
      if (outer == nullptr) return unknown.front();
      outer->insert(outer->end(), unknown.begin(), unknown.end());
    }
    while (IsName(Current(), "if")) {
      // The whole conditional expression is a conditional for jinja2: its value, test and else.
      ++conditional_;
      absl::Cleanup leave = [this] { --conditional_; };
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr condition, ParseOr());
      NodePtr otherwise;
      if (IsName(Current(), "else")) {
        Advance();
        ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      std::vector<NodePtr> children;
      children.push_back(std::move(expr));
      children.push_back(std::move(condition));
      children.push_back(std::move(otherwise));
      ASSIGN_OR_RETURN(expr, Make(NodeKind::kCondition, line, std::move(children)));
    }
    return expr;
  }

  absl::StatusOr<NodePtr> ParseOr() {
    ASSIGN_OR_RETURN(NodePtr left, ParseAnd());
    while (IsName(Current(), "or")) {
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr right, ParseAnd());
      ASSIGN_OR_RETURN(left,
                       Make(NodeKind::kOr, line, Children(std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseAnd() {
    ASSIGN_OR_RETURN(NodePtr left, ParseNot());
    while (IsName(Current(), "and")) {
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr right, ParseNot());
      ASSIGN_OR_RETURN(left,
                       Make(NodeKind::kAnd, line, Children(std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseNot() {
    if (IsName(Current(), "not")) {
      NestingGuard guard(*this);
      RETURN_IF_ERROR(guard.Check());
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr operand, ParseNot());
      return Make(NodeKind::kNot, line, Children(std::move(operand)));
    }
    return ParseCompare();
  }

  absl::StatusOr<NodePtr> ParseCompare() {
    const int line = Current().line;
    ASSIGN_OR_RETURN(NodePtr first, ParseMath1());
    std::vector<NodePtr> operands;
    std::vector<std::string> operators;
    while (true) {
      const Token& token = Current();
      std::string op;
      if (token.kind == TokenKind::kOperator &&
          (token.text == "==" || token.text == "!=" || token.text == "<" || token.text == "<=" ||
           token.text == ">" || token.text == ">=")) {
        op = token.text;
        Advance();
      } else if (IsName(token, "in")) {
        op = "in";
        Advance();
      } else if (IsName(token, "not") && IsName(Peek(), "in")) {
        op = "notin";
        Advance();
        Advance();
      } else {
        break;
      }
      ASSIGN_OR_RETURN(NodePtr operand, ParseMath1());
      operands.push_back(std::move(operand));
      operators.push_back(std::move(op));
    }
    if (operands.empty()) return first;
    operands.insert(operands.begin(), std::move(first));
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kCompare, line, std::move(operands)));
    node->names = std::move(operators);
    return node;
  }

  absl::StatusOr<NodePtr> Binary(std::string op, int line, NodePtr left, NodePtr right) {
    ASSIGN_OR_RETURN(NodePtr node,
                     Make(NodeKind::kBinary, line, Children(std::move(left), std::move(right))));
    node->name = std::move(op);
    return node;
  }

  absl::StatusOr<NodePtr> ParseMath1() {
    ASSIGN_OR_RETURN(NodePtr left, ParseConcat());
    while (IsOperator(Current(), "+") || IsOperator(Current(), "-")) {
      const std::string op = Current().text;
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr right, ParseConcat());
      ASSIGN_OR_RETURN(left, Binary(op, line, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseConcat() {
    const int line = Current().line;
    ASSIGN_OR_RETURN(NodePtr first, ParseMath2());
    if (!IsOperator(Current(), "~")) return first;
    std::vector<NodePtr> parts;
    parts.push_back(std::move(first));
    while (IsOperator(Current(), "~")) {
      Advance();
      ASSIGN_OR_RETURN(NodePtr part, ParseMath2());
      parts.push_back(std::move(part));
    }
    return Make(NodeKind::kConcat, line, std::move(parts));
  }

  absl::StatusOr<NodePtr> ParseMath2() {
    ASSIGN_OR_RETURN(NodePtr left, ParsePow());
    while (IsOperator(Current(), "*") || IsOperator(Current(), "/") ||
           IsOperator(Current(), "//") || IsOperator(Current(), "%")) {
      const std::string op = Current().text;
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr right, ParsePow());
      ASSIGN_OR_RETURN(left, Binary(op, line, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParsePow() {
    ASSIGN_OR_RETURN(NodePtr left, ParseUnary(true));
    while (IsOperator(Current(), "**")) {
      const int line = Current().line;
      Advance();
      ASSIGN_OR_RETURN(NodePtr right, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Binary("**", line, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseUnary(bool with_filter) {
    NestingGuard guard(*this);
    RETURN_IF_ERROR(guard.Check());
    const int line = Current().line;
    NodePtr node;
    if (IsOperator(Current(), "-") || IsOperator(Current(), "+")) {
      const bool negate = Current().text == "-";
      Advance();
      ASSIGN_OR_RETURN(NodePtr operand, ParseUnary(false));
      ASSIGN_OR_RETURN(node, Make(negate ? NodeKind::kNegate : NodeKind::kPlus, line,
                                  Children(std::move(operand))));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpression(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<NodePtr> Literal(Value value, int line) {
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kLiteral, line));
    node->literal = std::move(value);
    return node;
  }

  absl::StatusOr<NodePtr> ParsePrimary() {
    const Token& token = Current();
    const int line = token.line;
    switch (token.kind) {
      case TokenKind::kName: {
        const std::string name = token.text;
        Advance();
        if (name == "true" || name == "True") return Literal(Value::Bool(true), line);
        if (name == "false" || name == "False") return Literal(Value::Bool(false), line);
        if (name == "none" || name == "None") return Literal(Value::None(), line);
        ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kName, line));
        node->name = name;
        return node;
      }
      case TokenKind::kString: {
        std::string text;
        while (Current().kind == TokenKind::kString) {
          text += Current().text;
          Advance();
        }
        return Literal(Value::String(std::move(text)), line);
      }
      case TokenKind::kInteger: {
        const int64_t value = token.integer;
        Advance();
        return Literal(Value::Int(value), line);
      }
      case TokenKind::kFloat: {
        const double value = token.real;
        Advance();
        return Literal(Value::Float(value), line);
      }
      case TokenKind::kOperator:
        if (token.text == "(") {
          Advance();
          ASSIGN_OR_RETURN(NodePtr node, ParseTuple(true, {}, true));
          RETURN_IF_ERROR(ExpectOperator(")"));
          return node;
        }
        if (token.text == "[") return ParseList();
        if (token.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Error(StrCat("unexpected ", Describe(token)));
  }

  absl::StatusOr<NodePtr> ParseList() {
    const int line = Current().line;
    Advance();
    std::vector<NodePtr> items;
    while (!IsOperator(Current(), "]")) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      if (IsOperator(Current(), "]")) break;
      ASSIGN_OR_RETURN(NodePtr item, ParseExpression(true));
      items.push_back(std::move(item));
    }
    RETURN_IF_ERROR(ExpectOperator("]"));
    return Make(NodeKind::kList, line, std::move(items));
  }

  absl::StatusOr<NodePtr> ParseDict() {
    const int line = Current().line;
    Advance();
    std::vector<NodePtr> items;
    while (!IsOperator(Current(), "}")) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      if (IsOperator(Current(), "}")) break;
      ASSIGN_OR_RETURN(NodePtr key, ParseExpression(true));
      RETURN_IF_ERROR(ExpectOperator(":"));
      ASSIGN_OR_RETURN(NodePtr value, ParseExpression(true));
      items.push_back(std::move(key));
      items.push_back(std::move(value));
    }
    RETURN_IF_ERROR(ExpectOperator("}"));
    return Make(NodeKind::kDict, line, std::move(items));
  }

  absl::StatusOr<NodePtr> ParsePostfix(NodePtr node) {
    while (true) {
      if (IsOperator(Current(), ".") || IsOperator(Current(), "[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOperator(Current(), "(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<NodePtr> ParseFilterExpression(NodePtr node) {
    while (true) {
      if (IsOperator(Current(), "|")) {
        ASSIGN_OR_RETURN(node, ParseFilters(std::move(node), false));
      } else if (IsName(Current(), "is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOperator(Current(), "(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<NodePtr> ParseSubscript(NodePtr node) {
    const int line = Current().line;
    if (IsOperator(Current(), ".")) {
      Advance();
      const Token& attribute = Current();
      if (attribute.kind == TokenKind::kName) {
        ASSIGN_OR_RETURN(NodePtr get, Make(NodeKind::kGetAttr, line, Children(std::move(node))));
        get->name = attribute.text;
        Advance();
        return get;
      }
      if (attribute.kind == TokenKind::kInteger) {
        ASSIGN_OR_RETURN(NodePtr index, Literal(Value::Int(attribute.integer), line));
        Advance();
        return Make(NodeKind::kGetItem, line, Children(std::move(node), std::move(index)));
      }
      return Error("expected name or number");
    }
    Advance();  // [
    std::vector<NodePtr> arguments;
    bool has_slice = false;
    while (!IsOperator(Current(), "]")) {
      if (!arguments.empty()) RETURN_IF_ERROR(ExpectOperator(","));
      ASSIGN_OR_RETURN(NodePtr argument, ParseSubscribed());
      has_slice = has_slice || argument->kind == NodeKind::kSlice;
      arguments.push_back(std::move(argument));
    }
    RETURN_IF_ERROR(ExpectOperator("]"));
    if (arguments.empty()) return ErrorAt(line, "expected an expression in []");
    if (arguments.size() == 1 && has_slice) {
      NodePtr slice = std::move(arguments[0]);
      slice->children.insert(slice->children.begin(), std::move(node));
      slice->depth = std::max(slice->depth, slice->children[0]->depth + 1);
      if (slice->depth > kMaxTreeDepth) return ErrorAt(line, "expression nested too deeply");
      return slice;
    }
    if (has_slice) return ErrorAt(line, "unsupported subscript with several slices");
    NodePtr key;
    if (arguments.size() == 1) {
      key = std::move(arguments[0]);
    } else {
      ASSIGN_OR_RETURN(key, Make(NodeKind::kTuple, line, std::move(arguments)));
    }
    return Make(NodeKind::kGetItem, line, Children(std::move(node), std::move(key)));
  }

  // One subscript: an expression or a slice `a:b:c` (a kSlice with the three bounds only).
  absl::StatusOr<NodePtr> ParseSubscribed() {
    const int line = Current().line;
    std::vector<NodePtr> bounds;
    if (IsOperator(Current(), ":")) {
      Advance();
      bounds.push_back(nullptr);
    } else {
      ASSIGN_OR_RETURN(NodePtr node, ParseExpression(true));
      if (!IsOperator(Current(), ":")) return node;
      Advance();
      bounds.push_back(std::move(node));
    }
    const auto at_bound_end = [&] {
      return IsOperator(Current(), "]") || IsOperator(Current(), ",");
    };
    if (IsOperator(Current(), ":")) {
      bounds.push_back(nullptr);
    } else if (!at_bound_end()) {
      ASSIGN_OR_RETURN(NodePtr stop, ParseExpression(true));
      bounds.push_back(std::move(stop));
    } else {
      bounds.push_back(nullptr);
    }
    if (IsOperator(Current(), ":")) {
      Advance();
      if (!at_bound_end()) {
        ASSIGN_OR_RETURN(NodePtr step, ParseExpression(true));
        bounds.push_back(std::move(step));
      } else {
        bounds.push_back(nullptr);
      }
    } else {
      bounds.push_back(nullptr);
    }
    return Make(NodeKind::kSlice, line, std::move(bounds));
  }

  // Call arguments into `node` (after children already there): positional, then keywords.
  absl::Status ParseCallArguments(Node& node) {
    RETURN_IF_ERROR(ExpectOperator("("));
    bool need_comma = false;
    while (!IsOperator(Current(), ")")) {
      if (need_comma) {
        RETURN_IF_ERROR(ExpectOperator(","));
        if (IsOperator(Current(), ")")) break;
      }
      if (IsOperator(Current(), "*") || IsOperator(Current(), "**")) {
        return Error("unsupported *args or **kwargs in a call");
      }
      if (Current().kind == TokenKind::kName && IsOperator(Peek(), "=")) {
        std::string keyword = Current().text;
        Advance();
        Advance();
        ASSIGN_OR_RETURN(NodePtr value, ParseExpression(true));
        node.depth = std::max(node.depth, value->depth + 1);
        node.children.push_back(std::move(value));
        node.names.push_back(std::move(keyword));
      } else {
        if (!node.names.empty()) return Error("positional argument follows keyword argument");
        ASSIGN_OR_RETURN(NodePtr value, ParseExpression(true));
        node.depth = std::max(node.depth, value->depth + 1);
        node.children.push_back(std::move(value));
      }
      need_comma = true;
    }
    Advance();
    if (node.depth > kMaxTreeDepth) return Error("expression nested too deeply");
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> ParseCall(NodePtr callee) {
    const int line = Current().line;
    if (callee->kind == NodeKind::kName) called_names_.emplace_back(callee->name, line);
    ASSIGN_OR_RETURN(NodePtr node, Make(NodeKind::kCall, line, Children(std::move(callee))));
    RETURN_IF_ERROR(ParseCallArguments(*node));
    return node;
  }

  // An unknown filter or test: fine inside a conditional, held while an expression may turn out
  // to be one, an error elsewhere.
  absl::Status Unknown(int line, const std::string& what) {
    if (conditional_ > 0) return absl::OkStatus();
    absl::Status error = ErrorAt(line, what);
    if (unknown_ == nullptr) return error;
    unknown_->push_back(std::move(error));
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ParseDottedName() {
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOperator(Current(), ".")) {
      Advance();
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&name, ".", part);
    }
    return name;
  }

  // `| name(args) | name ...` applied to `node`; `start_inline` for filter blocks, whose first
  // filter has no `|`.
  absl::StatusOr<NodePtr> ParseFilters(NodePtr node, bool start_inline) {
    while (IsOperator(Current(), "|") || start_inline) {
      if (!start_inline) Advance();
      start_inline = false;
      const int line = Current().line;
      ASSIGN_OR_RETURN(std::string name, ParseDottedName());
      // As jinja2 3.x: inside a condition or a branch, an unknown filter fails only if it runs.
      if (!IsKnownFilter(name))
        RETURN_IF_ERROR(Unknown(line, StrCat("unknown filter '", name, "'")));
      std::vector<NodePtr> children;
      children.push_back(std::move(node));
      ASSIGN_OR_RETURN(NodePtr filter, Make(NodeKind::kFilter, line, std::move(children)));
      filter->name = std::move(name);
      if (IsOperator(Current(), "(")) RETURN_IF_ERROR(ParseCallArguments(*filter));
      node = std::move(filter);
    }
    return node;
  }

  absl::StatusOr<NodePtr> ParseTest(NodePtr node) {
    const int line = Current().line;
    Advance();  // is
    bool negated = false;
    if (IsName(Current(), "not")) {
      Advance();
      negated = true;
    }
    ASSIGN_OR_RETURN(std::string name, ParseDottedName());
    if (!IsKnownTest(name)) RETURN_IF_ERROR(Unknown(line, StrCat("unknown test '", name, "'")));
    ASSIGN_OR_RETURN(NodePtr test, Make(NodeKind::kTest, line, Children(std::move(node))));
    test->name = std::move(name);
    test->flag = negated;
    const Token& token = Current();
    if (IsOperator(token, "(")) {
      RETURN_IF_ERROR(ParseCallArguments(*test));
    } else if ((token.kind == TokenKind::kName || token.kind == TokenKind::kString ||
                token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat ||
                IsOperator(token, "[") || IsOperator(token, "{")) &&
               !IsName(token, "else") && !IsName(token, "or") && !IsName(token, "and")) {
      if (IsName(token, "is")) return Error("You cannot chain multiple tests with is");
      ASSIGN_OR_RETURN(NodePtr argument, ParsePrimary());
      ASSIGN_OR_RETURN(argument, ParsePostfix(std::move(argument)));
      test->depth = std::max(test->depth, argument->depth + 1);
      test->children.push_back(std::move(argument));
    }
    return test;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string_view origin_;
  int nesting_ = 0;
  int loop_nesting_ = 0;
  // Unknown filters and tests fail when they run inside conditionals (if blocks and conditional
  // expressions), as in jinja2 3.x; elsewhere when the template is parsed.
  int conditional_ = 0;
  std::vector<absl::Status>* unknown_ = nullptr;  // a conditional expression's first operand's
  std::set<std::string, std::less<>> assigned_names_;
  std::vector<std::pair<std::string, int>> called_names_;
};

}  // namespace

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

absl::StatusOr<std::unique_ptr<Node>> ParseTemplate(std::string_view source,
                                                    std::string_view origin) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, origin));
  return Parser(std::move(tokens), origin).Run();
}

}  // namespace attnserve::jinja
