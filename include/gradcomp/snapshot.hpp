/// @file snapshot.hpp
/// @brief Snapshots through the wire format: an `aggregator`'s save and restore, and what every
/// compressor's snapshot functions share (dgc/snapshot.hpp, ef_signsgd/snapshot.hpp).
///
/// A snapshot holds an object's whole state, so that a trainer that checkpoints and restarts
/// continues bit for bit. The state may live in any backend's memory: saving copies it to the
/// host (one synchronisation), restoring copies it back after the message was checked completely.
/// Layout: docs/wire_format.md, "Snapshots".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "aggregator.hpp"
#include "backend.hpp"
#include "error.hpp"
#include "span.hpp"
#include "wire/tensor_message.hpp"
#include "wire/decode.hpp"
#include "wire/encode.hpp"
#include "wire/format.hpp"

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

// One dense section of a snapshot, in the order the layout dictates: a buffer in the memory of
// the object's backend, which save reads and restore writes.
template <class T, class Space>
struct snapshot_item {
  wire::section_role role = wire::section_role::residual;
  std::uint32_t tensor = 0;
  span<T, Space> data;
};

template <class T, class Space>
snapshot_item<T, Space> make_snapshot_item(wire::section_role role, std::size_t tensor, span<T, Space> data) {
  snapshot_item<T, Space> it;
  it.role = role;
  it.tensor = static_cast<std::uint32_t>(tensor);
  it.data = data;
  return it;
}

template <class T>
std::uint64_t dense_section_bytes(std::size_t n) {
  return wire::section_header_bytes + sizeof(T) * static_cast<std::uint64_t>(n);
}

// Exact size of a snapshot of `items`, with a state section when `state`.
template <class T, class Space>
std::size_t snapshot_size(const std::vector<snapshot_item<T, Space>>& items, bool state, bool checksum) {
  std::uint64_t total = wire::message_header_bytes + (checksum ? wire::checksum_bytes : 0);
  if (state) total += dense_section_bytes<double>(snapshot_state_words);
  for (const auto& it : items) total += dense_section_bytes<T>(it.data.size());
  return static_cast<std::size_t>(total);
}

inline wire::encode_options snapshot_options(wire::value_coding c, bool checksum) {
  wire::encode_options o;
  o.dense_values = c;
  o.checksum = checksum;
  return o;
}

// Offsets of the items in one contiguous host copy (staging for memory the host cannot reach).
template <class T, class Space>
std::vector<std::size_t> staging_offsets(const std::vector<snapshot_item<T, Space>>& items, std::size_t& total) {
  std::vector<std::size_t> at;
  at.reserve(items.size());
  total = 0;
  for (const auto& it : items) {
    at.push_back(total);
    total += it.data.size();
  }
  return at;
}

// Writes header, optional state section, the items and the checksum; the items are read in the
// backend's memory (copied to the host first, in one synchronisation, where the host cannot read
// it).
template <class T, class Backend>
result<std::size_t> write_snapshot(const Backend& backend,
                                   const std::vector<snapshot_item<const T, memory_space_t<Backend>>>& items,
                                   const double* state, bool checksum, span<std::byte> out) {
  const std::size_t total = snapshot_size(items, state != nullptr, checksum);
  if (out.size() < total) return fail(errc::output_too_small);
  constexpr bool host = is_host_accessible_v<memory_space_t<Backend>>;
  std::size_t staged = 0;
  const std::vector<std::size_t> at = staging_offsets(items, staged);
  std::vector<T> staging(host ? 0 : staged);
  auto values = [&](std::size_t i) -> const T* {
    if constexpr (host)
      return items[i].data.data();
    else
      return staging.data() + at[i];
  };
  if constexpr (!host) {
    for (std::size_t i = 0; i < items.size(); ++i)
      ops<Backend>::copy_to_host(backend, items[i].data, span<T>(staging.data() + at[i], items[i].data.size()));
    ops<Backend>::synchronize(backend);
  }
  std::byte* p = out.data() + wire::message_header_bytes;
  auto write = [&](const auto& msg, wire::value_coding coding, wire::section_role role) {
    const auto pl = wire::detail::plan_section(msg, snapshot_options(coding, checksum));
    if (!pl) return pl.error();
    // A buffer holding NaN or an infinity (an overflowed accumulator) cannot be saved.
    const errc e = wire::detail::write_section(p, msg, *pl, role);
    if (e == errc::ok) p += pl->bytes;
    return e;
  };
  if (state != nullptr) {
    tensor_message<double> s;
    s.tensor = snapshot_state_tensor;
    s.numel = snapshot_state_words;
    s.dense = true;
    s.values = span<const double>(state, snapshot_state_words);
    if (const errc e = write(s, wire::value_coding::fp64, wire::section_role::state); e != errc::ok) return fail(e);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    tensor_message<T> m;
    m.tensor = items[i].tensor;
    m.numel = items[i].data.size();
    m.dense = true;
    m.values = span<const T>(values(i), items[i].data.size());
    if (const errc e = write(m, exact_coding<T>(), items[i].role); e != errc::ok) return fail(e);
  }
  const std::size_t count = items.size() + (state != nullptr ? 1 : 0);
  const auto body = static_cast<std::size_t>(p - out.data());
  wire::detail::write_message_header(out.data(), wire::message_kind::snapshot,
                                     static_cast<std::uint32_t>(count), total, checksum);
  if (checksum) wire::detail::write_checksum(out.data(), body);
  return total;
}

