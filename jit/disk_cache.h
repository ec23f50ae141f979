#pragma once
// A directory of compiled artefacts (CUDA modules), one file per key. Writes are
// atomic: the entry goes to a temporary file in the same directory, is
// fsync'ed, then renamed over the final name, so a reader sees a whole entry or
// none. Every entry carries its key and a checksum of key and payload; a
// truncated, corrupt or colliding entry is reported as a miss (and counted),
// never returned, so the caller rebuilds it and stores it again.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vjit::jit {

// FNV-1a, 64 bits.
uint64_t fnv1a64(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ull);

class DiskCache {
 public:
  // `dir` is created on the first store; an empty dir disables the cache.
  explicit DiskCache(std::string dir, std::string prefix = "cuda-");

  bool enabled() const { return !dir_.empty(); }
  // The entry's payload, or nullopt when it is absent or damaged (then
  // `damaged`, if given, is set).
  std::optional<std::string> load(std::string_view key, bool* damaged = nullptr) const;
  // Stores atomically. Throws UserError naming the path when the directory
  // cannot be written.
  void store(std::string_view key, std::string_view payload) const;
  // The file an entry of `key` lives in.
  std::string path(std::string_view key) const;

 private:
  std::string dir_, prefix_;
};

}  // namespace vjit::jit
