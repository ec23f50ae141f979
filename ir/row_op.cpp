#include "ir/row_op.h"

namespace vjit::ir {

const RowOp* row_op(Op op) {
  switch (op) {
#define VJIT_X(name, kind, ...) VJIT_IF_ROW_##kind(case Op::name: return &k##name##Row;)
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
    default: return nullptr;
  }
}

}  // namespace vjit::ir