inline bool is_count(double x, double limit) { return x >= 0.0 && x < limit && std::floor(x) == x; }

// Checks a snapshot against the expected items (and state section, whose recorded settings
// `settings_differ(words)` compares: it returns the name of a field that differs, or nullptr),
// then restores it into the items' backend memory (through the host and one synchronisation
// where the host cannot write it). `largest` receives each item's largest magnitude, for the
// overflow guards' bounds.
template <class T, class Backend, class SettingsDiffer>
result<void> read_snapshot(const Backend& backend, span<const std::byte> msg,
                           const std::vector<snapshot_item<T, memory_space_t<Backend>>>& items, double* state,
                           SettingsDiffer&& settings_differ, std::vector<double>& largest) {
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
      // Step and epoch as whole numbers below 2^53; no settings recorded: those of the first
      // release, which only had DGC with the sampled threshold.
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
      words[word::momentum_correction] = -1.0;  // not recorded
      words[word::nesterov] = -1.0;
      words[word::selection] = -1.0;
    } else {
      for (std::size_t i = word::step_low; i <= word::seed_high; ++i)
        if (!is_count(words[i], two32)) return fail(errc::malformed_payload);
      if (!is_count(words[word::momentum_correction], 2.0) || !is_count(words[word::nesterov], 2.0) ||
          !wire::is_snapshot_selection_word(words[word::selection]))
        return fail(errc::malformed_payload);
    }
    if (const char* field = settings_differ(static_cast<const double*>(words)))
      return fail(errc::config_mismatch, field);
  }
  if (h->section_count != expected) return fail(errc::layout_mismatch);
  for (const auto& it : items) {
    const auto& s = sections[next++];
    if (s.role != it.role || s.tensor != it.tensor || s.numel != it.data.size() ||
        s.indices != wire::index_coding::dense || s.values != exact_coding<T>())
      return fail(errc::layout_mismatch);
  }
  // Everything checked: now write.
  constexpr bool host = is_host_accessible_v<memory_space_t<Backend>>;
  std::size_t staged = 0;
  const std::vector<std::size_t> at = staging_offsets(items, staged);
  std::vector<T> staging(host ? 0 : staged);
  auto values = [&](std::size_t i) -> T* {
    if constexpr (host)
      return items[i].data.data();
    else
      return staging.data() + at[i];
  };
  largest.assign(items.size(), 0.0);
  next = state != nullptr ? 1 : 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& s = sections[next++];
    const span<T> to(values(i), items[i].data.size());
    (void)wire::decode_section<T>(msg, s, span<std::uint32_t>(), to);
    double m = 0.0;  // the values are finite (checked by the decoder)
    for (const T x : to) m = std::max(m, static_cast<double>(std::fabs(x)));
    largest[i] = m;
  }
  if constexpr (!host) {
    for (std::size_t i = 0; i < items.size(); ++i)
      ops<Backend>::copy_to_backend(backend, span<const T>(values(i), items[i].data.size()), items[i].data);
    ops<Backend>::synchronize(backend);
  }
  if (state != nullptr)
    for (std::size_t i = 0; i < snapshot_state_words; ++i) state[i] = words[i];
  return {};
}

