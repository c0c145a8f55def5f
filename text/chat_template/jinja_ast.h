// The parsed template: one node type for expressions and statements, with the children's
// meaning fixed per kind (listed below), as jinja2's nodes are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/chat_template/jinja_value.h"

namespace attnserve::jinja {

enum class NodeKind {
  // Expressions.
  kLiteral,    // literal
  kName,       // name
  kList,       // children: items
  kTuple,      // children: items
  kDict,       // children: key, value, key, value, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]], each bound may be null
  kCall,       // children[0](children[1..]); the last names.size() arguments are keywords
  kFilter,     // children[0] | name(children[1..]); children[0] is null in filter blocks
  kTest,       // children[0] is name(children[1..]); flag: `is not`
  kNegate,     // -children[0]
  kPlus,       // +children[0]
  kNot,        // not children[0]
  kBinary,     // children[0] name children[1], name one of + - * / // % **
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCompare,    // children[0] names[0] children[1] names[1] children[2] ...
  kConcat,     // children[0] ~ children[1] ~ ...
  kCondition,  // children[0] if children[1] else children[2] (null: undefined)
  // Statements.
  kBody,         // children: statements
  kOutput,       // name: text
  kPrint,        // {{ children[0] }}
  kIf,           // children: condition, body, condition, body, ..., [else body]
  kFor,          // names: targets (flag: unpack); children: iterable, filter|null, body, else|null
  kSet,          // names: targets (flag: unpack) or [namespace] with name = attribute;
                 // children[0]: value
  kSetBlock,     // names/name as kSet; children[0]: body, children[1]: filter|null
  kMacro,        // name; names: parameters; children[0]: body; defaults: aligned to the last
  kFilterBlock,  // children[0]: filter chain (innermost operand null), children[1]: body
  kWith,         // names: targets; defaults: values; children[0]: body
  kScopedBody,   // children[0]: body rendered in a scope of its own ({% generation %})
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;
  Value literal;
  bool flag = false;
  int depth = 1;  // of the expression tree below, bounded at parse time
  std::vector<std::unique_ptr<Node>> children;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Node>> defaults;
};

}  // namespace attnserve::jinja
