/// @file snapshot.hpp
/// @brief Save and restore the whole state of a `dgc_compressor` or `dgc_aggregator` through the
/// wire format, so a trainer that checkpoints and restarts loses no accumulated gradient.
///
/// A compressor snapshot holds the residuals, the momentum buffers, the step counter, the epoch
/// and the sampling seed (the whole random state: samples depend only on seed, tensor and step).
/// Restoring it into a compressor with the same tensors and settings continues bit for bit as if
/// training had never stopped. Layout: docs/wire_format.md, "Compressor snapshots".
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../backend.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "../tensor_message.hpp"
#include "../wire/decode.hpp"
#include "../wire/encode.hpp"
#include "../wire/format.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

inline constexpr std::uint32_t snapshot_state_tensor = 0xffffffffu;
inline constexpr std::size_t snapshot_state_words = 4;

template <class T>
constexpr wire::value_coding exact_coding() noexcept {
  return std::is_same<T, float>::value ? wire::value_coding::fp32 : wire::value_coding::fp64;
}

// One dense section of a snapshot, in the order the layout dictates.
template <class T>
struct snapshot_item {
  wire::section_role role;
  tensor_message<T> data;
  T* restore_to;  // where restore writes it
};

struct snapshot_access {
  template <class T, class B>
  static std::vector<snapshot_item<T>> items(dgc_compressor<T, B>& c) {
    std::vector<snapshot_item<T>> out;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      auto& st = c.tensors_[t];
      if (!st.info.compressed) continue;
      out.push_back(item(wire::section_role::residual, t, st.v.data(), st.info.numel));
      if (!st.u.empty()) out.push_back(item(wire::section_role::momentum, t, st.u.data(), st.info.numel));
    }
    return out;
  }
  template <class T, class B>
  static std::vector<snapshot_item<T>> items(dgc_aggregator<T, B>& a) {
    std::vector<snapshot_item<T>> out;
    for (std::size_t t = 0; t < a.tensors_.size(); ++t) {
      auto& st = a.tensors_[t];
      if (st.receiver_momentum)
        out.push_back(item(wire::section_role::receiver_momentum, t, st.u.data(), st.info.numel));
    }
    return out;
  }
  template <class T, class B>
  static void counters(const dgc_compressor<T, B>& c, double* words) {
    words[0] = static_cast<double>(c.step_);
    words[1] = static_cast<double>(c.epoch_);
    words[2] = static_cast<double>(c.cfg_.seed & 0xffffffffu);
    words[3] = static_cast<double>(c.cfg_.seed >> 32);
  }
  template <class T, class B>
  static void set_counters(dgc_compressor<T, B>& c, const double* words) {
    c.step_ = static_cast<std::size_t>(words[0]);
    c.epoch_ = static_cast<std::size_t>(words[1]);
    c.cfg_.seed = static_cast<std::uint64_t>(words[2]) | (static_cast<std::uint64_t>(words[3]) << 32);
  }

 private:
  template <class T>
  static snapshot_item<T> item(wire::section_role role, std::size_t t, T* data, std::size_t n) {
    snapshot_item<T> it;
    it.role = role;
    it.data.tensor = t;
    it.data.numel = n;
    it.data.dense = true;
    it.data.values = span<const T>(data, n);
    it.restore_to = data;
    return it;
  }
};

inline wire::encode_options snapshot_options(wire::value_coding c, bool checksum) {
  wire::encode_options o;
  o.dense_values = c;
  o.checksum = checksum;
  return o;
}

template <class T>
std::uint64_t dense_section_bytes(std::size_t n) {
  return wire::section_header_bytes + sizeof(T) * static_cast<std::uint64_t>(n);
}

