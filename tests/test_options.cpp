#include "vjit/options.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jit/options_doc.h"
#include "vjit/error.h"

namespace {

using vjit::Lever;
using Options = vjit::Options;

const std::vector<std::string> kVariables = {
    "VJIT_FUSION", "VJIT_LAZY",      "VJIT_STREAMING", "VJIT_MERGE_MATMULS", "VJIT_POLICY",
    "VJIT_MEMPLAN", "VJIT_DEVICE",   "VJIT_THREADS",   "VJIT_ISA",           "VJIT_GEMM", "VJIT_VERTEX_GEMM",
    "VJIT_CACHE_DIR", "VJIT_DIST_TIMEOUT", "VJIT_DIST_NCCL", "VJIT_DIST_OVERLAP", "VJIT_PROFILE", "VJIT_PERF_MAP", "VJIT_CHECK_FINITE", "VJIT_LOG", "VJIT_INPLACE_CONCAT", "VJIT_EPILOGUE", "VJIT_BATCH_GEMMS", "VJIT_PAD_WIDE_ROWS", "VJIT_PRETRANSPOSE", "VJIT_INFER_KERNELS", "VJIT_ROW_PLACEMENT", "VJIT_CHILD_ROWS", "VJIT_PARAM_LAYOUT", "VJIT_FUSE_ACROSS_PHASES", "VJIT_TF32", "VJIT_CUDA_GRAPHS", "VJIT_CUDA_RESIDENT_PARAMS",
    "VJIT_MAX_MEMORY", "VJIT_DETERMINISTIC", "VJIT_TRACE", "VJIT_INFER_SHARDS",
};

// Clears every VJIT_* variable for the test and restores them afterwards.
class OptionsEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& name : kVariables) {
      const char* value = std::getenv(name.c_str());
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name.c_str());
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  static void set(const std::string& name, const std::string& value) { setenv(name.c_str(), value.c_str(), 1); }

  // The message of the UserError from_env throws.
  static std::string env_error() {
    try {
      vjit::Options::from_env();
    } catch (const vjit::UserError& e) {
      return e.what();
    }
    ADD_FAILURE() << "from_env did not throw";
    return "";
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(OptionsEnv, DefaultsWithEmptyEnvironment) {
  vjit::Options o = vjit::Options::from_env();
  EXPECT_EQ(o, vjit::Options::defaults());
  EXPECT_TRUE(o.tuning.fusion);
  EXPECT_TRUE(o.tuning.lazy);
  EXPECT_FALSE(o.tuning.streaming);
  EXPECT_TRUE(o.tuning.merge_matmuls);
  EXPECT_TRUE(o.tuning.inplace_concat);
  EXPECT_TRUE(o.tuning.epilogue);
  EXPECT_EQ(o.tuning.batch_gemms, Lever::Auto);
  EXPECT_TRUE(o.tuning.pad_wide_rows);
  EXPECT_EQ(o.tuning.pretranspose, Lever::Auto);
  EXPECT_EQ(o.tuning.infer_kernels, Lever::Auto);
  EXPECT_EQ(o.tuning.row_placement, Options::RowPlacement::Auto);
  EXPECT_EQ(o.tuning.child_rows, Lever::Auto);
  EXPECT_EQ(o.tuning.param_layout, Lever::Auto);
  EXPECT_TRUE(o.tuning.fuse_across_phases);
  EXPECT_EQ(o.policy, Options::Policy::Agenda);
  EXPECT_EQ(o.tuning.memplan, Options::MemoryPlanner::Copy);
  EXPECT_EQ(o.device, Options::Device::Cpu);
  EXPECT_EQ(o.threads, vjit::Options::default_threads());
  EXPECT_GE(o.threads, 1);
  EXPECT_EQ(o.tuning.infer_shards, 1);
  EXPECT_EQ(o.max_memory, 0);
  EXPECT_EQ(o.deterministic, Lever::Auto);
  EXPECT_EQ(o.tuning.isa, Options::Isa::Auto);
  EXPECT_EQ(o.tuning.gemm, Options::Gemm::Auto);
  EXPECT_EQ(o.tuning.vertex_gemm, Options::VertexGemm::Auto);
  EXPECT_EQ(o.cache_dir, "");
  EXPECT_EQ(o.dist_timeout, 300);
  EXPECT_EQ(o.tuning.dist_nccl, Lever::Auto);
  EXPECT_EQ(o.tuning.dist_overlap, Lever::Auto);
  EXPECT_FALSE(o.profile);
  EXPECT_FALSE(o.perf_map);
  EXPECT_EQ(o.trace_path, "");
  EXPECT_FALSE(o.check_finite);
  EXPECT_EQ(o.log, Options::Log::Off);
  EXPECT_NO_THROW(o.validate());
}

TEST_F(OptionsEnv, EveryVariableIsParsed) {
  set("VJIT_FUSION", "0");
  set("VJIT_LAZY", "off");
  set("VJIT_STREAMING", "true");
  set("VJIT_MERGE_MATMULS", "off");
  set("VJIT_INPLACE_CONCAT", "0");
  set("VJIT_EPILOGUE", "off");
  set("VJIT_BATCH_GEMMS", "off");
  set("VJIT_PAD_WIDE_ROWS", "false");
  set("VJIT_PRETRANSPOSE", "off");
  set("VJIT_INFER_KERNELS", "0");
  set("VJIT_ROW_PLACEMENT", "copy");
  set("VJIT_CHILD_ROWS", "off");
  set("VJIT_PARAM_LAYOUT", "off");
  set("VJIT_FUSE_ACROSS_PHASES", "0");
  set("VJIT_POLICY", "fsm");
  set("VJIT_MEMPLAN", "pqtree");
  set("VJIT_DEVICE", "cuda");
  set("VJIT_THREADS", "7");
  set("VJIT_INFER_SHARDS", "3");
  set("VJIT_MAX_MEMORY", "3G");
  set("VJIT_DETERMINISTIC", "off");
  set("VJIT_ISA", "avx2");
  set("VJIT_GEMM", "openblas");
  set("VJIT_VERTEX_GEMM", "libxsmm");
  set("VJIT_CACHE_DIR", "/tmp/vjit cache");
  set("VJIT_DIST_TIMEOUT", "12");
  set("VJIT_DIST_NCCL", "off");
  set("VJIT_DIST_OVERLAP", "on");
  set("VJIT_TF32", "1");
  set("VJIT_PROFILE", "on");
  set("VJIT_PERF_MAP", "1");
  set("VJIT_TRACE", "/tmp/run trace.json");
  set("VJIT_CHECK_FINITE", "on");
  set("VJIT_LOG", "schedule");
  vjit::Options o = vjit::Options::from_env();
  EXPECT_FALSE(o.tuning.fusion);
  EXPECT_FALSE(o.tuning.lazy);
  EXPECT_TRUE(o.tuning.streaming);
  EXPECT_FALSE(o.tuning.merge_matmuls);
  EXPECT_FALSE(o.tuning.inplace_concat);
  EXPECT_FALSE(o.tuning.epilogue);
  EXPECT_EQ(o.tuning.batch_gemms, Lever::Off);
  EXPECT_FALSE(o.tuning.pad_wide_rows);
  EXPECT_EQ(o.tuning.pretranspose, Lever::Off);
  EXPECT_EQ(o.tuning.infer_kernels, Lever::Off);
  EXPECT_EQ(o.tuning.row_placement, Options::RowPlacement::Copy);
  EXPECT_EQ(o.tuning.child_rows, Lever::Off);
  EXPECT_EQ(o.tuning.param_layout, Lever::Off);
  EXPECT_FALSE(o.tuning.fuse_across_phases);
  EXPECT_EQ(o.policy, Options::Policy::Fsm);
  EXPECT_EQ(o.tuning.memplan, Options::MemoryPlanner::PqTree);
  EXPECT_EQ(o.device, Options::Device::Cuda);
  EXPECT_EQ(o.threads, 7);
  EXPECT_EQ(o.tuning.infer_shards, 3);
  EXPECT_EQ(o.max_memory, int64_t(3) << 30);
  EXPECT_EQ(o.deterministic, Lever::Off);
  EXPECT_EQ(o.tuning.isa, Options::Isa::Avx2);
  EXPECT_EQ(o.tuning.gemm, Options::Gemm::OpenBlas);
  EXPECT_EQ(o.tuning.vertex_gemm, Options::VertexGemm::Libxsmm);
  EXPECT_EQ(o.cache_dir, "/tmp/vjit cache");
  EXPECT_EQ(o.dist_timeout, 12);
  EXPECT_EQ(o.tuning.dist_nccl, Lever::Off);
  EXPECT_EQ(o.tuning.dist_overlap, Lever::On);
  EXPECT_EQ(o.tuning.tf32, Lever::On);
  EXPECT_TRUE(o.profile);
  EXPECT_TRUE(o.perf_map);
  EXPECT_EQ(o.trace_path, "/tmp/run trace.json");
  EXPECT_TRUE(o.check_finite);
  EXPECT_EQ(o.log, Options::Log::Schedule);
  EXPECT_NO_THROW(o.validate());
}

TEST_F(OptionsEnv, BoolSpellings) {
  for (const char* yes : {"1", "true", "on", "TRUE", "On"}) {
    set("VJIT_PROFILE", yes);
    EXPECT_TRUE(vjit::Options::from_env().profile) << yes;
  }
  for (const char* no : {"0", "false", "off", "FALSE", "Off"}) {
    set("VJIT_FUSION", no);
    EXPECT_FALSE(vjit::Options::from_env().tuning.fusion) << no;
  }
}

// Every spelling of every enumeration parses to the enumerator of its index
// and prints back (to_string) as itself.
TEST_F(OptionsEnv, EveryChoiceOfEveryEnumIsAccepted) {
  auto check = [&](const char* variable, auto choices, auto read) {
    for (size_t i = 0; i < choices.size(); ++i) {
      set(variable, std::string(choices[i]));
      const auto value = read(vjit::Options::from_env());
      EXPECT_EQ(size_t(value), i) << variable << "=" << choices[i];
      EXPECT_EQ(vjit::to_string(value), choices[i]) << variable;
    }
    unsetenv(variable);
  };
  check("VJIT_POLICY", vjit::option_values::policy, [](const Options& o) { return o.policy; });
  check("VJIT_MEMPLAN", vjit::option_values::memplan, [](const Options& o) { return o.tuning.memplan; });
  check("VJIT_DEVICE", vjit::option_values::device, [](const Options& o) { return o.device; });
  check("VJIT_ISA", vjit::option_values::isa, [](const Options& o) { return o.tuning.isa; });
  check("VJIT_GEMM", vjit::option_values::gemm, [](const Options& o) { return o.tuning.gemm; });
  check("VJIT_VERTEX_GEMM", vjit::option_values::vertex_gemm, [](const Options& o) { return o.tuning.vertex_gemm; });
  check("VJIT_LOG", vjit::option_values::log, [](const Options& o) { return o.log; });
  check("VJIT_ROW_PLACEMENT", vjit::option_values::row_placement, [](const Options& o) { return o.tuning.row_placement; });
  check("VJIT_CHILD_ROWS", vjit::option_values::lever, [](const Options& o) { return o.tuning.child_rows; });
  check("VJIT_DETERMINISTIC", vjit::option_values::lever, [](const Options& o) { return o.deterministic; });
  EXPECT_EQ(Options::Policy::Fsm, Options::Policy(4));
  EXPECT_EQ(Options::Gemm::OneDnnBf16, Options::Gemm(5));
}

TEST_F(OptionsEnv, EnumsAreCaseInsensitive) {
  set("VJIT_POLICY", "Frontier");
  EXPECT_EQ(vjit::Options::from_env().policy, Options::Policy::Frontier);
  set("VJIT_ROW_PLACEMENT", "Tables");
  EXPECT_EQ(vjit::Options::from_env().tuning.row_placement, Options::RowPlacement::Tables);
  set("VJIT_CHILD_ROWS", "AUTO");
  EXPECT_EQ(vjit::Options::from_env().tuning.child_rows, Lever::Auto);
}

// A lever takes auto/on/off and the booleans' spellings.
TEST_F(OptionsEnv, LeverSpellings) {
  const std::pair<const char*, Lever> spellings[] = {{"auto", Lever::Auto}, {"on", Lever::On},   {"off", Lever::Off},
                                                     {"1", Lever::On},      {"0", Lever::Off},   {"true", Lever::On},
                                                     {"FALSE", Lever::Off}, {"Auto", Lever::Auto}};
  for (const auto& [text, lever] : spellings) {
    set("VJIT_CHILD_ROWS", text);
    EXPECT_EQ(vjit::Options::from_env().tuning.child_rows, lever) << text;
  }
  set("VJIT_CHILD_ROWS", "maybe");
  const std::string message = env_error();
  EXPECT_NE(message.find("VJIT_CHILD_ROWS='maybe'"), std::string::npos) << message;
  EXPECT_NE(message.find("auto, on, off, 0, 1, true, false"), std::string::npos) << message;
}

TEST_F(OptionsEnv, EmptyValueCountsAsUnset) {
  set("VJIT_POLICY", "");
  set("VJIT_FUSION", "");
  set("VJIT_THREADS", "");
  EXPECT_EQ(vjit::Options::from_env(), vjit::Options::defaults());
}

TEST_F(OptionsEnv, UnknownEnumValueListsValidOnes) {
  set("VJIT_POLICY", "greedy");
  const std::string message = env_error();
  EXPECT_NE(message.find("VJIT_POLICY"), std::string::npos) << message;
  EXPECT_NE(message.find("greedy"), std::string::npos) << message;
  EXPECT_NE(message.find("depth, agenda, frontier, ratio, fsm"), std::string::npos) << message;
}

TEST_F(OptionsEnv, EveryEnumVariableRejectsUnknownValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"VJIT_MEMPLAN", "copy, padded, pqtree, auto"},
      {"VJIT_DEVICE", "cpu, cuda"},
      {"VJIT_ISA", "auto, avx512, avx2, neon, scalar"},
      {"VJIT_GEMM", "auto, onednn, openblas, blis, libxsmm, onednn_bf16, reference"},
      {"VJIT_VERTEX_GEMM", "auto, same, onednn, openblas, blis, libxsmm, reference"},
      {"VJIT_LOG", "off, passes, schedule, kernels, primitives, all"},
  };
  for (const auto& [variable, valid] : cases) {
    set(variable, "bogus");
    const std::string message = env_error();
    EXPECT_NE(message.find(variable + "='bogus'"), std::string::npos) << message;
    EXPECT_NE(message.find(valid), std::string::npos) << message;
    unsetenv(variable.c_str());
  }
}

