/// @file thrust/wire_decode.hpp
/// @brief Decode-and-accumulate of gradient messages in the Thrust backend's memory, on its
/// system: the receiving side of an allgather whose buffers are on the device, with the guarantees
/// of `wire::decode_accumulate` and without the host waiting.
///
/// `wire::device_accumulator<T, thrust_backend<System>>` is set up once with the receiver's
/// accumulators (tensor t's dense accumulator is `dest[t]`, in backend memory) and the most bytes
/// a message may have. `accumulate(on, msg, outcome, length)` then issues, on `on`'s stream, the
/// whole decoding of one message held in backend memory: every check of the host decoder (header,
/// checksum, section headers, the rules of gradient messages, each tensor against its
/// accumulator, every index and value), then, only where all of them passed, the addition of
/// every section into its accumulator. The outcome (`errc::ok` and the section count, or the
/// error and 0) lands in backend memory.
///
/// A message is applied completely or not at all, and nothing outside the message's bytes, the
/// accumulators and the decoder's own workspace is ever read or written, whatever the bytes say.
/// For every message the error is the one `wire::decode_accumulate` reports for the same bytes and
/// accumulators: the first fault in message order, a checksum mismatch before any other.
///
/// Every index coding and every value coding but `isgq` is decoded. Raw, bitmap and delta_varint
/// indices and the value codings are decoded by one thread per byte of the message, with two
/// scans (the positions of bitmap bits and varint ends, then the varint gaps). A section whose
/// codes have no boundaries a thread could find on its own is decoded by one thread, in the same
/// launch for every such section: Rice-coded indices, and `qsgd_gamma` values (Elias-gamma codes,
/// read in order) with dense or raw_u32 indices, the forms a QSGD sender writes; so a receiver on
/// a device should ask its peers for the parallel codings (`encode_options::device_readable`
/// makes QSGD's senders write the fixed-width `qsgd` form). An `isgq` section (ISGQ's factors,
/// whose product is formed on the host), or a `qsgd_gamma` section with other indices, refuses
/// the message with `errc::unknown_coding`: peers send those to host receivers.
///
/// This header includes Thrust; the umbrella header does not include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>

#include "../config.hpp"
#include "../detail/bytes.hpp"
#include "../wire/codecs/values.hpp"
#include "../error.hpp"
#include "../backend_memory.hpp"
#include "../span.hpp"
#include "../wire/decode.hpp"
#include "../wire/format.hpp"
#include "system_backend.hpp"
#include "system_memory.hpp"
#include "wire_encode.hpp"

namespace gradcomp {
namespace wire {

/// What a `device_accumulator` requires of a message beyond the rules every receiver applies.
struct device_accumulate_options {
  /// Refuse (`errc::state_overflow`) a message that would make any sum non-finite, checked before
  /// anything is written (what `check_sums` asks of `decode_accumulate`).
  bool check_sums = false;
  /// Refuse (`errc::missing_tensor`) a message without a section for every accumulator.
  bool every_tensor = false;
  /// The kind of message accepted (others: `errc::layout_mismatch`): gradient messages, or a
  /// round of a multi-round method, whose sections are dense.
  message_kind kind = message_kind::gradients;
};

namespace detail {

// Calls f(Codec{}) for the codec of c (a functor: this runs on devices too); false when c is not
// a known coding.
template <class F, class... Codecs>
GRADCOMP_HD bool visit_codec(gradcomp::detail::codec_list<Codecs...>, value_coding c, F& f) {
  return ((c == Codecs::code ? (f(Codecs{}), true) : false) || ...);
}

// An accumulator as the kernels see it.
template <class T>
struct accumulator_entry {
  T* data;
  std::uint64_t size;
  std::uint32_t form;  // any_form, or 1 dense / 0 sparse sections only
};
constexpr std::uint32_t any_form = 2;

// A sound section header of the message being decoded, and what its checks found.
template <class T>
struct decode_entry {
  T* acc;
  std::uint64_t offset;       // of the section in the message
  std::uint64_t index_at;     // of its index payload
  std::uint64_t index_bytes;
  std::uint64_t value_at;     // of its value payload
  std::uint64_t value_bytes;
  std::uint32_t numel;
  std::uint32_t kept;
  std::uint32_t indices;      // index_coding
  std::uint32_t values;       // value_coding
  std::uint32_t parameter;    // Rice parameter
  std::uint64_t index_error;  // (position << 16) | errc of the first bad index; no_error: none
  std::uint64_t value_error;  // the same for the values
  std::uint64_t sum_error;    // the same for the sums (errc::state_overflow)
};

// The decoder's state for one message, in backend memory. `crc_length` and `crc_closed` sit
// side by side: the checksum kernel (chunk_crc) reads them as {message length, closed gate}.
struct decode_state {
  std::uint64_t crc_length;   // the message's length once its frame was found sound
  std::uint64_t crc_closed;   // 1 unless the frame is sound and the message has a checksum
  std::uint64_t frame_error;  // errc of the frame checks (nothing else is checked then)
  std::uint64_t walk_error;   // errc at the point where the header walk stopped; 0: none
  std::uint64_t sound;        // sections in the table: every one before the walk stopped
  std::uint64_t sections;     // the header's section count
  std::uint64_t verdict;      // the message's errc
};

GRADCOMP_HD inline std::uint64_t error_key(std::uint64_t position, errc e) noexcept {
  return (position << 16) | static_cast<std::uint64_t>(e);
}

// The index codings whose positions a thread reading a qsgd_gamma stream finds for itself.
GRADCOMP_HD inline bool gamma_positions(index_coding c) noexcept {
  return c == index_coding::dense || c == index_coding::raw_u32;
}

// One thread: the frame, the header and every section header in order, with the rules of
// gradient messages and the receiver's accumulators, as check_accumulate takes them, up to the
// first fault. Fills the table with the sound sections before it.
template <class T>
struct walk_headers {
  const std::byte* msg;
  std::uint64_t capacity;
  const std::uint64_t* length;  // null: the buffer's length
  const accumulator_entry<T>* dest;
  std::uint64_t count;
  std::uint8_t* seen;
  decode_entry<T>* table;
  decode_state* st;
  bool every_tensor;
  std::uint64_t* outcome;
  message_kind kind;

