#include "jit/disk_cache.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "vjit/error.h"

namespace vjit::jit {

namespace {

// The file: magic, key length, payload length, checksum (u64 each, little
// endian as the host writes them), key, payload.
constexpr char kMagic[8] = {'v', 'j', 'i', 't', 'c', 'c', '1', '\n'};

void append_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

uint64_t read_u64(const std::string& in, size_t at) {
  uint64_t v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

uint64_t checksum(std::string_view key, std::string_view payload) { return fnv1a64(payload, fnv1a64(key)); }

}  // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

DiskCache::DiskCache(std::string dir, std::string prefix) : dir_(std::move(dir)), prefix_(std::move(prefix)) {}

std::string DiskCache::path(std::string_view key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(fnv1a64(key)));
  return dir_ + "/" + prefix_ + name + ".bin";
}

std::optional<std::string> DiskCache::load(std::string_view key, bool* damaged) const {
  if (damaged) *damaged = false;
  if (!enabled()) return std::nullopt;
  std::ifstream in(path(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  const size_t header = sizeof kMagic + 3 * sizeof(uint64_t);
  auto bad = [&] {
    if (damaged) *damaged = true;
    return std::nullopt;
  };
  if (file.size() < header || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) return bad();
  const uint64_t key_size = read_u64(file, sizeof kMagic), payload_size = read_u64(file, sizeof kMagic + 8);
  const uint64_t sum = read_u64(file, sizeof kMagic + 16);
  if (key_size != key.size() || file.size() != header + key_size + payload_size) return bad();
  std::string_view stored_key(file.data() + header, key_size);
  std::string_view payload(file.data() + header + key_size, payload_size);
  if (stored_key != key || checksum(stored_key, payload) != sum) return bad();
  return std::string(payload);
}

void DiskCache::store(std::string_view key, std::string_view payload) const {
  if (!enabled()) return;
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  VJIT_USER_CHECK(!error, "cannot create the kernel cache directory " << dir_ << " (VJIT_CACHE_DIR): "
                                                                     << error.message());
  std::string file(kMagic, sizeof kMagic);
  append_u64(file, key.size());
  append_u64(file, payload.size());
  append_u64(file, checksum(key, payload));
  file.append(key);
  file.append(payload);
  const std::string_view pieces[] = {file};
  io::write_file_atomically(path(key), pieces, "the kernel cache entry (VJIT_CACHE_DIR)");
}

}  // namespace vjit::jit