TEST_F(OptionsEnv, MalformedBoolIsRejected) {
  for (const char* variable : {"VJIT_FUSION", "VJIT_LAZY", "VJIT_STREAMING", "VJIT_MERGE_MATMULS", "VJIT_INPLACE_CONCAT",
                               "VJIT_EPILOGUE", "VJIT_PAD_WIDE_ROWS", "VJIT_FUSE_ACROSS_PHASES",
                               "VJIT_PROFILE",
                               "VJIT_PERF_MAP", "VJIT_CHECK_FINITE"}) {
    set(variable, "yes please");
    const std::string message = env_error();
    EXPECT_NE(message.find(variable), std::string::npos) << message;
    EXPECT_NE(message.find("yes please"), std::string::npos) << message;
    EXPECT_NE(message.find("0, 1, true, false, on, off"), std::string::npos) << message;
    unsetenv(variable);
  }
}

TEST_F(OptionsEnv, MalformedThreadsIsRejected) {
  for (const char* bad : {"0", "-3", "four", "4x", " 4", "99999999999999999999", "2.5"}) {
    set("VJIT_THREADS", bad);
    const std::string message = env_error();
    EXPECT_NE(message.find("VJIT_THREADS"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("positive integer"), std::string::npos) << message;
  }
}

TEST_F(OptionsEnv, MaxMemoryTakesBytesWithPowerOfTwoSuffixes) {
  const std::pair<const char*, int64_t> good[] = {{"0", 0},           {"4096", 4096},          {"64k", 64 << 10},
                                                  {"512M", 512 << 20}, {"2GiB", int64_t(2) << 30}, {"1mb", 1 << 20}};
  for (const auto& [text, bytes] : good) {
    set("VJIT_MAX_MEMORY", text);
    EXPECT_EQ(vjit::Options::from_env().max_memory, bytes) << text;
  }
  for (const char* bad : {"-1", "12X", "M", "1.5G", "99999999999G", " 5"}) {
    set("VJIT_MAX_MEMORY", bad);
    const std::string message = env_error();
    EXPECT_NE(message.find(std::string("VJIT_MAX_MEMORY='") + bad + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("K, M or G"), std::string::npos) << message;
  }
}

TEST(Options, DescribeIsOneLineNamingEveryField) {
  vjit::Options o;
  o.threads = 3;
  o.policy = vjit::Options::Policy::Ratio;
  const std::string line = o.describe();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  for (const std::string& name : vjit::option_names()) EXPECT_NE(line.find(name + "="), std::string::npos) << name;
  EXPECT_NE(line.find("policy=ratio"), std::string::npos);
  EXPECT_NE(line.find("threads=3"), std::string::npos);
  EXPECT_NE(line.find("fusion=on"), std::string::npos);
}

TEST(Options, ApplyFlagUsesTheSameValidation) {
  vjit::Options o;
  vjit::apply_flag(o, "--policy", "depth");
  vjit::apply_flag(o, "fusion", "off");
  vjit::apply_flag(o, "--cache-dir", "/tmp/k");
  vjit::apply_flag(o, "VJIT_THREADS", "5");
  vjit::apply_flag(o, "--cache_dir", "/tmp/k2");
  vjit::apply_flag(o, "--trace", "/tmp/t.json");
  EXPECT_EQ(o.trace_path, "/tmp/t.json");
  EXPECT_EQ(o.policy, Options::Policy::Depth);
  EXPECT_FALSE(o.tuning.fusion);
  EXPECT_EQ(o.cache_dir, "/tmp/k2");
  EXPECT_EQ(o.threads, 5);

  try {
    vjit::apply_flag(o, "--policy", "random");
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--policy='random'"), std::string::npos) << message;
    EXPECT_NE(message.find("depth, agenda, frontier, ratio, fsm"), std::string::npos) << message;
  }
  EXPECT_EQ(o.policy, Options::Policy::Depth);  // unchanged by the failed flag

  try {
    vjit::apply_flag(o, "--polcy", "depth");
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--polcy"), std::string::npos) << message;
    EXPECT_NE(message.find("--policy"), std::string::npos) << message;
    EXPECT_NE(message.find("--cache-dir"), std::string::npos) << message;
  }
}

TEST(Options, ApplyFlagsConsumesOptionsAndReturnsTheRest) {
  const char* argv[] = {"prog",        "--policy", "fsm",       "--epochs", "3",          "--no-fusion",
                        "--threads=2", "input.txt", "--lazy",   "0",        "--", "--policy", "x"};
  vjit::Options o;
  std::vector<std::string> rest = vjit::apply_flags(o, int(std::size(argv)), argv);
  EXPECT_EQ(o.policy, Options::Policy::Fsm);
  EXPECT_FALSE(o.tuning.fusion);
  EXPECT_FALSE(o.tuning.lazy);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(rest, (std::vector<std::string>{"--epochs", "3", "input.txt", "--", "--policy", "x"}));

  const char* missing[] = {"prog", "--policy"};
  EXPECT_THROW(vjit::apply_flags(o, 2, missing), vjit::UserError);
  const char* not_bool[] = {"prog", "--no-policy"};
  EXPECT_THROW(vjit::apply_flags(o, 2, not_bool), vjit::UserError);
  const char* bad[] = {"prog", "--memplan=tree"};
  EXPECT_THROW(vjit::apply_flags(o, 2, bad), vjit::UserError);
}

TEST(Options, ValidateCatchesValuesSetByCode) {
  vjit::Options o;
  o.policy = Options::Policy(17);  // not an enumerator
  EXPECT_THROW(o.validate(), vjit::UserError);
  o = vjit::Options{};
  o.tuning.gemm = Options::Gemm(-1);
  try {
    o.validate();
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("onednn"), std::string::npos) << e.what();
  }
  o = vjit::Options{};
  o.threads = 0;
  EXPECT_THROW(o.validate(), vjit::UserError);
  o = vjit::Options{};
  o.tuning.infer_shards = 0;
  EXPECT_THROW(o.validate(), vjit::UserError);
}

TEST(Options, LogTopics) {
  vjit::Options o;
  EXPECT_FALSE(o.logs(vjit::Options::Log::Passes));
  o.log = vjit::Options::Log::Passes;
  EXPECT_TRUE(o.logs(vjit::Options::Log::Passes));
  EXPECT_FALSE(o.logs(vjit::Options::Log::Schedule));
  o.log = vjit::Options::Log::All;
  EXPECT_TRUE(o.logs(vjit::Options::Log::Schedule));
  EXPECT_TRUE(o.logs(vjit::Options::Log::Kernels));
}

// docs/options.md is made from the table the options are parsed by. With
// VJIT_WRITE_OPTIONS_DOC=<path> (the build target options_doc) this test
// writes the file instead of comparing.
TEST(OptionsDoc, MatchesTheCode) {
  const std::string made = vjit::options_markdown();
  if (const char* path = std::getenv("VJIT_WRITE_OPTIONS_DOC")) {
    std::ofstream(path) << made;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string path = std::string(VJIT_SHIPPED_DATA_DIR) + "/../docs/options.md";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " is missing: cmake --build build --target options_doc";
  std::ostringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), made) << path << " differs from the options table: cmake --build build --target options_doc";
}

