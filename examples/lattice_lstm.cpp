// Trains the lattice_lstm model of vjit/models.h on its built-in data, or on
// a file of its benchmark format with --data PATH (flags: examples/models/trainer.h).
#include "examples/models/trainer.h"

int main(int argc, char** argv) { return vjit::models::train_main("lattice_lstm", argc, argv); }