  GRADCOMP_HD errc walk(std::uint64_t size) const {
    message_header h;
    if (const errc e = parse_frame(msg, size, h); e != errc::ok) {
      st->frame_error = static_cast<std::uint64_t>(e);
      return errc::ok;
    }
    st->crc_length = h.total_bytes;
    st->crc_closed = h.has_checksum() ? 0 : 1;
    if (const errc e = parse_header_rest(msg, h); e != errc::ok) return e;
    if (h.kind != kind) return errc::layout_mismatch;
    st->sections = h.section_count;
    for (std::uint64_t t = 0; t < count; ++t) seen[t] = 0;
    const std::uint64_t end = h.total_bytes - (h.has_checksum() ? checksum_bytes : 0);
    std::uint64_t offset = message_header_bytes;
    for (std::uint32_t i = 0; i < h.section_count; ++i) {
      section_header s;
      if (const errc e = parse_section_header(msg, size, offset, end, s); e != errc::ok) return e;
      if (!gradcomp::detail::is_known_coding(gradcomp::detail::parallel_value_codecs{}, s.values) &&
          !(s.values == value_coding::qsgd_gamma && gamma_positions(s.indices)))
        return errc::unknown_coding;  // isgq, qsgd_gamma with other indices: read by the host decoder only
      if (s.role != section_role::gradient) return errc::section_not_allowed;
      if (is_round(kind) && s.indices != index_coding::dense) return errc::section_not_allowed;
      if (s.tensor < count && seen[s.tensor] != 0) return errc::duplicate_tensor;
      if (s.tensor >= count) return errc::unknown_tensor;
      if (dest[s.tensor].size < s.numel) return errc::output_too_small;
      if (dest[s.tensor].size > s.numel) return errc::size_mismatch;
      if (dest[s.tensor].form != any_form && (s.indices == index_coding::dense) != (dest[s.tensor].form == 1))
        return errc::layout_mismatch;
      seen[s.tensor] = 1;
      decode_entry<T>& e = table[st->sound++];  // at most `count` sections pass the checks above
      e.acc = dest[s.tensor].data;
      e.offset = offset;
      e.index_at = offset + section_header_bytes;
      e.index_bytes = s.index_bytes;
      e.value_at = e.index_at + s.index_bytes;
      e.value_bytes = s.value_bytes;
      e.numel = s.numel;
      e.kept = s.kept;
      e.indices = static_cast<std::uint32_t>(s.indices);
      e.values = static_cast<std::uint32_t>(s.values);
      e.parameter = s.index_parameter;
      e.index_error = no_error;
      e.value_error = no_error;
      e.sum_error = no_error;
      offset += s.bytes;
    }
    if (offset != end) return errc::trailing_bytes;
    if (every_tensor)
      for (std::uint64_t t = 0; t < count; ++t)
        if (seen[t] == 0) return errc::missing_tensor;
    return errc::ok;
  }

