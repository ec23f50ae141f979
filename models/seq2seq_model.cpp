// seq2seq: an encoder–decoder over token sequences whose decoder chain grows
// one step at a time when it decodes greedily (vjit/growth.h). Trained with
// teacher forcing, where the whole target chain is known up front and the
// graph is static.
#include <algorithm>

#include "models/common.h"
#include "vjit/error.h"
#include "vjit/random.h"

namespace vjit::models {

namespace {

constexpr int kMinLength = 3, kMaxLength = 12;

// Random sources of kMinLength..kMaxLength data tokens.
std::vector<std::vector<int>> make_sources(int count, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int>> sources(size_t(std::max(count, 0)));
  for (std::vector<int>& source : sources) {
    source.resize(size_t(rng.uniform_int(kMinLength, kMaxLength)));
    for (int& token : source) token = rng.uniform_int(kSeq2seqFirstDataToken, kSeq2seqVocab - 1);
  }
  return sources;
}

// The encoder chain over the source, then the decoder's first step (fed the
// start token, its child the encoder's last step). Returns that step's index.
int add_prompt(Sample& sample, int encoder, int decoder, const std::vector<int>& source, int first_label) {
  for (size_t i = 0; i < source.size(); ++i)
    sample.add_vertex(encoder, i > 0 ? std::vector<int>{int(i) - 1} : std::vector<int>{}, source[i]);
  return sample.add_vertex(decoder, {int(source.size()) - 1}, kSeq2seqStart, first_label);
}

// Teacher forcing: decoder step j is fed target j − 1 (the start token for
// j = 0) and labelled with target j; the target is the reversed source, then
// the end token.
Sample teacher_forced_sample(int encoder, int decoder, const std::vector<int>& source, std::string name) {
  std::vector<int> target(source.rbegin(), source.rend());
  target.push_back(kSeq2seqEnd);
  Sample sample;
  sample.name = std::move(name);
  int previous = add_prompt(sample, encoder, decoder, source, target[0]);
  for (size_t j = 1; j < target.size(); ++j) previous = sample.add_vertex(decoder, {previous}, target[j - 1], target[j]);
  return sample;
}

int argmax(std::span<const float> values) {
  return int(std::max_element(values.begin(), values.end()) - values.begin());
}

}  // namespace

Bundle make_seq2seq(const Config& config) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  const int H = config.hidden, E = config.embed_size(), V = kSeq2seqVocab;
  Param source_embedding = m.add("source_embedding", mat(V, E), Init::Uniform, 0.1f);
  Param target_embedding = m.add("target_embedding", mat(V, E), Init::Uniform, 0.1f);
  LstmCell encoder_cell(m, "encoder_", E, H), decoder_cell(m, "decoder_", E, H);
  Param w_out = m.add("W_out", mat(V, H));
  auto embed = [&](Builder& b, Param table) {
    Value x = b.pull_embedding(table);
    return config.dropout > 0 ? b.dropout(x, config.dropout) : x;
  };
  const int encoder = bundle.program->add_type("encoder", [&](Builder& b) {
    auto [h, c] = encoder_cell.step(b, embed(b, source_embedding), b.gather_sum(vec(2 * H)));
    b.scatter(b.concat({h, c}));
  });
  const int decoder = bundle.program->add_type("decoder", [&](Builder& b) {
    auto [h, c] = decoder_cell.step(b, embed(b, target_embedding), b.gather(0, vec(2 * H)));
    classify(b, w_out, h, V);
    b.scatter(b.concat({h, c}));
  });
  const std::vector<std::vector<int>> train = make_sources(config.train_samples, config.seed);
  const std::vector<std::vector<int>> test = make_sources(config.test_samples, config.seed + 1000003);
  for (size_t s = 0; s < train.size(); ++s)
    bundle.train.push_back(teacher_forced_sample(encoder, decoder, train[s], "sequence " + std::to_string(s)));
  for (size_t s = 0; s < test.size(); ++s)
    bundle.test.push_back(teacher_forced_sample(encoder, decoder, test[s], "test sequence " + std::to_string(s)));
  bundle.classifier_types = {decoder};
  return bundle;
}

Sample seq2seq_prompt(const Program& program, const Sample& teacher_forced) {
  const int encoder = program.type_index("encoder"), decoder = program.type_index("decoder");
  std::vector<int> source;
  for (const Vertex& v : teacher_forced.vertices)
    if (v.type == encoder) source.push_back(v.token);
  VJIT_USER_CHECK(!source.empty(), "seq2seq_prompt: '" << teacher_forced.name << "' has no encoder vertex");
  Sample prompt;
  prompt.name = teacher_forced.name;
  add_prompt(prompt, encoder, decoder, source, -1);
  return prompt;
}

GrowthCallback seq2seq_greedy_decoder(const Program& program, int max_steps) {
  const int decoder = program.type_index("decoder");
  return [decoder, max_steps](GrowthStep& step) {
    const int next = argmax(step.push(0));
    if (next == kSeq2seqEnd) return;
    int steps = 0;  // decoder steps so far, this one included
    for (int v = 0; v <= step.vertex(); ++v) steps += step.sample().vertices[size_t(v)].type == decoder;
    if (steps < max_steps) step.add_vertex(decoder, {step.vertex()}, next);
  };
}

std::vector<int> seq2seq_output(const Program& program, const Sample& decoded) {
  const int decoder = program.type_index("decoder");
  std::vector<int> tokens;
  bool first = true;
  for (const Vertex& v : decoded.vertices) {
    if (v.type != decoder) continue;
    if (!first) tokens.push_back(v.token);
    first = false;
  }
  return tokens;
}

std::vector<int> seq2seq_target(const Program& program, const Sample& teacher_forced) {
  const int decoder = program.type_index("decoder");
  std::vector<int> target;
  for (const Vertex& v : teacher_forced.vertices)
    if (v.type == decoder && v.label != kSeq2seqEnd) target.push_back(v.label);
  return target;
}

}  // namespace vjit::models
