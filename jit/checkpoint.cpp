// Checkpoints (include/vjit/checkpoint.h) over the safetensors reader and
// writer of jit/safetensors.h. Loading stages everything it will change —
// parameter values, the optimizer state — and validates it all before the
// first write into the Model or the engine.
#include "vjit/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "jit/engine_access.h"
#include "jit/safetensors.h"
#include "vjit/error.h"

namespace vjit {

namespace {

using jit::safetensors::Tensor;

constexpr const char* kFormatKey = "vjit.format";
constexpr const char* kFormat = "checkpoint";
constexpr const char* kVersionKey = "vjit.version";
constexpr const char* kVersion = "1";
constexpr const char* kSignatureKey = "vjit.signature";
constexpr const char* kTrainStepsKey = "vjit.train_steps";
constexpr const char* kOptimizerKey = "vjit.optimizer";
constexpr const char* kSlotsKey = "vjit.optimizer.slots";
constexpr const char* kFrozenKey = "vjit.frozen";
constexpr const char* kStepTensor = "optimizer.step";
constexpr const char* kChecksumKey = "vjit.checksum";
constexpr const char* kChecksum = "crc32";
constexpr std::string_view kCrcPrefix = "vjit.crc32.";
constexpr std::string_view kReservedPrefix = "vjit.";
constexpr std::string_view kOptimizerPrefix = "optimizer.";

std::string slot_tensor(const std::string& slot, const std::string& param) {
  return std::string(kOptimizerPrefix) + slot + "." + param;
}

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int d = 0; d < shape.rank; ++d) dims.push_back(shape.dims[size_t(d)]);
  return dims;
}

template <typename T>
std::string_view bytes_of(const T* data, size_t count) {
  return {reinterpret_cast<const char*>(data), count * sizeof(T)};
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
  return out;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin < list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    items.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

// The shortest text that reads back as the same value (a float's as a float:
// "0.01", not 0.00999999977648...).
std::string exact(double value) {
  char text[64];
  const float narrow = float(value);
  const std::to_chars_result r = double(narrow) == value ? std::to_chars(text, text + sizeof text, narrow)
                                                         : std::to_chars(text, text + sizeof text, value);
  return std::string(text, r.ptr);
}

// zlib's CRC-32 of `bytes` (Python: f"{zlib.crc32(data):08x}"), 8 hex digits.
std::string crc32_hex(std::string_view bytes) {
  const unsigned long crc = crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  char text[9];
  std::snprintf(text, sizeof text, "%08lx", crc & 0xffffffffUL);
  return text;
}

// Records every tensor's checksum in `metadata`, and that the file has them.
void add_checksums(std::map<std::string, std::string>& metadata, const std::vector<Tensor>& tensors) {
  metadata[kChecksumKey] = kChecksum;
  for (const Tensor& t : tensors) metadata[std::string(kCrcPrefix) + t.name] = crc32_hex(t.bytes);
}

// The index of the first NaN or ±Inf among F32 `bytes`, or -1.
int64_t first_non_finite(std::string_view bytes) {
  for (size_t i = 0; i * sizeof(float) < bytes.size(); ++i) {
    float value;
    std::memcpy(&value, bytes.data() + i * sizeof(float), sizeof value);
    if (!std::isfinite(value)) return int64_t(i);
  }
  return -1;
}

// A file with a NaN or an infinity would be refused by every load: refused
// here instead, before anything is written, naming the tensor and element.
void check_finite_for_save(const std::string& path, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (t.dtype != "F32") continue;
    const int64_t k = first_non_finite(t.bytes);
    VJIT_USER_CHECK(k < 0, "cannot write '" << path << "': tensor '" << t.name << "' holds a value that is not finite at element "
                                            << k << " (a checkpoint holds finite values only; load refuses others)");
  }
}

void check_user_metadata(const std::string& path, const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata)
    VJIT_USER_CHECK(!std::string_view(key).starts_with(kReservedPrefix),
                    "cannot write '" << path << "': metadata key '" << key << "' starts with '" << kReservedPrefix
                                     << "', which vjit reserves for its own entries");
}

