#!/usr/bin/env python3
"""Trains the binary Tree-LSTM (Tai et al. 2015) on the Stanford Sentiment Treebank shipped
in data/sst/, with the settings and seed of the C++ example (`tree_lstm --sst`): hidden 150,
300-dimensional random word vectors, batch 25, dropout 0.5, Adam (lr 0.002, gradient norm
clipped to 5), 5 epochs; the same shuffles and initial weights, so the same losses.
Prints each epoch's loss, training accuracy and dev accuracy, then the best epoch's test
accuracy. Flags override the settings (--help); engine options are the VJIT_* variables.

    python3 examples/python/tree_lstm_sst.py --epochs 1
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (examples/python/models.py)
import vjit  # noqa: E402

SST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "sst")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=os.path.join(SST_DIR, "train.txt.gz"), help="training trees")
    p.add_argument("--dev", default=os.path.join(SST_DIR, "dev.txt.gz"), help="picks the best epoch")
    p.add_argument("--test", default=os.path.join(SST_DIR, "test.txt.gz"), help="scored for the best epoch")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=25)
    p.add_argument("--hidden", type=int, default=150)
    p.add_argument("--embed", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--vocab-limit", type=int, default=20000)
    p.add_argument("--batches", choices=("select", "arrays"), default="select",
                   help="select: copy the batch's samples out of the training set (as the C++ example does); "
                        "arrays: build each batch with NumPy from the training set's arrays (GraphBatch.from_arrays)")
    p.add_argument("--save-best", default=os.path.join(tempfile.gettempdir(), "tree_lstm_sst_best.safetensors"))
    return p.parse_args()


class Scores:
    """Accuracy of the logits every vertex pushed against its label, and at the roots."""

    def __init__(self):
        self.hits = self.total = self.root_hits = self.roots = 0
        self.loss, self.samples = 0.0, 0

    def add(self, batch, evaluation):
        arrays = batch.to_arrays()
        labels, predicted = arrays["labels"], evaluation.predictions()
        scored = (labels >= 0) & (predicted >= 0)
        self.hits += int(np.count_nonzero(scored & (predicted == labels)))
        self.total += int(np.count_nonzero(scored))
        roots = arrays["sample_offsets"][1:] - 1
        roots = roots[arrays["sample_offsets"][1:] > arrays["sample_offsets"][:-1]]
        self.root_hits += int(np.count_nonzero(scored[roots] & (predicted[roots] == labels[roots])))
        self.roots += int(np.count_nonzero(scored[roots]))

    def accuracy(self):
        return self.hits / self.total if self.total else 0.0

    def root_accuracy(self):
        return self.root_hits / self.roots if self.roots else 0.0


class ArrayBatches:
    """The training set as CSR arrays; each batch is cut from them with NumPy and handed to
    GraphBatch.from_arrays in one call."""

    def __init__(self, samples):
        self.arrays = samples.to_arrays()

    @staticmethod
    def ranges(starts, ends):
        """The concatenation of range(starts[i], ends[i])."""
        counts = ends - starts
        offsets = np.concatenate(([0], np.cumsum(counts)))
        return np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1]), offsets

    def select(self, indices):
        a = self.arrays
        indices = np.asarray(indices)
        vertices, sample_offsets = self.ranges(a["sample_offsets"][indices], a["sample_offsets"][indices + 1])
        edges, child_offsets = self.ranges(a["child_offsets"][vertices], a["child_offsets"][vertices + 1])
        return vjit.GraphBatch.from_arrays(sample_offsets, a["types"][vertices], child_offsets, a["children"][edges],
                                           tokens=a["tokens"][vertices], labels=a["labels"][vertices])


def evaluate(engine, samples, batch_size):
    scores = Scores()
    for begin in range(0, len(samples), batch_size):
        batch = samples.select(range(begin, min(len(samples), begin + batch_size)))
        result = engine.infer(batch)
        scores.add(batch, result)
        scores.loss += result.objective
        scores.samples += len(batch)
    return scores


def main():
    args = parse_args()
    train_trees = vjit.read_bracket_file(args.data)
    dev_trees = vjit.read_bracket_file(args.dev) if args.dev else []
    test_trees = vjit.read_bracket_file(args.test) if args.test else []
    vocab = vjit.Vocabulary.from_trees(train_trees, args.vocab_limit)

    model = vjit.Model(seed=args.seed)
    program = vjit.Program(model)
    leaf, internal = models.tree_lstm(program, len(vocab), args.hidden, args.embed, args.dropout)
    train = vjit.trees_to_batch(train_trees, vocab, leaf, internal)
    test = vjit.trees_to_batch(test_trees, vocab, leaf, internal, len(train_trees))
    dev = vjit.trees_to_batch(dev_trees, vocab, leaf, internal, len(train_trees) + len(test_trees))

    engine = vjit.Engine(program)
    adam = vjit.Adam(args.lr, 0.9, 0.999, 1e-8, 0.0, 5.0)
    print(f"tree_lstm (Python): {len(train)} train / {len(dev)} dev / {len(test)} test samples, {len(model)} parameters "
          f"({model.total_numel} values), hidden {args.hidden}, embed {args.embed}, batch {args.batch}, "
          f"lr {args.lr:g}, dropout {args.dropout:g}\n{engine.options}", flush=True)
    held_out, held_out_name = (dev, "dev") if len(dev) else (test, "test")
    best_epoch, best_root = 0, -1.0
    source = ArrayBatches(train) if args.batches == "arrays" else train
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = vjit.shuffled_indices(len(train), args.seed * 1000 + epoch)
        epoch_started = time.perf_counter()
        loss, train_scores = 0.0, Scores()
        for begin in range(0, len(order), args.batch):
            batch = source.select(order[begin:begin + args.batch])
            loss += engine.train_step(batch, adam)
            train_scores.add(batch, engine.last_result())
        seconds = time.perf_counter() - epoch_started
        scores = evaluate(engine, held_out, args.batch)
        print(f"epoch {epoch}: loss {loss / len(order):.4f}  train acc {train_scores.accuracy():.3f}  "
              f"{held_out_name} acc {scores.accuracy():.3f} (root {scores.root_accuracy():.3f})  "
              f"{len(order) / seconds:.1f} samples/s", flush=True)
        if len(dev) and scores.root_accuracy() > best_root:
            best_epoch, best_root = epoch, scores.root_accuracy()
            vjit.save_checkpoint(args.save_best, engine, adam, {"epoch": str(epoch)})
    print(f"trained {args.epochs} epochs in {time.perf_counter() - started:.1f} s")
    if best_epoch and len(test):
        vjit.load_checkpoint(args.save_best, engine, adam)
        scores = evaluate(engine, test, args.batch)
        print(f"best epoch {best_epoch} (dev root acc {best_root:.4f}) from {args.save_best}: "
              f"test acc {scores.accuracy():.4f} (root {scores.root_accuracy():.4f})")


if __name__ == "__main__":
    main()
