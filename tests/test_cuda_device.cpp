// The GPU back end on a GPU (ctest label `gpu`): the generated kernels, the
// index kernels and cuBLASLt against the reference, and cuBLASLt's FP32 peak.
// Without a usable device every test says "skipped: no CUDA device (reason)".
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "codegen/cuda_source.h"
#include "cuda_test_util.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"

namespace vjit::testing {
namespace {

using runtime::CudaDevice;
using runtime::DevicePtr;

DevicePtr to_device(CudaDevice& gpu, const std::vector<float>& host) {
  DevicePtr p = gpu.alloc(host.size() * sizeof(float));
  gpu.upload(p, host.data(), host.size() * sizeof(float));
  return p;
}

std::vector<float> to_host(CudaDevice& gpu, DevicePtr p, size_t n) {
  std::vector<float> host(n);
  gpu.download(host.data(), p, n * sizeof(float));
  return host;
}

bool transcendental(const codegen::KernelSpec& spec) {
  return std::any_of(spec.instrs.begin(), spec.instrs.end(), [](const codegen::KernelInstr& k) {
    return k.op == ir::Op::Exp || k.op == ir::Op::Log || k.op == ir::Op::Tanh || k.op == ir::Op::Sigmoid;
  });
}

TEST(CudaDevice, ReportsTheDevice) {
  VJIT_SKIP_WITHOUT_CUDA();
  const runtime::CudaDeviceInfo& info = CudaDevice::get().info();
  std::printf("device: %s sm_%d, %d SMs, %.1f GiB, driver %d, NVRTC %d\n", info.name.c_str(), info.arch(),
              info.multiprocessors, double(info.memory_bytes) / double(1 << 30), info.driver_version,
              jit::nvrtc_version());
  EXPECT_GE(info.major, 7);
}

// Every example kernel, compiled by NVRTC for this device and launched through
// the driver, equals the reference kernel: bit for bit for the IEEE ops, within
// 1e-5 relative where expf, logf or tanhf (≤ 2 ulp each) take part.
TEST(CudaDevice, EveryExampleKernelMatchesTheReference) {
  VJIT_SKIP_WITHOUT_CUDA();
  CudaDevice& gpu = CudaDevice::get();
  std::vector<codegen::KernelSpec> specs = example_kernel_specs();
  std::vector<codegen::CudaKernelSource> kernels;
  for (const codegen::KernelSpec& spec : specs) kernels.push_back(codegen::cuda_fused_kernel(spec));
  auto start = std::chrono::steady_clock::now();
  jit::CudaModuleImage image =
      jit::compile_cuda_module(codegen::cuda_module_source(kernels), gpu.info().arch(), "", "example kernels");
  std::printf("compiled %zu kernels for sm_%d in %.3f s (%zu bytes%s)\n", kernels.size(), gpu.info().arch(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), image.image.size(),
              image.ptx ? ", PTX" : "");
  void* module = gpu.load_module(image.image);
  uint32_t seed = 1;
  for (size_t s = 0; s < specs.size(); ++s) {
    const codegen::KernelSpec& spec = specs[s];
    void* fn = gpu.function(module, kernels[s].name);
    for (int64_t rows : {int64_t(1), int64_t(37), int64_t(5000)}) {
      gpu.release_all();
      FusedOperands in(spec, rows, seed++);
      std::vector<std::vector<float>> expected = reference_outputs(spec, in);
      std::vector<uint64_t> pointers;
      for (const auto& v : in.inputs) pointers.push_back(to_device(gpu, v));
      for (const auto& v : in.outputs) pointers.push_back(to_device(gpu, v));
      FusedOperands args = in;
      std::vector<void*> params = fused_params(args.rows, pointers, args.input_ld, args.output_ld);
      gpu.launch(fn, CudaDevice::grid_for(rows * spec.width), 256, params.data());
      for (size_t o = 0; o < expected.size(); ++o) {
        std::vector<float> got = to_host(gpu, pointers[in.inputs.size() + o], expected[o].size());
        if (transcendental(spec)) {
          EXPECT_LE(max_error(got, expected[o], rows, spec.width, in.output_ld[o]), 1e-5)
              << spec.key() << " rows " << rows;
        } else {
          EXPECT_EQ(got, expected[o]) << spec.key() << " rows " << rows;
        }
      }
    }
  }
}

TEST(CudaDevice, IndexKernelsGatherAndScatterAdd) {
  VJIT_SKIP_WITHOUT_CUDA();
  CudaDevice& gpu = CudaDevice::get();
  gpu.release_all();
  jit::CudaModuleImage image = jit::compile_cuda_module(codegen::cuda_index_kernels_source(), gpu.info().arch(), "");
  void* module = gpu.load_module(image.image);
  std::vector<float> base(4096);
  for (size_t i = 0; i < base.size(); ++i) base[i] = float(i % 97) * 0.25f;
  long long rows = 300, width = 10, ld = 12;
  std::vector<long long> offsets(static_cast<size_t>(rows));
  for (long long r = 0; r < rows; ++r) offsets[size_t(r)] = (r * 37) % 400 * 10;  // repeats: shared destinations
  DevicePtr d_base = to_device(gpu, base), d_dst = to_device(gpu, std::vector<float>(size_t(rows * ld), 0.0f));
  DevicePtr d_off = gpu.alloc(offsets.size() * sizeof(long long));
  gpu.upload(d_off, offsets.data(), offsets.size() * sizeof(long long));
  void* gather[] = {&rows, &width, &d_off, &d_base, &d_dst, &ld};
  gpu.launch(gpu.function(module, "vjit_gather_rows"), CudaDevice::grid_for(rows * width), 256, gather);
  std::vector<float> dst = to_host(gpu, d_dst, size_t(rows * ld));
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i)
      ASSERT_EQ(dst[size_t(r * ld + i)], base[size_t(offsets[size_t(r)] + i)]) << r << " " << i;
  void* scatter[] = {&rows, &width, &d_off, &d_base, &d_dst, &ld};
  gpu.launch(gpu.function(module, "vjit_scatter_add_rows"), CudaDevice::grid_for(rows * width), 256, scatter);
  std::vector<double> expected(base.begin(), base.end());
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i) expected[size_t(offsets[size_t(r)] + i)] += dst[size_t(r * ld + i)];
  std::vector<float> got = to_host(gpu, d_base, base.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4 * std::max(1.0, expected[i])) << i;
}

