#include "jit/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "vjit/error.h"

namespace vjit::jit::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this code reads and writes the host's bytes");

namespace {

using nlohmann::json;

// The reference reader's limit on the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DType {
  std::string_view name;
  size_t size;
};
// Every dtype of the spec whose elements are whole bytes.
constexpr DType kDTypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                             {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                             {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

// A directory opens as a stream whose "size" is huge (a buffer of it is
// std::bad_alloc), a FIFO blocks: only regular files (or links to one) are read.
void check_regular_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) return;  // opening it says why (no such file, permission)
  VJIT_USER_CHECK(std::filesystem::is_regular_file(status),
                  "cannot read '" << path << "': it is not a regular file ("
                                  << (std::filesystem::is_directory(status) ? "a directory" : "a device, FIFO or socket")
                                  << ")");
}

std::vector<char> read_whole_file(const std::string& path) {
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  VJIT_USER_CHECK(in, "cannot open '" << path << "': " << std::strerror(errno));
  const std::streamsize size = in.tellg();
  VJIT_USER_CHECK(size >= 0, "cannot read '" << path << "': " << std::strerror(errno));
  std::vector<char> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(bytes.data(), size);
  VJIT_USER_CHECK(in || size == 0, "cannot read '" << path << "': " << std::strerror(errno));
  return bytes;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UserError("'" + path + "' is not a valid safetensors file: " + what);
}

// A non-negative integer of the header, or an error naming where it is.
uint64_t unsigned_at(const json& value, const std::string& path, const std::string& where) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0))
    bad(path, where + " is " + value.dump() + ", not a non-negative integer");
  return value.get<uint64_t>();
}

Tensor parse_tensor(const std::string& path, const std::string& name, const json& entry, uint64_t data_size,
                    uint64_t& begin, uint64_t& end) {
  const std::string where = "tensor '" + name + "'";
  if (!entry.is_object()) bad(path, where + " is " + entry.dump() + ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) bad(path, where + " has no \"" + key + "\"");
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) bad(path, where + " has dtype " + dtype.dump() + ", not a string");
  Tensor tensor;
  tensor.name = name;
  tensor.dtype = dtype.get<std::string>();
  const size_t element = dtype_size(tensor.dtype);
  if (element == 0) bad(path, where + " has the unknown dtype \"" + tensor.dtype + "\"");
  const json& shape = entry["shape"];
  if (!shape.is_array()) bad(path, where + " has shape " + shape.dump() + ", not an array");
  // The size the shape needs; a product past the data is kept at data_size + 1
  // ("too large") so that it cannot overflow, unless a later extent is 0.
  uint64_t bytes = element;
  for (size_t d = 0; d < shape.size(); ++d) {
    const uint64_t extent = unsigned_at(shape[d], path, where + "'s shape[" + std::to_string(d) + "]");
    if (__builtin_mul_overflow(bytes, extent, &bytes) || bytes > data_size) bytes = extent == 0 ? 0 : data_size + 1;
    tensor.shape.push_back(int64_t(std::min<uint64_t>(extent, uint64_t(INT64_MAX))));
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) bad(path, where + " has data_offsets " + offsets.dump() + ", not [begin, end]");
  begin = unsigned_at(offsets[0], path, where + "'s data_offsets[0]");
  end = unsigned_at(offsets[1], path, where + "'s data_offsets[1]");
  if (begin > end) bad(path, where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "], which end before they begin");
  if (end > data_size)
    bad(path, where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  "] past the end of the data, which holds " + std::to_string(data_size) +
                  " bytes: the file is truncated or damaged");
  if (bytes != end - begin)
    bad(path, where + " of dtype " + tensor.dtype + " and shape " + shape_string(tensor.shape) + " needs " +
                  (bytes > data_size ? std::string("more bytes than the data holds") : std::to_string(bytes) + " bytes") +
                  ", but its data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                  std::to_string(end - begin));
  return tensor;
}

}  // namespace

