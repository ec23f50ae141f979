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

const std::vector<std::string> kVariables = {
    "VJIT_FUSION", "VJIT_LAZY",      "VJIT_STREAMING", "VJIT_MERGE_MATMULS", "VJIT_POLICY",
    "VJIT_MEMPLAN", "VJIT_DEVICE",   "VJIT_THREADS",   "VJIT_ISA",           "VJIT_GEMM", "VJIT_VERTEX_GEMM",
    "VJIT_CACHE_DIR", "VJIT_DIST_TIMEOUT", "VJIT_DIST_NCCL", "VJIT_DIST_OVERLAP", "VJIT_PROFILE", "VJIT_PERF_MAP", "VJIT_CHECK_FINITE", "VJIT_LOG", "VJIT_INPLACE_CONCAT", "VJIT_EPILOGUE", "VJIT_PAD_WIDE_ROWS", "VJIT_PRETRANSPOSE", "VJIT_INFER_KERNELS", "VJIT_GATHER_SLICES", "VJIT_GATHER_POINTERS", "VJIT_FORWARD_GATHERS", "VJIT_ACCUMULATE_GRADIENTS", "VJIT_PARAM_LAYOUT", "VJIT_FUSE_ACROSS_PHASES", "VJIT_TF32",
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
  EXPECT_TRUE(o.fusion);
  EXPECT_TRUE(o.lazy);
  EXPECT_FALSE(o.streaming);
  EXPECT_TRUE(o.merge_matmuls);
  EXPECT_TRUE(o.inplace_concat);
  EXPECT_TRUE(o.epilogue);
  EXPECT_TRUE(o.pad_wide_rows);
  EXPECT_TRUE(o.pretranspose);
  EXPECT_TRUE(o.infer_kernels);
  EXPECT_TRUE(o.gather_slices);
  EXPECT_TRUE(o.gather_pointers);
  EXPECT_TRUE(o.forward_gathers);
  EXPECT_TRUE(o.accumulate_gradients);
  EXPECT_TRUE(o.param_layout);
  EXPECT_TRUE(o.fuse_across_phases);
  EXPECT_EQ(o.policy, "agenda");
  EXPECT_EQ(o.memplan, "copy");
  EXPECT_EQ(o.device, "cpu");
  EXPECT_EQ(o.threads, vjit::Options::default_threads());
  EXPECT_GE(o.threads, 1);
  EXPECT_EQ(o.infer_shards, 1);
  EXPECT_EQ(o.max_memory, 0);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(o.isa, "auto");
  EXPECT_EQ(o.gemm, "auto");
  EXPECT_EQ(o.vertex_gemm, "auto");
  EXPECT_EQ(o.cache_dir, "");
  EXPECT_EQ(o.dist_timeout, 300);
  EXPECT_TRUE(o.dist_nccl);
  EXPECT_FALSE(o.dist_overlap);
  EXPECT_FALSE(o.profile);
  EXPECT_FALSE(o.perf_map);
  EXPECT_EQ(o.trace_path, "");
  EXPECT_FALSE(o.check_finite);
  EXPECT_EQ(o.log, "off");
  EXPECT_NO_THROW(o.validate());
}

TEST_F(OptionsEnv, EveryVariableIsParsed) {
  set("VJIT_FUSION", "0");
  set("VJIT_LAZY", "off");
  set("VJIT_STREAMING", "true");
  set("VJIT_MERGE_MATMULS", "off");
  set("VJIT_INPLACE_CONCAT", "0");
  set("VJIT_EPILOGUE", "off");
  set("VJIT_PAD_WIDE_ROWS", "false");
  set("VJIT_PRETRANSPOSE", "off");
  set("VJIT_INFER_KERNELS", "0");
  set("VJIT_GATHER_SLICES", "off");
  set("VJIT_GATHER_POINTERS", "off");
  set("VJIT_FORWARD_GATHERS", "off");
  set("VJIT_ACCUMULATE_GRADIENTS", "off");
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
  set("VJIT_PROFILE", "on");
  set("VJIT_PERF_MAP", "1");
  set("VJIT_TRACE", "/tmp/run trace.json");
  set("VJIT_CHECK_FINITE", "on");
  set("VJIT_LOG", "schedule");
  vjit::Options o = vjit::Options::from_env();
  EXPECT_FALSE(o.fusion);
  EXPECT_FALSE(o.lazy);
  EXPECT_TRUE(o.streaming);
  EXPECT_FALSE(o.merge_matmuls);
  EXPECT_FALSE(o.inplace_concat);
  EXPECT_FALSE(o.epilogue);
  EXPECT_FALSE(o.pad_wide_rows);
  EXPECT_FALSE(o.pretranspose);
  EXPECT_FALSE(o.infer_kernels);
  EXPECT_FALSE(o.gather_slices);
  EXPECT_FALSE(o.gather_pointers);
  EXPECT_FALSE(o.forward_gathers);
  EXPECT_FALSE(o.accumulate_gradients);
  EXPECT_FALSE(o.param_layout);
  EXPECT_FALSE(o.fuse_across_phases);
  EXPECT_EQ(o.policy, "fsm");
  EXPECT_EQ(o.memplan, "pqtree");
  EXPECT_EQ(o.device, "cuda");
  EXPECT_EQ(o.threads, 7);
  EXPECT_EQ(o.infer_shards, 3);
  EXPECT_EQ(o.max_memory, int64_t(3) << 30);
  EXPECT_FALSE(o.deterministic);
  EXPECT_EQ(o.isa, "avx2");
  EXPECT_EQ(o.gemm, "openblas");
  EXPECT_EQ(o.vertex_gemm, "libxsmm");
  EXPECT_EQ(o.cache_dir, "/tmp/vjit cache");
  EXPECT_EQ(o.dist_timeout, 12);
  EXPECT_FALSE(o.dist_nccl);
  EXPECT_TRUE(o.dist_overlap);
  EXPECT_TRUE(o.profile);
  EXPECT_TRUE(o.perf_map);
  EXPECT_EQ(o.trace_path, "/tmp/run trace.json");
  EXPECT_TRUE(o.check_finite);
  EXPECT_EQ(o.log, "schedule");
  EXPECT_NO_THROW(o.validate());
}

