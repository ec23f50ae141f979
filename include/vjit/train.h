#pragma once
// Small helpers for training loops: deterministic shuffling, a progress bar,
// argmax, a timer and an accuracy counter.
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace vjit {

/// A permutation of 0..n-1 that depends only on (n, seed): std::mt19937_64 (whose
/// output the standard fixes) drives a Fisher–Yates shuffle written out here with
/// rejection sampling, so the result is the same with every standard library.
/// Throws UserError when n < 0.
std::vector<int> shuffled_indices(int n, uint64_t seed);

/// Index of the largest of x[0..n) (the first one on ties; NaNs are skipped unless
/// all are NaN, then 0). Throws UserError when n <= 0 or x is null.
int argmax(const float* x, int n);

/// Seconds on the steady clock since construction or the last reset().
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }  ///< starts counting again
  /// Seconds since construction or reset().
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Counts correct predictions.
struct Accuracy {
  int64_t correct = 0;  ///< predictions that were right
  int64_t total = 0;  ///< predictions counted

  /// Counts one prediction, right when `hit`.
  void add(bool hit) {
    correct += hit ? 1 : 0;
    ++total;
  }
  /// Adds other's counts.
  Accuracy& operator+=(const Accuracy& other) {
    correct += other.correct;
    total += other.total;
    return *this;
  }
  /// correct / total, 0 when nothing was counted.
  double value() const { return total == 0 ? 0.0 : double(correct) / double(total); }
};

/// A progress bar on stderr:
///   epoch 1 [=====>              ] 123/456 loss 1.23 12.3 samples/s
/// On a terminal it redraws in place with a carriage return (at most every 0.1 s, and always at
/// the end); otherwise (logs, CI) it prints a plain line at every 10 % of the total
/// or every 10 s, whichever comes first, and at the end.
class ProgressBar {
 public:
  /// `total` samples (0 = unknown: no bar, just counts); `label` starts the line.
  explicit ProgressBar(int64_t total, std::string label = "");
  /// Writes to `out`; `interactive` chooses the in-place mode (for tests and files).
  ProgressBar(int64_t total, std::string label, std::ostream& out, bool interactive);
  ~ProgressBar();

  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// `done` samples so far; `loss` is shown when finite (pass NaN to leave it out).
  void update(int64_t done, double loss);
  /// Adds `n` samples to the count.
  void advance(int64_t n, double loss) { update(done_ + n, loss); }
  /// Draws the final state and ends the line; later updates are ignored. Called
  /// by the destructor when not called before.
  void finish();

  /// One line of the bar, without a carriage return or line end (public for tests).
  static std::string render(const std::string& label, int64_t done, int64_t total, double loss,
                            double samples_per_second, int width = 30);

 private:
  void draw(bool final);

  int64_t total_;
  std::string label_;
  std::ostream* out_;
  bool interactive_;
  Timer timer_;
  int64_t done_ = 0;
  double loss_;
  double last_draw_ = -1.0;
  int64_t drawn_done_ = -1;
  int64_t last_decile_ = 0;
  bool finished_ = false;
};

}  // namespace vjit
