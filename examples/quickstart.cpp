// The README's example (docs.readme_example checks that the README shows this
// file as it is): a tree RNN over tiny trees, written once as a vertex
// function, trained through the batched engine, checked against the reference.
#include <cmath>
#include <cstdio>
#include <span>

#include <vjit/vjit.h>

int main() {
  using vjit::Shape;
  const int H = 16, vocab = 10, classes = 2;

  // Parameters, with deterministic seeded initialisation.
  vjit::Model model(/*seed=*/1);
  auto E = model.add("E", Shape::mat(vocab, H), vjit::Init::Uniform, 0.1f);
  auto W = model.add("W", Shape::mat(H, 2 * H));
  auto b = model.add("b", Shape::vec(H), vjit::Init::Zeros);
  auto out = model.add("out", Shape::mat(classes, H));

  // One vertex function per vertex type.
  vjit::Program program(model);
  int leaf = program.add_type("leaf", [&](vjit::Builder& f) {
    f.scatter(f.tanh(f.pull_embedding(E)));  // h = tanh(E[token])
  });
  int node = program.add_type("node", [&](vjit::Builder& f) {
    auto children = f.concat({f.gather(0, Shape::vec(H)), f.gather(1, Shape::vec(H))});
    auto h = f.tanh(f.add(f.matmul(W, children), b));  // h = tanh(W [h1; h2] + b)
    auto logits = f.matmul(out, h);
    f.add_loss(f.softmax_cross_entropy(logits, f.label(classes)));
    f.push(logits);
    f.scatter(h);
  });

  // Every sample brings its own graph: here, trees (a b) and ((a b) c).
  vjit::GraphBatch batch;
  for (int s = 0; s < 64; ++s) {
    vjit::Sample tree;
    int a = tree.add_vertex(leaf, {}, s % vocab), c = tree.add_vertex(leaf, {}, (s * 7) % vocab);
    int ac = tree.add_vertex(node, {a, c}, -1, s % 2);
    if (s % 3 == 0) tree.add_vertex(node, {ac, tree.add_vertex(leaf, {}, 3)}, -1, (s / 3) % 2);
    batch.samples.push_back(tree);
  }

  // The engine batches every vertex of the 64 graphs into a few tasks.
  vjit::Engine engine(program);  // options from the VJIT_* variables
  vjit::Adam adam(0.003f);
  for (int step = 0; step <= 40; ++step) {
    double loss = engine.train_step(batch, adam);
    if (step % 10 == 0) std::printf("step %d: loss %.4f\n", step, loss / 64);
  }
  engine.reset_stats();
  vjit::Evaluation<float> result = engine.infer(batch);  // no dropout, no gradients
  // Pushed values in one flat buffer: sample 0's root (vertex 2) pushed its logits.
  std::span<const float> logits = result.pushes.at(/*sample=*/0, /*vertex=*/2, /*push=*/0);
  std::printf("sample 0: logits %.3f %.3f, label %d\n", logits[0], logits[1], batch.samples[0].vertices[2].label);
  // The reference interpreter computes the same objective vertex by vertex.
  vjit::RunOptions inference;
  inference.training = false;
  inference.backward = false;
  double reference = vjit::reference_evaluate(program, batch, inference).objective;
  std::printf("objective: engine %.6f, reference %.6f; %lld tasks for %lld vertices\n", result.objective, reference,
              static_cast<long long>(engine.stats().tasks), static_cast<long long>(engine.stats().vertices));
  return std::abs(result.objective - reference) <= 1e-4 * std::abs(reference) ? 0 : 1;
}
