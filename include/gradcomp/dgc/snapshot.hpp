/// @file snapshot.hpp
/// @brief Save and restore the whole state of a `dgc_compressor` or `dgc_aggregator` through the
/// wire format, so a trainer that checkpoints and restarts loses no accumulated gradient.
///
/// A compressor snapshot holds the residuals, the momentum buffers, the step counter, the epoch
/// and the sampling seed (the whole random state: samples depend only on seed, tensor and step).
/// Restoring it into a compressor with the same tensors and settings continues bit for bit as if
/// training had never stopped. Layout: docs/wire_format.md, "Compressor snapshots".
#pragma once

#include <algorithm>
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

// The state section's layout (wire/format.hpp): step, epoch and seed as 32-bit halves, then the
// settings the state depends on; earlier releases wrote four words (step, epoch, seed halves),
// which restore still reads.
using wire::snapshot_state_tensor;
inline constexpr std::size_t snapshot_state_words = wire::snapshot_state_words;
inline constexpr std::size_t snapshot_legacy_state_words = wire::snapshot_legacy_state_words;
namespace word = wire::state_word;
namespace legacy_word = wire::legacy_state_word;

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
  // Takes the outcome of a step in progress, so that the counters are the compressor's.
  template <class T, class B>
  static void wait(dgc_compressor<T, B>& c) {
    c.wait();
  }
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
    const auto low = [](std::uint64_t x) { return static_cast<double>(x & 0xffffffffu); };
    const auto high = [](std::uint64_t x) { return static_cast<double>(x >> 32); };
    words[word::step_low] = low(c.step_);
    words[word::step_high] = high(c.step_);
    words[word::epoch_low] = low(c.epoch_);
    words[word::epoch_high] = high(c.epoch_);
    words[word::seed_low] = low(c.cfg_.seed);
    words[word::seed_high] = high(c.cfg_.seed);
    words[word::momentum_correction] = c.cfg_.momentum_correction ? 1.0 : 0.0;
    words[word::nesterov] = c.cfg_.nesterov ? 1.0 : 0.0;
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(
        c.cfg_.selection == selection_method::exact_topk ? wire::snapshot_selection::exact_topk
                                                         : wire::snapshot_selection::sampled_threshold));
  }
  // The settings a snapshot's state depends on must match the compressor's; returns the name of
  // the first field that differs, or nullptr.
  template <class T, class B>
  static const char* config_difference(const dgc_compressor<T, B>& c, const double* words) {
    double own[snapshot_state_words];
    counters(c, own);
    if (words[word::momentum_correction] != own[word::momentum_correction]) return "momentum_correction";
    // Without momentum correction the state does not depend on the Nesterov setting (only the
    // receiver's momentum does).
    if (own[word::momentum_correction] != 0.0 && words[word::nesterov] != own[word::nesterov]) return "nesterov";
    if (words[word::selection] != own[word::selection]) return "selection";
    return nullptr;
  }
  template <class T, class B>
  static void set_counters(dgc_compressor<T, B>& c, const double* words) {
    const auto join = [](double low, double high) {
      return static_cast<std::uint64_t>(low) | (static_cast<std::uint64_t>(high) << 32);
    };
    c.step_ = static_cast<std::size_t>(join(words[word::step_low], words[word::step_high]));
    c.epoch_ = static_cast<std::size_t>(join(words[word::epoch_low], words[word::epoch_high]));
    c.cfg_.seed = join(words[word::seed_low], words[word::seed_high]);
  }
  // After a restore: the overflow guard's bounds become the restored state's largest magnitudes.
  template <class T, class B>
  static void reset_bounds(dgc_compressor<T, B>& c) {
    const auto records = c.records_.view();
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      records[t].u_bound = magnitude_of(c.backend_, c.tensors_[t].u);
      records[t].v_bound = magnitude_of(c.backend_, c.tensors_[t].v);
    }
  }
  template <class T, class B>
  static void reset_bounds(dgc_aggregator<T, B>& a) {
    for (auto& st : a.tensors_) st.u_bound = magnitude_of(a.backend_, st.u);
  }

 private:
  template <class B, class Buffer>
  static double magnitude_of(const B& backend, const Buffer& b) {
    using T = typename Buffer::value_type;
    return ops<B>::largest_magnitude(backend, span<const T>(b.data(), b.size()));
  }
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

