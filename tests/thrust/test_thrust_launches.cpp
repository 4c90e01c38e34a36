// Launch accounting on the CPU: how many Thrust algorithms one step of each method, and the device
// encoder and decoder on one message, dispatch on the Thrust backend (counting_system.hpp; the
// steps also on a separate backend whose kernels this unit compiles for that system), for
// the first 1, 10 and 161 tensors of ResNet-50 (bench/data/resnet50.txt, each dimension cut to at
// most 8 so that the step is quick; the ranks, and so which tensors are compressed, are
// ResNet-50's). On the CUDA system each dispatch becomes at least one kernel launch. The counts are
// exact and written in docs/backends.md ("Launches per step"): a change that adds or removes a
// dispatch fails here until the table says so. Each step is issued without a host transfer.
#include <algorithm>
#include <array>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <gradcomp/thrust/segmented_sum.hpp>
#include <gradcomp/thrust/wire_decode.hpp>
#include <gradcomp/thrust/wire_encode.hpp>

#include <gradcomp/separate_kernels.hpp>

#include "thrust/counting_system.hpp"

namespace gradcomp_test {
struct counting_kernels {};
}  // namespace gradcomp_test
// The same kernels behind a separate backend, compiled in this unit: its steps must dispatch what
// the Thrust backend's do.
GRADCOMP_INSTANTIATE_KERNELS(gradcomp_test::counting_kernels, gradcomp_test::counting::tag);

namespace {

using backend = gradcomp::thrust_backend<gradcomp_test::counting::tag>;
using separate = gradcomp::separate_backend<gradcomp_test::counting_kernels>;
using gradcomp::detail::thrust_impl::host_transfer_count;

struct layer {
  std::string name;
  std::vector<std::size_t> shape;
};

// The first `count` tensors of ResNet-50, each dimension cut to at most `cut`.
std::vector<layer> resnet50(std::size_t count, std::size_t cut = 8) {
  std::ifstream in(GRADCOMP_TEST_RESNET50);
  REQUIRE(in);
  std::vector<layer> out;
  std::string line;
  while (out.size() < count && std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    layer l;
    fields >> l.name;
    for (std::size_t d; fields >> d;) l.shape.push_back(std::min(d, cut));
    out.push_back(l);
  }
  REQUIRE(out.size() == count);
  return out;
}

// Gradients of the layers in the memory of backend B, with values of every magnitude (times
// `scale`), and the same on the host.
template <class B>
struct gradients_on {
  std::vector<gradcomp::backend_buffer<float, B>> buffers;
  std::vector<gradcomp::backend_span<const float, B>> views;
  std::vector<std::vector<float>> host;

