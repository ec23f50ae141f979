#include "vjit/ir.h"

#include <sstream>

#include "vjit/error.h"

namespace vjit::ir {

const char* op_name(Op op) {
  switch (op) {
#define VJIT_X(name, kind) \
  case Op::name:           \
    return #name;
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  }
  return "?";
}

OpKind op_kind(Op op) {
  switch (op) {
#define VJIT_X(name, kind) \
  case Op::name:           \
    return OpKind::kind;
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  }
  return OpKind::Sink;
}

namespace {

void print_attributes(std::ostream& out, const Node& n) {
  switch (n.op) {
    case Op::Gather:
    case Op::GatherAll:
    case Op::GatherGrad:
    case Op::Fwd: out << " slot=" << n.slot; break;
    case Op::Param:
    case Op::PullEmbedding:
    case Op::ParamGrad:
    case Op::EmbeddingGrad: out << " param=" << n.param; break;
    case Op::Slice:
    case Op::Pad: out << " start=" << n.start; break;
    case Op::Constant:
    case Op::Scale:
    case Op::AddScalar: out << " c=" << n.scalar; break;
    case Op::Dropout: out << " rate=" << n.scalar << " key=" << n.slot; break;
    case Op::MatMul:
      if (n.trans_a) out << " ta";
      if (n.trans_b) out << " tb";
      break;
    default: break;
  }
}

}  // namespace

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

namespace {

int expected_arity(Op op) {
  switch (op_kind(op)) {
    case OpKind::Source: return 0;
    case OpKind::Unary:
    case OpKind::Reduce: return 1;
    case OpKind::Binary:
    case OpKind::Contract: return 2;
    default: break;
  }
  switch (op) {
    case Op::Concat: return -1;
    case Op::Slice:
    case Op::Pad:
    case Op::Reshape:
    case Op::Broadcast:
    case Op::BroadcastRows:
    case Op::SoftmaxCE:
    case Op::Scatter:
    case Op::Push:
    case Op::Loss:
    case Op::GatherGrad:
    case Op::ParamGrad:
    case Op::EmbeddingGrad: return 1;
    case Op::SoftmaxCEGrad: return 2;
    default: return -1;
  }
}

}  // namespace

void verify(const Function& function) {
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& n = function[id];
    int arity = expected_arity(n.op);
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
    if (n.op == Op::Slice) {
      const Shape& s = function[n.args[0]].shape;
      VJIT_INTERNAL_CHECK(n.start >= 0 && n.start + n.shape.numel() <= s.numel(),
                          "verify " << function.name << ": slice out of range " << to_string(function, id));
    }
  }
}

}  // namespace vjit::ir
