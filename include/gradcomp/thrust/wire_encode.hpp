/// @file thrust/wire_encode.hpp
/// @brief Encoding of gradient messages in the Thrust backend's memory, on its system: the bytes
/// of `wire::encode` (wire format version 1), written where the indices and values are, without
/// the host waiting.
///
/// `wire::device_encoder<T, thrust_backend<System>>` is set up once with the sections of a
/// message: for each tensor its id and element count, and views of backend memory holding its
/// indices and values (and, for a sparse section, where the count kept this step is, also in
/// backend memory: a DGC step decides it on the device). `encode(on, out, outcome)` then issues
/// the whole encoding on `on`'s stream and returns without waiting: the section sizes and offsets,
/// the checks of every index and value, the headers, the payloads and the CRC-32C trailer are
/// computed on the system. The outcome (the message's length, or the error the host encoder would
/// report for the same sections) lands in backend memory, for the host to read when it needs it,
/// or for the next kernel (a send of `outcome[0]` bytes) to use as it is.
///
/// Sparse sections are written with the raw_u32, the bitmap or the delta_varint index coding
/// (`encode_options::indices` names one of them: `automatic` is the host encoder's; a varint's
/// place is a prefix sum of the lengths before it), values as fp32 or fp64, or as `scaled_sign` or
/// `ternary` for a section that names that coding (`device_section::coding`: values of one
/// magnitude, or 0 and one magnitude, whose largest is found by an atomic maximum first). For
/// the same sections and options the bytes are exactly those of `wire::encode`, checksum
/// included, and so is the error: the first section in order that fails, an index error before a
/// value error within it.
///
/// This header includes Thrust; the umbrella header does not include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>

#include "../config.hpp"
#include "../wire/codecs/crc32c.hpp"
#include "../error.hpp"
#include "../backend_memory.hpp"
#include "../span.hpp"
#include "../wire/device_section.hpp"
#include "../wire/encode.hpp"
#include "../wire/format.hpp"
#include "system_backend.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace wire {