// The names of the model's frozen parameters (constants included), comma-separated.
std::string frozen_names(const Model& model) {
  std::vector<std::string> names;
  for (int p = 0; p < model.size(); ++p)
    if (model.param(p).frozen) names.push_back(model.param(p).name);
  return join(names);
}

std::vector<Tensor> parameter_tensors(const Model& model) {
  std::vector<Tensor> tensors;
  for (int p = 0; p < model.size(); ++p) {
    const ParamData& param = model.param(p);
    tensors.push_back({param.name, "F32", dims_of(param.shape), bytes_of(param.value.data(), param.value.size())});
  }
  return tensors;
}

// The first line where two signatures differ, for the error message.
std::string first_difference(const std::string& expected, const std::string& found) {
  size_t line = 1, a = 0, b = 0;
  while (a < expected.size() || b < found.size()) {
    const size_t a_end = std::min(expected.find('\n', a), expected.size());
    const size_t b_end = std::min(found.find('\n', b), found.size());
    const std::string want = expected.substr(a, a_end - a), got = found.substr(b, b_end - b);
    if (want != got || (a >= expected.size()) != (b >= found.size()))
      return "line " + std::to_string(line) + " is '" + got + "' in the file, '" + want + "' in the program";
    a = a_end + 1;
    b = b_end + 1;
    ++line;
  }
  return "they differ";
}

class Loader {
 public:
  explicit Loader(const std::string& path) : file_(jit::safetensors::read(path)) {}

  const jit::safetensors::File& file() const { return file_; }
  bool is_checkpoint() const { return file_.metadata.contains(kFormatKey); }

  [[noreturn]] void fail(const std::string& what) const { throw UserError("cannot load '" + file_.path + "': " + what); }

  const std::string& metadata(const char* key) const {
    const auto it = file_.metadata.find(key);
    if (it == file_.metadata.end()) fail(std::string("its metadata has no \"") + key + "\"");
    return it->second;
  }

  // The F32 tensor `name` of `shape`, checked (checksum, finite values);
  // `role` says what it is for messages.
  std::string_view f32(const std::string& name, const Shape& shape, const std::string& role) const {
    const Tensor* t = file_.find(name);
    if (!t) fail("it has no tensor '" + name + "' for " + role);
    if (t->dtype != "F32")
      fail("tensor '" + name + "' (" + role + ") is " + t->dtype + "; vjit's parameters and optimizer state are F32");
    if (t->shape != dims_of(shape))
      fail("tensor '" + name + "' (" + role + ") has shape " + jit::safetensors::shape_string(t->shape) +
           " in the file, " + jit::safetensors::shape_string(dims_of(shape)) + " in the model");
    check_checksum(*t, role);
    check_finite(*t, role);
    return t->bytes;
  }

  // A NaN or ±Inf in an F32 tensor would poison every step after the load.
  void check_finite(const Tensor& t, const std::string& role) const {
    const int64_t k = first_non_finite(t.bytes);
    if (k < 0) return;
    float value;
    std::memcpy(&value, t.bytes.data() + size_t(k) * sizeof(float), sizeof value);
    fail("tensor '" + t.name + "' (" + role + ") holds " + std::to_string(value) + " at element " +
         std::to_string(k) + ", which is not finite; vjit loads finite values only");
  }

  // A file written with checksums ("vjit.checksum") has one per tensor, which
  // its data must match. Files without them (written before they existed, or
  // by other tools) load unverified.
  void check_checksum(const Tensor& t, const std::string& role) const {
    if (!file_.metadata.contains(kChecksumKey)) return;
    if (metadata(kChecksumKey) != kChecksum)
      fail(std::string("its \"") + kChecksumKey + "\" is '" + metadata(kChecksumKey) + "'; this build checks '" +
           kChecksum + "'");
    const auto saved = file_.metadata.find(std::string(kCrcPrefix) + t.name);
    if (saved == file_.metadata.end())
      fail("tensor '" + t.name + "' (" + role + ") has no checksum (\"" + std::string(kCrcPrefix) + t.name +
           "\") in the metadata");
    const std::string actual = crc32_hex(t.bytes);
    if (saved->second != actual)
      fail("tensor '" + t.name + "' (" + role + ") does not match its checksum: CRC-32 " + actual +
           " of its data, " + saved->second + " in the metadata; the file is damaged");
  }

