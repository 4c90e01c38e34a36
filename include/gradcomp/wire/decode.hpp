/// @file decode.hpp
/// @brief Decoding of wire messages: peek, validate, decode, decode-and-accumulate.
///
/// Nothing here trusts the message. Every length is checked against the buffer before it is used,
/// nothing is allocated from a size that was not checked, every index is checked against its
/// tensor and against its predecessor, and every value must be finite. Each kind of damage has
/// its own `errc` (listed in docs/wire_format.md). Functions that write into caller memory check
/// the whole input first, so an error leaves the destination unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../detail/bytes.hpp"
#include "../detail/index_codec.hpp"
#include "../detail/value_codec.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "crc32c.hpp"
#include "format.hpp"

namespace gradcomp {
namespace wire {

/**
 * @brief Reads and checks the message header without looking at the sections.
 * @return the header, or `errc::truncated` (buffer shorter than the header or than the declared
 *         length), `errc::trailing_bytes` (buffer longer than the declared length),
 *         `errc::bad_magic`, `errc::unsupported_version`, `errc::reserved_field` (unknown flag
 *         bits), `errc::unknown_coding` (unknown message kind), `errc::malformed_payload` (a
 *         declared length shorter than the header), `errc::size_overflow` (more sections than the
 *         declared length can hold).
 */
[[nodiscard]] inline result<message_header> peek(span<const std::byte> msg) noexcept;

namespace detail {

// The fields needed to find the message's end and its checksum: magic, version, flags, length.
inline result<message_header> read_frame(span<const std::byte> msg) noexcept {
  using gradcomp::detail::load_le;
  if (msg.size() < message_header_bytes) return fail(errc::truncated);
  const std::byte* p = msg.data();
  for (int i = 0; i < 4; ++i)
    if (p[i] != static_cast<std::byte>(magic[i])) return fail(errc::bad_magic);
  message_header h;
  h.version = load_le<std::uint16_t>(p + 4);
  h.flags = load_le<std::uint16_t>(p + 6);
  h.section_count = load_le<std::uint32_t>(p + 12);
  h.total_bytes = load_le<std::uint64_t>(p + 16);
  if (h.version == 0 || h.version > format_version) return fail(errc::unsupported_version);
  if ((h.flags & ~flag_checksum) != 0) return fail(errc::reserved_field);
  const std::uint64_t fixed = message_header_bytes + (h.has_checksum() ? checksum_bytes : 0);
  if (h.total_bytes < fixed) return fail(errc::malformed_payload);
  if (msg.size() < h.total_bytes) return fail(errc::truncated);
  if (msg.size() > h.total_bytes) return fail(errc::trailing_bytes);
  return h;
}

// The remaining header fields, once the frame is known to be sound.
inline result<message_header> read_header_rest(span<const std::byte> msg, message_header h) noexcept {
  const std::uint32_t kind = gradcomp::detail::load_le<std::uint32_t>(msg.data() + 8);
  if (kind > static_cast<std::uint32_t>(message_kind::snapshot)) return fail(errc::unknown_coding);
  h.kind = static_cast<message_kind>(kind);
  const std::uint64_t fixed = message_header_bytes + (h.has_checksum() ? checksum_bytes : 0);
  if (h.section_count > (h.total_bytes - fixed) / section_header_bytes)
    return fail(errc::size_overflow);
  return h;
}

}  // namespace detail

inline result<message_header> peek(span<const std::byte> msg) noexcept {
  auto h = detail::read_frame(msg);
  if (!h) return h;
  return detail::read_header_rest(msg, *h);
}

/**
 * @brief Reads and checks the header of the section at `offset`, which must end by `end` (the
 * start of the checksum, or the message end). Payloads are not decoded.
 * @return the section header, or `errc::truncated` (the section runs past `end`),
 *         `errc::size_overflow` (a section length beyond the whole message), `errc::kept_exceeds_numel`,
 *         `errc::unknown_coding`, `errc::reserved_field` (a parameter on a coding that has
 *         none), `errc::malformed_payload` (payload lengths that disagree with the codings).
 */
[[nodiscard]] inline result<section_header> read_section_header(span<const std::byte> msg,
                                                                std::uint64_t offset,
                                                                std::uint64_t end) noexcept {
  using gradcomp::detail::load_le;
  if (end > msg.size() || offset > end || end - offset < section_header_bytes)
    return fail(errc::truncated);
  const std::byte* p = msg.data() + offset;
  section_header s;
  s.offset = offset;
  s.bytes = load_le<std::uint64_t>(p);
  s.tensor = load_le<std::uint32_t>(p + 8);
  s.numel = load_le<std::uint32_t>(p + 12);
  s.kept = load_le<std::uint32_t>(p + 16);
  const auto ic = static_cast<std::uint8_t>(p[20]);
  const auto vc = static_cast<std::uint8_t>(p[21]);
  s.index_parameter = static_cast<std::uint8_t>(p[22]);
  const auto role = static_cast<std::uint8_t>(p[23]);
  s.index_bytes = load_le<std::uint64_t>(p + 24);
  if (s.bytes < section_header_bytes) return fail(errc::malformed_payload);
  if (s.bytes > end) return fail(errc::size_overflow);  // longer than the whole message
  if (s.bytes > end - offset) return fail(errc::truncated);
  if (s.kept > s.numel) return fail(errc::kept_exceeds_numel);
  if (ic > static_cast<std::uint8_t>(index_coding::bitmap)) return fail(errc::unknown_coding);
  s.indices = static_cast<index_coding>(ic);
  s.values = static_cast<value_coding>(vc);
  const std::uint64_t vsize = value_bytes_per_element(s.values);
  if (vsize == 0) return fail(errc::unknown_coding);
  if (role > static_cast<std::uint8_t>(section_role::state))
    return fail(errc::unknown_coding);
  s.role = static_cast<section_role>(role);
  if (s.indices == index_coding::rice ? s.index_parameter > 31 : s.index_parameter != 0)
    return fail(errc::reserved_field);
  if (s.index_bytes > s.bytes - section_header_bytes) return fail(errc::malformed_payload);
  s.value_bytes = s.bytes - section_header_bytes - s.index_bytes;
  if (s.value_bytes != vsize * s.kept) return fail(errc::malformed_payload);
  const std::uint64_t k = s.kept, n = s.numel;
  switch (s.indices) {
    case index_coding::dense:
      if (k != n || s.index_bytes != 0) return fail(errc::malformed_payload);
      break;
    case index_coding::raw_u32:
      if (s.index_bytes != 4 * k) return fail(errc::malformed_payload);
      break;
    case index_coding::bitmap:
      if (s.index_bytes != (n + 7) / 8) return fail(errc::malformed_payload);
      break;
    case index_coding::delta_varint:
      if (s.index_bytes < k || s.index_bytes > 5 * k) return fail(errc::malformed_payload);
      break;
    case index_coding::rice:
      if (s.index_bytes < (k * (1 + static_cast<std::uint64_t>(s.index_parameter)) + 7) / 8)
        return fail(errc::malformed_payload);
      break;
    default:
      return fail(errc::unknown_coding);
  }
  return s;
}

namespace detail {

// Decodes the indices of a checked section header, calling sink(j, index) for each.
template <class Sink>
errc for_each_index(span<const std::byte> msg, const section_header& s, Sink&& sink) noexcept {
  const std::byte* p = msg.data() + s.offset + section_header_bytes;
  switch (s.indices) {
    case index_coding::dense:
      for (std::uint32_t j = 0; j < s.kept; ++j) sink(j, j);
      return errc::ok;
    case index_coding::raw_u32: return gradcomp::detail::decode_raw(p, s.numel, s.kept, sink);
    case index_coding::delta_varint:
      return gradcomp::detail::decode_varint(p, s.index_bytes, s.numel, s.kept, sink);
    case index_coding::rice:
      return gradcomp::detail::decode_rice(p, s.index_bytes, s.index_parameter, s.numel, s.kept, sink);
    case index_coding::bitmap: return gradcomp::detail::decode_bitmap(p, s.numel, s.kept, sink);
    default: return errc::unknown_coding;
  }
}

inline const std::byte* value_payload(span<const std::byte> msg, const section_header& s) noexcept {
  return msg.data() + s.offset + section_header_bytes + s.index_bytes;
}

// Checks a section's payloads completely (indices and values), writing nothing.
template <class T>
errc check_section(span<const std::byte> msg, const section_header& s) noexcept {
  const errc e = for_each_index(msg, s, [](std::uint32_t, std::uint32_t) {});
  if (e != errc::ok) return e;
  return gradcomp::detail::check_values<T>(value_payload(msg, s), s.values, s.kept);
}

// Walks every section header; f(section_header) returns errc::ok to continue.
template <class F>
result<message_header> walk(span<const std::byte> msg, F&& f) noexcept {
  auto h = peek(msg);
  if (!h) return h;
  const std::uint64_t end = h->total_bytes - (h->has_checksum() ? checksum_bytes : 0);
  std::uint64_t offset = message_header_bytes;
  for (std::uint32_t i = 0; i < h->section_count; ++i) {
    auto s = read_section_header(msg, offset, end);
    if (!s) return fail(s.error());
    const errc e = f(*s);
    if (e != errc::ok) return fail(e);
    offset += s->bytes;
  }
  if (offset != end) return fail(errc::trailing_bytes);
  return h;
}

inline errc verify_checksum(span<const std::byte> msg, const message_header& h) noexcept {
  if (!h.has_checksum()) return errc::ok;
  const std::uint64_t body = h.total_bytes - checksum_bytes;
  const std::uint32_t stored = gradcomp::detail::load_le<std::uint32_t>(msg.data() + body);
  const std::uint32_t actual = crc32c(span<const std::byte>(msg.data(), static_cast<std::size_t>(body)));
  return stored == actual ? errc::ok : errc::checksum_mismatch;
}

// Header frame, then the checksum (before any other field is interpreted), then the rest.
inline result<message_header> checked_header(span<const std::byte> msg) noexcept {
  auto frame = read_frame(msg);
  if (!frame) return frame;
  if (const errc e = verify_checksum(msg, *frame); e != errc::ok) return fail(e);
  return read_header_rest(msg, *frame);
}

template <class T>
result<message_header> validate_as(span<const std::byte> msg) noexcept {
  auto h = checked_header(msg);
  if (!h) return h;
  return walk(msg, [&](const section_header& s) { return check_section<T>(msg, s); });
}

}  // namespace detail

/**
 * @brief Calls `f(const section_header&)` for each section, in order, after checking the message
 * header, the checksum and each section header (payloads are not decoded: use `validate` first
 * to know they are sound). `f` returns nothing.
 * @return the message header, or the first error found.
 */
template <class F>
[[nodiscard]] result<message_header> for_each_section(span<const std::byte> msg, F&& f) {
  auto h = detail::checked_header(msg);
  if (!h) return h;
  return detail::walk(msg, [&](const section_header& s) {
    f(s);
    return errc::ok;
  });
}

/**
 * @brief Checks a whole message: header, checksum, every section header and every payload (all
 * indices strictly increasing and in range, payloads consumed exactly with zero padding, all
 * values finite).
 * @return the message header, or the first error found (see `peek`, `read_section_header`,
 *         plus `errc::checksum_mismatch`, `errc::index_out_of_range`,
 *         `errc::indices_not_increasing`, `errc::non_finite_input`, `errc::trailing_bytes` when
 *         the sections end before the declared length).
 */
[[nodiscard]] inline result<message_header> validate(span<const std::byte> msg) noexcept {
  return detail::validate_as<double>(msg);
}

/**
 * @brief Decodes one section (from `for_each_section`) into caller memory: the first `kept`
 * entries of `indices` and `values` (for a dense section all `numel` values, and `indices` is
 * not touched).
 * @return `kept`, or `errc::output_too_small`, any payload error of `validate`, or
 *         `errc::value_out_of_range` (an fp64 value beyond the range of `T`); on error nothing
 *         is written.
 */
template <class T>
[[nodiscard]] result<std::size_t> decode_section(span<const std::byte> msg,
                                                 const section_header& s,
                                                 span<std::uint32_t> indices, span<T> values) {
  if (s.offset > msg.size() || s.bytes > msg.size() - s.offset) return fail(errc::truncated);
  if (values.size() < s.kept || (s.indices != index_coding::dense && indices.size() < s.kept))
    return fail(errc::output_too_small);
  if (const errc e = detail::check_section<T>(msg, s); e != errc::ok) return fail(e);
  if (s.indices != index_coding::dense)
    (void)detail::for_each_index(msg, s, [&](std::uint32_t j, std::uint32_t i) { indices[j] = i; });
  const std::byte* v = detail::value_payload(msg, s);
  errc unused = errc::ok;  // checked above
  for (std::uint32_t j = 0; j < s.kept; ++j)
    values[j] = gradcomp::detail::load_value<T>(v, s.values, j, unused);
  return static_cast<std::size_t>(s.kept);
}

/**
 * @brief The receiving side of an allgather: adds every section of a gradient message into
 * `dest[section.tensor]` (`dest[t]` holds tensor t's dense accumulator, in host memory).
 *
 * The whole message is validated first, and every section checked against `dest`, so an error
 * leaves every accumulator unchanged: a message is applied completely or not at all.
 *
 * `index_scratch` is optional working memory: when it holds at least the total `kept` of the
 * message's sparse sections, positions are decoded once (into it) instead of twice (once to
 * validate, once to apply). Its content on return is unspecified.
 *
 * @return the message header, or any error of `validate`, `errc::layout_mismatch` (not a
 *         gradient message, or a section whose role is not `gradient`), `errc::unknown_tensor`
 *         (a tensor id beyond `dest`), `errc::output_too_small` (an accumulator shorter than
 *         its tensor), `errc::size_mismatch` (an accumulator longer than its tensor).
 */
template <class T>
[[nodiscard]] result<message_header> decode_accumulate(span<const std::byte> msg,
                                                       span<const span<T>> dest,
                                                       span<std::uint32_t> index_scratch) {
  auto h = detail::checked_header(msg);
  if (!h) return h;
  if (h->kind != message_kind::gradients) return fail(errc::layout_mismatch);
  // Positions of gap and bitmap codings go to the scratch while it has room; raw and dense
  // positions are cheap to read again.
  auto stored = [](const section_header& s) {
    return s.indices == index_coding::delta_varint || s.indices == index_coding::rice ||
           s.indices == index_coding::bitmap;
  };
  std::uint64_t used = 0;
  auto checked = detail::walk(msg, [&](const section_header& s) {
    if (s.role != section_role::gradient) return errc::layout_mismatch;
    if (s.tensor >= dest.size()) return errc::unknown_tensor;
    if (dest[s.tensor].size() < s.numel) return errc::output_too_small;
    if (dest[s.tensor].size() > s.numel) return errc::size_mismatch;
    errc e = errc::ok;
    if (stored(s) && s.kept <= index_scratch.size() - used) {
      std::uint32_t* out = index_scratch.data() + used;
      e = detail::for_each_index(msg, s, [out](std::uint32_t j, std::uint32_t i) { out[j] = i; });
      used += s.kept;
    } else {
      e = detail::for_each_index(msg, s, [](std::uint32_t, std::uint32_t) {});
    }
    if (e != errc::ok) return e;
    return gradcomp::detail::check_values<T>(detail::value_payload(msg, s), s.values, s.kept);
  });
  if (!checked) return checked;
  used = 0;
  (void)detail::walk(msg, [&](const section_header& s) {
    T* acc = dest[s.tensor].data();
    const std::byte* v = detail::value_payload(msg, s);
    if (stored(s) && s.kept <= index_scratch.size() - used) {
      const std::uint32_t* idx = index_scratch.data() + used;
      gradcomp::detail::add_values<T>(v, s.values, s.kept, acc, [idx](std::size_t j) { return idx[j]; });
      used += s.kept;
      return errc::ok;
    }
    if (s.indices == index_coding::raw_u32) {
      const std::byte* raw = msg.data() + s.offset + section_header_bytes;
      gradcomp::detail::add_values<T>(v, s.values, s.kept, acc, [raw](std::size_t j) {
        return gradcomp::detail::load_le<std::uint32_t>(raw + 4 * j);
      });
      return errc::ok;
    }
    if (s.indices == index_coding::dense) {
      gradcomp::detail::add_values<T>(v, s.values, s.kept, acc, [](std::size_t j) { return j; });
      return errc::ok;
    }
    // Without room in the scratch: decode positions in blocks on the stack, add each block.
    constexpr std::uint32_t block = 256;
    std::uint32_t positions[block];
    const wire::value_coding coding = s.values;
    const std::size_t value_size = value_bytes_per_element(coding);
    auto flush = [&](std::uint32_t first, std::uint32_t count) {
      gradcomp::detail::add_values<T>(v + value_size * first, coding, count, acc,
                                      [&positions](std::size_t j) { return positions[j]; });
    };
    (void)detail::for_each_index(msg, s, [&](std::uint32_t j, std::uint32_t i) {
      positions[j % block] = i;
      if (j % block == block - 1) flush(j - (block - 1), block);
    });
    if (s.kept % block != 0) flush(s.kept - s.kept % block, s.kept % block);
    return errc::ok;
  });
  return h;
}

/// `decode_accumulate` without scratch memory: positions of compact codings are decoded twice.
template <class T>
[[nodiscard]] result<message_header> decode_accumulate(span<const std::byte> msg,
                                                       span<const span<T>> dest) {
  return decode_accumulate<T>(msg, dest, span<std::uint32_t>());
}

/// A section decoded into owned memory (see `decode`).
template <class T>
struct decoded_section {
  section_header header;               ///< The section's header.
  std::vector<std::uint32_t> indices;  ///< Kept positions (empty for dense sections).
  std::vector<T> values;               ///< Kept values (all values for dense sections).
};

/**
 * @brief Convenience: validates and decodes every section into vectors. Throws `gradcomp::error`
 * with the first error found. Allocations are bounded by the message length.
 */
template <class T>
std::vector<decoded_section<T>> decode(span<const std::byte> msg) {
  detail::validate_as<T>(msg).value();
  std::vector<decoded_section<T>> out;
  (void)for_each_section(msg, [&](const section_header& s) {
    decoded_section<T> d;
    d.header = s;
    d.values.resize(s.kept);
    if (s.indices != index_coding::dense) d.indices.resize(s.kept);
    decode_section<T>(msg, s, span<std::uint32_t>(d.indices.data(), d.indices.size()),
                      span<T>(d.values.data(), d.values.size()))
        .value();
    out.push_back(std::move(d));
  });
  return out;
}

}  // namespace wire
}  // namespace gradcomp
