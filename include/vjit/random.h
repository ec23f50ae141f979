#pragma once
// Seeded pseudo-random numbers that are the same on every platform and with
// every standard library: SplitMix64 (Steele, Lea and Flood, OOPSLA'14). For
// data generators, examples and tests; the dropout masks hash with mix64 too.
//
//   vjit::Rng rng(seed);
//   int length = rng.uniform_int(5, 20);
//   rng.shuffle(order);
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace vjit {

/// SplitMix64's finaliser: a bijective mix of the 64 bits of x. A fixed
/// function of x, for drawing a random choice from a position or a seed.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

/// SplitMix64: a stream of 64-bit numbers determined by the seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}  ///< the stream of `seed`

  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }  ///< the next 64 random bits
  /// In [lo, hi] (lo <= hi), by the remainder of next(): the bias is below
  /// 2^-32 for ranges under 2^32.
  int uniform_int(int lo, int hi) {
    const uint64_t range = uint64_t(int64_t(hi) - int64_t(lo)) + 1;
    return int(int64_t(lo) + int64_t(next() % range));
  }
  /// In [0, 1), 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  bool bernoulli(double p) { return uniform() < p; }  ///< true with probability p
  /// Fisher–Yates: every order equally likely (up to uniform_int's bias).
  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (int i = int(items.size()) - 1; i > 0; --i) std::swap(items[size_t(i)], items[size_t(uniform_int(0, i))]);
  }

 private:
  uint64_t state_;
};

}  // namespace vjit