  // Every parameter's values, checked.
  std::vector<std::string_view> parameters(const Model& model) const {
    std::vector<std::string_view> values;
    for (int p = 0; p < model.size(); ++p)
      values.push_back(f32(model.param(p).name, model.param(p).shape, "parameter '" + model.param(p).name + "'"));
    return values;
  }

  // Every tensor of the file is expected: a parameter of the model, or, in a
  // vjit checkpoint with optimizer state, one of the state's tensors.
  void check_no_extra(const Model& model) const {
    std::set<std::string> expected;
    for (int p = 0; p < model.size(); ++p) expected.insert(model.param(p).name);
    const bool optimizer_state = is_checkpoint() && file_.metadata.contains(kOptimizerKey);
    if (optimizer_state) {
      expected.insert(kStepTensor);
      for (const std::string& slot : split(metadata(kSlotsKey)))
        for (int p = 0; p < model.size(); ++p) expected.insert(slot_tensor(slot, model.param(p).name));
    }
    for (const Tensor& t : file_.tensors)
      if (!expected.contains(t.name))
        fail("its tensor '" + t.name + "' is not a parameter of the model" +
             (optimizer_state ? " nor part of the optimizer state" : ""));
  }

  void check_checkpoint(const Program& program) const {
    if (!is_checkpoint())
      fail(std::string("it is not a vjit checkpoint (no \"") + kFormatKey +
           "\" in its metadata); a file of parameters only loads with load_parameters");
    if (metadata(kFormatKey) != kFormat)
      fail(std::string("its \"") + kFormatKey + "\" is '" + metadata(kFormatKey) + "', not '" + kFormat + "'");
    if (metadata(kVersionKey) != kVersion)
      fail("it has format version " + metadata(kVersionKey) + "; this build reads version " + kVersion);
    const std::string& signature = metadata(kSignatureKey);
    if (signature != program.signature_string())
      fail("it was saved for another program: " + first_difference(program.signature_string(), signature));
  }

  // A checkpoint records which parameters were frozen; loading checks the
  // model freezes the same ones (freezing is the program's choice, made
  // before its vertex types are built, so it is checked, not applied).
  // Files written before the entry existed carry none and are not checked.
  void check_frozen(const Model& model) const {
    if (!file_.metadata.contains(kFrozenKey)) return;
    const std::string& saved = metadata(kFrozenKey);
    if (saved == frozen_names(model)) return;
    const std::vector<std::string> saved_names = saved.empty() ? std::vector<std::string>{} : split(saved);
    const std::set<std::string> saved_set(saved_names.begin(), saved_names.end());
    for (int p = 0; p < model.size(); ++p)
      if (model.param(p).frozen != saved_set.contains(model.param(p).name))
        fail("parameter '" + model.param(p).name + "' is " + (model.param(p).frozen ? "frozen" : "trainable") +
             " in the model but was " + (model.param(p).frozen ? "trainable" : "frozen") + " in the saved run");
    fail(std::string("its \"") + kFrozenKey + "\" is '" + saved + "', the model's frozen parameters are '" +
         frozen_names(model) + "'");
  }

