/// @file encode.hpp
/// @brief Encoding of gradient messages (wire format version 1, docs/wire_format.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../detail/bytes.hpp"
#include "codecs/index.hpp"
#include "codecs/values.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "tensor_message.hpp"
#include "crc32c.hpp"
#include "format.hpp"
#include "value_codecs.hpp"

namespace gradcomp {
namespace wire {

/// How `encode` writes each section.
struct encode_options {
  /// Index coding of sparse sections; `automatic` picks the smallest for each section.
  index_coding indices = index_coding::automatic;
  value_coding values = value_coding::fp32;        ///< Value coding of sparse sections.
  value_coding dense_values = value_coding::fp32;  ///< Value coding of dense sections.
  bool checksum = false;                           ///< Append a CRC-32C of the message.
  /// Write only codings that a device decoder reads in parallel (`wire::device_accumulator`):
  /// `automatic` index coding never chooses `rice`, and a `qsgd` section stays in its fixed-width
  /// form even where `qsgd_gamma` would be shorter (such a decoder reads both in order, on one
  /// thread).
  bool device_readable = false;
};

namespace detail {

struct section_plan {
  index_coding indices = index_coding::dense;
  int rice_parameter = 0;
  value_coding values = value_coding::fp32;
  std::uint64_t index_bytes = 0;
  std::uint64_t value_bytes = 0;
  std::uint64_t bytes = 0;
};

// A section whose producer wrote its value payload (tensor_message::payload): dense, in a
// coding that takes one, the payload checked as a decoder checks it.
template <class T>
result<section_plan> plan_payload_section(const tensor_message<T>& m) {
  if (!m.dense || !m.values.empty() || !m.indices.empty() || !gradcomp::detail::is_payload_coding(m.coding))
    return fail(errc::invalid_argument);
  if (!gradcomp::detail::value_payload_fits(m.coding, m.payload.data(), m.payload.size(), m.numel))
    return fail(errc::malformed_payload);
  if (const errc e = gradcomp::detail::check_values<T>(m.payload.data(), m.coding, m.numel); e != errc::ok)
    return fail(e);
  section_plan p;
  p.indices = index_coding::dense;
  p.values = m.coding;
  p.value_bytes = m.payload.size();
  p.bytes = section_header_bytes + p.value_bytes;
  return p;
}

// Checks one section and decides how it is written (reads the indices once).
template <class T>
result<section_plan> plan_section(const tensor_message<T>& m, const encode_options& opt) {
  constexpr std::uint64_t u32max = std::numeric_limits<std::uint32_t>::max();
  if (m.tensor > u32max || m.numel > u32max) return fail(errc::size_overflow);
  section_plan p;
  if (!m.payload.empty()) return plan_payload_section(m);
  if (m.dense) {
    if (m.values.size() != m.numel || !m.indices.empty()) return fail(errc::size_mismatch);
    p.values = m.coding != value_coding::unspecified ? m.coding : opt.dense_values;
    if (!is_known(p.values)) return fail(errc::unknown_coding);
  } else {
    if (m.values.size() != m.indices.size()) return fail(errc::size_mismatch);
    if (m.indices.size() > m.numel) return fail(errc::kept_exceeds_numel);
    p.values = m.coding != value_coding::unspecified ? m.coding : opt.values;
    if (!is_known(p.values)) return fail(errc::unknown_coding);
    // One pass over the gaps checks the indices and sizes every coding.
    const auto n = static_cast<std::uint32_t>(m.numel);
    const gradcomp::detail::index_sizes s = gradcomp::detail::measure_indices(m.indices, n);
    if (s.error != errc::ok) return fail(s.error);
    p.rice_parameter = 0;
    switch (opt.indices) {
      case index_coding::automatic: {
        p.indices = index_coding::raw_u32;
        p.index_bytes = s.raw;
        const std::pair<index_coding, std::uint64_t> others[] = {
            {index_coding::delta_varint, s.varint},
            {index_coding::rice, s.rice},
            {index_coding::bitmap, s.bitmap}};
        for (const auto& o : others) {
          if (o.first == index_coding::rice && opt.device_readable) continue;
          if (o.second < p.index_bytes) {
            p.indices = o.first;
            p.index_bytes = o.second;
          }
        }
        if (p.indices == index_coding::rice) p.rice_parameter = s.rice_parameter;
        break;
      }
      case index_coding::raw_u32: p.indices = opt.indices; p.index_bytes = s.raw; break;
      case index_coding::delta_varint: p.indices = opt.indices; p.index_bytes = s.varint; break;
      case index_coding::bitmap: p.indices = opt.indices; p.index_bytes = s.bitmap; break;
      case index_coding::rice:
        p.indices = opt.indices;
        p.index_bytes = s.rice;
        p.rice_parameter = s.rice_parameter;
        break;
      default:
        return fail(errc::invalid_argument);  // `dense` is not a coding for sparse sections
    }
  }
  if (gradcomp::detail::is_payload_coding(p.values)) return fail(errc::invalid_argument);  // needs `payload`
  if (!gradcomp::detail::value_layout_fits(p.values, m.values.size(), m.parameters))
    return fail(errc::invalid_argument);
  // A known coding; qsgd picks its shorter form here.
  if (const errc e = gradcomp::detail::plan_values(m.values, p.values, m.parameters, !opt.device_readable, p.values,
                                                   p.value_bytes);
      e != errc::ok)
    return fail(e);
  p.bytes = section_header_bytes + p.index_bytes + p.value_bytes;
  return p;
}

inline bool add_overflows(std::uint64_t& total, std::uint64_t add) noexcept {
  if (add > std::numeric_limits<std::uint64_t>::max() - total) return true;
  total += add;
  return false;
}

// True when two sections name the same tensor: linear when the ids increase (as a compressor
// writes them), else a comparison of every pair (sections come from the caller's own model, and
// nothing is allocated).
template <class T>
bool has_duplicate_tensor(span<const tensor_message<T>> sections) noexcept {
  bool increasing = true;
  for (std::size_t i = 1; i < sections.size() && increasing; ++i)
    increasing = sections[i].tensor > sections[i - 1].tensor;
  if (increasing) return false;
  for (std::size_t i = 1; i < sections.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (sections[i].tensor == sections[j].tensor) return true;
  return false;
}

// Sections + header + trailer of a message, or size_overflow.
template <class T>
result<std::uint64_t> plan_message(span<const tensor_message<T>> sections,
                                   const encode_options& opt) {
  if (sections.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (has_duplicate_tensor(sections)) return fail(errc::duplicate_tensor);
  std::uint64_t total = message_header_bytes + (opt.checksum ? checksum_bytes : 0);
  for (std::size_t s = 0; s < sections.size(); ++s) {
    auto p = plan_section(sections[s], opt);
    if (!p) return fail(p.error());
    if (add_overflows(total, p->bytes)) return fail(errc::size_overflow);
  }
  if (total > std::numeric_limits<std::size_t>::max()) return fail(errc::size_overflow);
  return total;
}

inline void write_message_header(std::byte* base, message_kind kind, std::uint32_t sections,
                                 std::uint64_t total, bool checksum) noexcept {
  using gradcomp::detail::store_le;
  for (int i = 0; i < 4; ++i) base[i] = static_cast<std::byte>(magic[i]);
  store_le<std::uint16_t>(base + 4, format_version);
  store_le<std::uint16_t>(base + 6, checksum ? flag_checksum : 0);
  store_le<std::uint32_t>(base + 8, static_cast<std::uint32_t>(kind));
  store_le<std::uint32_t>(base + 12, sections);
  store_le<std::uint64_t>(base + 16, total);
}

// Writes the CRC-32C of [base, base + body) after it.
inline void write_checksum(std::byte* base, std::size_t body) noexcept {
  gradcomp::detail::store_le<std::uint32_t>(base + body,
                                            crc32c(span<const std::byte>(base, body)));
}

// Value payloads at least this long are written past the caches where the coding allows it
// (detail::encode_values_streaming): larger than a core's share of the caches on common servers,
// so the message would not stay cached for a reader anyway; below it, a decode that follows on
// this core finds the message in cache.
inline constexpr std::size_t streaming_payload_bytes = std::size_t(8) << 20;

// Encodes values in `coding`, laid out as `params` says, at dst (`bytes` bytes, as planned); with
// `crc`, continues *crc over the bytes written, block by block where the coding has a fixed size
// per value.
template <class T>
errc write_values(span<const T> v, value_coding coding, const coding_parameters& params, std::uint64_t bytes,
                  std::byte* dst, std::uint32_t* crc) noexcept {
  if (crc == nullptr) return gradcomp::detail::encode_planned_values(v, coding, dst, params, bytes);
  const std::size_t width = value_bytes_per_element(coding);
  if (width * v.size() >= streaming_payload_bytes && gradcomp::detail::encode_values_streaming(v, coding, dst, crc))
    return errc::ok;
  if (width == 0) {
    const errc e = gradcomp::detail::encode_planned_values(v, coding, dst, params, bytes);
    if (e == errc::ok) *crc = crc32c(span<const std::byte>(dst, static_cast<std::size_t>(bytes)), *crc);
    return e;
  }
  const std::size_t per_block = gradcomp::detail::crc32c_follow_block / width;
  for (std::size_t at = 0; at < v.size(); at += per_block) {
    const std::size_t count = std::min(per_block, v.size() - at);
    std::byte* out = dst + width * at;
    const errc e = gradcomp::detail::encode_values(v.subspan(at, count), coding, out);
    if (e != errc::ok) return e;
    *crc = crc32c(span<const std::byte>(out, width * count), *crc);
  }
  return errc::ok;
}

// Writes one planned section at p (exactly pl.bytes bytes); with `crc`, continues *crc over them.
template <class T>
errc write_section(std::byte* p, const tensor_message<T>& m, const section_plan& pl,
                   section_role role, std::uint32_t* crc = nullptr) noexcept {
  using gradcomp::detail::store_le;
  store_le<std::uint64_t>(p, pl.bytes);
  store_le<std::uint32_t>(p + 8, static_cast<std::uint32_t>(m.tensor));
  store_le<std::uint32_t>(p + 12, static_cast<std::uint32_t>(m.numel));
  store_le<std::uint32_t>(p + 16, static_cast<std::uint32_t>(m.payload.empty() ? m.values.size() : m.numel));
  p[20] = static_cast<std::byte>(pl.indices);
  p[21] = static_cast<std::byte>(pl.values);
  p[22] = static_cast<std::byte>(pl.rice_parameter);
  p[23] = static_cast<std::byte>(role);
  store_le<std::uint64_t>(p + 24, pl.index_bytes);
  std::byte* idx = p + section_header_bytes;
  const auto n = static_cast<std::uint32_t>(m.numel);
  switch (pl.indices) {
    case index_coding::raw_u32: gradcomp::detail::encode_raw(m.indices, idx); break;
    case index_coding::delta_varint: gradcomp::detail::encode_varint(m.indices, idx); break;
    case index_coding::rice:
      gradcomp::detail::encode_rice(m.indices, pl.rice_parameter, idx, pl.index_bytes);
      break;
    case index_coding::bitmap: gradcomp::detail::encode_bitmap(m.indices, n, idx); break;
    default: break;
  }
  if (crc != nullptr) *crc = crc32c(span<const std::byte>(p, section_header_bytes + pl.index_bytes), *crc);
  if (!m.payload.empty()) {
    std::memcpy(idx, m.payload.data(), m.payload.size());
    if (crc != nullptr) *crc = crc32c(m.payload, *crc);
    return errc::ok;
  }
  return write_values(m.values, pl.values, m.parameters, pl.value_bytes, idx + pl.index_bytes, crc);
}

// One pass: each section is planned (validated, codings chosen), checked against the space left
// and written; the total length goes into the header at the end. Allocates nothing. `kind`:
// gradients, or a round (whose sections must be dense).
template <class T>
result<std::size_t> encode_message(span<const tensor_message<T>> sections, const encode_options& opt,
                                   span<std::byte> out, message_kind kind = message_kind::gradients) {
  if (kind != message_kind::gradients && !is_round(kind)) return fail(errc::invalid_argument);
  if (sections.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (has_duplicate_tensor(sections)) return fail(errc::duplicate_tensor);
  const std::uint64_t trailer = opt.checksum ? checksum_bytes : 0;
  if (out.size() < message_header_bytes + trailer) return fail(errc::output_too_small);
  std::byte* const base = out.data();
  std::uint64_t left = out.size() - message_header_bytes - trailer;
  std::byte* p = base + message_header_bytes;
  std::uint32_t sections_crc = 0;  // CRC-32C of the sections written so far
  for (std::size_t s = 0; s < sections.size(); ++s) {
    if (is_round(kind) && !sections[s].dense) return fail(errc::invalid_argument);
    const auto pl = plan_section(sections[s], opt);
    if (!pl) return fail(pl.error());
    if (pl->bytes > left) return fail(errc::output_too_small);
    left -= pl->bytes;
    const errc e = write_section(p, sections[s], *pl, section_role::gradient, opt.checksum ? &sections_crc : nullptr);
    if (e != errc::ok) return fail(e);
    p += pl->bytes;
  }
  const auto body = static_cast<std::size_t>(p - base);
  write_message_header(base, kind, static_cast<std::uint32_t>(sections.size()),
                       body + trailer, opt.checksum);
  if (opt.checksum) {
    // The sections were checksummed as they were written; the header joins them in front.
    const std::uint32_t header_crc = crc32c(span<const std::byte>(base, message_header_bytes));
    gradcomp::detail::store_le<std::uint32_t>(
        base + body, gradcomp::detail::crc32c_combine(header_crc, sections_crc, body - message_header_bytes));
  }
  return body + static_cast<std::size_t>(trailer);
}

}  // namespace detail

/**
 * @brief An upper bound of the encoded size of a section of `numel` elements keeping `kept`, known
 * before the indices are: encoding into a buffer of the sum over sections plus
 * `message_overhead_bytes(opt)` always succeeds (barring invalid input). `params` is the layout
 * of a coding that has one (`one_bit`'s column count), as in `tensor_message::parameters`.
 * @return the bound, or `errc::size_overflow` (`numel` above 2^32 - 1, which no section holds),
 *         `errc::kept_exceeds_numel`, `errc::invalid_argument` (a coding whose payload its
 *         producer writes, `isgq`: its section is 32 bytes plus the payload's length).
 */
inline result<std::uint64_t> max_section_bytes(std::uint64_t numel, std::uint64_t kept, bool dense,
                                               const encode_options& opt,
                                               const coding_parameters& params = {}) noexcept {
  if (numel > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (kept > numel) return fail(errc::kept_exceeds_numel);
  // Below 2^32 elements of at most 8 bytes with at most 5 index bytes each: no product overflows.
  const auto values = value_payload_bytes(dense ? opt.dense_values : opt.values, dense ? numel : kept, params);
  if (!values) return fail(values.error());
  if (dense) return section_header_bytes + *values;
  std::uint64_t index = 0;
  const std::uint64_t bitmap = (numel + 7) / 8;
  const int r = gradcomp::detail::rice_center(numel, kept);
  const std::uint64_t rice = std::max(gradcomp::detail::rice_bytes_bound(numel, kept, std::max(0, r - 1)),
                                      std::max(gradcomp::detail::rice_bytes_bound(numel, kept, r),
                                               gradcomp::detail::rice_bytes_bound(numel, kept, std::min(r + 1, 31))));
  switch (opt.indices) {
    case index_coding::raw_u32: index = 4 * kept; break;
    case index_coding::delta_varint: index = 5 * kept; break;
    case index_coding::bitmap: index = bitmap; break;
    case index_coding::rice: index = rice; break;
    default: index = std::min(4 * kept, bitmap); break;  // automatic never exceeds either
  }
  return section_header_bytes + index + *values;
}

/// Bytes of a message outside its sections: the header and, if asked for, the checksum.
constexpr std::uint64_t message_overhead_bytes(const encode_options& opt) noexcept {
  return message_header_bytes + (opt.checksum ? checksum_bytes : 0);
}

/**
 * @brief Upper bound of `encode`'s output for these sections (reads only their sizes).
 * @return the bound, or `errc::size_overflow` (a section of more than 2^32 - 1 elements, more
 *         than 2^32 - 1 sections, or a total beyond `size_t`), `errc::kept_exceeds_numel`.
 */
template <class T>
[[nodiscard]] result<std::size_t> max_encoded_bytes(span<const tensor_message<T>> sections,
                                                    const encode_options& opt) noexcept {
  if (sections.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  std::uint64_t total = message_overhead_bytes(opt);
  for (const auto& m : sections) {
    encode_options o = opt;  // a section's own coding replaces the options'
    if (m.coding != value_coding::unspecified) o.values = o.dense_values = m.coding;
    const auto b = m.payload.empty() ? max_section_bytes(m.numel, m.values.size(), m.dense, o, m.parameters)
                                     : result<std::uint64_t>(section_header_bytes + m.payload.size());
    if (!b) return fail(b.error());
    if (detail::add_overflows(total, *b)) return fail(errc::size_overflow);
  }
  if (total > std::numeric_limits<std::size_t>::max()) return fail(errc::size_overflow);
  return static_cast<std::size_t>(total);
}

/**
 * @brief The exact size `encode` will produce (reads the indices once to choose codings).
 * @return the size, or the error `encode` would report for these sections.
 */
template <class T>
[[nodiscard]] result<std::size_t> encoded_bytes(span<const tensor_message<T>> sections,
                                                const encode_options& opt = {}) {
  auto total = detail::plan_message<T>(sections, opt);
  if (!total) return fail(total.error());
  return static_cast<std::size_t>(*total);
}

/**
 * @brief Encodes one worker's step (one section per tensor message) into `out`.
 *
 * Each section is written in its own value coding when the message names one
 * (`tensor_message::coding`), else in the options'. Sparse sections must have strictly
 * increasing indices below `numel`; every value must be finite and fit the chosen value coding (fp16 holds magnitudes up to 65504; values are rounded to
 * nearest even). The output is a function of the inputs and options only: the same step gives
 * the same bytes on every platform.
 *
 * @param sections the tensors, in any order (ids need not be contiguous).
 * @param opt      codings and checksum.
 * @param out      destination; `max_encoded_bytes(sections, opt)` bytes always suffice.
 * Encoding makes one pass over the sections and allocates nothing.
 *
 * @return bytes written, or `errc::output_too_small`, `errc::size_mismatch`,
 *         `errc::kept_exceeds_numel`, `errc::index_out_of_range`, `errc::indices_not_increasing`,
 *         `errc::non_finite_input`, `errc::value_out_of_range`, `errc::unknown_coding`,
 *         `errc::invalid_argument` (index coding `dense` for a sparse section),
 *         `errc::duplicate_tensor` (two sections for one tensor: a gradient message carries each
 *         tensor at most once), `errc::size_overflow`, and for a producer's payload
 *         (`tensor_message::payload`) `errc::invalid_argument` (a coding that takes none, or
 *         values given too) or any payload error a decoder reports (`errc::malformed_payload`,
 *         `errc::non_finite_input`, `errc::value_out_of_range`). On error the content of `out` is
 *         unspecified.
 */
template <class T>
[[nodiscard]] result<std::size_t> encode(span<const tensor_message<T>> sections,
                                         const encode_options& opt, span<std::byte> out) {
  return detail::encode_message<T>(sections, opt, out);
}

/**
 * @brief Encodes one worker's part of a round of a multi-round method (`kind`: `first_round` or
 * `second_round`) into `out`, as `encode` a gradient message: every section dense (its values in
 * `opt.dense_values`, or its own coding).
 * @return the bytes written, or `encode`'s errors; `errc::invalid_argument` also for another kind
 *         or a sparse section.
 */
template <class T>
[[nodiscard]] result<std::size_t> encode_round(message_kind kind, span<const tensor_message<T>> sections,
                                               const encode_options& opt, span<std::byte> out) {
  if (!is_round(kind)) return fail(errc::invalid_argument);
  return detail::encode_message<T>(sections, opt, out, kind);
}

/// Convenience: encodes into a new vector; throws `gradcomp::error`.
template <class T>
std::vector<std::byte> encode(span<const tensor_message<T>> sections, const encode_options& opt = {}) {
  std::vector<std::byte> out(max_encoded_bytes(sections, opt).value());
  const auto n = encode(sections, opt, span<std::byte>(out.data(), out.size()));
  out.resize(n.value());
  return out;
}

}  // namespace wire
}  // namespace gradcomp
