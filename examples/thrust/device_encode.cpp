// A DGC step's message encoded where the step ran: the compressor's gradients, state and message
// live in the portable Thrust backend's memory (Thrust's OpenMP system here; compiled by nvcc with
// thrust::system::cuda::tag, the GPU's), and a wire::device_encoder, set up once from
// dgc_compressor::device_message(), writes each step's message there without the host waiting.
// The host reads the outcome (the length) and the bytes only to show that they are the bytes
// encode_message writes on the host; a trainer would hand them to its exchange instead.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <gradcomp/thrust/wire_encode.hpp>
#include <thrust/system/omp/execution_policy.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

using device = gradcomp::thrust_backend<thrust::system::omp::tag>;

int main() {
  const device backend{};
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(0.01);
  gradcomp::dgc_compressor<float, device> worker(config, backend);
  worker.add_tensor("conv.weight", {64, 64, 3, 3});
  worker.add_tensor("conv.bias", {64});

  // Set up once: raw 32-bit positions, fp32 values, a CRC-32C trailer.
  gradcomp::wire::encode_options wire;
  wire.indices = gradcomp::wire::index_coding::raw_u32;
  wire.checksum = true;
  gradcomp::wire::device_encoder<float, device> encoder(backend, worker.device_message(), wire);
  auto message = gradcomp::allocate_buffer<std::byte>(backend, encoder.max_message_bytes());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(backend, 2);  // length, errc

  std::vector<gradcomp::backend_buffer<float, device>> grads;
  for (const std::size_t n : {std::size_t(64 * 64 * 9), std::size_t(64)})
    grads.push_back(gradcomp::allocate_buffer<float>(backend, n));
  for (int step = 0; step < 3; ++step) {
    std::vector<gradcomp::backend_span<const float, device>> views;
    for (auto& g : grads) {  // a trainer's backward pass would have written them
      std::vector<float> host(g.size());
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = std::sin(0.1f * static_cast<float>(i + 7 * step));
      if (!gradcomp::copy_to_backend(backend, gradcomp::span<const float>(host.data(), host.size()), g.view()))
        return 1;
      views.push_back(gradcomp::readonly(g.view()));
    }
    if (!worker.compress(views) || !encoder.encode(backend, message.view(), outcome.view())) return 1;

    // Here the trainer would send outcome[0] bytes of `message` from the device. To check them,
    // bring both to the host and compare with the host encoder's message of the same step.
    std::uint64_t result[2] = {};
    if (!gradcomp::copy_to_host(backend, gradcomp::readonly(outcome.view()),
                                gradcomp::span<std::uint64_t>(result, 2)))
      return 1;
    gradcomp::synchronize(backend);
    if (result[1] != 0) {
      std::printf("step %d refused: %s\n", step, gradcomp::to_string(static_cast<gradcomp::errc>(result[1])));
      return 1;
    }
    std::vector<std::byte> on_device(message.size()), on_host(worker.max_message_bytes(wire));
    if (!gradcomp::copy_to_host(backend, gradcomp::readonly(message.view()),
                                gradcomp::span<std::byte>(on_device.data(), on_device.size())))
      return 1;
    gradcomp::synchronize(backend);
    const auto bytes = worker.encode_message(wire, gradcomp::span<std::byte>(on_host.data(), on_host.size()));
    const bool same = bytes && *bytes == result[0] &&
                      std::equal(on_host.begin(), on_host.begin() + static_cast<std::ptrdiff_t>(*bytes),
                                 on_device.begin());
    std::printf("step %d: %llu bytes encoded in the backend's memory, %s encode_message's\n", step,
                static_cast<unsigned long long>(result[0]), same ? "the same as" : "NOT the same as");
    if (!same) return 1;
  }
  return 0;
}