  explicit gradients_on(const std::vector<layer>& layers, float scale = 1.0f) {
    for (std::size_t t = 0; t < layers.size(); ++t) {
      std::size_t n = 1;
      for (std::size_t d : layers[t].shape) n *= d;
      std::vector<float>& h = host.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = (static_cast<float>((i * 37 + t * 11) % 101) / 8.0f - 6.0f) * scale;
      buffers.push_back(gradcomp::allocate_buffer<float>(B{}, n));
      REQUIRE(gradcomp::copy_to_backend(B{}, gradcomp::span<const float>(h.data(), n), buffers.back().view()));
      views.push_back(gradcomp::readonly(buffers.back().view()));
    }
  }
};
using gradients = gradients_on<backend>;

// The gradients' host copies, as the CPU backend takes them.
template <class B>
std::vector<gradcomp::span<const float>> host_views(const gradients_on<B>& g) {
  std::vector<gradcomp::span<const float>> out;
  for (const auto& h : g.host) out.push_back(gradcomp::span<const float>(h.data(), h.size()));
  return out;
}

// The dispatches of the second step of a compressor made by `make` over the layers (the first
// step sets up what a first step does once), each dimension cut to at most `cut`.
template <class Make>
std::size_t count_step(std::size_t tensors, Make make, std::size_t cut = 8) {
  const auto layers = resnet50(tensors, cut);
  auto c = make();
  for (const auto& l : layers) c.add_tensor(l.name, l.shape);
  gradients_on<std::decay_t<decltype(c.backend())>> g(layers);
  REQUIRE(c.compress(g.views));
  REQUIRE(c.stats());
  const auto transfers = host_transfer_count.load();
  const std::size_t before = gradcomp_test::counting::dispatches;
  REQUIRE(c.compress(g.views));
  const std::size_t issued = gradcomp_test::counting::dispatches - before;
  CHECK(host_transfer_count.load() == transfers);
  REQUIRE(c.stats());
  return issued;
}

// The dispatches of encoding a DGC step's message of the layers on the device (raw_u32 indices,
// with the checksum), of decoding it into accumulators of the layers and adding it there, and of
// decoding and adding 1 and 8 workers' messages in one call (sums checked, as an exchange does).
struct codec_counts {
  std::size_t encode = 0;
  std::size_t decode = 0;
  std::size_t decode_1 = 0;
  std::size_t decode_8 = 0;
};

codec_counts count_codec(std::size_t tensors) {
  const auto layers = resnet50(tensors);
  const backend b{};
  gradcomp::dgc_config cfg;
  cfg.selection = gradcomp::selection_method::exact_topk;
  gradcomp::dgc_compressor<float, backend> c(cfg);
  for (const auto& l : layers) c.add_tensor(l.name, l.shape);
  gradients g(layers);
  REQUIRE(c.compress(g.views));
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::raw_u32;
  opt.checksum = true;
  gradcomp::wire::device_encoder<float, backend> enc(b, c.device_message(), opt);
  auto out = gradcomp::allocate_buffer<std::byte>(b, enc.max_message_bytes());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  codec_counts counts;
  std::size_t before = gradcomp_test::counting::dispatches;
  REQUIRE(enc.encode(b, out.view(), outcome.view()));
  counts.encode = gradcomp_test::counting::dispatches - before;
  std::uint64_t result[2] = {};
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
  gradcomp::synchronize(b);
  REQUIRE(result[1] == 0);

  std::vector<gradcomp::backend_buffer<float, backend>> sums;
  std::vector<gradcomp::span<float, gradcomp::memory_space_t<backend>>> views;
  for (const auto& grad : g.buffers) {
    sums.push_back(gradcomp::allocate_buffer<float>(b, grad.size()));
    views.push_back(sums.back().view());
  }
  gradcomp::wire::device_accumulator<float, backend> decoder(
      b, gradcomp::span<const gradcomp::span<float, gradcomp::memory_space_t<backend>>>(views.data(), views.size()),
      enc.max_message_bytes());
  const auto message = gradcomp::readonly(out.view()).first(static_cast<std::size_t>(result[0]));
  before = gradcomp_test::counting::dispatches;
  REQUIRE(decoder.accumulate(b, message, outcome.view()));
  counts.decode = gradcomp_test::counting::dispatches - before;
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
  gradcomp::synchronize(b);
  CHECK(result[0] == 0);
  CHECK(result[1] == tensors);

  // The message in each of 8 slots of an allgather's buffer.
  const std::size_t stride = message.size();
  auto slots = gradcomp::allocate_buffer<std::byte>(b, 8 * stride);
  std::vector<std::byte> host(stride);
  REQUIRE(gradcomp::copy_to_host(b, message, gradcomp::span<std::byte>(host.data(), host.size())));
  gradcomp::synchronize(b);
  for (std::size_t r = 0; r < 8; ++r)
    REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::byte>(host.data(), host.size()),
                                      slots.view().subspan(r * stride, stride)));
  gradcomp::wire::device_accumulate_options checked;
  checked.check_sums = true;
  gradcomp::wire::device_accumulator<float, backend> all(
      b, gradcomp::span<const gradcomp::span<float, gradcomp::memory_space_t<backend>>>(views.data(), views.size()),
      stride, checked, {}, 8);
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(b, 16);
  for (const std::size_t n : {std::size_t(1), std::size_t(8)}) {
    before = gradcomp_test::counting::dispatches;
    REQUIRE(all.accumulate_all(b, gradcomp::readonly(slots.view()).first(n * stride), stride, {}, outcomes.view()));
    (n == 1 ? counts.decode_1 : counts.decode_8) = gradcomp_test::counting::dispatches - before;
    std::vector<std::uint64_t> got(2 * n);
    REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcomes.view()).first(2 * n),
                                   gradcomp::span<std::uint64_t>(got.data(), got.size())));
    gradcomp::synchronize(b);
    for (std::size_t r = 0; r < n; ++r) {
      CHECK(got[2 * r] == 0);
      CHECK(got[2 * r + 1] == tensors);
    }
  }
  return counts;
}

