// A trainer's own C++ file, compiled by any C++ compiler without Thrust or CUDA headers: it
// includes gradcomp's host headers only and runs DGC on a backend whose kernels another file
// compiled (kernels_omp.cpp here; kernels_cuda.cu, compiled by nvcc, for gradcomp::cuda_backend).
// Three steps of two tensors, each checked bit for bit against the CPU backend's message.
#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <vector>

#include "kernels_tag.hpp"

// On a GPU: gradcomp::cuda_backend, with kernels_cuda.cu in the program instead of kernels_omp.cpp.
using device = gradcomp::separate_backend<example_kernels>;

int main() try {
  const device backend{};
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(0.01);
  gradcomp::dgc_compressor<float, device> worker(config, backend);
  gradcomp::dgc_compressor<float> reference(config);
  auto layout = [](auto& c) {
    c.add_tensor("fc.weight", {256, 512});
    c.add_tensor("fc.bias", {256});
  };
  layout(worker);
  layout(reference);

  std::vector<gradcomp::backend_buffer<float, device>> grads;
  for (const std::size_t n : {std::size_t(256 * 512), std::size_t(256)})
    grads.push_back(gradcomp::allocate_buffer<float>(backend, n));
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> host;
    std::vector<gradcomp::span<const float>> host_views;
    std::vector<gradcomp::backend_span<const float, device>> views;
    for (auto& g : grads) {
      host.emplace_back(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) host.back()[i] = std::cos(0.01f * static_cast<float>(i * (step + 3)));
      if (!gradcomp::copy_to_backend(backend, gradcomp::span<const float>(host.back().data(), g.size()), g.view()))
        return 1;
      host_views.emplace_back(host.back().data(), host.back().size());
      views.push_back(gradcomp::readonly(g.view()));
    }
    if (!worker.compress(views) || !reference.compress(host_views)) return 1;
    std::vector<std::byte> a(worker.max_message_bytes()), b(reference.max_message_bytes());
    const auto na = worker.encode_message({}, gradcomp::span<std::byte>(a.data(), a.size()));
    const auto nb = reference.encode_message({}, gradcomp::span<std::byte>(b.data(), b.size()));
    const bool same =
        na && nb && *na == *nb && std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(*na), b.begin());
    std::printf("step %d: %zu bytes, %s the CPU backend's message\n", step, na ? *na : std::size_t(0),
                same ? "the same as" : "NOT the same as");
    if (!same) return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::printf("%s\n", e.what());
  return 1;
}
