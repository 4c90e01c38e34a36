// DGC with gradients and state in a backend's memory: the portable Thrust backend, here on
// Thrust's OpenMP system (the same source compiled by nvcc with thrust::system::cuda::tag runs
// on the GPU). Two workers compress gradients that live in the backend's memory, their messages
// go through the wire format, and a replica sums them in the backend's memory; the averaged
// update is copied back and compared with the CPU backend's, which it equals bit for bit.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <thrust/system/omp/execution_policy.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using device = gradcomp::thrust_backend<thrust::system::omp::tag>;

// One step of `workers` workers on backend B, from host gradients; the averaged update of
// tensor 0 on the host, or an empty vector (and a message) on error.
template <class B>
std::vector<float> averaged_update(const B& backend, const std::vector<std::vector<float>>& grads) {
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(0.01);
  config.num_workers = grads.size();
  std::vector<gradcomp::dgc_compressor<float, B>> workers;
  for (std::size_t r = 0; r < grads.size(); ++r) {
    workers.emplace_back(config, backend);
    workers.back().add_tensor("fc.weight", {512, 1024});
  }
  gradcomp::aggregator<float, B> replica(workers[0].receiver(), backend);
  gradcomp::wire::encode_options wire;
  wire.checksum = true;
  std::vector<std::byte> message(workers[0].max_message_bytes(wire));

  replica.begin();
  for (std::size_t r = 0; r < grads.size(); ++r) {
    // A trainer on this backend already holds its gradient there; here it is copied in once.
    auto g = gradcomp::allocate_buffer<float>(backend, grads[r].size());
    if (!gradcomp::copy_to_backend(backend, gradcomp::span<const float>(grads[r].data(), grads[r].size()),
                                   g.view()))
      return {};
    const std::vector<gradcomp::backend_span<const float, B>> views = {gradcomp::readonly(g.view())};
    const auto issued = workers[r].compress(views);
    const auto stats = issued ? workers[r].stats() : gradcomp::fail(issued.error());
    const gradcomp::span<std::byte> out(message.data(), message.size());
    const auto bytes = stats ? workers[r].encode_message(wire, out) : gradcomp::fail(stats.error());
    if (!bytes) {
      std::printf("worker %zu: %s\n", r, gradcomp::to_string(bytes.error()));
      return {};
    }
    // In a real job the bytes cross the network here; every replica adds every worker's message.
    if (auto added = replica.add(gradcomp::span<const std::byte>(message.data(), *bytes)); !added) {
      std::printf("replica: %s\n", gradcomp::to_string(added.error()));
      return {};
    }
  }
  if (!replica.finish(grads.size())) return {};
  std::vector<float> update(grads[0].size());
  if (!gradcomp::copy_to_host(backend, replica.update(0), gradcomp::span<float>(update.data(), update.size())))
    return {};
  gradcomp::synchronize(backend);  // the host reads `update` only after this
  return update;
}

}  // namespace

int main() {
  std::vector<std::vector<float>> grads(2, std::vector<float>(512 * 1024));
  for (std::size_t r = 0; r < grads.size(); ++r)
    for (std::size_t i = 0; i < grads[r].size(); ++i)
      grads[r][i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r)) * static_cast<float>(i % 101);

  const std::vector<float> on_device = averaged_update(device{}, grads);
  const std::vector<float> on_cpu = averaged_update(gradcomp::cpu_backend{}, grads);
  if (on_device.empty() || on_cpu.empty()) return 1;
  std::size_t nonzero = 0;
  for (const float u : on_device) nonzero += u != 0.0f;
  const bool same = std::memcmp(on_device.data(), on_cpu.data(), on_cpu.size() * sizeof(float)) == 0;
  std::printf("Thrust backend: %zu of %zu update entries set; %s the CPU backend's bits\n", nonzero,
              on_device.size(), same ? "the same as" : "NOT the same as");
  return same ? 0 : 1;
}
