// The consumer project's program: a tiny Tree-LSTM from the model zoo, one
// training step through the installed API. Exit status 0
// only when the loss is finite and positive.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <vjit/models.h>
#include <vjit/vjit.h>

int main() {
  vjit::models::Config config;
  config.hidden = 16;
  config.train_samples = 8;
  config.test_samples = 4;
  vjit::models::Bundle bundle = vjit::models::make_model("tree_lstm", config);

  vjit::Options options = vjit::Options::from_env();
  options.threads = 1;
  vjit::Engine engine(*bundle.program, options);
  vjit::Adam adam(0.01f);
  std::vector<int> all(bundle.train.size());
  std::iota(all.begin(), all.end(), 0);
  double loss = engine.train_step(vjit::models::make_batch(bundle.train, all), adam);
  if (!std::isfinite(loss) || loss <= 0) {
    std::fprintf(stderr, "consumer: the first training step's loss is %g, not a finite positive number\n", loss);
    return 1;
  }
  std::printf("consumer: %s, hidden %d, %zu samples: first step loss %.6f\n", bundle.name.c_str(), config.hidden,
              bundle.train.size(), loss);
  return 0;
}
