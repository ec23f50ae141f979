// libcublasLt.so.N of the driver double (driver_double.h): the cuBLASLt
// functions vjit resolves, with descriptors and layouts kept as plain data and
// each product recorded (m, n, k, transposes, leading dimensions, alpha and
// beta) in the driver double's log, its operands checked against the live
// device allocations. Nothing is multiplied.
#include <cublasLt.h>

#include <cstring>
#include <map>
#include <mutex>

#include "driver_double.h"

namespace {

struct Desc {
  int compute_type = 0, trans_a = 0, trans_b = 0;
};
struct Layout {
  int64_t rows = 0, cols = 0, ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // floats
};

// What lives now, by fake handle; never destroyed (see driver_double.cpp).
struct State {
  std::mutex mutex;
  std::map<uint64_t, Desc> descs;
  std::map<uint64_t, Layout> layouts;
  std::map<uint64_t, int> preferences, handles;
  uint64_t next_handle = 0x7f000000;
  uint64_t new_handle() { return next_handle += 0x40; }
};

State& state() {
  static State* s = new State;
  return *s;
}

using Lock = std::lock_guard<std::mutex>;

uint64_t as_int(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

cublasStatus_t record(const char* name, cublasStatus_t status, uint64_t handle = 0) {
  VjitDoubleCall call{};
  std::strncpy(call.name, name, sizeof call.name - 1);
  call.status = int(status);
  call.args[0] = handle;
  vjit_double_record(&call);
  return status;
}

template <typename Handle, typename Map>
cublasStatus_t create(const char* name, Handle* out, Map& map, typename Map::mapped_type value) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = s.new_handle();
  map[h] = value;
  *out = reinterpret_cast<Handle>(h);
  return record(name, CUBLAS_STATUS_SUCCESS, h);
}

template <typename Map>
cublasStatus_t destroy(const char* name, const void* handle, Map& map) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = map.erase(as_int(handle)) > 0;
  return record(name, known ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE, as_int(handle));
}

// A column-major rows × cols matrix with leading dimension ld, in floats, lies
// in one device allocation; in a strided batch, every matrix of it (the
// stride not negative).
bool operand_on_device(uint64_t data, const Layout& layout) {
  if (layout.rows == 0 || layout.cols == 0) return true;
  if (layout.batch_count < 1 || layout.batch_stride < 0) return false;
  const size_t floats =
      size_t((layout.cols - 1) * layout.ld + layout.rows + int64_t(layout.batch_count - 1) * layout.batch_stride);
  return layout.ld >= layout.rows && vjit_double_is_device_range(data, floats * sizeof(float)) != 0;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  return create("cublasLtCreate", handle, state().handles, 0);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return destroy("cublasLtDestroy", handle, state().handles);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t) {
  return create("cublasLtMatmulDescCreate", desc, state().descs, Desc{int(compute), 0, 0});
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy("cublasLtMatmulDescDestroy", desc, state().descs);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes) {
  State& s = state();
  Lock lock(s.mutex);
  auto found = s.descs.find(as_int(desc));
  if (found == s.descs.end() || bytes != sizeof(int32_t))
    return record("cublasLtMatmulDescSetAttribute", CUBLAS_STATUS_INVALID_VALUE, as_int(desc));
  int32_t op = 0;
  std::memcpy(&op, value, sizeof op);
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSA) found->second.trans_a = op != CUBLAS_OP_N;
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSB) found->second.trans_b = op != CUBLAS_OP_N;
  return record("cublasLtMatmulDescSetAttribute", CUBLAS_STATUS_SUCCESS, as_int(desc));
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F) return record("cublasLtMatrixLayoutCreate", CUBLAS_STATUS_NOT_SUPPORTED);
  return create("cublasLtMatrixLayoutCreate", layout, state().layouts, Layout{int64_t(rows), int64_t(cols), ld});
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy("cublasLtMatrixLayoutDestroy", layout, state().layouts);
}

// The batch attributes (count int32_t, stride int64_t, as cuBLASLt sizes
// them); any other attribute or size is refused.
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* value, size_t bytes) {
  State& s = state();
  Lock lock(s.mutex);
  auto found = s.layouts.find(as_int(layout));
  bool valid = found != s.layouts.end();
  if (valid && attribute == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && bytes == sizeof(int32_t))
    std::memcpy(&found->second.batch_count, value, bytes);
  else if (valid && attribute == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && bytes == sizeof(int64_t))
    std::memcpy(&found->second.batch_stride, value, bytes);
  else
    valid = false;
  return record("cublasLtMatrixLayoutSetAttribute", valid ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE,
                as_int(layout));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  return create("cublasLtMatmulPreferenceCreate", preference, state().preferences, 0);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  return destroy("cublasLtMatmulPreferenceDestroy", preference, state().preferences);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t, const void*, size_t) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = s.preferences.count(as_int(preference)) > 0;
  return record("cublasLtMatmulPreferenceSetAttribute", known ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE,
                as_int(preference));
}

