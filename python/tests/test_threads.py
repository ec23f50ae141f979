"""Engine calls release the GIL: Python threads train engines of their own at once, each
computing what it computes alone."""
import sys
import threading
import time

import models
import vjit


def train(seed, steps=4):
    trees = vjit.make_synthetic_treebank(40, seed)
    vocab = vjit.Vocabulary.from_trees(trees)
    model = vjit.Model(seed=seed)
    program = vjit.Program(model)
    leaf, internal = models.tree_lstm(program, len(vocab), 16, 16)
    batch = vjit.trees_to_batch(trees, vocab, leaf, internal)
    engine, adam = vjit.Engine(program, threads=1), vjit.Adam(0.01)
    return [engine.train_step(batch, adam) for _ in range(steps)]


def test_two_threads_with_their_own_engines():
    alone = {seed: train(seed) for seed in (1, 2)}
    results, errors = {}, []

    def run(seed):
        try:
            results[seed] = train(seed)
        except Exception as error:  # reported below, with the thread's seed
            errors.append((seed, error))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == alone
    assert alone[1] != alone[2]


def test_gil_is_released_during_engine_calls():
    """While one thread trains, another runs Python code. With a switch interval of 0.1 ms a
    call that kept the GIL would let the counting thread run about that long after it; a
    call that releases it lets it count through the whole step."""
    trees = vjit.make_synthetic_treebank(200, 9)
    vocab = vjit.Vocabulary.from_trees(trees)
    model = vjit.Model(seed=9)
    program = vjit.Program(model)
    leaf, internal = models.tree_lstm(program, len(vocab), 64, 64)
    batch = vjit.trees_to_batch(trees, vocab, leaf, internal)
    engine, adam = vjit.Engine(program, threads=1), vjit.Adam(0.01)
    engine.train_step(batch, adam)
    done, ticks = threading.Event(), [0]

    def count():
        while not done.is_set():
            ticks[0] += 1

    interval = sys.getswitchinterval()
    counter = threading.Thread(target=count)
    try:
        sys.setswitchinterval(1e-4)
        counter.start()
        time.sleep(0.05)
        started, before = time.perf_counter(), ticks[0]
        time.sleep(0.05)  # the counting rate, the GIL free
        rate = (ticks[0] - before) / (time.perf_counter() - started)
        before = ticks[0]
        started = time.perf_counter()
        engine.train_step(batch, adam)
        seconds, during = time.perf_counter() - started, ticks[0] - before
    finally:
        done.set()
        counter.join()
        sys.setswitchinterval(interval)
    assert seconds > 0.005, "the step is too short to tell"
    assert during > rate * 0.002, f"{during} ticks in a {seconds:.3f} s step at {rate:.0f} ticks/s"
