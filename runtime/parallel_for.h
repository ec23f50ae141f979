#pragma once
// How an optimizer's step (vjit/optimizer.h) runs its chunks of work on
// several threads: ParallelFor, and PoolParallelFor, the Engine's ThreadPool
// lent to it. Tests give it runners of their own (another order, counted runs).
#include <cstdint>
#include <type_traits>

#include "runtime/thread_pool.h"

namespace vjit::runtime {

/// A non-owning reference to a callable void(int64_t): two pointers, copied
/// freely, never allocating. The callable must outlive every call through it.
class TaskRef {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, TaskRef> &&
                                                    std::is_invocable_v<F&, int64_t>>>
  /// Refers to `fn` (not copied). Implicit, like a function pointer's conversion.
  TaskRef(F&& fn)  // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const void*>(&fn))), call_(&invoke<std::remove_reference_t<F>>) {}

  void operator()(int64_t i) const { call_(object_, i); }  ///< calls the callable with i

 private:
  template <typename F>
  static void invoke(void* fn, int64_t i) {
    (*static_cast<F*>(fn))(i);
  }

  void* object_;
  void (*call_)(void*, int64_t);
};

/// Runs independent tasks on several threads: run(n, fn) calls fn(i) once for
/// every i in [0, n), on any of its threads and in any order, and returns when
/// all calls have returned (rethrowing an exception one threw). An optimizer's
/// tasks write disjoint memory. For allocation-free steps an implementation must
/// not allocate per call.
class ParallelFor {
 public:
  virtual ~ParallelFor() = default;
  virtual void run(int64_t n, TaskRef fn) = 0;  ///< fn(i) for every i in [0, n), then returns
};

/// ParallelFor on a ThreadPool; parallel_for allocates nothing per call.
class PoolParallelFor final : public ParallelFor {
 public:
  explicit PoolParallelFor(ThreadPool& pool) : pool_(pool) {}
  void run(int64_t n, TaskRef fn) override {
    pool_.parallel_for(n, [fn](int64_t i) { fn(i); });
  }

 private:
  ThreadPool& pool_;
};

}  // namespace vjit::runtime
