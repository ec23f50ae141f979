#pragma once
// The training loop every example program runs: flags, epochs over shuffled
// batches through the Engine, a progress bar, and per-epoch loss, accuracy and
// samples per second.
namespace vjit::models {

// Flags: --epochs N, --batch N, --hidden N, --embed N, --lr X, --dropout X,
// --seed N, --train-samples N, --test-samples N, --data PATH, --dev PATH,
// --test PATH, --save-best PATH, --sst, and every VJIT_* option as a flag
// (--policy agenda, --no-fusion, ...). Returns the process exit code; errors
// are printed, never thrown.
//
// --dev PATH scores every epoch on the dev set instead of the test set and
// keeps a checkpoint of the best epoch by dev root accuracy (--save-best PATH,
// default <build dir>/<model>_best.safetensors); after the last epoch that
// checkpoint is loaded back and scored on the test set ("best epoch N ...:
// test acc ..."). --sst trains on the Stanford Sentiment Treebank shipped in
// data/sst/ (train, dev, test) with Tai et al. 2015's hyper-parameters where
// vjit has them (hidden 150, embed 300, batch 25, dropout 0.5, Adam lr 0.002,
// 5 epochs; best checkpoint <build dir>/<model>_sst_best.safetensors); other
// flags override them. Tai et al. start from GloVe vectors, which vjit does not
// ship: --vectors FILE (GloVe or word2vec text, plain or gzip; see
// load_word_vectors in vjit/data.h) sets the rows of the model's embedding of
// the words the file holds before training, and prints how many it found.
//
// Checkpoints (vjit/checkpoint.h): --save PATH writes one after every epoch
// (parameters, Adam's state, the epoch and its test scores in the metadata)
// and prints the evaluation it saved. --load PATH resumes from one: the
// parameters and Adam's state are restored and training goes on with the
// epoch after the saved one, for --epochs more epochs, exactly as the
// uninterrupted run would have (same flags). --epochs 0 trains nothing: with
// --load it evaluates the loaded model and prints "evaluation after epoch N".
// The model flags (--hidden, --embed, --data, ...) must be those of the run
// that saved.
int train_main(const char* model_name, int argc, char** argv);

}  // namespace vjit::models