// option_table() and option_value(): every option by name, its value read
// back in a spelling apply_flag takes, for front ends (the Python module).
TEST(OptionTable, EveryOptionReadsBackAsApplyFlagTakesIt) {
  const std::vector<vjit::OptionInfo> table = vjit::option_table();
  ASSERT_EQ(table.size(), vjit::option_names().size());
  vjit::Options changed = vjit::Options::defaults();
  changed.threads = 3;
  changed.max_memory = int64_t(5) << 20;
  changed.cache_dir = "/tmp/a dir";
  changed.policy = vjit::Options::Policy::Frontier;
  changed.tuning.fusion = false;
  changed.tuning.pretranspose = vjit::Lever::Off;
  for (const vjit::Options& options : {vjit::Options::defaults(), changed}) {
    vjit::Options copy = vjit::Options::defaults();
    for (size_t i = 0; i < table.size(); ++i) {
      EXPECT_EQ(table[i].name, vjit::option_names()[i]);
      EXPECT_EQ(table[i].env.rfind("VJIT_", 0), 0u) << table[i].name;
      EXPECT_FALSE(table[i].doc.empty()) << table[i].name;
      EXPECT_EQ(table[i].choices.empty(), table[i].kind != "lever" && table[i].kind != "choice") << table[i].name;
      vjit::apply_flag(copy, table[i].name, vjit::option_value(options, table[i].name));
    }
    EXPECT_EQ(copy, options) << options.describe();
  }
  EXPECT_EQ(vjit::option_value(changed, "max_memory"), std::to_string(int64_t(5) << 20));
  EXPECT_EQ(vjit::option_value(changed, "VJIT_POLICY"), "frontier");
  EXPECT_EQ(vjit::option_value(changed, "fusion"), "off");
  EXPECT_EQ(vjit::option_value(changed, "cache_dir"), "/tmp/a dir");
  EXPECT_THROW(vjit::option_value(changed, "fusoin"), vjit::UserError);
}

