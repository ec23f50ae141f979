// Trains the var_lstm_gates model of vjit/models.h: the Var-LSTM
// written with one weight per gate, on its built-in data (flags:
// examples/models/trainer.h). Matmul merging gives it the stacked GEMMs of
// var_lstm; --no-merge-matmuls shows what it saves.
#include "examples/models/trainer.h"

int main(int argc, char** argv) { return vjit::models::train_main("var_lstm_gates", argc, argv); }