// One algorithm, all zeros, for every problem whose descriptors are alive.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  State& s = state();
  Lock lock(s.mutex);
  bool known = s.handles.count(as_int(handle)) && s.descs.count(as_int(desc)) &&
               s.preferences.count(as_int(preference)) && requested >= 1;
  for (const void* layout : {a, b, c, d}) known = known && s.layouts.count(as_int(layout));
  *returned = known ? 1 : 0;
  if (known) results[0] = cublasLtMatmulHeuristicResult_t{};
  return record("cublasLtMatmulAlgoGetHeuristic", known ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE,
                as_int(desc));
}

}  // extern "C"

namespace {

// D = alpha·op(A)·op(B) + beta·C, column-major: op(A) m × k, op(B) k × n, C and D m × n.
bool shapes_agree(const VjitDoubleCall& call, const Layout& a, const Layout& b, const Layout& c, const Layout& d) {
  const int64_t a_rows = call.trans_a ? a.cols : a.rows, a_cols = call.trans_a ? a.rows : a.cols;
  const int64_t b_rows = call.trans_b ? b.cols : b.rows, b_cols = call.trans_b ? b.rows : b.cols;
  return a_rows == call.m && a_cols == call.k && b_rows == call.k && b_cols == call.n && c.rows == d.rows &&
         c.cols == d.cols && c.ld == d.ld && a.batch_count == d.batch_count && b.batch_count == d.batch_count &&
         c.batch_count == d.batch_count;
}

// The call with its descriptor's transposes and compute type and the layouts'
// shapes; false when a handle is not alive.
bool describe_matmul(State& s, const void* desc, const void* const (&layouts)[4], VjitDoubleCall& call,
                     Layout (&shapes)[4]) {
  auto found = s.descs.find(as_int(desc));
  if (found == s.descs.end()) return false;
  call.trans_a = found->second.trans_a;
  call.trans_b = found->second.trans_b;
  call.compute_type = found->second.compute_type;
  for (int i = 0; i < 4; ++i) {
    auto layout = s.layouts.find(as_int(layouts[i]));
    if (layout == s.layouts.end()) return false;
    shapes[i] = layout->second;
  }
  call.m = shapes[3].rows;
  call.n = shapes[3].cols;
  call.k = call.trans_a ? shapes[0].rows : shapes[0].cols;
  call.lda = shapes[0].ld;
  call.ldb = shapes[1].ld;
  call.ldc = shapes[3].ld;
  call.batch_count = shapes[3].batch_count;
  for (int i = 0; i < 4; ++i) call.batch_stride[i] = shapes[i].batch_stride;
  return true;
}

}  // namespace

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                         const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                                         cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                                         cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                                         const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                         cudaStream_t stream) {
  State& s = state();
  Lock lock(s.mutex);
  VjitDoubleCall call{};
  std::strncpy(call.name, "cublasLtMatmul", sizeof call.name - 1);
  const uint64_t operands[] = {as_int(a), as_int(b), as_int(c), as_int(d), as_int(workspace), workspace_bytes};
  std::copy(std::begin(operands), std::end(operands), call.args);
  call.stream = as_int(stream);
  std::memcpy(&call.alpha, alpha, sizeof(float));
  std::memcpy(&call.beta, beta, sizeof(float));
  Layout shapes[4];
  bool valid = s.handles.count(as_int(handle)) && algo != nullptr &&
               describe_matmul(s, desc, {a_desc, b_desc, c_desc, d_desc}, call, shapes);
  valid = valid && shapes_agree(call, shapes[0], shapes[1], shapes[2], shapes[3]);
  for (int i = 0; i < 4 && valid; ++i) valid = operand_on_device(operands[i], shapes[i]);
  // A batch's outputs lie apart: each D wholly before the next.
  const Layout& out = shapes[3];
  valid = valid && (out.batch_count == 1 || out.batch_stride >= (out.cols - 1) * out.ld + out.rows);
  valid = valid && (workspace_bytes == 0 || vjit_double_is_device_range(as_int(workspace), workspace_bytes));
  call.status = valid ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  vjit_double_record(&call);
  return cublasStatus_t(call.status);
}