struct expected_counts {
  const char* method;
  std::size_t at_1, at_10, at_161;
};

template <class Make>
void check_counts(const expected_counts& e, Make make) {
  CAPTURE(e.method);
  const std::size_t at_1 = count_step(1, make);
  const std::size_t at_10 = count_step(10, make);
  const std::size_t at_161 = count_step(161, make);
  INFO(std::string(e.method) << ": " << at_1 << ", " << at_10 << ", " << at_161
                             << " dispatches for 1, 10, 161 tensors");
  CHECK(at_1 == e.at_1);
  CHECK(at_10 == e.at_10);
  CHECK(at_161 == e.at_161);
}

}  // namespace

// On the Thrust backend and on a separate backend whose kernels are the Thrust backend's.
TEST_CASE_TEMPLATE("launches per step: DGC, exact and sampled, with clipping", B, backend, separate) {
  gradcomp::dgc_config exact;
  exact.selection = gradcomp::selection_method::exact_topk;
  exact.clip_norm = 1.0;
  check_counts({"dgc exact", 31, 32, 32}, [&] { return gradcomp::dgc_compressor<float, B>(exact); });
  gradcomp::dgc_config sampled;
  sampled.clip_norm = 1.0;
  check_counts({"dgc sampled", 46, 47, 47}, [&] { return gradcomp::dgc_compressor<float, B>(sampled); });
}

namespace {

// Three DGC steps over the first 40 tensors of ResNet-50 at full sizes (gradients with many ties
// at every magnitude), on the counting system and on the CPU backend: every message, residual and
// selection (every field of its result) bitwise the same.
void check_dgc_at_full_size(const gradcomp::dgc_config& cfg) {
  const auto layers = resnet50(40, std::size_t(1) << 20);
  gradcomp::dgc_compressor<float, backend> on_thrust(cfg);
  gradcomp::dgc_compressor<float> on_cpu(cfg);
  for (const auto& l : layers) {
    on_thrust.add_tensor(l.name, l.shape);
    on_cpu.add_tensor(l.name, l.shape);
  }
  // The whole-model selections keep their own scratch: no per-tensor selection workspace.
  CHECK(on_thrust.workspace_bytes() == 0);
  CHECK(on_cpu.workspace_bytes() != 0);
  for (const float scale : {1.0f, -0.5f, 2.0f}) {
    CAPTURE(scale);
    gradients g(layers, scale);
    REQUIRE(on_thrust.compress(g.views));
    REQUIRE(on_cpu.compress(host_views(g)));
    REQUIRE(on_thrust.stats());
    REQUIRE(on_cpu.stats());
    for (std::size_t t = 0; t < layers.size(); ++t) {
      CAPTURE(t);
      const auto x = on_thrust.message(t);
      const auto y = on_cpu.message(t);
      REQUIRE(x.values.size() == y.values.size());
      CHECK(std::memcmp(x.values.data(), y.values.data(), x.values.size_bytes()) == 0);
      REQUIRE(x.indices.size() == y.indices.size());
      CHECK(std::memcmp(x.indices.data(), y.indices.data(), x.indices.size_bytes()) == 0);
      const auto ex = on_thrust.residual(t);
      const auto ey = on_cpu.residual(t);
      REQUIRE(ex.size() == ey.size());
      CHECK(std::memcmp(ex.data(), ey.data(), ex.size_bytes()) == 0);
      const auto sx = on_thrust.selection(t);
      const auto sy = on_cpu.selection(t);
      CHECK(sx.count == sy.count);
      CHECK(sx.target == sy.target);
      CHECK(std::memcmp(&sx.threshold, &sy.threshold, sizeof(float)) == 0);
      CHECK(sx.sample_count == sy.sample_count);
      CHECK(sx.rounds == sy.rounds);
      CHECK(sx.exact == sy.exact);
    }
  }
}

}  // namespace

