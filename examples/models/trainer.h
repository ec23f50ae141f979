#pragma once
// The training loop every example program runs: flags, epochs over shuffled
// batches through the Engine, a progress bar, and per-epoch loss, accuracy and
// samples per second.
namespace vjit::models {

// Flags: --epochs N, --batch N, --hidden N, --embed N, --lr X, --dropout X,
// --seed N, --train-samples N, --test-samples N, --data PATH, --test PATH, and
// every VJIT_* option as a flag (--policy agenda, --no-fusion, ...). Returns
// the process exit code; errors are printed, never thrown.
int train_main(const char* model_name, int argc, char** argv);

}  // namespace vjit::models