// cuBLASLt against a double loop, every transpose; then the FP32 and TF32 peak.
TEST(CudaDevice, CublasLtSgemmMatchesAndPeak) {
  VJIT_SKIP_WITHOUT_CUDA();
  CudaDevice& gpu = CudaDevice::get();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      gpu.release_all();
      const int64_t m = 67, n = 45, k = 33;
      const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
      std::vector<float> a(size_t((ta ? k : m) * lda)), b(size_t((tb ? n : k) * ldb)), c(size_t(m * ldc), 1.0f);
      for (float& x : a) x = value(rng);
      for (float& x : b) x = value(rng);
      DevicePtr da = to_device(gpu, a), db = to_device(gpu, b), dc = to_device(gpu, c);
      gpu.sgemm(ta, tb, m, n, k, 1.0f, da, lda, db, ldb, 0.5f, dc, ldc);
      std::vector<float> got = to_host(gpu, dc, c.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0.5;
          for (int64_t p = 0; p < k; ++p)
            sum += double(ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]) *
                   double(tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]);
          ASSERT_NEAR(got[size_t(i * ldc + j)], sum, 1e-4) << "ta " << ta << " tb " << tb << " " << i << "," << j;
        }
    }
  gpu.release_all();
  const int64_t size = 8192;
  DevicePtr a = gpu.alloc(size_t(size * size) * 4), b = gpu.alloc(size_t(size * size) * 4),
            c = gpu.alloc(size_t(size * size) * 4);
  gpu.memset_zero(a, size_t(size * size) * 4);
  gpu.memset_zero(b, size_t(size * size) * 4);
  for (bool tf32 : {false, true}) {
    gpu.sgemm(false, false, size, size, size, 1.0f, a, size, b, size, 0.0f, c, size, tf32);  // warm-up
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep)
      best = std::min(best, gpu.time_ms([&] { gpu.sgemm(false, false, size, size, size, 1.0f, a, size, b, size, 0.0f, c, size, tf32); }));
    std::printf("cuBLASLt %s peak: %.1f TFLOP/s (%lldx%lldx%lld, best of 5: %.3f ms)\n", tf32 ? "TF32" : "FP32",
                2.0 * double(size) * double(size) * double(size) / (best * 1e-3) / 1e12, (long long)size,
                (long long)size, (long long)size, best);
  }
}

}  // namespace
}  // namespace vjit::testing