// Writes header, optional state section, the items and the checksum.
template <class T>
result<std::size_t> write_snapshot(const std::vector<snapshot_item<T>>& items, const double* state,
                                   bool checksum, span<std::byte> out) {
  std::uint64_t total = wire::message_header_bytes + (checksum ? wire::checksum_bytes : 0);
  if (state != nullptr) total += dense_section_bytes<double>(snapshot_state_words);
  for (const auto& it : items) total += dense_section_bytes<T>(it.data.numel);
  if (out.size() < total) return fail(errc::output_too_small);
  std::byte* p = out.data() + wire::message_header_bytes;
  if (state != nullptr) {
    tensor_message<double> s;
    s.tensor = snapshot_state_tensor;
    s.numel = snapshot_state_words;
    s.dense = true;
    s.values = span<const double>(state, snapshot_state_words);
    const auto pl = wire::detail::plan_section(s, snapshot_options(wire::value_coding::fp64, checksum));
    if (!pl) return fail(pl.error());
    const errc e = wire::detail::write_section(p, s, *pl, wire::section_role::state);
    if (e != errc::ok) return fail(e);
    p += pl->bytes;
  }
  const auto opt = snapshot_options(exact_coding<T>(), checksum);
  for (const auto& it : items) {
    const auto pl = wire::detail::plan_section(it.data, opt);
    if (!pl) return fail(pl.error());
    // A residual holding NaN or an infinity (an overflowed accumulator) cannot be saved.
    const errc e = wire::detail::write_section(p, it.data, *pl, it.role);
    if (e != errc::ok) return fail(e);
    p += pl->bytes;
  }
  const std::size_t count = items.size() + (state != nullptr ? 1 : 0);
  const auto body = static_cast<std::size_t>(p - out.data());
  wire::detail::write_message_header(out.data(), wire::message_kind::snapshot,
                                     static_cast<std::uint32_t>(count), total, checksum);
  if (checksum) wire::detail::write_checksum(out.data(), body);
  return static_cast<std::size_t>(total);
}

inline bool is_count(double x, double limit) { return x >= 0.0 && x < limit && std::floor(x) == x; }

// Checks a snapshot against the expected items (and state section), then restores it.
template <class T>
result<void> read_snapshot(span<const std::byte> msg, const std::vector<snapshot_item<T>>& items,
                           double* state) {
  const auto h = wire::detail::validate_as<T>(msg);
  if (!h) return fail(h.error());
  if (h->kind != wire::message_kind::snapshot) return fail(errc::layout_mismatch);
  const std::size_t expected = items.size() + (state != nullptr ? 1 : 0);
  if (h->section_count != expected) return fail(errc::layout_mismatch);
  std::vector<wire::section_header> sections;
  sections.reserve(expected);
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) { sections.push_back(s); });
  std::size_t next = 0;
  double words[snapshot_state_words] = {0, 0, 0, 0};
  if (state != nullptr) {
    const auto& s = sections[next++];
    if (s.role != wire::section_role::state || s.tensor != snapshot_state_tensor ||
        s.numel != snapshot_state_words || s.indices != wire::index_coding::dense ||
        s.values != wire::value_coding::fp64)
      return fail(errc::layout_mismatch);
    const auto r = wire::decode_section<double>(msg, s, span<std::uint32_t>(),
                                                span<double>(words, snapshot_state_words));
    if (!r) return fail(r.error());
    const double two53 = 9007199254740992.0, two32 = 4294967296.0;
    if (!is_count(words[0], two53) || !is_count(words[1], two53) || !is_count(words[2], two32) ||
        !is_count(words[3], two32))
      return fail(errc::malformed_payload);
  }
  for (const auto& it : items) {
    const auto& s = sections[next++];
    if (s.role != it.role || s.tensor != it.data.tensor || s.numel != it.data.numel ||
        s.indices != wire::index_coding::dense || s.values != exact_coding<T>())
      return fail(errc::layout_mismatch);
  }
  // Everything checked: now write.
  next = state != nullptr ? 1 : 0;
  for (const auto& it : items) {
    const auto& s = sections[next++];
    (void)wire::decode_section<T>(msg, s, span<std::uint32_t>(), span<T>(it.restore_to, s.numel));
  }
  if (state != nullptr)
    for (std::size_t i = 0; i < snapshot_state_words; ++i) state[i] = words[i];
  return {};
}

}  // namespace detail