  uint64_t train_steps() const {
    const std::string& text = metadata(kTrainStepsKey);
    uint64_t steps = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), steps);
    if (error != std::errc() || end != text.data() + text.size())
      fail(std::string("its \"") + kTrainStepsKey + "\" is '" + text + "', not a step count");
    return steps;
  }

  // The saved optimizer state for `optimizer`, checked and adopted by it.
  OptimizerState optimizer_state(const Model& model, const Optimizer& optimizer) const {
    if (!file_.metadata.contains(kOptimizerKey))
      fail("it holds no optimizer state (saved without an optimizer); load it without one");
    if (metadata(kOptimizerKey) != optimizer.kind())
      fail("its optimizer state is " + metadata(kOptimizerKey) + "'s, the optimizer given is " + optimizer.kind());
    const std::vector<std::string> slots = optimizer.state_slot_names();
    if (metadata(kSlotsKey) != join(slots))
      fail("its optimizer state has the slots '" + metadata(kSlotsKey) + "', the " + optimizer.kind() +
           " optimizer given uses '" + join(slots) + "'");
    OptimizerState state;
    state.steps = step_count();
    for (int p = 0; p < model.size(); ++p) {
      const ParamData& param = model.param(p);
      state.shapes.push_back(param.shape);
      state.slots.emplace_back();
      for (const std::string& slot : slots) {
        const std::string_view bytes =
            f32(slot_tensor(slot, param.name), param.shape, "the optimizer's " + slot + " of '" + param.name + "'");
        std::vector<float>& values = state.slots.back().emplace_back(size_t(param.shape.numel()));
        std::memcpy(values.data(), bytes.data(), bytes.size());
      }
    }
    optimizer.adopt(state);
    return state;
  }

 private:
  int64_t step_count() const {
    const Tensor* t = file_.find(kStepTensor);
    if (!t) fail(std::string("it has no tensor '") + kStepTensor + "' (the optimizer's step count)");
    if (t->dtype != "I64" || !t->shape.empty())
      fail(std::string("tensor '") + kStepTensor + "' is " + t->dtype + " of shape " +
           jit::safetensors::shape_string(t->shape) + ", not an I64 scalar");
    check_checksum(*t, "the optimizer's step count");
    int64_t steps = 0;
    std::memcpy(&steps, t->bytes.data(), sizeof steps);
    if (steps < 0) fail(std::string("tensor '") + kStepTensor + "' holds " + std::to_string(steps) + " steps");
    return steps;
  }

  jit::safetensors::File file_;
};

// What save_checkpoint writes: the step count, the optimizer state and the
// weights of one step, copied under the engine's lock (no train_step on another
// thread runs meanwhile). The file is written after the lock is released, so
// training waits for this copy only, not for the disk.
struct CheckpointCopy {
  std::map<std::string, std::string> metadata;
  OptimizerState state;
  int64_t steps = 0;
  std::vector<std::vector<float>> weights;  // per parameter
};

CheckpointCopy copy_for_checkpoint(const std::string& path, const Engine& engine, const Optimizer* optimizer,
                                   const std::map<std::string, std::string>& user_metadata) {
  const Model& model = engine.program().model();
  CheckpointCopy copy;
  copy.metadata = user_metadata;
  std::map<std::string, std::string>& metadata = copy.metadata;
  const jit::EngineAccess locked(engine);
  locked.download_parameters();  // the Model's values, where the GPU holds newer ones
  metadata[kFormatKey] = kFormat;
  metadata[kVersionKey] = kVersion;
  metadata[kSignatureKey] = engine.program().signature_string();
  metadata[kTrainStepsKey] = std::to_string(locked.train_steps());
  metadata[kFrozenKey] = frozen_names(model);
  if (optimizer) {
    for (int p = 0; p < model.size(); ++p)
      VJIT_USER_CHECK(!std::string_view(model.param(p).name).starts_with(kOptimizerPrefix),
                      "cannot write '" << path << "': parameter '" << model.param(p).name << "' starts with '"
                                       << kOptimizerPrefix << "', which names the optimizer's tensors");
    const std::vector<std::string> slots = optimizer->state_slot_names();
    for (const auto& [name, value] : optimizer->hyper_parameters()) metadata["vjit.optimizer." + name] = exact(value);
    metadata[kOptimizerKey] = optimizer->kind();
    metadata[kSlotsKey] = join(slots);
    OptimizerState& state = copy.state;
    state = locked.optimizer_state();
    if (!optimizer->made(state)) {  // no step yet: what its first step would make
      state = {};
      for (int p = 0; p < model.size(); ++p)
        state.slots.emplace_back(slots.size(), std::vector<float>(size_t(model.param(p).shape.numel()), 0.0f));
    }
    bool consistent = int(state.slots.size()) == model.size();
    for (size_t p = 0; consistent && p < state.slots.size(); ++p) consistent = state.slots[p].size() == slots.size();
    VJIT_USER_CHECK(consistent, "cannot write '" << path << "': the engine's optimizer state does not hold "
                                                 << slots.size() << " slots (" << join(slots)
                                                 << ") for each of the model's " << model.size() << " parameters");
    copy.steps = state.steps;
  }
  copy.weights.reserve(size_t(model.size()));
  for (int p = 0; p < model.size(); ++p) {
    const ParamValues& values = model.param(p).value;
    copy.weights.emplace_back(values.begin(), values.end());
  }
  return copy;
}