TEST_F(OptionsEnv, BoolSpellings) {
  for (const char* yes : {"1", "true", "on", "TRUE", "On"}) {
    set("VJIT_PROFILE", yes);
    EXPECT_TRUE(vjit::Options::from_env().profile) << yes;
  }
  for (const char* no : {"0", "false", "off", "FALSE", "Off"}) {
    set("VJIT_FUSION", no);
    EXPECT_FALSE(vjit::Options::from_env().fusion) << no;
  }
}

TEST_F(OptionsEnv, EveryChoiceOfEveryEnumIsAccepted) {
  auto check = [&](const char* variable, auto choices, std::string vjit::Options::*field) {
    for (std::string_view choice : choices) {
      set(variable, std::string(choice));
      EXPECT_EQ(vjit::Options::from_env().*field, choice) << variable;
    }
    unsetenv(variable);
  };
  check("VJIT_POLICY", vjit::option_values::policy, &vjit::Options::policy);
  check("VJIT_MEMPLAN", vjit::option_values::memplan, &vjit::Options::memplan);
  check("VJIT_DEVICE", vjit::option_values::device, &vjit::Options::device);
  check("VJIT_ISA", vjit::option_values::isa, &vjit::Options::isa);
  check("VJIT_GEMM", vjit::option_values::gemm, &vjit::Options::gemm);
  check("VJIT_VERTEX_GEMM", vjit::option_values::vertex_gemm, &vjit::Options::vertex_gemm);
  check("VJIT_LOG", vjit::option_values::log, &vjit::Options::log);
}

TEST_F(OptionsEnv, EnumsAreCaseInsensitiveAndStoredLowerCase) {
  set("VJIT_POLICY", "Frontier");
  EXPECT_EQ(vjit::Options::from_env().policy, "frontier");
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
  for (const char* variable :
       {"VJIT_FUSION", "VJIT_LAZY", "VJIT_STREAMING", "VJIT_MERGE_MATMULS", "VJIT_INPLACE_CONCAT", "VJIT_EPILOGUE", "VJIT_PAD_WIDE_ROWS", "VJIT_PRETRANSPOSE", "VJIT_INFER_KERNELS", "VJIT_GATHER_SLICES", "VJIT_GATHER_POINTERS", "VJIT_FORWARD_GATHERS", "VJIT_ACCUMULATE_GRADIENTS", "VJIT_PARAM_LAYOUT", "VJIT_FUSE_ACROSS_PHASES",
        "VJIT_PROFILE", "VJIT_PERF_MAP", "VJIT_CHECK_FINITE", "VJIT_DETERMINISTIC"}) {
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
  o.policy = "ratio";
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
  EXPECT_EQ(o.policy, "depth");
  EXPECT_FALSE(o.fusion);
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
  EXPECT_EQ(o.policy, "depth");  // unchanged by the failed flag

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
  EXPECT_EQ(o.policy, "fsm");
  EXPECT_FALSE(o.fusion);
  EXPECT_FALSE(o.lazy);
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
  o.policy = "Agenda";  // must be the canonical lower-case spelling
  EXPECT_THROW(o.validate(), vjit::UserError);
  o = vjit::Options{};
  o.gemm = "mkl";
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
  o.infer_shards = 0;
  EXPECT_THROW(o.validate(), vjit::UserError);
}

TEST(Options, LogTopics) {
  vjit::Options o;
  EXPECT_FALSE(o.logs("passes"));
  o.log = "passes";
  EXPECT_TRUE(o.logs("passes"));
  EXPECT_FALSE(o.logs("schedule"));
  o.log = "all";
  EXPECT_TRUE(o.logs("schedule"));
  EXPECT_TRUE(o.logs("kernels"));
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
