#include "vjit/train.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>

#include "vjit/error.h"

namespace vjit {

std::vector<int> shuffled_indices(int n, uint64_t seed) {
  VJIT_USER_CHECK(n >= 0, "shuffled_indices: n=" << n << " must be >= 0");
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[size_t(i)] = i;
  std::mt19937_64 rng(seed);
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (int i = n - 1; i > 0; --i) {
    // Uniform j in [0, i]: reject the top 2^64 mod range outputs so every residue
    // is equally likely (std::uniform_int_distribution is implementation-defined).
    const uint64_t range = uint64_t(i) + 1;
    const uint64_t reject = (kMax % range + 1) % range;  // 2^64 mod range
    uint64_t r = rng();
    while (r > kMax - reject) r = rng();
    const size_t j = size_t(r % range);
    std::swap(order[size_t(i)], order[j]);
  }
  return order;
}

int argmax(const float* x, int n) {
  VJIT_USER_CHECK(x != nullptr && n > 0, "argmax: needs at least one value, got n=" << n
                                                                                    << (x ? "" : " and a null pointer"));
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

// --- ProgressBar ---

ProgressBar::ProgressBar(int64_t total, std::string label)
    : ProgressBar(total, std::move(label), std::cerr, isatty(fileno(stderr)) != 0) {}

ProgressBar::ProgressBar(int64_t total, std::string label, std::ostream& out, bool interactive)
    : total_(total < 0 ? 0 : total),
      label_(std::move(label)),
      out_(&out),
      interactive_(interactive),
      loss_(std::numeric_limits<double>::quiet_NaN()) {}

ProgressBar::~ProgressBar() {
  try {
    finish();
  } catch (...) {
    // Never throw from a destructor; a failed write of a progress line is harmless.
  }
}

std::string ProgressBar::render(const std::string& label, int64_t done, int64_t total, double loss,
                                double samples_per_second, int width) {
  std::ostringstream line;
  if (!label.empty()) line << label << ' ';
  if (total > 0) {
    const int64_t shown = done < 0 ? 0 : (done > total ? total : done);
    const int filled = int(shown * width / total);
    line << '[';
    for (int k = 0; k < width; ++k) line << (k < filled ? '=' : (k == filled ? '>' : ' '));
    line << "] " << done << '/' << total;
  } else {
    line << done;
  }
  char buffer[64];
  if (std::isfinite(loss)) {
    std::snprintf(buffer, sizeof buffer, " loss %.4g", loss);
    line << buffer;
  }
  if (std::isfinite(samples_per_second)) {
    std::snprintf(buffer, sizeof buffer, " %.1f samples/s", samples_per_second);
    line << buffer;
  }
  return line.str();
}

void ProgressBar::update(int64_t done, double loss) {
  if (finished_) return;
  done_ = done;
  if (std::isfinite(loss)) loss_ = loss;
  const double now = timer_.seconds();
  if (interactive_) {
    if (last_draw_ < 0.0 || now - last_draw_ >= 0.1) draw(false);
    return;
  }
  const int64_t decile = total_ > 0 ? (done_ >= total_ ? 10 : done_ * 10 / total_) : 0;
  if (decile > last_decile_ || now - (last_draw_ < 0.0 ? 0.0 : last_draw_) >= 10.0) {
    last_decile_ = decile;
    draw(false);
  }
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!interactive_ && drawn_done_ == done_) return;  // the last line already shows it
  draw(true);
}

void ProgressBar::draw(bool final) {
  const double elapsed = timer_.seconds();
  last_draw_ = elapsed;
  drawn_done_ = done_;
  const double rate = elapsed > 0.0 ? double(done_) / elapsed : std::numeric_limits<double>::quiet_NaN();
  const std::string line = render(label_, done_, total_, loss_, rate);
  if (interactive_) {
    *out_ << '\r' << line << "\x1b[K";
    if (final) *out_ << '\n';
  } else {
    *out_ << line << '\n';
  }
  out_->flush();
}

}  // namespace vjit