// Copies validated values into the model: cannot fail, so nothing is half done.
void commit_parameters(Model& model, const std::vector<std::string_view>& values) {
  for (int p = 0; p < model.size(); ++p)
    std::memcpy(model.param(p).value.data(), values[size_t(p)].data(), values[size_t(p)].size());
}

}  // namespace

void save_checkpoint(const std::string& path, const Engine& engine, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& user_metadata) {
  check_user_metadata(path, user_metadata);
  const CheckpointCopy copy = copy_for_checkpoint(path, engine, optimizer, user_metadata);
  const Model& model = engine.program().model();  // names and shapes: fixed since Model::add
  std::vector<Tensor> tensors;
  if (optimizer) tensors.push_back({kStepTensor, "I64", {}, bytes_of(&copy.steps, 1)});  // 8-byte dtype first: aligned
  for (int p = 0; p < model.size(); ++p) {
    const std::vector<float>& values = copy.weights[size_t(p)];
    tensors.push_back(
        {model.param(p).name, "F32", dims_of(model.param(p).shape), bytes_of(values.data(), values.size())});
  }
  if (optimizer) {
    const std::vector<std::string> slots = optimizer->state_slot_names();
    for (size_t k = 0; k < slots.size(); ++k)
      for (int p = 0; p < model.size(); ++p) {
        const std::vector<float>& values = copy.state.slots[size_t(p)][k];
        tensors.push_back({slot_tensor(slots[k], model.param(p).name), "F32", dims_of(model.param(p).shape),
                           bytes_of(values.data(), values.size())});
      }
  }
  check_finite_for_save(path, tensors);
  std::map<std::string, std::string> metadata = copy.metadata;
  add_checksums(metadata, tensors);
  jit::safetensors::write(path, metadata, tensors, "checkpoint");
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Engine& engine, Optimizer* optimizer) {
  const Loader loader(path);
  const Program& program = engine.program();
  Model& model = program.model();
  loader.check_checkpoint(program);
  loader.check_frozen(model);
  const uint64_t train_steps = loader.train_steps();
  const std::vector<std::string_view> values = loader.parameters(model);
  OptimizerState state;  // empty: the next step makes a fresh one
  if (optimizer) state = loader.optimizer_state(model, *optimizer);
  loader.check_no_extra(model);
  std::map<std::string, std::string> user_metadata;
  for (const auto& [key, value] : loader.file().metadata)
    if (!std::string_view(key).starts_with(kReservedPrefix)) user_metadata[key] = value;

  // Validated without the lock (reading the file is the long part); the
  // changes under it, so that no infer or train_step sees half of them.
  jit::EngineAccess locked(engine);
  commit_parameters(model, values);
  locked.upload_parameters();
  locked.set_optimizer_state(std::move(state));
  locked.set_train_steps(train_steps);
  return user_metadata;
}

void save_parameters(const std::string& path, const Model& model, const std::map<std::string, std::string>& metadata) {
  check_user_metadata(path, metadata);
  const std::vector<Tensor> tensors = parameter_tensors(model);
  check_finite_for_save(path, tensors);
  std::map<std::string, std::string> with_checksums = metadata;
  add_checksums(with_checksums, tensors);
  jit::safetensors::write(path, with_checksums, tensors, "parameters");
}

void load_parameters(const std::string& path, Model& model) {
  const Loader loader(path);
  const std::vector<std::string_view> values = loader.parameters(model);
  loader.check_no_extra(model);
  commit_parameters(model, values);
}

}  // namespace vjit