TEST_CASE("launches per step: DGC at full sizes, the sample-guided top-k included") {
  // At their full sizes and the final density the first 10 and 40 tensors of ResNet-50 include
  // tensors of at least 2^15 elements, which the exact top-k selects with the sample-guided plan
  // (its sample, sort, cut, candidates: 8 more dispatches than the plain radix select of every
  // tensor; 5 more under the sampled threshold, whose exact paths compact candidates anyway); the
  // first one alone does not. All have two levels of the segmented sums (4 dispatches more than
  // one level: the clipping norms and the overflow guard's exact pass; the sampled threshold's
  // round counts, 2 more).
  for (const auto selection : {gradcomp::selection_method::exact_topk, gradcomp::selection_method::sampled_threshold}) {
    const bool exact = selection == gradcomp::selection_method::exact_topk;
    CAPTURE(exact);
    gradcomp::dgc_config cfg;
    cfg.selection = selection;
    cfg.clip_norm = 1.0;
    cfg.schedule = gradcomp::warmup_schedule::constant(0.001);
    const auto make = [&] { return gradcomp::dgc_compressor<float, backend>(cfg); };
    const std::size_t full = std::size_t(1) << 20;
    const std::size_t at_1 = count_step(1, make, full);
    const std::size_t at_10 = count_step(10, make, full);
    const std::size_t at_40 = count_step(40, make, full);
    INFO(at_1 << ", " << at_10 << ", " << at_40 << " dispatches for 1, 10, 40 tensors");
    CHECK(at_1 == (exact ? 35 : 52));
    CHECK(at_10 == (exact ? 44 : 58));
    CHECK(at_40 == (exact ? 44 : 58));
    check_dgc_at_full_size(cfg);
  }
}

TEST_CASE_TEMPLATE("launches per step: the quantisers and AdaComp", B, backend, separate) {
  // A whole model at once (thrust/model_table.hpp): EF-SignSGD and TernGrad take two per level of
  // their sums (one level at these sizes, at most three) and three more.
  check_counts({"ef_signsgd", 5, 5, 5},
               [] { return gradcomp::ef_signsgd_compressor<float, B>(gradcomp::ef_signsgd_config{}); });
  check_counts({"terngrad", 5, 5, 5}, [] { return gradcomp::terngrad_compressor<float, B>(gradcomp::terngrad_config{}); });
  check_counts({"onebit_sgd", 5, 5, 5},
               [] { return gradcomp::onebit_sgd_compressor<float, B>(gradcomp::onebit_sgd_config{}); });
  check_counts({"qsgd", 4, 4, 4}, [] { return gradcomp::qsgd_compressor<float, B>(gradcomp::qsgd_config{}); });
  check_counts({"adacomp", 7, 7, 7}, [] { return gradcomp::adacomp_compressor<float, B>(gradcomp::adacomp_config{}); });
}

TEST_CASE("launches per message: the device encoder and decoder") {
  const codec_counts at_1 = count_codec(1), at_10 = count_codec(10), at_161 = count_codec(161);
  INFO("encode: " << at_1.encode << ", " << at_10.encode << ", " << at_161.encode << "; decode: " << at_1.decode
                  << ", " << at_10.decode << ", " << at_161.decode << "; 1 and 8 workers: " << at_1.decode_1 << "/"
                  << at_1.decode_8 << ", " << at_10.decode_1 << "/" << at_10.decode_8 << ", " << at_161.decode_1
                  << "/" << at_161.decode_8 << " dispatches for 1, 10, 161 tensors");
  // A fixed number, whatever the tensors and the workers.
  for (const codec_counts& c : {at_1, at_10, at_161}) {
    CHECK(c.encode == 7);
    CHECK(c.decode == 12);
    CHECK(c.decode_1 == 13);
    CHECK(c.decode_8 == 13);
  }
}

// A term of the reductions below.
struct index_leaf {
  GRADCOMP_HD double operator()(std::uint32_t t, std::uint64_t i) const { return static_cast<double>(i % 97 + t); }
};

