// The aggregator's part of the backend conformance suite (docs/backends.md): a backend's
// aggregator against the CPU backend's, for messages in every index coding, damaged, truncated
// and incomplete messages, the overflow guard, and messages already in backend memory. Each
// check takes the backend value to test and, where the backend counts its synchronisations, the
// counter (no step of add(bytes) and finish may wait).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "backend/conformance.hpp"

namespace gradcomp_test {

// A receiver's layout: two sparse tensors (one with receiver momentum), a dense one with it, a
// dense one without.
inline gradcomp::receiver_layout aggregation_layout(gradcomp::momentum_kind kind) {
  gradcomp::receiver_layout r;
  r.momentum = 0.9;
  r.kind = kind;
  const std::size_t numel[] = {3000, 700, 97, 40};
  for (std::size_t t = 0; t < 4; ++t) {
    gradcomp::receiver_tensor x;
    x.info.name = "t";
    x.info.name += std::to_string(t);
    x.info.shape = {numel[t]};
    x.info.numel = numel[t];
    x.info.compressed = t < 2;
    x.dense = t >= 2;
    x.momentum = t != 1 && t != 3;
    x.max_kept = x.dense ? 0 : numel[t] / 10;
    r.tensors.push_back(x);
  }
  return r;
}

// One worker's message of a step for that layout: sparse tensors keep a random tenth of their
// positions (values of every magnitude, `scale` times), dense tensors everything.
inline std::vector<gradcomp::tensor_message<float>> aggregation_message(const gradcomp::receiver_layout& layout,
                                                                  std::size_t step, std::size_t worker, float scale,
                                                                  std::vector<std::vector<std::uint32_t>>& idx,
                                                                  std::vector<std::vector<float>>& val) {
  std::mt19937_64 rng(97 * step + worker + 5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<gradcomp::tensor_message<float>> out;
  idx.assign(layout.tensors.size(), {});
  val.assign(layout.tensors.size(), {});
  for (std::size_t t = 0; t < layout.tensors.size(); ++t) {
    const auto& x = layout.tensors[t];
    for (std::uint32_t i = 0; i < x.info.numel; ++i)
      if (x.dense || rng() % 10 == 0) {
        if (!x.dense) idx[t].push_back(i);
        val[t].push_back(scale * normal(rng));
      }
    gradcomp::tensor_message<float> m;
    m.tensor = t;
    m.numel = x.info.numel;
    m.dense = x.dense;
    m.indices = gradcomp::span<const std::uint32_t>(idx[t].data(), idx[t].size());
    m.values = gradcomp::span<const float>(val[t].data(), val[t].size());
    out.push_back(m);
  }
  return out;
}

inline std::vector<std::byte> encoded(const std::vector<gradcomp::tensor_message<float>>& m, gradcomp::wire::index_coding c) {
  gradcomp::wire::encode_options opt;
  opt.indices = c;
  opt.values = gradcomp::wire::value_coding::fp32;
  opt.checksum = true;
  std::vector<std::byte> out(gradcomp::wire::max_encoded_bytes(gradcomp::span<const gradcomp::tensor_message<float>>(m.data(), m.size()), opt).value());
  out.resize(gradcomp::wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(m.data(), m.size()), opt,
                                    gradcomp::span<std::byte>(out.data(), out.size()))
                 .value());
  return out;
}

template <class Backend>
std::vector<std::vector<float>> updates(const Backend& b, const gradcomp::aggregator<float, Backend>& a) {
  std::vector<std::vector<float>> out;
  for (std::size_t t = 0; t < a.num_tensors(); ++t)
    out.push_back(gradcomp_test::backend_harness<Backend>::template download<float>(b, a.update(t)));
  return out;
}

inline gradcomp::wire::index_coding index_coding_for(std::size_t i) {
  const gradcomp::wire::index_coding c[] = {gradcomp::wire::index_coding::raw_u32, gradcomp::wire::index_coding::delta_varint,
                                            gradcomp::wire::index_coding::rice, gradcomp::wire::index_coding::bitmap};
  return c[i % 4];
}

inline gradcomp::span<const std::byte> bytes_of(const std::vector<std::byte>& v) {
  return gradcomp::span<const std::byte>(v.data(), v.size());
}

// Five steps of three workers, vanilla and Nesterov receiver momentum: updates bitwise the CPU
// backend's, the same refusals, no synchronisation where counted, the CPU's snapshot bytes.
template <class Backend>
void check_aggregator_sums(const Backend& backend, const std::size_t* synchronizations) {
  for (const auto kind : {gradcomp::momentum_kind::vanilla, gradcomp::momentum_kind::nesterov}) {
    CAPTURE(static_cast<int>(kind));
    const auto layout = aggregation_layout(kind);
    gradcomp::aggregator<float, Backend> tested(layout, backend);
    gradcomp::aggregator<float> reference(layout);
    for (std::size_t s = 0; s < 5; ++s) {
      CAPTURE(s);
      tested.begin();
      reference.begin();
      const std::size_t before = synchronizations != nullptr ? *synchronizations : 0;
      for (std::size_t w = 0; w < 3; ++w) {
        std::vector<std::vector<std::uint32_t>> idx;
        std::vector<std::vector<float>> val;
        const auto sections = aggregation_message(layout, s, w, 1.0f + static_cast<float>(w), idx, val);
        const auto msg = encoded(sections, index_coding_for(s + w));
        REQUIRE(tested.add(bytes_of(msg)));
        REQUIRE(reference.add(bytes_of(msg)));
        // Damaged, truncated or foreign messages are refused alike and add nothing.
        auto bad = msg;
        bad[bad.size() - 3] ^= std::byte{0x40};
        const auto e1 = tested.add(bytes_of(bad)), e2 = reference.add(bytes_of(bad));
        REQUIRE(!e1);
        CHECK(e1.error() == e2.error());
        const std::vector<std::byte> cut(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(msg.size() / 2));
        CHECK(tested.add(bytes_of(cut)).error() == reference.add(bytes_of(cut)).error());
        const auto partial = encoded({sections[0], sections[1], sections[3]}, index_coding_for(s));
        CHECK(tested.add(bytes_of(partial)).error() == gradcomp::errc::missing_tensor);
        CHECK(reference.add(bytes_of(partial)).error() == gradcomp::errc::missing_tensor);
      }
      REQUIRE(tested.finish(3));
      REQUIRE(reference.finish(3));
      if (synchronizations != nullptr) CHECK(*synchronizations == before);
      CHECK(gradcomp_test::bitwise_equal(updates(backend, tested), updates(gradcomp::cpu_backend{}, reference)));
    }
    // Receiver momentum saved on the backend: the CPU's bytes.
    CHECK(gradcomp::save_snapshot(tested) == gradcomp::save_snapshot(reference));
  }
}
// Values near the largest float: the same add refused for overflow, nothing modified.
template <class Backend>
void check_aggregator_overflow(const Backend& backend) {
  const auto layout = aggregation_layout(gradcomp::momentum_kind::vanilla);
  gradcomp::aggregator<float, Backend> tested(layout, backend);
  gradcomp::aggregator<float> reference(layout);
  tested.begin();
  reference.begin();
  bool refused = false;
  for (std::size_t w = 0; w < 40 && !refused; ++w) {
    CAPTURE(w);
    std::vector<std::vector<std::uint32_t>> idx;
    std::vector<std::vector<float>> val;
    // Values near 1e37: after a few messages the bounds reach the largest float, the sums are
    // checked exactly, and an add that would overflow is refused.
    const auto msg = encoded(aggregation_message(layout, 0, w % 2, 3e37f, idx, val), index_coding_for(w));
    const auto a = tested.add(bytes_of(msg));
    const auto b = reference.add(bytes_of(msg));
    REQUIRE(static_cast<bool>(a) == static_cast<bool>(b));
    if (!a) {
      CHECK(a.error() == gradcomp::errc::state_overflow);
      CHECK(b.error() == gradcomp::errc::state_overflow);
      refused = true;
    }
    REQUIRE(gradcomp_test::bitwise_equal(updates(backend, tested), updates(gradcomp::cpu_backend{}, reference)));
  }
  CHECK(refused);
}
// Messages in backend memory (tensor_message over the backend's space) add as host ones do on
// the CPU; positions out of order or range and NaN are refused alike.
template <class Backend>
void check_aggregator_backend_messages(const Backend& backend) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const auto layout = aggregation_layout(gradcomp::momentum_kind::nesterov);
  gradcomp::aggregator<float, Backend> tested(layout, backend);
  gradcomp::aggregator<float> reference(layout);
  for (std::size_t s = 0; s < 3; ++s) {
    tested.begin();
    reference.begin();
    for (std::size_t w = 0; w < 2; ++w) {
      std::vector<std::vector<std::uint32_t>> idx;
      std::vector<std::vector<float>> val;
      const auto host = aggregation_message(layout, s, w, 1.0f, idx, val);
      for (const auto& m : host) {
        auto d_idx = harness::upload(backend, std::vector<std::uint32_t>(m.indices.begin(), m.indices.end()));
        auto d_val = harness::upload(backend, std::vector<float>(m.values.begin(), m.values.end()));
        gradcomp::tensor_message<float, gradcomp::memory_space_t<Backend>> d;
        d.tensor = m.tensor;
        d.numel = m.numel;
        d.dense = m.dense;
        d.indices = gradcomp::readonly(d_idx.view());
        d.values = gradcomp::readonly(d_val.view());
        REQUIRE(tested.add(d));
        REQUIRE(reference.add(m));
        if (!m.dense && m.indices.size() > 2) {
          // Positions out of order or out of range, and a NaN, are refused alike.
          auto bad_idx = std::vector<std::uint32_t>(m.indices.begin(), m.indices.end());
          std::swap(bad_idx[0], bad_idx[1]);
          auto b_idx = harness::upload(backend, bad_idx);
          d.indices = gradcomp::readonly(b_idx.view());
          CHECK(tested.add(d).error() == gradcomp::errc::indices_not_increasing);
          bad_idx = std::vector<std::uint32_t>(m.indices.begin(), m.indices.end());
          bad_idx.back() = static_cast<std::uint32_t>(m.numel);
          auto c_idx = harness::upload(backend, bad_idx);
          d.indices = gradcomp::readonly(c_idx.view());
          CHECK(tested.add(d).error() == gradcomp::errc::index_out_of_range);
          auto bad_val = std::vector<float>(m.values.begin(), m.values.end());
          bad_val[1] = std::numeric_limits<float>::quiet_NaN();
          auto n_val = harness::upload(backend, bad_val);
          d.indices = gradcomp::readonly(d_idx.view());
          d.values = gradcomp::readonly(n_val.view());
          CHECK(tested.add(d).error() == gradcomp::errc::non_finite_input);
        }
      }
    }
    REQUIRE(tested.finish(2));
    REQUIRE(reference.finish(2));
    CHECK(gradcomp_test::bitwise_equal(updates(backend, tested), updates(gradcomp::cpu_backend{}, reference)));
  }
}

}  // namespace gradcomp_test
