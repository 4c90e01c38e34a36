// A trainer's plain C++ file on the installed package: DGC on gradcomp::cuda_backend, with no CUDA
// or Thrust header in this translation unit; kernels.cu compiles the backend's kernels. The
// consumer test builds it (the C++ compiler here, nvcc there, linked together) to show that the
// installed headers support this split; on a GPU it compresses one step and compares the message
// with the CPU backend's.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  const gradcomp::cuda_backend gpu{};
  gradcomp::dgc_compressor<float, gradcomp::cuda_backend> worker({}, gpu);
  gradcomp::dgc_compressor<float> reference({});
  worker.add_tensor("w", {512, 512});
  reference.add_tensor("w", {512, 512});
  std::vector<float> grad(512 * 512);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = std::sin(0.001f * static_cast<float>(i * i % 7919));
  auto g = gradcomp::allocate_buffer<float>(gpu, grad.size());
  if (!gradcomp::copy_to_backend(gpu, gradcomp::span<const float>(grad.data(), grad.size()), g.view())) return 1;
  const std::vector<gradcomp::backend_span<const float, gradcomp::cuda_backend>> views = {
      gradcomp::readonly(g.view())};
  const std::vector<gradcomp::span<const float>> host = {gradcomp::span<const float>(grad.data(), grad.size())};
  if (!worker.compress(views) || !reference.compress(host)) return 1;
  std::vector<std::byte> a(worker.max_message_bytes()), b(reference.max_message_bytes());
  const auto na = worker.encode_message({}, gradcomp::span<std::byte>(a.data(), a.size()));
  const auto nb = reference.encode_message({}, gradcomp::span<std::byte>(b.data(), b.size()));
  a.resize(na ? *na : 0);
  b.resize(nb ? *nb : 0);
  std::printf("cuda_backend from plain C++: %s\n", na && a == b ? "the CPU backend's message" : "DIFFERENT");
  return na && a == b ? 0 : 1;
}
