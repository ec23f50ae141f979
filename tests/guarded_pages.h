#pragma once
// Two pages, the second PROT_NONE: an array ending at the first page's end
// faults on any access past it (the tail tests of the unary kernels,
// tests/test_vmath.cpp and tests/test_a64_vmath.cpp).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <stdexcept>

namespace vjit::test_util {

class GuardedPages {
 public:
  GuardedPages() : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(p);
    if (mprotect(base_ + page_, page_, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
  }
  ~GuardedPages() { munmap(base_, 2 * page_); }
  GuardedPages(const GuardedPages&) = delete;
  GuardedPages& operator=(const GuardedPages&) = delete;

  // n floats ending exactly at the guard page.
  float* array_at_end(std::size_t n) { return reinterpret_cast<float*>(base_ + page_) - n; }
  std::size_t page_floats() const { return page_ / sizeof(float); }

 private:
  std::size_t page_;
  char* base_ = nullptr;
};

}  // namespace vjit::test_util