size_t dtype_size(std::string_view dtype) {
  for (const DType& d : kDTypes)
    if (d.name == dtype) return d.size;
  return 0;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

const Tensor* File::find(const std::string& name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

File read(const std::string& path) {
  File file;
  file.path = path;
  file.contents = read_whole_file(path);
  const uint64_t size = file.contents.size();
  if (size < 8)
    bad(path, "it is " + std::to_string(size) + " bytes long, shorter than the 8-byte header size it starts with (truncated)");
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.contents.data(), 8);
  if (header_size > size - 8)
    bad(path, "its header size " + std::to_string(header_size) + " is larger than the " + std::to_string(size - 8) +
                  " bytes that follow it (truncated, or not a safetensors file)");
  if (header_size > kMaxHeaderBytes)
    bad(path, "its header size " + std::to_string(header_size) + " is above the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  const std::string_view header_text(file.contents.data() + 8, header_size);
  if (header_text.empty() || header_text.front() != '{')
    bad(path, "its header does not start with '{' (byte offset 8)");
  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {
    bad(path, std::string("its header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad(path, "its header is not a JSON object");

  const uint64_t data_start = 8 + header_size, data_size = size - data_start;
  struct Placed {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Placed> placed;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(path, "\"__metadata__\" is not an object of strings");
      for (const auto& field : entry.items()) {
        if (!field.value().is_string())
          bad(path, "\"__metadata__\" entry '" + field.key() + "' is " + field.value().dump() + ", not a string");
        file.metadata[field.key()] = field.value().get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0, end = 0;
    file.tensors.push_back(parse_tensor(path, name, entry, data_size, begin, end));
    placed.push_back({begin, end, file.tensors.size() - 1});
  }

  // The tensors must tile the data: sorted by offset, each begins where the
  // one before ended, the last ends where the file does.
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  std::string previous;
  for (const Placed& p : placed) {
    const std::string& name = file.tensors[p.tensor].name;
    if (p.begin < covered)
      bad(path, "tensor '" + name + "' (data bytes [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                    ")) overlaps tensor '" + previous + "', which ends at byte " + std::to_string(covered));
    if (p.begin > covered)
      bad(path, "data bytes [" + std::to_string(covered) + ", " + std::to_string(p.begin) +
                    ") (file offset " + std::to_string(data_start + covered) + ") belong to no tensor");
    covered = p.end;
    previous = name;
  }
  if (covered != data_size)
    bad(path, "the tensors cover " + std::to_string(covered) + " bytes of data, but " + std::to_string(data_size) +
                  " follow the header (file offset " + std::to_string(data_start + covered) + " on belong to no tensor)");

  std::vector<Tensor> ordered;
  ordered.reserve(placed.size());
  for (const Placed& p : placed) {
    Tensor& t = file.tensors[p.tensor];
    t.bytes = std::string_view(file.contents.data() + data_start + p.begin, p.end - p.begin);
    ordered.push_back(std::move(t));
  }
  file.tensors = std::move(ordered);
  return file;
}

void write(const std::string& path, const std::map<std::string, std::string>& metadata,
           const std::vector<Tensor>& tensors, const std::string& what) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    VJIT_USER_CHECK(t.name != "__metadata__", "cannot write " << what << " '" << path
                                                               << "': a tensor cannot be named '__metadata__'");
    VJIT_USER_CHECK(!header.contains(t.name),
                    "cannot write " << what << " '" << path << "': two tensors are named '" << t.name << "'");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata string that is not UTF-8
    throw UserError("cannot write " + what + " '" + path + "': " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer pads
  const uint64_t header_size = text.size();
  char size_bytes[8];
  std::memcpy(size_bytes, &header_size, 8);
  std::vector<std::string_view> pieces{std::string_view(size_bytes, 8), text};
  for (const Tensor& t : tensors) pieces.push_back(t.bytes);
  io::write_file_atomically(path, pieces, what);
}

}  // namespace vjit::jit::safetensors