/// Exact size of `save_snapshot`'s output for this compressor.
template <class T>
std::size_t snapshot_bytes(const dgc_compressor<T, cpu_backend>& c, bool checksum = true) {
  std::uint64_t total = wire::message_header_bytes + (checksum ? wire::checksum_bytes : 0) +
                        detail::dense_section_bytes<double>(detail::snapshot_state_words);
  for (const auto& it : detail::snapshot_access::items(const_cast<dgc_compressor<T, cpu_backend>&>(c)))
    total += detail::dense_section_bytes<T>(it.data.numel);
  return static_cast<std::size_t>(total);
}

/**
 * @brief Writes the compressor's whole state (residuals, momentum, step, epoch, seed) as a
 * snapshot message into `out`, with a CRC-32C unless `checksum` is false.
 * @return bytes written, or `errc::output_too_small` (see `snapshot_bytes`),
 *         `errc::non_finite_input` (a residual or momentum holds NaN or an infinity).
 */
template <class T>
[[nodiscard]] result<std::size_t> save_snapshot(const dgc_compressor<T, cpu_backend>& c,
                                                span<std::byte> out, bool checksum = true) {
  auto& mc = const_cast<dgc_compressor<T, cpu_backend>&>(c);  // items are only read here
  double words[detail::snapshot_state_words];
  detail::snapshot_access::counters(c, words);
  return detail::write_snapshot(detail::snapshot_access::items(mc), words, checksum, out);
}

/// Convenience: the snapshot in a new vector; throws `gradcomp::error`.
template <class T>
std::vector<std::byte> save_snapshot(const dgc_compressor<T, cpu_backend>& c, bool checksum = true) {
  std::vector<std::byte> out(snapshot_bytes(c, checksum));
  out.resize(save_snapshot(c, span<std::byte>(out.data(), out.size()), checksum).value());
  return out;
}

/**
 * @brief Restores a snapshot written by `save_snapshot` into `c`, which must have the same
 * tensors (names are not stored: ids, sizes and the compressed/dense split must match) and the
 * same momentum setting. The snapshot's seed replaces the configured one.
 *
 * The message is checked completely first: on any error `c` is unchanged.
 * @return `errc::layout_mismatch` (another layout, or not a snapshot), or any decoding error.
 */
template <class T>
[[nodiscard]] result<void> restore_snapshot(dgc_compressor<T, cpu_backend>& c,
                                            span<const std::byte> msg) {
  double words[detail::snapshot_state_words];
  auto r = detail::read_snapshot(msg, detail::snapshot_access::items(c), words);
  if (!r) return r;
  detail::snapshot_access::set_counters(c, words);
  return {};
}

/// Writes an aggregator's receiver-side momentum buffers as a snapshot message (a new vector);
/// throws `gradcomp::error`.
template <class T>
std::vector<std::byte> save_snapshot(const dgc_aggregator<T, cpu_backend>& a, bool checksum = true) {
  const auto items = detail::snapshot_access::items(const_cast<dgc_aggregator<T, cpu_backend>&>(a));
  std::uint64_t total = wire::message_header_bytes + (checksum ? wire::checksum_bytes : 0);
  for (const auto& it : items) total += detail::dense_section_bytes<T>(it.data.numel);
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  detail::write_snapshot<T>(items, nullptr, checksum, span<std::byte>(out.data(), out.size())).value();
  return out;
}

/// Restores an aggregator snapshot; on error `a` is unchanged. Errors as for the compressor.
template <class T>
[[nodiscard]] result<void> restore_snapshot(dgc_aggregator<T, cpu_backend>& a,
                                            span<const std::byte> msg) {
  return detail::read_snapshot<T>(msg, detail::snapshot_access::items(a), nullptr);
}

}  // namespace gradcomp
