// The receiving side of an allgather on the device: every worker's message lies in one buffer of
// the portable Thrust backend's memory (Thrust's OpenMP system here; compiled by nvcc with
// thrust::system::cuda::tag, the GPU's), as a collective would leave it, with each message's
// length beside it. A wire::device_accumulator, set up once with the receiver's accumulators,
// decodes and adds all of them there in one call (accumulate_all: a fixed number of kernel
// launches, whatever the workers), in rank order, without the host waiting: each message is
// checked completely (a corrupt one is refused with an error code and changes nothing) before any
// of it is added. The host reads the sums only to show that they are decode_accumulate's.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <gradcomp/thrust/wire_decode.hpp>
#include <thrust/system/omp/execution_policy.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

using device = gradcomp::thrust_backend<thrust::system::omp::tag>;
using space = gradcomp::memory_space_t<device>;

int main() {
  const device backend{};
  const std::vector<std::size_t> sizes = {64 * 64 * 9, 64};
  const int workers = 4;

  // Each worker's DGC step, encoded on the host here (a worker on a GPU would encode where its
  // step ran, with wire::device_encoder); varint positions and fp16 values, with a CRC-32C.
  gradcomp::wire::encode_options wire;
  wire.indices = gradcomp::wire::index_coding::delta_varint;
  wire.values = gradcomp::wire::value_coding::fp16;
  wire.checksum = true;
  std::vector<std::vector<std::byte>> messages;
  for (int r = 0; r < workers; ++r) {
    gradcomp::dgc_config config;
    config.schedule = gradcomp::warmup_schedule::constant(0.01);
    config.seed = 1234;
    gradcomp::dgc_compressor<float> worker(config);
    worker.add_tensor("conv.weight", {64, 64, 3, 3});
    worker.add_tensor("conv.bias", {64});
    std::vector<std::vector<float>> grads;
    std::vector<gradcomp::span<const float>> views;
    for (const std::size_t n : sizes) {
      grads.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) grads.back()[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r));
    }
    for (const auto& g : grads) views.emplace_back(g.data(), g.size());
    if (!worker.compress(views)) return 1;
    std::vector<std::byte> m(worker.max_message_bytes(wire));
    const auto n = worker.encode_message(wire, gradcomp::span<std::byte>(m.data(), m.size()));
    if (!n) return 1;
    m.resize(*n);
    messages.push_back(std::move(m));
  }
  messages[2][100] ^= std::byte{0x10};  // one worker's message damaged on the way

  // What an allgather leaves on the device: each message in a slot of the longest one's length,
  // and their lengths.
  std::vector<std::uint64_t> lengths;
  std::uint64_t longest = 0;
  for (const auto& m : messages) {
    lengths.push_back(m.size());
    longest = m.size() > longest ? m.size() : longest;
  }
  std::vector<std::byte> gathered(workers * longest);
  for (int r = 0; r < workers; ++r) std::memcpy(gathered.data() + r * longest, messages[r].data(), messages[r].size());
  auto received = gradcomp::allocate_buffer<std::byte>(backend, gathered.size());
  auto received_lengths = gradcomp::allocate_buffer<std::uint64_t>(backend, lengths.size());
  if (!gradcomp::copy_to_backend(backend, gradcomp::span<const std::byte>(gathered.data(), gathered.size()),
                                 received.view()) ||
      !gradcomp::copy_to_backend(backend, gradcomp::span<const std::uint64_t>(lengths.data(), lengths.size()),
                                 received_lengths.view()))
    return 1;

  // The receiver: one accumulator per tensor in the backend's memory (zero here), and a decoder
  // set up once for `workers` messages up to the longest; then one call for all of them.
  std::vector<gradcomp::backend_buffer<float, device>> sums;
  std::vector<gradcomp::span<float, space>> accumulators;
  for (const std::size_t n : sizes) {
    sums.push_back(gradcomp::allocate_buffer<float>(backend, n));
    const std::vector<float> zero(n, 0.0f);
    if (!gradcomp::copy_to_backend(backend, gradcomp::span<const float>(zero.data(), n), sums.back().view())) return 1;
    accumulators.push_back(sums.back().view());
  }
  gradcomp::wire::device_accumulator<float, device> receiver(
      backend, gradcomp::span<const gradcomp::span<float, space>>(accumulators.data(), accumulators.size()), longest,
      {}, {}, workers);
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(backend, 2 * workers);  // errc, sections per worker
  if (!receiver.accumulate_all(backend, gradcomp::readonly(received.view()), longest,
                               gradcomp::readonly(received_lengths.view()), outcomes.view()))
    return 1;

  // The host reads the outcomes and sums once, and checks them against decode_accumulate.
  std::vector<std::uint64_t> result(2 * workers);
  if (!gradcomp::copy_to_host(backend, gradcomp::readonly(outcomes.view()),
                              gradcomp::span<std::uint64_t>(result.data(), result.size())))
    return 1;
  std::vector<std::vector<float>> on_device, on_host;
  for (std::size_t t = 0; t < sums.size(); ++t) {
    on_device.emplace_back(sizes[t]);
    on_host.emplace_back(sizes[t], 0.0f);
    if (!gradcomp::copy_to_host(backend, gradcomp::readonly(sums[t].view()),
                                gradcomp::span<float>(on_device.back().data(), sizes[t])))
      return 1;
  }
  gradcomp::synchronize(backend);
  std::vector<gradcomp::span<float>> host_views;
  for (auto& h : on_host) host_views.emplace_back(h.data(), h.size());
  for (int r = 0; r < workers; ++r) {
    const auto e = static_cast<gradcomp::errc>(result[2 * r]);
    const auto host = gradcomp::wire::decode_accumulate<float>(
        gradcomp::span<const std::byte>(messages[r].data(), messages[r].size()),
        gradcomp::span<const gradcomp::span<float>>(host_views.data(), host_views.size()));
    std::printf("worker %d: %zu bytes, %s\n", r, messages[r].size(),
                e == gradcomp::errc::ok ? "added" : gradcomp::to_string(e));
    if ((host ? gradcomp::errc::ok : host.error()) != e) return 1;
  }
  bool same = true;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    same = same && std::memcmp(on_device[t].data(), on_host[t].data(), sizes[t] * sizeof(float)) == 0;
  std::printf("sums on the device %s decode_accumulate's\n", same ? "are bitwise" : "are NOT");
  return same && result[2 * 2] == static_cast<std::uint64_t>(gradcomp::errc::checksum_mismatch) ? 0 : 1;
}