// The read-only items of `items`, for write_snapshot.
template <class T, class Space>
std::vector<snapshot_item<const T, Space>> readonly_items(const std::vector<snapshot_item<T, Space>>& items) {
  std::vector<snapshot_item<const T, Space>> out;
  out.reserve(items.size());
  for (const auto& it : items) out.push_back(make_snapshot_item(it.role, it.tensor, readonly(it.data)));
  return out;
}

// What every compressor's snapshot functions do, given its access type `A` (a friend of the
// compressor) with: wait(c) (takes the step in progress), backend(c), items(c) (the state buffers
// in snapshot order), counters(c, words) (the state section), config_difference(c, words) (the
// recorded field that differs, or nullptr), set_counters(c, words), set_bounds(c, largest).
template <class A>
struct compressor_snapshot {
  template <class C>
  static std::size_t bytes(const C& c, bool checksum) {
    return snapshot_size(A::items(const_cast<C&>(c)), true, checksum);
  }
  template <class T, class C>
  static result<std::size_t> save(const C& c, span<std::byte> out, bool checksum) {
    auto& mc = const_cast<C&>(c);  // only read (after the step in progress)
    A::wait(mc);
    double words[snapshot_state_words];
    A::counters(c, words);
    return write_snapshot<T>(A::backend(c), readonly_items(A::items(mc)), words, checksum, out);
  }
  template <class T, class C>
  static std::vector<std::byte> save(const C& c, bool checksum) {
    std::vector<std::byte> out(bytes(c, checksum));
    out.resize(save<T>(c, span<std::byte>(out.data(), out.size()), checksum).value());
    return out;
  }
  template <class C>
  static result<void> restore(C& c, span<const std::byte> msg) {
    A::wait(c);
    double words[snapshot_state_words];
    std::vector<double> largest;
    auto r = read_snapshot(
        A::backend(c), msg, A::items(c), words, [&](const double* w) { return A::config_difference(c, w); },
        largest);
    if (!r) return r;
    A::set_counters(c, words);
    A::set_bounds(c, largest);
    return {};
  }
};

// Which access type (compressor_snapshot's A) a compressor's snapshots go through, with `type`
// (the access) and `value_type` (the compressor's T): a compressor names its trait as its member
// `snapshot_trait`, or its method's snapshot.hpp specialises this. The snapshot functions below
// exist for the compressors that have one.
template <class C, class = void>
struct snapshot_access {};
template <class C>
struct snapshot_access<C, std::void_t<typename C::snapshot_trait>> : C::snapshot_trait {};

template <class C>
using snapshot_access_t = typename snapshot_access<C>::type;

// The state an aggregator's snapshot holds: its receiver-side momentum buffers.
struct aggregator_snapshot_access {
  template <class T, class B>
  static std::vector<snapshot_item<T, memory_space_t<B>>> items(aggregator<T, B>& a) {
    std::vector<snapshot_item<T, memory_space_t<B>>> out;
    for (std::size_t t = 0; t < a.tensors_.size(); ++t) {
      auto& st = a.tensors_[t];
      if (st.receiver_momentum) out.push_back(make_snapshot_item(wire::section_role::receiver_momentum, t, st.u.view()));
    }
    return out;
  }
  template <class T, class B>
  static const B& backend(const aggregator<T, B>& a) noexcept {
    return a.backend_;
  }
  // After a restore: the overflow guard's bounds become the restored buffers' largest magnitudes.
  template <class T, class B>
  static void set_bounds(aggregator<T, B>& a, const std::vector<double>& largest) {
    std::size_t i = 0;
    for (auto& st : a.tensors_) st.u_bound = st.receiver_momentum ? largest[i++] : 0.0;
  }
};

}  // namespace detail

/// Exact size of `save_snapshot`'s output for the compressor `c` (any compressor whose snapshot
/// header, `<gradcomp/<method>/snapshot.hpp>`, is included).
template <class C, class A = detail::snapshot_access_t<C>>
std::size_t snapshot_bytes(const C& c, bool checksum = true) {
  return detail::compressor_snapshot<A>::bytes(c, checksum);
}