TEST_CASE("launches per model: the ordered sums of every tensor at once") {
  namespace impl = gradcomp::detail::thrust_impl;
  using System = gradcomp_test::counting::tag;
  for (const std::size_t tensors : {std::size_t(1), std::size_t(10), std::size_t(161)}) {
    CAPTURE(tensors);
    std::vector<std::size_t> sizes;
    for (const auto& l : resnet50(tensors, static_cast<std::size_t>(-1))) {
      std::size_t n = 1;
      for (std::size_t d : l.shape) n *= d;
      sizes.push_back(n);
    }
    const impl::segmented_reduction<System> reduction(
        gradcomp::span<const std::size_t>(sizes.data(), sizes.size()));
    impl::system_buffer<double, System> results(tensors);
    const std::size_t before = gradcomp_test::counting::dispatches;
    reduction.issue(nullptr, index_leaf{}, gradcomp::detail::sum_merge{}, results.view().data());
    // Two per level: conv1's 9,408 elements take two levels, the 3x3 kernels of 2,359,296 too.
    CHECK(gradcomp_test::counting::dispatches - before == 4);
    CHECK(reduction.levels() == 2);
  }
}

namespace {

// Two compressors' last steps: every message and error buffer bitwise equal.
template <class A, class B>
void check_same_step(A& a, B& b) {
  REQUIRE(a.stats());
  REQUIRE(b.stats());
  for (std::size_t t = 0; t < a.num_tensors(); ++t) {
    CAPTURE(t);
    const auto x = a.message(t).values;
    const auto y = b.message(t).values;
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);
    const auto ex = a.error_feedback(t);
    const auto ey = b.error_feedback(t);
    REQUIRE(ex.size() == ey.size());
    CHECK(std::memcmp(ex.data(), ey.data(), ex.size_bytes()) == 0);
  }
}

}  // namespace

TEST_CASE("launches per step: gradients that moved are read where they are now, for one upload of the table") {
  // Two steps on gradients of ResNet-50's first ten layers, the second from other buffers with
  // other values: the Thrust compressor's messages and errors are the CPU backend's, bitwise, and
  // the second step takes the same launches as any other (the table's upload is a copy in the
  // stream's order) and no host transfer. A table left with the first buffers would send the first
  // gradients again.
  const auto layers = resnet50(10);
  gradients first(layers), second(layers, -0.75f);
  gradcomp::ef_signsgd_compressor<float, backend> on_thrust(gradcomp::ef_signsgd_config{});
  gradcomp::ef_signsgd_compressor<float> on_cpu(gradcomp::ef_signsgd_config{});
  for (const auto& l : layers) {
    on_thrust.add_tensor(l.name, l.shape);
    on_cpu.add_tensor(l.name, l.shape);
  }
  for (const gradients* g : {&first, &second}) {
    const auto transfers = host_transfer_count.load();
    const std::size_t before = gradcomp_test::counting::dispatches;
    REQUIRE(on_thrust.compress(g->views));
    if (g == &second) {
      CHECK(gradcomp_test::counting::dispatches - before == 5);
      CHECK(host_transfer_count.load() == transfers);
    }
    REQUIRE(on_cpu.compress(host_views(*g)));
    check_same_step(on_thrust, on_cpu);
  }
}

TEST_CASE("launches per step: a copy of a compressor steps on its own buffers") {
  // A copy's table still names the original's buffers until its first step binds its own: the
  // original and the copy step on other gradients and must each keep their own messages and
  // errors (a copy that wrote through the original's table would leave the original's wrong).
  const auto layers = resnet50(10);
  gradients first(layers), second(layers, -0.75f);
  gradcomp::onebit_sgd_compressor<float, backend> original(gradcomp::onebit_sgd_config{});
  gradcomp::onebit_sgd_compressor<float> reference(gradcomp::onebit_sgd_config{}), copied_reference(
                                                                                       gradcomp::onebit_sgd_config{});
  for (const auto& l : layers) {
    original.add_tensor(l.name, l.shape);
    reference.add_tensor(l.name, l.shape);
    copied_reference.add_tensor(l.name, l.shape);
  }
  REQUIRE(original.compress(first.views));
  REQUIRE(reference.compress(host_views(first)));
  REQUIRE(copied_reference.compress(host_views(first)));
  auto copy = original;
  REQUIRE(copy.compress(second.views));
  REQUIRE(copied_reference.compress(host_views(second)));
  REQUIRE(original.compress(first.views));
  REQUIRE(reference.compress(host_views(first)));
  check_same_step(original, reference);
  check_same_step(copy, copied_reference);
}