namespace detail {

// A section as the kernels see it; `at`, `bytes`, `index_bytes` and `error` are set on the device
// at every encode.
template <class T>
struct section_entry {
  const std::uint32_t* indices;
  const T* values;
  const std::uint64_t* kept_at;
  std::uint64_t capacity;     // entries the views hold
  std::uint64_t first_entry;  // of this section in the flat list of every section's entries
  std::uint64_t first_bitmap_byte;  // of this section among the bitmap bytes (bitmap sections)
  std::uint32_t tensor;
  std::uint32_t numel;
  std::uint32_t dense;
  std::uint32_t index_coding;
  std::uint32_t packed;  // the section's own packed coding (scaled_sign, ternary) or 0: the encoder's
  std::uint64_t top;     // a ternary section's largest |value|, as the bits of a binary64
  std::uint64_t kept;
  std::uint64_t index_bytes;
  std::uint64_t bytes;
  std::uint64_t at;     // offset of the section in the message
  std::uint64_t index_error;  // (position << 16) | errc of the first bad index; all ones: none
  std::uint64_t value_error;  // the same for the values
  std::uint64_t status;       // kept errors: an errc; 0 otherwise
};

constexpr std::uint64_t no_error = ~std::uint64_t(0);
// The magic bytes "GCWF" as a little-endian word (wire::magic is host data).
constexpr std::uint32_t magic_word = 0x46574347u;
static_assert(magic[0] == 0x47 && magic[1] == 0x43 && magic[2] == 0x57 && magic[3] == 0x46, "GCWF");

GRADCOMP_HD inline void store_byte_le(std::byte* p, std::uint64_t v, int bytes) noexcept {
  for (int b = 0; b < bytes; ++b) p[b] = static_cast<std::byte>((v >> (8 * b)) & 0xffu);
}

GRADCOMP_HD inline void atomic_max_u64(std::uint64_t* p, std::uint64_t v) noexcept {
#if defined(__CUDA_ARCH__)
  atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  std::uint64_t seen = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v > seen && !__atomic_compare_exchange_n(p, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

constexpr std::uint32_t scaled_sign_code = static_cast<std::uint32_t>(value_coding::scaled_sign);
constexpr std::uint32_t ternary_code = static_cast<std::uint32_t>(value_coding::ternary);

GRADCOMP_HD inline void atomic_min_u64(std::uint64_t* p, std::uint64_t v) noexcept {
#if defined(__CUDA_ARCH__)
  atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  std::uint64_t seen = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < seen && !__atomic_compare_exchange_n(p, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

// Per section, one thread: the count kept, the sizes, the errors cleared.
template <class T>
struct size_sections {
  section_entry<T>* s;
  std::uint32_t value_width;
  GRADCOMP_HD void operator()(std::size_t i) const {
    section_entry<T>& e = s[i];
    e.status = 0;
    e.index_error = no_error;
    e.value_error = no_error;
    e.top = 0;
    e.kept = e.dense != 0 ? e.numel : e.kept_at != nullptr ? *e.kept_at : e.capacity;
    if (e.dense == 0 && e.kept > e.numel) e.status = static_cast<std::uint64_t>(errc::kept_exceeds_numel);
    else if (e.kept > e.capacity) e.status = static_cast<std::uint64_t>(errc::size_mismatch);
    if (e.status != 0) e.kept = 0;
    const bool bitmap = e.index_coding == static_cast<std::uint32_t>(index_coding::bitmap);
    const bool varint = e.index_coding == static_cast<std::uint32_t>(index_coding::delta_varint);
    // A varint section's index bytes are known once its lengths are summed (lay_out).
    e.index_bytes = e.dense != 0 || varint ? 0 : bitmap ? (std::uint64_t(e.numel) + 7) / 8 : 4 * e.kept;
    const std::uint64_t value_bytes = e.packed == scaled_sign_code ? 4 + (e.kept + 7) / 8
                                      : e.packed == ternary_code   ? 4 + (e.kept + 3) / 4
                                                                   : value_width * e.kept;
    e.bytes = section_header_bytes + e.index_bytes + value_bytes;
  }
};

// The section an entry (or a bitmap byte) belongs to: the last whose first entry is at or below it.
template <class T, class First>
GRADCOMP_HD std::size_t section_of(const section_entry<T>* s, std::size_t count, std::uint64_t x, First first) {
  std::size_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const std::size_t mid = hi - (hi - lo) / 2;
    if (first(s[mid]) <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The gap coded for entry j of a section (d_0 = i_0, d_j = i_j - i_{j-1} - 1) and the length of
// its varint (1 to 5 bytes).
template <class T>
GRADCOMP_HD std::uint32_t gap_of(const section_entry<T>& e, std::uint64_t j) {
  return j == 0 ? e.indices[0] : e.indices[j] - e.indices[j - 1] - 1;
}
GRADCOMP_HD inline std::uint32_t varint_length(std::uint32_t d) noexcept {
  return 1u + (d >= (1u << 7)) + (d >= (1u << 14)) + (d >= (1u << 21)) + (d >= (1u << 28));
}

struct first_entry_of {
  template <class E>
  GRADCOMP_HD std::uint64_t operator()(const E& e) const { return e.first_entry; }
};
struct first_bitmap_byte_of {
  template <class E>
  GRADCOMP_HD std::uint64_t operator()(const E& e) const { return e.first_bitmap_byte; }
};

// The magnitude of v and its sign bit, as the host's std::fabs and std::signbit.
template <class T>
GRADCOMP_HD T magnitude(T v) noexcept {
  return v < T(0) ? -v : v == T(0) ? T(0) : v;
}
template <class T>
GRADCOMP_HD bool sign_bit(T v) noexcept {
  if constexpr (sizeof(T) == 4) {
    std::uint32_t b = 0;
    memcpy(&b, &v, 4);
    return (b >> 31) != 0;
  } else {
    std::uint64_t b = 0;
    memcpy(&b, &v, 8);
    return (b >> 63) != 0;
  }
}

// Per entry of a ternary section: its magnitude into the section's largest (finite values only).
template <class T>
struct ternary_tops {
  section_entry<T>* s;
  std::size_t sections;
  GRADCOMP_HD void operator()(std::size_t x) const {
    section_entry<T>& e = s[section_of(s, sections, x, first_entry_of{})];
    const std::uint64_t j = x - e.first_entry;
    if (e.packed != ternary_code || j >= e.kept) return;
    const T v = e.values[j];
    if (!(v - v == T(0))) return;
    const double m = static_cast<double>(magnitude(v));
    std::uint64_t bits = 0;
    memcpy(&bits, &m, 8);
    atomic_max_u64(&e.top, bits);
  }
};

GRADCOMP_HD inline double double_of_bits(std::uint64_t bits) noexcept {
  double d = 0.0;
  memcpy(&d, &bits, 8);
  return d;
}

// Per entry: the index and the value checked as the host encoder checks them; the first bad one
// of each kind per section kept (the smallest position). A scaled_sign section's values must all
// have the magnitude of the first, which binary32 must hold exactly. A ternary section's must be
// 0 or of the largest magnitude, which binary32 must hold exactly; as the host encoder checks
// every value's finiteness first, then the scale, then each value, a ternary section's errors are
// ordered by position j (not finite), kept (the scale), kept + 1 + j (a value).
template <class T>
struct check_entries {
  section_entry<T>* s;
  std::size_t sections;
  bool to_fp32;
  GRADCOMP_HD void operator()(std::size_t x) const {
    section_entry<T>& e = s[section_of(s, sections, x, first_entry_of{})];
    const std::uint64_t j = x - e.first_entry;
    if (j >= e.kept) return;
    if (e.dense == 0) {
      const std::uint32_t i = e.indices[j];
      if (i >= e.numel)
        atomic_min_u64(&e.index_error, (j << 16) | static_cast<std::uint64_t>(errc::index_out_of_range));
      else if (j > 0 && i <= e.indices[j - 1])
        atomic_min_u64(&e.index_error, (j << 16) | static_cast<std::uint64_t>(errc::indices_not_increasing));
    }
    const T v = e.values[j];
    if (!(v - v == T(0))) {
      atomic_min_u64(&e.value_error, (j << 16) | static_cast<std::uint64_t>(errc::non_finite_input));
    } else if (e.packed == scaled_sign_code) {
      const float scale = static_cast<float>(magnitude(e.values[0]));
      if (!(scale - scale == 0.0f) || static_cast<T>(scale) != magnitude(e.values[0]) ||
          magnitude(v) != static_cast<T>(scale))
        atomic_min_u64(&e.value_error, (j << 16) | static_cast<std::uint64_t>(errc::value_out_of_range));
    } else if (e.packed == ternary_code) {
      const T top = static_cast<T>(double_of_bits(e.top));
      const float scale = static_cast<float>(top);
      constexpr auto out_of_range = static_cast<std::uint64_t>(errc::value_out_of_range);
      if (!(scale - scale == 0.0f) || static_cast<T>(scale) != top)
        atomic_min_u64(&e.value_error, (e.kept << 16) | out_of_range);
      else if (v != T(0) && magnitude(v) != top)
        atomic_min_u64(&e.value_error, ((e.kept + 1 + j) << 16) | out_of_range);
    } else if (to_fp32) {
      const float f = static_cast<float>(v);
      if (!(f - f == 0.0f))
        atomic_min_u64(&e.value_error, (j << 16) | static_cast<std::uint64_t>(errc::value_out_of_range));
    }
  }
};

// Per entry: the length of its varint in a delta_varint section (0 for any other entry), for the
// scan that places each varint.
template <class T>
struct varint_lengths {
  const section_entry<T>* s;
  std::size_t sections;
  std::uint64_t* lengths;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const section_entry<T>& e = s[section_of(s, sections, x, first_entry_of{})];
    const std::uint64_t j = x - e.first_entry;
    const bool varint = e.dense == 0 && e.index_coding == static_cast<std::uint32_t>(index_coding::delta_varint);
    lengths[x] = varint && j < e.kept ? varint_length(gap_of(e, j)) : 0;
  }
};

// Where a varint section's bytes start among the scanned lengths (the sum before its first entry).
template <class T>
GRADCOMP_HD std::uint64_t varint_base(const section_entry<T>& e, const std::uint64_t* sums) {
  return e.first_entry == 0 ? 0 : sums[e.first_entry - 1];
}

// One thread: the host encoder's verdict (the first section in order that fails, an index error
// before a value error), the sections' offsets, the message header and the outcome.
template <class T>
struct lay_out {
  section_entry<T>* s;
  std::size_t sections;
  bool checksum;
  const std::int32_t* verdict;  // null: none
  std::byte* out;
  std::uint64_t* outcome;  // [0]: bytes, [1]: errc
  const std::uint64_t* varint_sums;  // the scanned varint lengths; null without varint sections
  GRADCOMP_HD void operator()(std::size_t) const {
    std::uint64_t at = message_header_bytes;
    std::uint64_t e = verdict != nullptr && *verdict != 0 ? static_cast<std::uint64_t>(*verdict) : 0;
    for (std::size_t i = 0; i < sections && e == 0; ++i) {
      if (s[i].status != 0) e = s[i].status;
      else if (s[i].index_error != no_error) e = s[i].index_error & 0xffffu;
      else if (s[i].value_error != no_error) e = s[i].value_error & 0xffffu;
      if (varint_sums != nullptr && s[i].dense == 0 && s[i].capacity != 0) {
        s[i].index_bytes = varint_sums[s[i].first_entry + s[i].capacity - 1] - varint_base(s[i], varint_sums);
        s[i].bytes += s[i].index_bytes;
      }
      s[i].at = at;
      at += s[i].bytes;
    }
    const std::uint64_t total = at + (checksum ? checksum_bytes : 0);
    outcome[0] = e == 0 ? total : 0;
    outcome[1] = e;
    if (e != 0) return;
    store_byte_le(out, magic_word, 4);
    store_byte_le(out + 4, format_version, 2);
    store_byte_le(out + 6, checksum ? flag_checksum : 0, 2);
    store_byte_le(out + 8, static_cast<std::uint32_t>(message_kind::gradients), 4);
    store_byte_le(out + 12, sections, 4);
    store_byte_le(out + 16, total, 8);
  }
};

// Per section: its header, and a packed section's scale.
template <class T>
struct write_headers {
  const section_entry<T>* s;
  std::byte* out;
  const std::uint64_t* outcome;
  std::uint32_t value_coding_code;
  std::uint32_t dense_coding_code;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (outcome[1] != 0) return;
    const section_entry<T>& e = s[i];
    std::byte* p = out + e.at;
    store_byte_le(p, e.bytes, 8);
    store_byte_le(p + 8, e.tensor, 4);
    store_byte_le(p + 12, e.numel, 4);
    store_byte_le(p + 16, e.kept, 4);
    p[20] = static_cast<std::byte>(e.dense != 0 ? static_cast<std::uint32_t>(index_coding::dense) : e.index_coding);
    p[21] = static_cast<std::byte>(e.packed != 0 ? e.packed : e.dense != 0 ? dense_coding_code : value_coding_code);
    p[22] = std::byte{0};
    p[23] = static_cast<std::byte>(section_role::gradient);
    store_byte_le(p + 24, e.index_bytes, 8);
    if (e.packed != 0) {  // scaled_sign: the first value's magnitude (0 when none); ternary: the largest
      const float scale = e.packed == ternary_code ? static_cast<float>(double_of_bits(e.top))
                          : e.kept == 0           ? 0.0f
                                                  : static_cast<float>(magnitude(e.values[0]));
      std::uint32_t bits = 0;
      memcpy(&bits, &scale, 4);
      store_byte_le(p + section_header_bytes + e.index_bytes, bits, 4);
    }
  }
};

// What the writers of a section's items (its entries, its bitmap bytes) share: the sections, which
// Of orders by their first item, the message, and the outcome of its layout.
template <class T, class Of>
struct item_writer {
  const section_entry<T>* s;
  std::size_t sections;
  std::byte* out;
  const std::uint64_t* outcome;
  // The section of item x, or null where the layout refused the message.
  GRADCOMP_HD const section_entry<T>* section(std::size_t x) const {
    return outcome[1] != 0 ? nullptr : s + section_of(s, sections, x, Of{});
  }
};

// Per entry: its raw_u32 index (raw sections) or its varint (delta_varint sections), and its
// value.
template <class T>
struct write_entries : item_writer<T, first_entry_of> {
  bool to_fp32;
  const std::uint64_t* varint_sums;  // null without varint sections
  GRADCOMP_HD void operator()(std::size_t x) const {
    const section_entry<T>* at = this->section(x);
    if (at == nullptr) return;
    const section_entry<T>& e = *at;
    const std::uint64_t j = x - e.first_entry;
    if (j >= e.kept) return;
    std::byte* payload = this->out + e.at + section_header_bytes;
    if (e.dense == 0 && e.index_coding == static_cast<std::uint32_t>(index_coding::raw_u32))
      store_byte_le(payload + 4 * j, e.indices[j], 4);
    if (e.dense == 0 && e.index_coding == static_cast<std::uint32_t>(index_coding::delta_varint)) {
      std::uint32_t d = gap_of(e, j);
      std::byte* p = payload + (varint_sums[x] - varint_base(e, varint_sums)) - varint_length(d);
      for (; d >= 0x80u; d >>= 7) *p++ = static_cast<std::byte>((d & 0x7fu) | 0x80u);
      *p = static_cast<std::byte>(d);
    }
    std::byte* values = payload + e.index_bytes;
    if (e.packed == scaled_sign_code) {  // each byte of signs with its first value (write_headers writes the scale)
      if (j % 8 != 0) return;
      unsigned byte = 0;
      for (std::uint64_t b = 0; b < 8 && j + b < e.kept; ++b) byte |= static_cast<unsigned>(sign_bit(e.values[j + b])) << b;
      values[4 + j / 8] = static_cast<std::byte>(byte);
    } else if (e.packed == ternary_code) {  // each byte of four codes with its first value
      if (j % 4 != 0) return;
      unsigned byte = 0;
      for (std::uint64_t b = 0; b < 4 && j + b < e.kept; ++b) {
        const T v = e.values[j + b];
        byte |= (v == T(0) ? 0u : v < T(0) ? 3u : 1u) << (2 * b);
      }
      values[4 + j / 4] = static_cast<std::byte>(byte);
    } else if (to_fp32) {
      const float f = static_cast<float>(e.values[j]);
      std::uint32_t bits = 0;
      memcpy(&bits, &f, 4);
      store_byte_le(values + 4 * j, bits, 4);
    } else {
      const double d = static_cast<double>(e.values[j]);
      std::uint64_t bits = 0;
      memcpy(&bits, &d, 8);
      store_byte_le(values + 8 * j, bits, 8);
    }
  }
};

// Per bitmap byte: its eight bits, from the kept positions in [8 b, 8 b + 8) (a binary search in
// the section's ascending indices).
template <class T>
struct write_bitmaps : item_writer<T, first_bitmap_byte_of> {
  GRADCOMP_HD void operator()(std::size_t x) const {
    const section_entry<T>* at = this->section(x);
    if (at == nullptr) return;
    const section_entry<T>& e = *at;
    if (e.dense != 0 || e.index_coding != static_cast<std::uint32_t>(index_coding::bitmap)) return;
    const std::uint64_t b = x - e.first_bitmap_byte;
    if (b >= e.index_bytes) return;
    std::uint64_t lo = 0, hi = e.kept;  // the first kept position at or above 8 b
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (e.indices[mid] < 8 * b) lo = mid + 1;
      else hi = mid;
    }
    unsigned bits = 0;
    for (std::uint64_t j = lo; j < e.kept && e.indices[j] < 8 * b + 8; ++j) bits |= 1u << (e.indices[j] - 8 * b);
    this->out[e.at + section_header_bytes + b] = static_cast<std::byte>(bits);
  }
};

// Bytes of a message body per thread of the checksum (a bitwise CRC: eight steps per byte),
// against the one thread that combines the chunks in order afterwards.
constexpr std::uint64_t crc_chunk_bytes = 1024;

// The CRC-32C of one chunk of the message body (before the trailer), where it lies in the body.
struct chunk_crc {
  const std::byte* out;
  const std::uint64_t* outcome;
  std::uint64_t chunk;
  std::uint32_t checksum_trailer;
  std::uint32_t* crcs;
  GRADCOMP_HD void operator()(std::size_t c) const {
    if (outcome[1] != 0) return;
    const std::uint64_t body = outcome[0] - checksum_trailer;
    const std::uint64_t first = c * chunk;
    if (first >= body) return;
    const std::uint64_t last = first + chunk < body ? first + chunk : body;
    std::uint32_t crc = 0xffffffffu;
    for (std::uint64_t i = first; i < last; ++i) {
      crc ^= static_cast<std::uint32_t>(out[i]);
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (gradcomp::detail::crc32c_polynomial & (0u - (crc & 1u)));
    }
    crcs[c] = ~crc;
  }
};

// The CRC-32C of `body` bytes (at least one) from the CRCs of its chunks of `chunk` bytes
// (chunk_crc), combined in order.
GRADCOMP_HD inline std::uint32_t combine_chunk_crcs(const std::uint32_t* crcs, std::uint64_t chunk,
                                                    std::uint64_t body) noexcept {
  const std::uint32_t whole = gradcomp::detail::crc32c_shift_factor(chunk);
  std::uint32_t crc = crcs[0];
  std::uint64_t c = 1;
  for (; (c + 1) * chunk <= body; ++c) crc = gradcomp::detail::crc32c_multiply_mod(whole, crc) ^ crcs[c];
  if (c * chunk < body) crc = gradcomp::detail::crc32c_combine(crc, crcs[c], body - c * chunk);
  return crc;
}

// One thread: the chunks' CRCs combined in order into the trailer.
struct write_trailer {
  std::byte* out;
  const std::uint64_t* outcome;
  std::uint64_t chunk;
  const std::uint32_t* crcs;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (outcome[1] != 0) return;
    const std::uint64_t body = outcome[0] - checksum_bytes;
    store_byte_le(out + body, combine_chunk_crcs(crcs, chunk, body), 4);
  }
};

}  // namespace detail

template <class T, class Backend>
class device_encoder;

/**
 * @brief Encodes gradient messages whose data lives in the Thrust backend's memory, on its system
 * (see the top of thrust/wire_encode.hpp).
 *
 * Set up once with the sections (their views and count locations stay valid while it is used);
 * each `encode` then writes the message of the data the views hold at that point in the stream's
 * order. Holds its own small tables in backend memory; `encode` allocates nothing.
 */
template <class T, class System>
class device_encoder<T, thrust_backend<System>> {
 public:
  using backend = thrust_backend<System>;                 ///< The backend.
  using space = thrust_space<System>;                     ///< Its memory space.
  using section = device_section<T, space>;               ///< A section's description.

  /**
   * @brief Checks the sections and options and uploads the section table (waits for the copy).
   * @throws gradcomp::error `invalid_argument` (an index coding other than raw_u32, bitmap or
   *         delta_varint, a value coding other than fp32 or fp64, a sparse section whose index
   *         and value views differ in length, a dense one whose values are not `numel`),
   *         `duplicate_tensor`, `size_overflow` (more than 2^32 - 1 sections).
   */
  device_encoder(const backend& on, span<const section> sections, const encode_options& opt)
      : opt_(opt), sections_(sections.size()) {
    using detail::section_entry;
    if (opt.indices != index_coding::raw_u32 && opt.indices != index_coding::bitmap &&
        opt.indices != index_coding::delta_varint)
      throw error(errc::invalid_argument, "device_encoder writes the raw_u32, bitmap or delta_varint index coding");
    if ((opt.values != value_coding::fp32 && opt.values != value_coding::fp64) ||
        (opt.dense_values != value_coding::fp32 && opt.dense_values != value_coding::fp64) ||
        opt.values != opt.dense_values)
      throw error(errc::invalid_argument, "device_encoder writes fp32 or fp64 values, the same for every section");
    if (sections.size() > std::numeric_limits<std::uint32_t>::max()) throw error(errc::size_overflow);
    std::vector<section_entry<T>> table(sections.size());
    std::uint64_t entries = 0, bitmap_bytes = 0, most = message_header_bytes + (opt.checksum ? checksum_bytes : 0);
    for (std::size_t i = 0; i < sections.size(); ++i) {
      const section& s = sections[i];
      for (std::size_t j = 0; j < i; ++j)
        if (sections[j].tensor == s.tensor) throw error(errc::duplicate_tensor);
      const std::uint64_t capacity = s.values.size();
      if (s.dense ? capacity != s.numel || !s.indices.empty() : s.indices.size() != capacity)
        throw error(errc::invalid_argument, "device_encoder: index and value views of different lengths");
      if (s.coding != value_coding::unspecified && s.coding != value_coding::scaled_sign &&
          s.coding != value_coding::ternary)
        throw error(errc::invalid_argument, "device_encoder: a section's own coding is scaled_sign, ternary or none");
      const bool sign = s.coding == value_coding::scaled_sign, ternary = s.coding == value_coding::ternary;
      if (ternary) ternary_ = true;
      section_entry<T>& e = table[i];
      e = section_entry<T>{};
      e.indices = s.indices.data();
      e.values = s.values.data();
      e.kept_at = s.dense ? nullptr : s.kept;
      e.capacity = capacity;
      e.first_entry = entries;
      e.first_bitmap_byte = bitmap_bytes;
      e.tensor = s.tensor;
      e.numel = s.numel;
      e.dense = s.dense ? 1 : 0;
      e.index_coding = static_cast<std::uint32_t>(opt.indices);
      e.packed = sign || ternary ? static_cast<std::uint32_t>(s.coding) : 0;
      entries += capacity;
      const bool bitmap = !s.dense && opt.indices == index_coding::bitmap;
      const std::uint64_t per_entry = opt.indices == index_coding::delta_varint ? 5 : 4;  // at most
      const std::uint64_t index_bytes = s.dense ? 0 : bitmap ? (std::uint64_t(s.numel) + 7) / 8 : per_entry * capacity;
      if (bitmap) bitmap_bytes += index_bytes;
      most += section_header_bytes + index_bytes +
              (sign ? 4 + (capacity + 7) / 8 : ternary ? 4 + (capacity + 3) / 4 : width() * capacity);
    }
    entries_ = entries;
    bitmap_bytes_ = bitmap_bytes;
    max_bytes_ = most;
    table_ = allocate_buffer<section_entry<T>>(on, table.size());
    const auto copied = copy_to_backend(on, span<const section_entry<T>>(table.data(), table.size()), table_.view());
    if (!copied) throw error(copied.error());
    if (opt.checksum) crcs_ = allocate_buffer<std::uint32_t>(on, chunks(max_bytes_));
    if (opt.indices == index_coding::delta_varint) varint_sums_ = allocate_buffer<std::uint64_t>(on, entries_);
    synchronize(on);
  }

  /**
   * @brief The encoder of a whole message with a verdict (`dgc_compressor::device_message()`):
   * where the verdict is not `errc::ok`, `encode`'s outcome is that error.
   */
  device_encoder(const backend& on, const device_message<T, space>& message, const encode_options& opt)
      : device_encoder(on, span<const section>(message.sections.data(), message.sections.size()), opt) {
    verdict_ = message.verdict;
  }

  /// The most bytes a message of these sections takes (every sparse section at its capacity).
  std::uint64_t max_message_bytes() const noexcept { return max_bytes_; }

  /**
   * @brief Issues the encoding of the sections' current data into `out` (at least
   * `max_message_bytes()` bytes) on `on`'s stream; returns without waiting.
   *
   * `outcome` (two values in backend memory) receives the message's length and `errc::ok`, or 0
   * and the verdict's error, or the error `wire::encode` reports for the same sections (`kept_exceeds_numel`,
   * `size_mismatch` for a count above the views' length, `index_out_of_range`,
   * `indices_not_increasing`, `non_finite_input`, `value_out_of_range`); then `out` holds no
   * message. Read it with `copy_to_host` and `synchronize`, or pass it to the next kernel.
   * @return `errc::output_too_small` or `errc::size_mismatch` (`outcome` shorter than 2),
   *         checked before anything is issued.
   */
  result<void> encode(const backend& on, span<std::byte, space> out, span<std::uint64_t, space> outcome) {
    using namespace detail;
    if (out.size() < max_bytes_) return fail(errc::output_too_small);
    if (outcome.size() < 2) return fail(errc::size_mismatch);
    const auto policy = gradcomp::detail::thrust_impl::exec<System>(on.stream);
    const thrust::counting_iterator<std::size_t> first(0);
    section_entry<T>* table = table_.view().data();
    std::byte* bytes = out.data();
    std::uint64_t* result = outcome.data();
    const bool to_fp32 = opt_.values == value_coding::fp32;
    const auto code = static_cast<std::uint32_t>(opt_.values);
    std::uint64_t* sums = varint_sums_.empty() ? nullptr : varint_sums_.view().data();
    if (sections_ != 0) thrust::for_each_n(policy, first, sections_, size_sections<T>{table, width()});
    if (ternary_) thrust::for_each_n(policy, first, entries_, ternary_tops<T>{table, sections_});
    if (entries_ != 0) thrust::for_each_n(policy, first, entries_, check_entries<T>{table, sections_, to_fp32});
    if (sums != nullptr) {
      thrust::for_each_n(policy, first, entries_, varint_lengths<T>{table, sections_, sums});
      thrust::inclusive_scan(policy, sums, sums + entries_, sums);
    }
    gradcomp::detail::thrust_impl::run_once<System>(
        on.stream, lay_out<T>{table, sections_, opt_.checksum, verdict_, bytes, result, sums});
    if (sections_ != 0)
      thrust::for_each_n(policy, first, sections_, write_headers<T>{table, bytes, result, code, code});
    if (entries_ != 0)
      thrust::for_each_n(policy, first, entries_, write_entries<T>{{table, sections_, bytes, result}, to_fp32, sums});
    if (bitmap_bytes_ != 0)
      thrust::for_each_n(policy, first, bitmap_bytes_, write_bitmaps<T>{{table, sections_, bytes, result}});
    if (opt_.checksum) {
      std::uint32_t* crcs = crcs_.view().data();
      thrust::for_each_n(policy, first, chunks(max_bytes_),
                         chunk_crc{bytes, result, crc_chunk, static_cast<std::uint32_t>(checksum_bytes), crcs});
      gradcomp::detail::thrust_impl::run_once<System>(on.stream, write_trailer{bytes, result, crc_chunk, crcs});
    }
    return {};
  }

 private:
  static constexpr std::uint64_t crc_chunk = detail::crc_chunk_bytes;
  static std::uint64_t chunks(std::uint64_t bytes) noexcept { return (bytes + crc_chunk - 1) / crc_chunk; }
  std::uint32_t width() const noexcept { return opt_.values == value_coding::fp32 ? 4 : 8; }

  encode_options opt_;
  const std::int32_t* verdict_ = nullptr;
  bool ternary_ = false;  // a section in the ternary coding: its largest magnitude is found first
  std::size_t sections_ = 0;
  std::uint64_t entries_ = 0;
  std::uint64_t bitmap_bytes_ = 0;
  std::uint64_t max_bytes_ = 0;
  backend_buffer<detail::section_entry<T>, backend> table_;
  backend_buffer<std::uint32_t, backend> crcs_;
  backend_buffer<std::uint64_t, backend> varint_sums_;  // delta_varint: each entry's length, scanned
};

}  // namespace wire
}  // namespace gradcomp
