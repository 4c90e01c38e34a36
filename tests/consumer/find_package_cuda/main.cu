// A trainer's CUDA translation unit: its gradients are in device memory (cudaMalloc), handed to
// gradcomp as spans of the Thrust backend's memory space, compressed on the GPU with DGC's
// default configuration, and the encoded message compared with the CPU backend's for the same
// gradients: the bytes must be identical. Without a CUDA device it only reports that (the
// project was still compiled and linked by nvcc against the installed package).
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <thrust/system/cuda/execution_policy.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

using gpu = gradcomp::thrust_backend<thrust::system::cuda::tag>;

template <class C>
std::vector<std::byte> message_of(C& c) {
  std::vector<std::byte> out(c.max_message_bytes());
  const auto n = c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size()));
  if (!n) return {};
  out.resize(*n);
  return out;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: compiled and linked only");
    return 0;
  }
  const std::size_t n = 1 << 18;
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) grad[i] = std::sin(0.001f * static_cast<float>(i * i % 7919)) * 0.01f;

  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.001);
  gradcomp::dgc_compressor<float> cpu(cfg);
  gradcomp::dgc_compressor<float, gpu> dev(cfg, gpu{});
  cpu.add_tensor("w", {n});
  dev.add_tensor("w", {n});

  float* d_grad = nullptr;
  if (cudaMalloc(&d_grad, n * sizeof(float)) != cudaSuccess) return 1;
  cudaMemcpy(d_grad, grad.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  const gradcomp::span<const float> host_view(grad.data(), n);
  const gradcomp::backend_span<const float, gpu> device_view(d_grad, n);

  int failures = 0;
  for (int step = 0; step < 3; ++step) {
    const bool ok = cpu.compress({&host_view, 1}) && dev.compress({&device_view, 1});
    const auto a = message_of(cpu), b = message_of(dev);
    if (!ok || a.empty() || a != b) {
      std::fprintf(stderr, "step %d: the GPU's message differs from the CPU's\n", step);
      ++failures;
    }
  }
  cudaFree(d_grad);
  std::printf("DGC on the GPU: %s\n", failures == 0 ? "the CPU's bytes" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}