TEST_CASE_TEMPLATE("launches per step: SAEF around DGC (exact top-k)", B, backend, separate) {
  // The worker's momentum is one launch over every tensor (saef/thrust_ops.hpp), then DGC's step
  // on u, whose buffers alternate between two sets (the table is uploaded each step, a copy). The
  // worker reads the step's outcome to keep or drop its new momentum: the records and the verdict,
  // two transfers in one synchronisation.
  gradcomp::dgc_config cfg;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.momentum_correction = false;
  std::vector<std::size_t> counts;
  for (const std::size_t tensors : {std::size_t(1), std::size_t(10), std::size_t(161)}) {
    const auto layers = resnet50(tensors);
    gradcomp::dgc_compressor<float, B> c(cfg);
    for (const auto& l : layers) c.add_tensor(l.name, l.shape);
    gradcomp::saef_worker<gradcomp::dgc_compressor<float, B>> worker(c, gradcomp::saef_config{});
    gradients_on<B> g(layers);
    REQUIRE(worker.step(g.views));
    REQUIRE(c.stats());
    const auto transfers = host_transfer_count.load();
    const std::size_t before = gradcomp_test::counting::dispatches;
    REQUIRE(worker.step(g.views));
    counts.push_back(gradcomp_test::counting::dispatches - before);
    CHECK(host_transfer_count.load() == transfers + 2);
    REQUIRE(c.stats());
  }
  INFO("saef: " << counts[0] << ", " << counts[1] << ", " << counts[2] << " dispatches for 1, 10, 161 tensors");
  CHECK(counts == std::vector<std::size_t>{32, 33, 33});
}

namespace {

// A lone worker's PowerSGD step on the Thrust backend and on the CPU backend (each round's
// average is the worker's own payload): the dispatches of begin_step and both end_rounds on the
// Thrust backend, and every update and error bitwise the CPU's.
struct powersgd_step_counts {
  std::size_t begin = 0, first = 0, second = 0;
};

template <class B>
powersgd_step_counts powersgd_step(gradcomp::powersgd_compressor<float, B>& on_thrust,
                                   gradcomp::powersgd_compressor<float>& on_cpu, const gradients_on<B>& g) {
  powersgd_step_counts counts;
  std::size_t before = gradcomp_test::counting::dispatches;
  auto payload =
      on_thrust.begin_step(gradcomp::span<const gradcomp::backend_span<const float, B>>(g.views.data(), g.views.size()));
  REQUIRE(payload);
  counts.begin = gradcomp_test::counting::dispatches - before;
  const auto cpu_grads = host_views(g);
  auto cpu_payload =
      on_cpu.begin_step(gradcomp::span<const gradcomp::span<const float>>(cpu_grads.data(), cpu_grads.size()));
  REQUIRE(cpu_payload);
  for (std::size_t* count : {&counts.first, &counts.second}) {
    if (on_thrust.round() == 0) break;
    before = gradcomp_test::counting::dispatches;
    payload = on_thrust.end_round(*payload);
    REQUIRE(payload);
    *count = gradcomp_test::counting::dispatches - before;
    cpu_payload = on_cpu.end_round(*cpu_payload);
    REQUIRE(cpu_payload);
  }
  REQUIRE(on_cpu.round() == 0);
  for (std::size_t t = 0; t < on_cpu.num_tensors(); ++t) {
    CAPTURE(t);
    std::vector<float> update(on_thrust.update(t).size());
    REQUIRE(gradcomp::copy_to_host(B{}, on_thrust.update(t), gradcomp::span<float>(update.data(), update.size())));
    gradcomp::synchronize(B{});
    const auto expected = on_cpu.update(t);
    REQUIRE(update.size() == expected.size());
    CHECK(std::memcmp(update.data(), expected.data(), expected.size_bytes()) == 0);
  }
  return counts;
}

}  // namespace

