#pragma once
// What every fuzz target shares. A target's LLVMFuzzerTestOneInput feeds the
// bytes to one reader or entry point of vjit: a UserError is the expected answer
// to bad input; any other exception, a crash, a sanitizer report or a broken
// invariant (finding()) aborts, and libFuzzer keeps the input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "vjit/error.h"

namespace vjit::fuzz {

// A broken invariant: says what and aborts (libFuzzer saves the input).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "vjit fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs `body`; true when it returned, false when it threw a UserError (its
// message in *why when given). Any other exception is a finding (an
// InternalError is vjit's own bug; anything else escaped vjit's checks).
template <typename Body>
bool runs_or_rejects(Body&& body, std::string* why = nullptr) {
  try {
    body();
    return true;
  } catch (const UserError& e) {
    if (why != nullptr) *why = e.what();
    return false;
  } catch (const std::exception& e) {
    finding(std::string("exception other than UserError: ") + e.what());
  } catch (...) {
    finding("exception other than UserError (not a std::exception)");
  }
}

// The input as text (it may hold any byte, NUL included).
inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// VJIT_FUZZ_VERBOSE=1 makes a target say what it did with each input (to
// stderr): how far inputs get, when replaying a corpus with -runs=0.
inline bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("VJIT_FUZZ_VERBOSE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

// A directory of this process's own under the system temporary directory,
// removed at exit; for entry points that take a path.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "vjit-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) finding("cannot create a scratch directory under " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Reads bytes of the input one at a time; past the end every read is 0, so
// any input decodes to something.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // A value in [0, n) for n >= 1.
  int below(int n) { return int(byte()) % n; }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace vjit::fuzz