  GRADCOMP_HD void operator()(std::size_t) const {
    *st = decode_state{};
    st->crc_closed = 1;
    outcome[0] = static_cast<std::uint64_t>(errc::device_error);  // until the verdict
    outcome[1] = 0;
    const std::uint64_t size = length != nullptr ? *length : capacity;
    if (size > capacity) {
      st->frame_error = static_cast<std::uint64_t>(errc::size_mismatch);
      return;
    }
    st->walk_error = static_cast<std::uint64_t>(walk(size));
  }
};

// The sound section whose payloads hold byte x, or null.
template <class T>
GRADCOMP_HD decode_entry<T>* section_at(decode_entry<T>* table, const decode_state* st, std::uint64_t x) {
  const std::uint64_t n = st->sound;
  if (n == 0 || x < table[0].index_at) return nullptr;
  std::uint64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::uint64_t mid = hi - (hi - lo) / 2;
    if (table[mid].offset <= x) lo = mid;
    else hi = mid - 1;
  }
  decode_entry<T>& e = table[lo];
  return x >= e.index_at && x < e.value_at + e.value_bytes ? &e : nullptr;
}

GRADCOMP_HD inline unsigned popcount8(unsigned b) noexcept {
  b = b - ((b >> 1) & 0x55u);
  b = (b & 0x33u) + ((b >> 2) & 0x33u);
  return (b + (b >> 4)) & 0x0fu;
}

// The values whose bits start in byte `rel` of the value payload at `payload` (whose parameter
// block states its own length where the coding has a layout of its own): [first, first + count).
struct values_of_byte {
  const std::byte* payload;
  std::uint64_t rel;
  std::uint64_t kept;
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  template <class Codec>
  GRADCOMP_HD void operator()(Codec) {
    if constexpr (Codec::fixed_bytes != 0) {
      if (rel % Codec::fixed_bytes != 0) return;
      first = rel / Codec::fixed_bytes;
      count = 1;
    } else {
      const std::uint64_t block = Codec::parameter_bytes_at(payload);
      if (rel < block) return;
      const std::uint64_t w = Codec::value_bits_at(payload), r = rel - block;
      first = (8 * r + w - 1) / w;  // the first value whose first bit is at 8 r or later
      std::uint64_t end = (8 * r + 8 + w - 1) / w;
      end = end < kept ? end : kept;
      count = first < end ? end - first : 0;
    }
  }
};

// The checks of a value payload that belong to byte `rel` of it: check_parameters at its first
// byte, check_one for each value whose bits start in it. `key` orders the first failure as the
// host decoder finds it: the parameter block is position 0, value j position j + 1.
template <class T>
struct check_value_byte {
  const std::byte* payload;
  std::uint64_t rel;
  std::uint32_t kept;
  errc e = errc::ok;
  std::uint64_t key = 0;
  template <class Codec>
  GRADCOMP_HD void operator()(Codec) {
    if (rel == 0) e = Codec::check_parameters(payload, kept);
    if (e != errc::ok) return;
    values_of_byte of{payload, rel, kept};
    of(Codec{});
    for (std::uint64_t j = of.first; j < of.first + of.count; ++j) {
      e = Codec::template check_one<T>(payload, static_cast<std::size_t>(j));
      if (e != errc::ok) {
        key = j + 1;
        return;
      }
    }
  }
};

template <class T>
struct value_of {
  const std::byte* payload;
  std::uint64_t j;
  T v = T(0);
  template <class Codec>
  GRADCOMP_HD void operator()(Codec) {
    v = Codec::template value<T>(payload, static_cast<std::size_t>(j));
  }
};

// Adds (Apply) or checks the sum of (with check_sums) value j of section e at position i.
template <class T, bool Apply>
GRADCOMP_HD void take(const std::byte* msg, decode_entry<T>& e, std::uint64_t j, std::uint64_t i) {
  value_of<T> f{msg + e.value_at, j};
  (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
  if (Apply) {
    e.acc[i] += f.v;
  } else {
    const T sum = e.acc[i] + f.v;
    if (!(sum - sum == T(0))) atomic_min_u64(&e.sum_error, error_key(j, errc::state_overflow));
  }
}

// Per byte of the message (and one more): the checks that need no scan (raw indices, bitmap
// padding, every value), and the count each byte adds to the position scan (the set bits of a
// bitmap byte, 1 for the last byte of a varint).
template <class T>
struct check_bytes {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  std::uint32_t* marks;
  GRADCOMP_HD void operator()(std::size_t x) const {
    marks[x] = 0;
    if (st->frame_error != 0) return;
    decode_entry<T>* found = section_at(table, st, x);
    if (found == nullptr) return;
    decode_entry<T>& e = *found;
    const auto b = static_cast<unsigned>(msg[x]);
    if (x >= e.value_at) {
      check_value_byte<T> f{msg + e.value_at, x - e.value_at, e.kept};
      (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
      if (f.e != errc::ok) atomic_min_u64(&e.value_error, error_key(f.key, f.e));
      return;
    }
    const std::uint64_t rel = x - e.index_at;
    switch (static_cast<index_coding>(e.indices)) {
      case index_coding::raw_u32: {
        if (rel % 4 != 0) return;
        const std::uint64_t j = rel / 4;
        const std::uint32_t i = gradcomp::detail::load_le<std::uint32_t>(msg + x);
        if (i >= e.numel)
          atomic_min_u64(&e.index_error, error_key(j, errc::index_out_of_range));
        else if (j > 0 && i <= gradcomp::detail::load_le<std::uint32_t>(msg + x - 4))
          atomic_min_u64(&e.index_error, error_key(j, errc::indices_not_increasing));
        return;
      }
      case index_coding::bitmap: {
        marks[x] = popcount8(b);
        const unsigned valid = e.numel % 8;
        if (rel == e.index_bytes - 1 && valid != 0 && (b >> valid) != 0)
          atomic_min_u64(&e.index_error, error_key(0, errc::malformed_payload));
        return;
      }
      case index_coding::delta_varint: marks[x] = (b & 0x80u) == 0 ? 1u : 0u; return;
      default: return;  // rice: serial_sections
    }
  }
};

// Per byte, after the scan of `marks` (exclusive): bitmap and varint sections hold as many
// positions as they keep; each varint is decoded and checked, and its gap + 1 written at its last
// byte (0 at every other byte, and for a varint found faulty) for the scan of the gaps.
template <class T>
struct decode_varints {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  const std::uint32_t* marks;
  std::uint32_t* gaps;
  GRADCOMP_HD void operator()(std::size_t x) const {
    gaps[x] = 0;
    if (st->frame_error != 0) return;
    decode_entry<T>* found = section_at(table, st, x);
    if (found == nullptr || x >= found->value_at) return;
    decode_entry<T>& e = *found;
    const auto coding = static_cast<index_coding>(e.indices);
    if (coding != index_coding::bitmap && coding != index_coding::delta_varint) return;
    const std::uint64_t before = marks[x] - marks[e.index_at];  // positions ended before byte x
    if (x == e.index_at) {
      const std::uint64_t all = marks[e.value_at] - marks[e.index_at];
      if (coding == index_coding::bitmap) {
        if (all != e.kept) atomic_min_u64(&e.index_error, error_key(0, errc::malformed_payload));
        return;
      }
      // Fewer varints than kept: the decoder runs out at the first one missing; more, or bytes
      // after the last: it stops with bytes left once it has read `kept`.
      const bool tail = (static_cast<unsigned>(msg[e.value_at - 1]) & 0x80u) != 0;
      if (all != e.kept || tail)
        atomic_min_u64(&e.index_error, error_key(all < e.kept ? all : e.kept, errc::malformed_payload));
    }
    const auto last = static_cast<unsigned>(msg[x]);
    if (coding != index_coding::delta_varint || (last & 0x80u) != 0 || before >= e.kept) return;
    // The varint's bytes: back to the end of the previous one or the payload's start, at most
    // five (a sixth makes it too long).
    std::uint64_t first = x;
    while (first > e.index_at && x - first < 4 && (static_cast<unsigned>(msg[first - 1]) & 0x80u) != 0) --first;
    const std::uint64_t len = x - first + 1;
    const bool too_long = len == 5 && first > e.index_at && (static_cast<unsigned>(msg[first - 1]) & 0x80u) != 0;
    if (too_long || (len == 5 && (last & 0xf0u) != 0) || (len > 1 && last == 0)) {
      atomic_min_u64(&e.index_error, error_key(before, errc::malformed_payload));
      return;
    }
    std::uint64_t d = 0;
    for (std::uint64_t k = 0; k < len; ++k) d |= static_cast<std::uint64_t>(static_cast<unsigned>(msg[first + k]) & 0x7fu) << (7 * k);
    if (d >= e.numel) {
      atomic_min_u64(&e.index_error, error_key(before, errc::index_out_of_range));
      return;
    }
    gaps[x] = static_cast<std::uint32_t>(d + 1);
  }
};

// Per byte, after both scans (marks exclusive, gaps inclusive): every entry of a raw, bitmap,
// varint or dense section with its position. Checking (Apply false): the varint positions against
// numel and, with check_sums, every sum. Applying (once the verdict is errc::ok): the additions.
template <class T, bool Apply>
struct take_entries {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  const std::uint32_t* marks;
  const std::uint32_t* sums;
  bool check_sums;
  GRADCOMP_HD void operator()(std::size_t x) const {
    if (st->frame_error != 0 || (Apply && st->verdict != 0)) return;
    decode_entry<T>* found = section_at(table, st, x);
    if (found == nullptr) return;
    decode_entry<T>& e = *found;
    const bool sums_wanted = Apply || check_sums;
    const auto coding = static_cast<index_coding>(e.indices);
    if (x >= e.value_at) {
      if (coding != index_coding::dense || !sums_wanted) return;
      values_of_byte f{msg + e.value_at, x - e.value_at, e.kept};
      (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
      for (std::uint64_t j = f.first; j < f.first + f.count; ++j) take<T, Apply>(msg, e, j, j);
      return;
    }
    const std::uint64_t rel = x - e.index_at;
    const auto b = static_cast<unsigned>(msg[x]);
    if (coding == index_coding::raw_u32) {
      if (!sums_wanted || rel % 4 != 0 || static_cast<value_coding>(e.values) == value_coding::qsgd_gamma) return;
      const std::uint32_t i = gradcomp::detail::load_le<std::uint32_t>(msg + x);
      if (i < e.numel) take<T, Apply>(msg, e, rel / 4, i);
    } else if (coding == index_coding::bitmap) {
      if (!sums_wanted) return;
      std::uint64_t j = marks[x] - marks[e.index_at];
      for (unsigned bit = 0; bit < 8; ++bit) {
        const std::uint64_t i = 8 * rel + bit;
        if (((b >> bit) & 1u) == 0) continue;
        if (i >= e.numel || j >= e.kept) return;  // reported by check_bytes, decode_varints
        take<T, Apply>(msg, e, j++, i);
      }
    } else if (coding == index_coding::delta_varint) {
      if ((b & 0x80u) != 0 || sums[x] == sums[x - 1]) return;  // not a varint's end, or faulty
      const std::uint64_t j = marks[x] - marks[e.index_at];
      if (j >= e.kept) return;
      // Gap sums within the section, modulo 2^32: each gap + 1 is below 2^32, so the sum of the
      // first varint beyond numel either exceeds numel or wraps below its predecessor's.
      const std::uint32_t base = sums[e.index_at - 1];
      const std::uint32_t s = sums[x] - base, prev = sums[x - 1] - base;
      if (s <= prev || static_cast<std::uint64_t>(s) - 1 >= e.numel) {
        if (!Apply) atomic_min_u64(&e.index_error, error_key(j, errc::index_out_of_range));
        return;
      }
      if (sums_wanted) take<T, Apply>(msg, e, j, s - 1);
    }
  }
};

GRADCOMP_HD inline unsigned bit_at(const std::byte* p, std::uint64_t b) noexcept {
  return (static_cast<unsigned>(p[b / 8]) >> (b % 8)) & 1u;
}

// Reads a Rice-coded index payload bit by bit, as decode_rice does (the same verdict: the first
// fault, at the same position), calling sink(j, i) for each position.
template <class Sink>
GRADCOMP_HD errc decode_rice_serial(const std::byte* p, std::uint64_t bytes, unsigned r, std::uint32_t n,
                                    std::uint32_t k, std::uint64_t& at, Sink& sink) {
  const std::uint64_t total = 8 * bytes;
  const std::uint64_t max_quotient = static_cast<std::uint64_t>(n) >> r;
  std::uint64_t bit = 0, next = 0;
  for (std::uint32_t j = 0; j < k; ++j) {
    at = j;
    std::uint64_t q = 0;
    for (;;) {
      if (bit >= total) return errc::malformed_payload;
      if (bit_at(p, bit++) == 0) break;
      if (++q > max_quotient) return errc::index_out_of_range;
    }
    if (total - bit < r) return errc::malformed_payload;
    std::uint64_t low = 0;
    for (unsigned b = 0; b < r; ++b) low |= static_cast<std::uint64_t>(bit_at(p, bit++)) << b;
    const std::uint64_t i = next + ((q << r) | low);
    if (i >= n) return errc::index_out_of_range;
    sink(j, i);
    next = i + 1;
  }
  at = k;
  if (total - bit >= 8) return errc::malformed_payload;
  for (; bit < total; ++bit)
    if (bit_at(p, bit) != 0) return errc::malformed_payload;
  return errc::ok;
}

// A qsgd_gamma section read in order by one thread: value j (0 unless the stream holds it) at
// position j (dense) or at its raw_u32 index. Checking records the payload's fault as the host's
// check_parameters finds it and, with check_sums, the first sum that is not finite; applying adds
// every value, the zeros too, as the host decoder does.
template <class T, bool Apply>
struct gamma_section {
  const std::byte* msg;
  decode_entry<T>* e;
  bool check_sums;
  GRADCOMP_HD std::uint64_t position(std::uint64_t j) const {
    if (static_cast<index_coding>(e->indices) == index_coding::dense) return j;
    return gradcomp::detail::load_le<std::uint32_t>(msg + e->index_at + 4 * j);
  }
  // Adds (Apply) or checks value j; false once a check failed.
  GRADCOMP_HD bool take(std::uint64_t j, T v) const {
    const std::uint64_t i = position(j);
    if (i >= e->numel) return true;  // reported by check_bytes
    if (Apply) {
      e->acc[i] += v;
      return true;
    }
    const T sum = e->acc[i] + v;
    if (sum - sum == T(0)) return true;
    e->sum_error = error_key(j, errc::state_overflow);
    return false;
  }
  struct sink {
    const gamma_section* s;
    const std::byte* payload;
    std::uint64_t* next;  // values below it are taken
    bool* going;
    GRADCOMP_HD void operator()(std::uint64_t j, std::uint32_t level, bool negative, float norm) const {
      using gradcomp::detail::qsgd_gamma_codec;
      for (; *going && *next < j; ++*next) *going = s->take(*next, T(0));
      if (*going) *going = s->take(j, gradcomp::detail::qsgd_value<T>(norm, level, qsgd_gamma_codec::levels(payload), negative));
      ++*next;
    }
  };
  GRADCOMP_HD void run() const {
    using gradcomp::detail::qsgd_gamma_codec;
    const std::byte* payload = msg + e->value_at;
    if (!Apply) {
      const errc fault = qsgd_gamma_codec::check_parameters(payload, e->kept);
      if (fault != errc::ok) {
        e->value_error = error_key(0, fault);
        return;
      }
      if (!check_sums) return;
    }
    std::uint64_t next = 0;
    bool going = true;
    (void)qsgd_gamma_codec::walk(payload, e->kept, sink{this, payload, &next, &going});
    for (; going && next < e->kept; ++next) going = take(next, T(0));
  }
};

// Per section: a section that one thread reads in order, in one launch for every such section:
// Rice-coded indices (checking records the first fault and, with check_sums, the sums; applying
// adds), qsgd_gamma values (gamma_section).
template <class T, bool Apply>
struct serial_sections {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  bool check_sums;
  struct sink {
    const std::byte* msg;
    decode_entry<T>* e;
    bool sums_wanted;
    GRADCOMP_HD void operator()(std::uint64_t j, std::uint64_t i) const {
      if (sums_wanted) take<T, Apply>(msg, *e, j, i);
    }
  };
  GRADCOMP_HD void operator()(std::size_t s) const {
    if (st->frame_error != 0 || s >= st->sound || (Apply && st->verdict != 0)) return;
    decode_entry<T>& e = table[s];
    if (static_cast<value_coding>(e.values) == value_coding::qsgd_gamma) {
      // Its raw indices are checked by check_bytes; their faults come first.
      if (Apply || e.index_error == no_error) gamma_section<T, Apply>{msg, &e, check_sums}.run();
      return;
    }
    if (static_cast<index_coding>(e.indices) != index_coding::rice) return;
    sink f{msg, &e, Apply || check_sums};
    std::uint64_t at = 0;
    const errc r = decode_rice_serial(msg + e.index_at, e.index_bytes, e.parameter, e.numel, e.kept, at, f);
    if (!Apply && r != errc::ok) e.index_error = error_key(at, r);
  }
};

// One thread: the message's verdict, in the host decoder's order (the frame; the checksum; then
// per section in order its header and rules, its indices, its values, its sums; the walk's
// end), and the outcome.
template <class T>
struct decide_message {
  decode_state* st;
  const decode_entry<T>* table;
  const std::byte* msg;
  const std::uint32_t* crcs;
  std::uint64_t* outcome;
  GRADCOMP_HD void operator()(std::size_t) const {
    std::uint64_t e = st->frame_error;
    if (e == 0 && st->crc_closed == 0) {
      const std::uint64_t body = st->crc_length - checksum_bytes;  // at least a header
      if (gradcomp::detail::load_le<std::uint32_t>(msg + body) != combine_chunk_crcs(crcs, crc_chunk_bytes, body))
        e = static_cast<std::uint64_t>(errc::checksum_mismatch);
    }
    for (std::uint64_t s = 0; s < st->sound && e == 0; ++s) {
      if (table[s].index_error != no_error) e = table[s].index_error & 0xffffu;
      else if (table[s].value_error != no_error) e = table[s].value_error & 0xffffu;
      else if (table[s].sum_error != no_error) e = table[s].sum_error & 0xffffu;
    }
    if (e == 0) e = st->walk_error;
    st->verdict = e;
    outcome[0] = e;
    outcome[1] = e == 0 ? st->sections : 0;
  }
};

}  // namespace detail

template <class T, class Backend>
class device_accumulator;

/**
 * @brief Decodes gradient messages held in the Thrust backend's memory and adds them into
 * accumulators there, on its system (see the top of thrust/wire_decode.hpp).
 *
 * Set up once with the accumulators (their memory stays valid while it is used) and the most
 * bytes a message may have; holds its workspace (about 8 bytes per byte of that capacity, plus a
 * table per tensor) in backend memory. Messages given to `accumulate` one after the other are
 * added in that order, each completely or not at all, so the sums are bitwise those of
 * `wire::decode_accumulate` called on the same messages in the same order.
 */
template <class T, class System>
class device_accumulator<T, thrust_backend<System>> {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "device_accumulator adds into float or double accumulators");

 public:
  using backend = thrust_backend<System>;  ///< The backend.
  using space = thrust_space<System>;      ///< Its memory space.

  /// Largest capacity: the scans count positions in 32-bit words (at most 8 per byte).
  static constexpr std::uint64_t capacity_limit = std::uint64_t(1) << 29;

  /**
   * @brief Uploads the accumulators' table and allocates the workspace (waits for the copy).
   * @param dest  tensor t's accumulator is `dest[t]`, of exactly its tensor's element count.
   * @param max_message_bytes  the longest message `accumulate` will be given.
   * @param opt  what it requires of a message beyond the rules every receiver applies.
   * @param dense_form  where not empty, the form of each accumulator's sections (host memory,
   *        read here): 1, the dense index coding only; 0, the sparse codings only; a section of
   *        the other form refuses the message with `errc::layout_mismatch`, as an `aggregator`
   *        refuses it. Empty: either form.
   * @throws gradcomp::error `invalid_argument` (a capacity of 0 or above `capacity_limit`, or
   *         `dense_form` neither empty nor one per accumulator), `size_overflow` (2^32
   *         accumulators or more), `device_error`.
   */
  device_accumulator(const backend& on, span<const span<T, space>> dest, std::uint64_t max_message_bytes,
                     const device_accumulate_options& opt = {}, span<const std::uint8_t> dense_form = {})
      : opt_(opt), count_(dest.size()), capacity_(max_message_bytes) {
    using detail::accumulator_entry;
    if (max_message_bytes == 0 || max_message_bytes > capacity_limit)
      throw error(errc::invalid_argument, "device_accumulator: a message capacity in [1, 2^29] bytes");
    if (dest.size() > std::numeric_limits<std::uint32_t>::max()) throw error(errc::size_overflow);
    std::vector<accumulator_entry<T>> table(dest.size());
    if (!dense_form.empty() && dense_form.size() != dest.size())
      throw error(errc::invalid_argument, "device_accumulator: one form per accumulator");
    for (std::size_t t = 0; t < dest.size(); ++t) {
      const std::uint32_t form = dense_form.empty() ? detail::any_form : (dense_form[t] != 0 ? 1u : 0u);
      table[t] = accumulator_entry<T>{dest[t].data(), dest[t].size(), form};
    }
    dest_ = allocate_buffer<accumulator_entry<T>>(on, table.size());
    const auto copied =
        copy_to_backend(on, span<const accumulator_entry<T>>(table.data(), table.size()), dest_.view());
    if (!copied) throw error(copied.error());
    const std::size_t slots = dest.size() == 0 ? 1 : dest.size();
    seen_ = allocate_buffer<std::uint8_t>(on, slots);
    table_ = allocate_buffer<detail::decode_entry<T>>(on, slots);
    state_ = allocate_buffer<detail::decode_state>(on, 1);
    marks_ = allocate_buffer<std::uint32_t>(on, capacity_ + 1);
    sums_ = allocate_buffer<std::uint32_t>(on, capacity_);
    crcs_ = allocate_buffer<std::uint32_t>(on, (capacity_ + detail::crc_chunk_bytes - 1) / detail::crc_chunk_bytes);
    synchronize(on);
  }

  /// The longest message `accumulate` takes.
  std::uint64_t max_message_bytes() const noexcept { return capacity_; }

  /**
   * @brief Issues, on `on`'s stream, the decoding of the message in `msg` and its addition into
   * the accumulators; returns without waiting.
   *
   * `length`, where not null, is where the message's length is (one value in backend memory,
   * read when the work runs: the size a receive reported); otherwise the message is all of `msg`.
   * `outcome` (two values in backend memory) receives `errc::ok` and the message's section count,
   * or the error and 0, the accumulators then unchanged: any error of `wire::decode_accumulate`
   * for the same bytes, `errc::state_overflow` (with `check_sums`), `errc::missing_tensor` (with
   * `every_tensor`), or `errc::size_mismatch` (a length beyond `msg`).
   * @return `errc::workspace_too_small` (`msg` longer than `max_message_bytes()`) or
   *         `errc::size_mismatch` (`outcome` shorter than 2), checked before anything is issued.
   */
  result<void> accumulate(const backend& on, span<const std::byte, space> msg, span<std::uint64_t, space> outcome,
                          const std::uint64_t* length = nullptr) {
    using namespace detail;
    if (msg.size() > capacity_) return fail(errc::workspace_too_small);
    if (outcome.size() < 2) return fail(errc::size_mismatch);
    const auto policy = gradcomp::detail::thrust_impl::exec<System>(on.stream);
    const thrust::counting_iterator<std::size_t> first(0);
    const std::byte* bytes = msg.data();
    const std::uint64_t n = msg.size();
    decode_entry<T>* table = table_.view().data();
    decode_state* st = state_.view().data();
    std::uint32_t* marks = marks_.view().data();
    std::uint32_t* sums = sums_.view().data();
    std::uint32_t* crcs = crcs_.view().data();
    gradcomp::detail::thrust_impl::run_once<System>(
        on.stream, walk_headers<T>{bytes, n, length, dest_.view().data(), count_, seen_.view().data(), table, st,
                                   opt_.every_tensor, outcome.data(), opt_.kind});
    const std::uint64_t chunks = (n + crc_chunk_bytes - 1) / crc_chunk_bytes;
    if (chunks != 0)
      thrust::for_each_n(policy, first, chunks,
                         chunk_crc{bytes, &st->crc_length, crc_chunk_bytes, static_cast<std::uint32_t>(checksum_bytes), crcs});
    thrust::for_each_n(policy, first, n + 1, check_bytes<T>{bytes, table, st, marks});
    thrust::exclusive_scan(policy, marks, marks + n + 1, marks);
    if (n != 0) {
      thrust::for_each_n(policy, first, n, decode_varints<T>{bytes, table, st, marks, sums});
      thrust::inclusive_scan(policy, sums, sums + n, sums);
      thrust::for_each_n(policy, first, n, take_entries<T, false>{bytes, table, st, marks, sums, opt_.check_sums});
    }
    const std::size_t slots = count_ == 0 ? 1 : count_;
    thrust::for_each_n(policy, first, slots, serial_sections<T, false>{bytes, table, st, opt_.check_sums});
    gradcomp::detail::thrust_impl::run_once<System>(on.stream,
                                                    decide_message<T>{st, table, bytes, crcs, outcome.data()});
    if (n != 0) thrust::for_each_n(policy, first, n, take_entries<T, true>{bytes, table, st, marks, sums, false});
    thrust::for_each_n(policy, first, slots, serial_sections<T, true>{bytes, table, st, false});
    return {};
  }

 private:
  device_accumulate_options opt_;
  std::uint64_t count_ = 0;
  std::uint64_t capacity_ = 0;
  backend_buffer<detail::accumulator_entry<T>, backend> dest_;
  backend_buffer<std::uint8_t, backend> seen_;
  backend_buffer<detail::decode_entry<T>, backend> table_;
  backend_buffer<detail::decode_state, backend> state_;
  backend_buffer<std::uint32_t, backend> marks_;
  backend_buffer<std::uint32_t, backend> sums_;
  backend_buffer<std::uint32_t, backend> crcs_;
};

}  // namespace wire
}  // namespace gradcomp