TEST(OptionsDoc, NamesEveryVariableOnce) {
  const std::string made = vjit::options_markdown();
  for (const std::string& name : vjit::option_names()) {
    std::string env = "VJIT_" + name;
    for (char& c : env) c = char(std::toupper(static_cast<unsigned char>(c)));
    const std::string cell = "| `" + env + "` |";
    const size_t first = made.find(cell);
    EXPECT_NE(first, std::string::npos) << env;
    EXPECT_EQ(made.find(cell, first + 1), std::string::npos) << env << " twice";
  }
}

}  // namespace

// Worker threads are bounded (1024): a larger VJIT_THREADS is refused by
// name before a pool is sized by it (2147483647 once ended in std::bad_alloc).
TEST_F(OptionsEnv, ThreadsAboveTheBoundAreRefused) {
  for (const char* bad : {"2147483647", "1025"}) {
    set("VJIT_THREADS", bad);
    const std::string message = env_error();
    EXPECT_NE(message.find(std::string("VJIT_THREADS='") + bad + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("1 to 1024"), std::string::npos) << message;
  }
  set("VJIT_THREADS", "1024");
  EXPECT_EQ(vjit::Options::from_env().threads, 1024);
  vjit::Options o;
  o.threads = 2147483647;
  EXPECT_THROW(o.validate(), vjit::UserError);
}

namespace {

using vjit::Lever;
using Options = vjit::Options;

// The levers only the CPU device honours: each is refused when on with the
// CUDA device (and so are the other CPU-only options at any value but their
// default); off is what the CUDA device does.
struct CpuOnly {
  const char* variable;
  const char* value;  // a value the CUDA device cannot honour
  bool lever;         // auto, on, off
};
const CpuOnly kCpuOnly[] = {
    {"VJIT_PRETRANSPOSE", "on", true},     {"VJIT_INFER_KERNELS", "on", true},
    {"VJIT_PARAM_LAYOUT", "on", true},     {"VJIT_DIST_OVERLAP", "on", true},    {"VJIT_DETERMINISTIC", "on", true},
    {"VJIT_ISA", "avx2", false},           {"VJIT_GEMM", "openblas", false},     {"VJIT_VERTEX_GEMM", "same", false},
    {"VJIT_INFER_SHARDS", "2", false},     {"VJIT_PERF_MAP", "on", false},       {"VJIT_CHECK_FINITE", "on", false},
};

Options with(const char* variable, const char* value, Options::Device device) {
  Options options;
  vjit::apply_flag(options, variable, value);
  options.device = device;
  return options;
}

std::string resolve_error(const Options& options) {
  try {
    options.resolve();
  } catch (const vjit::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OptionsResolve, AutoIsWhatEachDeviceDoes) {
  Options options;
  const Options cpu = options.resolve();
  for (Lever lever : {cpu.tuning.pretranspose, cpu.tuning.infer_kernels, cpu.tuning.child_rows, cpu.tuning.param_layout,
                      cpu.deterministic, cpu.tuning.batch_gemms})
    EXPECT_EQ(lever, Lever::On);
  EXPECT_EQ(cpu.tuning.row_placement, Options::RowPlacement::Tables);
  EXPECT_EQ(cpu.tuning.tf32, Lever::Off);
  EXPECT_EQ(cpu.tuning.dist_nccl, Lever::Off);
  EXPECT_EQ(cpu.tuning.dist_overlap, Lever::Off);

  options.device = Options::Device::Cuda;
  const Options cuda = options.resolve();
  for (Lever lever : {cuda.tuning.pretranspose, cuda.tuning.infer_kernels,
                      cuda.tuning.param_layout, cuda.deterministic, cuda.tuning.dist_overlap, cuda.tuning.tf32,
                      cuda.tuning.cuda_graphs, cuda.tuning.cuda_resident_params})
    EXPECT_EQ(lever, Lever::Off);
  // Honoured on the GPU but never run there: auto stays off until measured.
  EXPECT_EQ(cuda.tuning.child_rows, Lever::Off) << "child rows: auto is the CPU's only";
  EXPECT_EQ(cuda.tuning.batch_gemms, Lever::Off) << "batched products: auto is the CPU's only";
  EXPECT_EQ(cuda.tuning.row_placement, Options::RowPlacement::Copy);
  EXPECT_EQ(cuda.tuning.dist_nccl, Lever::On);
  EXPECT_EQ(cuda.resolve(), cuda) << "resolving twice changes nothing";
  EXPECT_EQ(cpu.resolve(), cpu);
}

TEST(OptionsResolve, OnAndOffAreKept) {
  Options options;
  options.tuning.child_rows = Lever::Off;
  options.tuning.dist_overlap = Lever::On;
  const Options cpu = options.resolve();
  EXPECT_EQ(cpu.tuning.child_rows, Lever::Off);
  EXPECT_EQ(cpu.tuning.dist_overlap, Lever::On);
  options.device = Options::Device::Cuda;
  options.tuning.dist_overlap = Lever::Off;
  options.tuning.tf32 = Lever::On;
  const Options cuda = options.resolve();
  EXPECT_EQ(cuda.tuning.child_rows, Lever::Off);
  EXPECT_EQ(cuda.tuning.tf32, Lever::On);
}

// Every row placement the CPU is given is the one it runs; the CUDA device
// runs copy, whether asked for it or for auto, and refuses the others,
// naming itself.
TEST(OptionsResolve, RowPlacementsAreKeptOnTheCpuAndCopyOnCuda) {
  for (const std::string_view level : vjit::option_values::row_placement) {
    if (level == "auto") continue;
    const Options cpu = with("VJIT_ROW_PLACEMENT", std::string(level).c_str(), Options::Device::Cpu).resolve();
    EXPECT_EQ(vjit::to_string(cpu.tuning.row_placement), level);
  }
  for (const char* level : {"copy", "auto"})
    EXPECT_EQ(with("VJIT_ROW_PLACEMENT", level, Options::Device::Cuda).resolve().tuning.row_placement,
              Options::RowPlacement::Copy)
        << level;
  for (const std::string level : {"slices", "tables"}) {
    const std::string message = resolve_error(with("VJIT_ROW_PLACEMENT", level.c_str(), Options::Device::Cuda));
    EXPECT_NE(message.find("VJIT_ROW_PLACEMENT=" + level + ": the cuda device"), std::string::npos) << message;
  }
}

TEST(OptionsResolve, CudaRefusesWhatOnlyTheCpuDoes) {
  for (const CpuOnly& option : kCpuOnly) {
    EXPECT_NO_THROW(with(option.variable, option.value, Options::Device::Cpu).resolve()) << option.variable;
    const std::string message = resolve_error(with(option.variable, option.value, Options::Device::Cuda));
    EXPECT_NE(message.find(std::string(option.variable) + "=" + option.value), std::string::npos) << message;
    EXPECT_NE(message.find("cuda device"), std::string::npos) << message;
    if (option.lever) {
      EXPECT_NO_THROW(with(option.variable, "off", Options::Device::Cuda).resolve()) << option.variable;
      EXPECT_NO_THROW(with(option.variable, "auto", Options::Device::Cuda).resolve()) << option.variable;
    }
  }
}

constexpr const char* kGpuOnly[] = {"VJIT_TF32", "VJIT_DIST_NCCL", "VJIT_CUDA_GRAPHS", "VJIT_CUDA_RESIDENT_PARAMS"};

TEST(OptionsResolve, CpuRefusesWhatOnlyTheGpuDoes) {
  for (const char* variable : kGpuOnly) {
    const std::string message = resolve_error(with(variable, "on", Options::Device::Cpu));
    EXPECT_NE(message.find(std::string(variable) + "=on"), std::string::npos) << message;
    EXPECT_NE(message.find("cpu device"), std::string::npos) << message;
    EXPECT_NO_THROW(with(variable, "off", Options::Device::Cpu).resolve()) << variable;
  }
}

// A pass's CUDA graph is captured from one stream: graphs with streaming are
// refused, naming both; either alone resolves.
TEST(OptionsResolve, CudaGraphsRefuseStreaming) {
  Options options = with("VJIT_CUDA_GRAPHS", "on", Options::Device::Cuda);
  EXPECT_EQ(options.resolve().tuning.cuda_graphs, Lever::On);
  options.tuning.streaming = true;
  const std::string message = resolve_error(options);
  EXPECT_NE(message.find("VJIT_CUDA_GRAPHS=on"), std::string::npos) << message;
  EXPECT_NE(message.find("VJIT_STREAMING=on"), std::string::npos) << message;
  options.tuning.cuda_graphs = Lever::Off;
  EXPECT_NO_THROW(options.resolve());
}

// Every option whose devices column leaves a device out is checked by the test
// above or the one before it: the lists and the table agree.
TEST(OptionsResolve, TheTestsNameEveryOptionADeviceLeavesOut) {
  const std::string doc = vjit::options_markdown();
  size_t single_device = 0;
  for (size_t at = doc.find("\n| `VJIT_"); at != std::string::npos; at = doc.find("\n| `VJIT_", at + 1)) {
    const std::string row = doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
    if (row.find(" | cpu | ") == std::string::npos && row.find(" | cuda | ") == std::string::npos) continue;
    ++single_device;
    const std::string variable = row.substr(3, row.find('`', 3) - 3);
    bool listed = false;
    for (const char* gpu_only : kGpuOnly) listed = listed || variable == gpu_only;
    for (const CpuOnly& option : kCpuOnly) listed = listed || variable == option.variable;
    EXPECT_TRUE(listed) << variable << " is honoured by one device only but no test checks the other refuses it";
  }
  EXPECT_EQ(single_device, std::size(kCpuOnly) + std::size(kGpuOnly));
}