// Checks a snapshot against the expected items (and state section, whose recorded settings
// `settings_differ(words)` compares: it returns the name of a field that differs, or nullptr),
// then restores it.
template <class T, class SettingsDiffer>
result<void> read_snapshot(span<const std::byte> msg, const std::vector<snapshot_item<T>>& items,
                           double* state, SettingsDiffer&& settings_differ) {
  const auto h = wire::detail::validate_as<T>(msg);
  if (!h) return fail(h.error());
  if (h->kind != wire::message_kind::snapshot) return fail(errc::layout_mismatch);
  // The settings first (a snapshot of another configuration is reported as such, not as the
  // layout difference it also causes), then the layout.
  const std::size_t expected = items.size() + (state != nullptr ? 1 : 0);
  std::vector<wire::section_header> sections;
  sections.reserve(std::min<std::size_t>(expected, h->section_count));
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    if (sections.size() < expected) sections.push_back(s);
  });
  std::size_t next = 0;
  double words[snapshot_state_words] = {};
  if (state != nullptr) {
    if (sections.empty()) return fail(errc::layout_mismatch);
    const auto& s = sections[next++];
    if (s.role != wire::section_role::state || s.tensor != snapshot_state_tensor ||
        (s.numel != snapshot_state_words && s.numel != snapshot_legacy_state_words) ||
        s.indices != wire::index_coding::dense || s.values != wire::value_coding::fp64)
      return fail(errc::layout_mismatch);
    const auto r = wire::decode_section<double>(msg, s, span<std::uint32_t>(), span<double>(words, s.numel));
    if (!r) return fail(r.error());
    const double two53 = 9007199254740992.0, two32 = 4294967296.0;
    if (s.numel == snapshot_legacy_state_words) {
      // Step and epoch as whole numbers below 2^53; no settings recorded, so none are compared.
      const double step = words[legacy_word::step], epoch = words[legacy_word::epoch];
      const double seed_low = words[legacy_word::seed_low], seed_high = words[legacy_word::seed_high];
      if (!is_count(step, two53) || !is_count(epoch, two53) || !is_count(seed_low, two32) ||
          !is_count(seed_high, two32))
        return fail(errc::malformed_payload);
      words[word::step_low] = std::fmod(step, two32);
      words[word::step_high] = std::floor(step / two32);
      words[word::epoch_low] = std::fmod(epoch, two32);
      words[word::epoch_high] = std::floor(epoch / two32);
      words[word::seed_low] = seed_low;
      words[word::seed_high] = seed_high;
    } else {
      for (std::size_t i = word::step_low; i <= word::seed_high; ++i)
        if (!is_count(words[i], two32)) return fail(errc::malformed_payload);
      if (!is_count(words[word::momentum_correction], 2.0) || !is_count(words[word::nesterov], 2.0) ||
          !is_count(words[word::selection], 2.0))
        return fail(errc::malformed_payload);
      if (const char* field = settings_differ(static_cast<const double*>(words)))
        return fail(errc::config_mismatch, field);
    }
  }
  if (h->section_count != expected) return fail(errc::layout_mismatch);
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
  auto& mc = const_cast<dgc_compressor<T, cpu_backend>&>(c);  // only read (after the step in progress)
  detail::snapshot_access::wait(mc);
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
 * same settings that the state depends on: `momentum_correction`, `nesterov` (with momentum
 * correction only) and `selection`
 * (recorded in the snapshot; snapshots of earlier releases, which did not record them, are
 * restored without that comparison). The snapshot's step, epoch and seed replace the
 * compressor's; the other settings (learning-rate-like values such as `momentum`, clipping, the
 * schedule, threads) are the compressor's own and may differ.
 *
 * The message is checked completely first: on any error `c` is unchanged.
 * @return `errc::layout_mismatch` (another layout, or not a snapshot), `errc::config_mismatch`
 *         (a recorded setting differs; `detail()` names the field: `"momentum_correction"`,
 *         `"nesterov"` or `"selection"`), `errc::malformed_payload` (counters that are not whole
 *         numbers in range), or any decoding error.
 */
template <class T>
[[nodiscard]] result<void> restore_snapshot(dgc_compressor<T, cpu_backend>& c,
                                            span<const std::byte> msg) {
  detail::snapshot_access::wait(c);
  double words[detail::snapshot_state_words];
  auto r = detail::read_snapshot(msg, detail::snapshot_access::items(c), words, [&](const double* w) {
    return detail::snapshot_access::config_difference(c, w);
  });
  if (!r) return r;
  detail::snapshot_access::set_counters(c, words);
  detail::snapshot_access::reset_bounds(c);
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
  auto r = detail::read_snapshot<T>(msg, detail::snapshot_access::items(a), nullptr,
                                    [](const double*) -> const char* { return nullptr; });
  if (!r) return r;
  detail::snapshot_access::reset_bounds(a);
  return {};
}

}  // namespace gradcomp