TEST_CASE_TEMPLATE("launches per step: PowerSGD's two rounds, whatever the tensors", B, backend, separate) {
  // The step's operations over the whole model (powersgd/model.hpp, powersgd/thrust_ops.hpp):
  // begin_step checks every gradient and sum in one reduction, sends the dense tensors, forms
  // every M, starts and orthogonalises every Q and projects every P (6 dispatches); round 1's end
  // checks the averages, takes the dense updates and every P, orthogonalises them and projects
  // every Q (5); round 2's checks, takes every Q and rebuilds every update and error (3). The
  // first step also draws the Qs on the host, in one upload. With one tensor there is no dense
  // tensor to send or take (ResNet-50's first, a convolution, is compressed at ranks 1 and 2).
  for (const std::size_t rank : {std::size_t(1), std::size_t(2)}) {
    CAPTURE(rank);
    std::vector<powersgd_step_counts> counts;
    for (const std::size_t tensors : {std::size_t(1), std::size_t(10), std::size_t(161)}) {
      CAPTURE(tensors);
      const auto layers = resnet50(tensors);
      gradcomp::powersgd_config cfg;
      cfg.rank = rank;
      gradcomp::powersgd_compressor<float, B> on_thrust(cfg);
      gradcomp::powersgd_compressor<float> on_cpu(cfg);
      for (const auto& l : layers) {
        on_thrust.add_tensor(l.name, l.shape);
        on_cpu.add_tensor(l.name, l.shape);
      }
      gradients_on<B> first(layers), second(layers, -0.75f);
      powersgd_step(on_thrust, on_cpu, first);
      const auto transfers = host_transfer_count.load();
      counts.push_back(powersgd_step(on_thrust, on_cpu, second));
      // One transfer per call (its checks' verdict, which the call returns), whatever the tensors,
      // and the test's own copies of the updates.
      CHECK(host_transfer_count.load() == transfers + 3 + tensors);
    }
    INFO("powersgd: begin " << counts[0].begin << ", " << counts[1].begin << ", " << counts[2].begin
                            << "; round 1 " << counts[0].first << ", " << counts[1].first << ", "
                            << counts[2].first << "; round 2 " << counts[0].second << ", " << counts[1].second
                            << ", " << counts[2].second << " dispatches for 1, 10, 161 tensors");
    CHECK(counts[0].begin == 5);
    CHECK(counts[0].first == 4);
    for (std::size_t i = 1; i < counts.size(); ++i) {
      CHECK(counts[i].begin == 6);
      CHECK(counts[i].first == 5);
    }
    for (const auto& c : counts) CHECK(c.second == 3);
  }
}

TEST_CASE("launches per layer: ISGQ's dithered factors, whatever the layer's size") {
  // ISGQ compresses a layer per call (its factors come from that layer's backward pass): the
  // finite checks of X and Delta (a reduction each, whose verdict the host reads), one dither
  // launch per factor (a thread per bucket) and the copies of each factor's scales and codes to
  // the host, which packs the message (one synchronisation), whatever the layer's size or the
  // batch: 8 dispatches (the copies are dispatched to the system too), 6 host transfers.
  using shape = std::array<std::size_t, 3>;  // inputs, outputs, batch
  for (const auto& [n_in, n_out, batch] : {shape{3, 2, 1}, shape{784, 512, 32}, shape{4096, 10, 64}}) {
    CAPTURE(n_in);
    gradcomp::isgq_compressor<float, backend> c(gradcomp::isgq_config{});
    c.add_layer("fc", n_in, n_out);
    std::vector<float> hx(batch * n_in), hd(batch * n_out);
    for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>((i * 37) % 101) / 16.0f - 3.0f;
    for (std::size_t i = 0; i < hd.size(); ++i) hd[i] = static_cast<float>((i * 11) % 97) / 64.0f - 0.75f;
    auto x = gradcomp::allocate_buffer<float>(backend{}, hx.size());
    auto d = gradcomp::allocate_buffer<float>(backend{}, hd.size());
    REQUIRE(gradcomp::copy_to_backend(backend{}, gradcomp::span<const float>(hx.data(), hx.size()), x.view()));
    REQUIRE(gradcomp::copy_to_backend(backend{}, gradcomp::span<const float>(hd.data(), hd.size()), d.view()));
    const std::size_t before = gradcomp_test::counting::dispatches;
    const auto transfers = host_transfer_count.load();
    REQUIRE(c.compress(0, gradcomp::readonly(x.view()), gradcomp::readonly(d.view()), batch));
    CHECK(gradcomp_test::counting::dispatches - before == 8);
    CHECK(host_transfer_count.load() - transfers == 6);
  }
}
