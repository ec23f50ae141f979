#include "vjit/ir.h"

#include <bit>
#include <cstdint>
#include <functional>
#include <sstream>

#include "ir/ops.h"
#include "ir/row_op.h"
#include "vjit/error.h"

namespace vjit::ir {

const char* target_name(GatherGradTarget target) {
  switch (target) {
    case GatherGradTarget::Slot: return "slot";
    case GatherGradTarget::EveryVariadic: return "every_variadic";
    case GatherGradTarget::VariadicRows: return "variadic_rows";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& out, GatherGradTarget target) { return out << target_name(target); }

namespace {

// One attribute in the text form: ` name=value`; a bool only its name, when set.
void print_attribute(std::ostream& out, const char* name, int value) { out << " " << name << "=" << value; }
void print_attribute(std::ostream& out, const char* name, double value) { out << " " << name << "=" << value; }
void print_attribute(std::ostream& out, const char* name, bool value) {
  if (value) out << " " << name;
}
void print_attribute(std::ostream& out, const char* name, GatherGradTarget value) {
  out << " " << name << "=" << value;
}

void print_attributes(std::ostream& out, const Node& n) {
  const AttrSet used = used_attributes(n);
#define VJIT_X(attr, field, text) \
  if (used.has(Attr::attr)) print_attribute(out, text, n.field);
  VJIT_IR_ATTRS(VJIT_X)
#undef VJIT_X
}

// Attributes compare and hash by value; a double by its bits, so that CSE keeps
// scale(x, -0.0) apart from scale(x, 0.0) and merges equal NaNs.
template <typename T>
bool same_attribute(T a, T b) {
  return a == b;
}
bool same_attribute(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
template <typename T>
size_t hash_attribute(T value) {
  return std::hash<T>{}(value);
}
size_t hash_attribute(double value) { return std::hash<uint64_t>{}(std::bit_cast<uint64_t>(value)); }

void hash_combine(size_t& seed, size_t h) { seed ^= h + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2); }

}  // namespace

bool same_attributes(const Node& a, const Node& b) {
  if (a.op != b.op) return false;
  const AttrSet used = used_attributes(a);
  if (used != used_attributes(b)) return false;
#define VJIT_X(attr, field, text) \
  if (used.has(Attr::attr) && !same_attribute(a.field, b.field)) return false;
  VJIT_IR_ATTRS(VJIT_X)
#undef VJIT_X
  return true;
}

size_t hash_attributes(const Node& n) {
  const AttrSet used = used_attributes(n);
  size_t seed = size_t(n.op);
#define VJIT_X(attr, field, text) \
  if (used.has(Attr::attr)) hash_combine(seed, hash_attribute(n.field));
  VJIT_IR_ATTRS(VJIT_X)
#undef VJIT_X
  return seed;
}

std::string to_string(const Function& function, ValueId id) {
  const Node& n = function[id];
  std::ostringstream out;
  if (!is_sink(n.op)) out << "%" << id << " = ";
  std::string name = op_name(n.op);
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  out << name << "(";
  for (size_t i = 0; i < n.args.size(); ++i) out << (i ? ", " : "") << "%" << n.args[i];
  out << ")";
  print_attributes(out, n);
  if (!is_sink(n.op)) out << " : " << n.shape.str() << (n.uniform ? " uniform" : "");
  return out.str();
}

std::string to_string(const Function& function) {
  std::ostringstream out;
  out << "function " << function.name << " {\n";
  for (ValueId id = 0; id < function.size(); ++id) out << "  " << to_string(function, id) << "\n";
  out << "}\n";
  return out.str();
}

void verify(const Function& function) {
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& n = function[id];
    const int arity = op_info(n.op).arity;
    VJIT_INTERNAL_CHECK(arity < 0 || int(n.args.size()) == arity,
                        "verify " << function.name << ": wrong operand count in " << to_string(function, id));
    VJIT_INTERNAL_CHECK(n.op != Op::Concat || !n.args.empty(),
                        "verify " << function.name << ": empty concat " << to_string(function, id));
    for (ValueId arg : n.args) {
      VJIT_INTERNAL_CHECK(arg >= 0 && arg < id, "verify " << function.name << ": operand %" << arg
                                                          << " does not precede " << to_string(function, id));
      VJIT_INTERNAL_CHECK(!is_sink(function[arg].op),
                          "verify " << function.name << ": sink used as operand in " << to_string(function, id));
    }
    const AttrSet used = used_attributes(n);
    const Node defaults{};
#define VJIT_X(attr, field, text)                                                                       \
  VJIT_INTERNAL_CHECK(used.has(Attr::attr) || n.field == defaults.field,                              \
                      "verify " << function.name << ": " << op_name(n.op) << " does not use attribute " \
                                << text << " but it is " << n.field << " in " << to_string(function, id));
    VJIT_IR_ATTRS(VJIT_X)
#undef VJIT_X
    if (n.uniform) {
      // Parameters, and parameters stacked by a Concat (matmul merging).
      bool stacked = n.op == Op::Concat;
      for (ValueId arg : n.args) stacked = stacked && function[arg].uniform;
      VJIT_INTERNAL_CHECK(n.op == Op::Param || stacked, "verify " << function.name
                                                                  << ": only parameters and concatenations of them "
                                                                     "are uniform: "
                                                                  << to_string(function, id));
    }
    if (is_elementwise(n.op) && n.op != Op::Step) {
      for (ValueId arg : n.args) {
        const Shape& s = function[arg].shape;
        bool fits = s == n.shape || s.rank == 0 || (n.shape.rank == 2 && s.rank == 1 && s.dims[0] == n.shape.dims[1]);
        VJIT_INTERNAL_CHECK(fits, "verify " << function.name << ": operand shape " << s.str()
                                            << " does not broadcast to " << to_string(function, id));
      }
    }
    if (n.op == Op::SliceCols || n.op == Op::PadCols) {
      const Shape& wide = n.op == Op::SliceCols ? function[n.args[0]].shape : n.shape;
      const Shape& narrow = n.op == Op::SliceCols ? n.shape : function[n.args[0]].shape;
      VJIT_INTERNAL_CHECK(wide.rank == 2 && narrow.rank == 2 && wide.dims[0] == narrow.dims[0] && n.start >= 0 &&
                              n.start + narrow.dims[1] <= wide.dims[1],
                          "verify " << function.name << ": column slice out of range " << to_string(function, id));
    }
    if (const RowOp* row = row_op(n.op)) {
      std::vector<Shape> operands;
      for (ValueId arg : n.args) operands.push_back(function[arg].shape);
      VJIT_INTERNAL_CHECK(row->accepts(operands) && row->result_shape(operands) == n.shape,
                          "verify " << function.name << ": operand shapes do not fit " << to_string(function, id));
    }
    if (n.op == Op::Gather || n.op == Op::GatherGrad)
      VJIT_INTERNAL_CHECK(n.start >= 0, "verify " << function.name << ": negative start in " << to_string(function, id));
    if (n.op == Op::Slice) {
      const Shape& s = function[n.args[0]].shape;
      VJIT_INTERNAL_CHECK(n.start >= 0 && n.start + n.shape.numel() <= s.numel(),
                          "verify " << function.name << ": slice out of range " << to_string(function, id));
    }
  }
}

}  // namespace vjit::ir
