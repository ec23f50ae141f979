#pragma once
// Replaces the global operator new and delete of the test program that
// includes this header (include it from exactly one file of a program) with
// ones that count allocations, on every thread, while an AllocationCounter
// lives. Memory a C library takes with malloc is not counted.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace vjit::test_util {

inline std::atomic<bool> g_counting{false};
inline std::atomic<int64_t> g_allocations{0};

inline void* counted_alloc(std::size_t size, std::size_t align = 0) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = align == 0 ? std::malloc(size) : std::aligned_alloc(align, (size + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}

// Counts the allocations any thread makes while it lives.
class AllocationCounter {
 public:
  AllocationCounter() {
    g_allocations.store(0);
    g_counting.store(true);
  }
  ~AllocationCounter() { g_counting.store(false); }
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  int64_t count() const { return g_allocations.load(); }
};

}  // namespace vjit::test_util

void* operator new(std::size_t size) { return vjit::test_util::counted_alloc(size); }
void* operator new[](std::size_t size) { return vjit::test_util::counted_alloc(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  return vjit::test_util::counted_alloc(size, std::size_t(align));
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return vjit::test_util::counted_alloc(size, std::size_t(align));
}
// The nothrow forms too (std::stable_sort's temporary buffer uses them): every
// form of new must come from the same allocator as the deletes below.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return vjit::test_util::counted_alloc(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return vjit::test_util::counted_alloc(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return vjit::test_util::counted_alloc(size, std::size_t(align));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return vjit::test_util::counted_alloc(size, std::size_t(align));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
// GCC at -O1 (scripts/build.sh Thread) inlines these deletes into callers and
// then reports free() on memory from operator new (-Wmismatched-new-delete),
// not seeing that every operator new above is malloc: the pairing is right by
// construction, so the warning is off for these definitions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