/**
 * @brief Writes the compressor's whole state as a snapshot message into `out`, with a CRC-32C
 * unless `checksum` is false: the step counter and what the method records beside it (DGC: the
 * residuals, the momentum buffers, the epoch and the seed; the methods with error feedback: each
 * compressed tensor's error; QSGD and TernGrad: the seed; PowerSGD: the seed, each compressed
 * tensor's error and the Q its next step starts from), under the method's code. Waits for the
 * step in progress; on a backend whose memory the host cannot read, copies the state to the host
 * first (one synchronisation).
 * @return bytes written, or `errc::output_too_small` (see `snapshot_bytes`),
 *         `errc::non_finite_input` (a state buffer holds NaN or an infinity).
 */
template <class C, class A = detail::snapshot_access_t<C>>
[[nodiscard]] result<std::size_t> save_snapshot(const C& c, span<std::byte> out, bool checksum = true) {
  return detail::compressor_snapshot<A>::template save<typename detail::snapshot_access<C>::value_type>(c, out,
                                                                                                      checksum);
}

/// Convenience: the compressor's snapshot in a new vector; throws `gradcomp::error`.
template <class C, class A = detail::snapshot_access_t<C>>
std::vector<std::byte> save_snapshot(const C& c, bool checksum = true) {
  return detail::compressor_snapshot<A>::template save<typename detail::snapshot_access<C>::value_type>(c, checksum);
}

/**
 * @brief Restores a snapshot written by `save_snapshot` (on any backend) into `c`, which must
 * have the same compressed tensors (names are not stored: their ids and sizes must match; the
 * tensors sent whole keep no state, are not recorded and are not compared) and the same settings
 * that the state depends on (the method; for DGC `momentum_correction`, `nesterov` with momentum
 * correction only, and `selection`, which snapshots of the first release did not record and are
 * restored without comparing). The snapshot's counters replace the compressor's (step; DGC's
 * epoch; the seed where recorded); the other settings are the compressor's own and may differ.
 *
 * The message is checked completely first: on any error `c` is unchanged.
 * @return `errc::layout_mismatch` (state sections of other ids or sizes, such as another
 *         compressor's, or not a snapshot), `errc::config_mismatch` (a recorded setting differs,
 *         or the snapshot is another method's; `detail()` names the field: `"selection"` for the
 *         method, `"momentum_correction"` or `"nesterov"`), `errc::malformed_payload` (counters
 *         that are not whole numbers in range), or any decoding error.
 */
template <class C, class A = detail::snapshot_access_t<C>>
[[nodiscard]] result<void> restore_snapshot(C& c, span<const std::byte> msg) {
  return detail::compressor_snapshot<A>::restore(c, msg);
}

/// Exact size of `save_snapshot`'s output for this aggregator.
template <class T, class B>
std::size_t snapshot_bytes(const aggregator<T, B>& a, bool checksum = true) {
  return detail::snapshot_size(detail::aggregator_snapshot_access::items(const_cast<aggregator<T, B>&>(a)), false,
                               checksum);
}

/// Writes an aggregator's receiver-side momentum buffers as a snapshot message (a new vector), with
/// a CRC-32C unless `checksum` is false; throws `gradcomp::error`.
template <class T, class B>
std::vector<std::byte> save_snapshot(const aggregator<T, B>& a, bool checksum = true) {
  using access = detail::aggregator_snapshot_access;
  const auto items = detail::readonly_items(access::items(const_cast<aggregator<T, B>&>(a)));
  std::vector<std::byte> out(detail::snapshot_size(items, false, checksum));
  detail::write_snapshot<T>(access::backend(a), items, nullptr, checksum, span<std::byte>(out.data(), out.size()))
      .value();
  return out;
}

/// Restores an aggregator snapshot into an aggregator with the same receiver-momentum tensors; on
/// error `a` is unchanged. @return `errc::layout_mismatch` (another layout, or not a snapshot),
/// or any decoding error.
template <class T, class B>
[[nodiscard]] result<void> restore_snapshot(aggregator<T, B>& a, span<const std::byte> msg) {
  using access = detail::aggregator_snapshot_access;
  std::vector<double> largest;
  auto r = detail::read_snapshot(access::backend(a), msg, access::items(a), nullptr,
                                 [](const double*) -> const char* { return nullptr; }, largest);
  if (!r) return r;
  access::set_bounds(a, largest);
  return {};
}

}  // namespace gradcomp
