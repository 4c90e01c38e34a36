/// @file thrust/wire_decode.hpp
/// @brief Decode-and-accumulate of gradient messages in the Thrust backend's memory, on its
/// system: the receiving side of an allgather whose buffers are on the device, with the guarantees
/// of `wire::decode_accumulate` and without the host waiting.
///
/// `wire::device_accumulator<T, thrust_backend<System>>` is set up once with the receiver's
/// accumulators (tensor t's dense accumulator is `dest[t]`, in backend memory), the most bytes
/// a message may have and the most messages one call takes. `accumulate(on, msg, outcome, length)`
/// then issues, on `on`'s stream, the whole decoding of one message held in backend memory: every
/// check of the host decoder (header, checksum, section headers, the rules of gradient messages,
/// each tensor against its accumulator, every index and value), then, only where all of them
/// passed, the addition of every section into its accumulator. The outcome (`errc::ok` and the
/// section count, or the error and 0) lands in backend memory. `accumulate_all` does the same for
/// N messages (an allgather's slots) in the same launches whatever N: every message checked at
/// once, then each element's sum formed in message order by the thread of the last message that
/// holds it, which finds the earlier messages' values by binary search, so the sums are bitwise
/// those of the messages added one after the other.
///
/// A message is applied completely or not at all, and nothing outside the message's bytes, the
/// accumulators and the decoder's own workspace is ever read or written, whatever the bytes say.
/// For every message the error is the one `wire::decode_accumulate` reports for the same bytes and
/// accumulators: the first fault in message order, a checksum mismatch before any other.
///
/// Every index coding and every value coding but `isgq` is decoded. Raw, bitmap and delta_varint
/// indices and the value codings are decoded by one thread per byte of the message, with two
/// scans (the positions of bitmap bits and varint ends, then the varint gaps). A section whose
/// codes have no boundaries a thread could find on its own is read in order by one thread:
/// Rice-coded indices, and `qsgd_gamma` values (Elias-gamma codes) with dense or raw_u32 indices,
/// the forms a QSGD sender writes (added by one thread per tensor, or with `check_sums` by one
/// thread, from the first message that has one); so a receiver on a device should ask its peers
/// for the parallel codings (`encode_options::device_readable` keeps `automatic` indices off
/// Rice and QSGD's values in the fixed-width `qsgd` form). An `isgq` section (ISGQ's factors,
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
  std::uint32_t tensor;       // the accumulator it adds into
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
  std::uint64_t structural;   // the message's errc before its sums are checked
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
      e.tensor = s.tensor;
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

// Per byte, after both scans (marks exclusive, gaps inclusive): the varint positions checked
// against numel and, where `take.entries`, every entry of a raw, bitmap, varint or dense section
// given to take(e, j, i) with its position.
template <class T, class Take>
struct take_entries {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  const std::uint32_t* marks;
  const std::uint32_t* sums;
  Take take;
  GRADCOMP_HD void operator()(std::size_t x) const {
    if (st->frame_error != 0) return;
    decode_entry<T>* found = section_at(table, st, x);
    if (found == nullptr) return;
    decode_entry<T>& e = *found;
    const bool sums_wanted = take.entries;
    const auto coding = static_cast<index_coding>(e.indices);
    if (x >= e.value_at) {
      if (coding != index_coding::dense || !sums_wanted) return;
      values_of_byte f{msg + e.value_at, x - e.value_at, e.kept};
      (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
      for (std::uint64_t j = f.first; j < f.first + f.count; ++j) take(e, j, j);
      return;
    }
    const std::uint64_t rel = x - e.index_at;
    const auto b = static_cast<unsigned>(msg[x]);
    if (coding == index_coding::raw_u32) {
      if (!sums_wanted || rel % 4 != 0 || static_cast<value_coding>(e.values) == value_coding::qsgd_gamma) return;
      const std::uint32_t i = gradcomp::detail::load_le<std::uint32_t>(msg + x);
      if (i < e.numel) take(e, rel / 4, i);
    } else if (coding == index_coding::bitmap) {
      if (!sums_wanted) return;
      std::uint64_t j = marks[x] - marks[e.index_at];
      for (unsigned bit = 0; bit < 8; ++bit) {
        const std::uint64_t i = 8 * rel + bit;
        if (((b >> bit) & 1u) == 0) continue;
        if (i >= e.numel || j >= e.kept) return;  // reported by check_bytes, decode_varints
        take(e, j++, i);
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
        atomic_min_u64(&e.index_error, error_key(j, errc::index_out_of_range));
        return;
      }
      if (sums_wanted) take(e, j, s - 1);
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

// Per section: the checks of a section that one thread reads in order, in one launch for every
// such section: Rice-coded indices (the first fault), the parameter block of qsgd_gamma values.
template <class T>
struct serial_sections {
  const std::byte* msg;
  decode_entry<T>* table;
  const decode_state* st;
  struct no_sink {
    GRADCOMP_HD void operator()(std::uint64_t, std::uint64_t) const {}
  };
  GRADCOMP_HD void operator()(std::size_t s) const {
    if (st->frame_error != 0 || s >= st->sound) return;
    decode_entry<T>& e = table[s];
    if (static_cast<value_coding>(e.values) == value_coding::qsgd_gamma) {
      // Its raw indices are checked by check_bytes; their faults come first.
      if (e.index_error == no_error) gamma_section<T, false>{msg, &e, false}.run();
      return;
    }
    if (static_cast<index_coding>(e.indices) != index_coding::rice) return;
    no_sink f;
    std::uint64_t at = 0;
    const errc r = decode_rice_serial(msg + e.index_at, e.index_bytes, e.parameter, e.numel, e.kept, at, f);
    if (r != errc::ok) e.index_error = error_key(at, r);
  }
};

// Whether section e is read by one thread in order (Rice indices, qsgd_gamma values).
template <class T>
GRADCOMP_HD bool is_serial(const decode_entry<T>& e) noexcept {
  return static_cast<index_coding>(e.indices) == index_coding::rice ||
         static_cast<value_coding>(e.values) == value_coding::qsgd_gamma;
}

// The message's verdict in the host decoder's order: the frame; the checksum; then per section
// in order its header and rules, its indices, its values, its sums (sum_fault(s): nonzero where
// section s makes a sum non-finite); the walk's end.
template <class T, class SumFault>
GRADCOMP_HD std::uint64_t message_verdict(const decode_state* st, decode_entry<T>* table, const std::byte* msg,
                                          const std::uint32_t* crcs, SumFault& sum_fault) {
  std::uint64_t e = st->frame_error;
  if (e == 0 && st->crc_closed == 0) {
    const std::uint64_t body = st->crc_length - checksum_bytes;  // at least a header
    if (gradcomp::detail::load_le<std::uint32_t>(msg + body) != combine_chunk_crcs(crcs, crc_chunk_bytes, body))
      e = static_cast<std::uint64_t>(errc::checksum_mismatch);
  }
  for (std::uint64_t s = 0; s < st->sound && e == 0; ++s) {
    if (table[s].index_error != no_error) e = table[s].index_error & 0xffffu;
    else if (table[s].value_error != no_error) e = table[s].value_error & 0xffffu;
    else if (sum_fault(s)) e = static_cast<std::uint64_t>(errc::state_overflow);
  }
  if (e == 0) e = st->walk_error;
  return e;
}

// The messages of one call and the decoder's workspace: message r at msgs + offsets[r] (null:
// r * stride), its length at lengths[r] (null: stride bytes), at most stride bytes and within
// the buffer; its table, state, checksum chunks and positions (`span` = stride + 1 per message:
// the scans' last slot) each in a slot of their own.
template <class T>
struct batch {
  const std::byte* msgs;
  std::uint64_t total;             // bytes at msgs
  const std::uint64_t* offsets;    // null: message r at r * stride
  std::uint64_t stride;            // the longest message, and the workspace per message
  const std::uint64_t* lengths;
  std::uint64_t messages;
  std::uint64_t count;  // accumulators
  std::uint64_t slots;  // table entries per message: count, at least 1
  std::uint64_t chunks;  // checksum chunks per message
  decode_entry<T>* tables;
  decode_state* states;
  std::uint32_t* marks;
  std::uint32_t* sums;
  std::uint32_t* crcs;
  std::uint32_t* section_of;  // [r * count + t]: message r's section of tensor t; none: no_section
  std::uint64_t* outcomes;
  std::uint64_t* limits;      // {first message with a serial section, first message added by serial_tail}
  GRADCOMP_HD std::uint64_t span() const { return stride + 1; }
  GRADCOMP_HD std::uint64_t offset(std::uint64_t r) const {
    const std::uint64_t at = offsets != nullptr ? offsets[r] : r * stride;
    return at < total ? at : total;
  }
  GRADCOMP_HD const std::byte* msg(std::uint64_t r) const { return msgs + offset(r); }
  // The bytes message r may have: its slot, within the buffer.
  GRADCOMP_HD std::uint64_t room(std::uint64_t r) const {
    const std::uint64_t left = total - offset(r);
    return left < stride ? left : stride;
  }
  GRADCOMP_HD decode_entry<T>* table(std::uint64_t r) const { return tables + r * slots; }
  GRADCOMP_HD std::uint32_t* marks_of(std::uint64_t r) const { return marks + r * span(); }
  GRADCOMP_HD std::uint32_t* sums_of(std::uint64_t r) const { return sums + r * span(); }
  GRADCOMP_HD const std::uint32_t* crcs_of(std::uint64_t r) const { return crcs + r * chunks; }
  GRADCOMP_HD void finish(std::uint64_t r, std::uint64_t verdict) const {
    states[r].verdict = verdict;
    outcomes[2 * r] = verdict;
    outcomes[2 * r + 1] = verdict == 0 ? states[r].sections : 0;
  }
};
constexpr std::uint32_t no_section = ~std::uint32_t(0);

// Value i of the section of tensor `t` in message r (a sound section of parallel codings), where
// it holds one: dense (value i), raw indices (a binary search of the payload), a bitmap (bit i
// and the set bits before it), varints (a binary search of the gap sums).
template <class T>
GRADCOMP_HD bool value_at(const batch<T>& b, std::uint64_t r, std::uint64_t t, std::uint64_t i, T& v) {
  const std::uint32_t s = b.section_of[r * b.count + t];
  if (s == no_section) return false;
  const decode_entry<T>& e = b.table(r)[s];
  const std::byte* msg = b.msg(r);
  const std::uint32_t* marks = b.marks_of(r);
  std::uint64_t j = 0;
  switch (static_cast<index_coding>(e.indices)) {
    case index_coding::dense: j = i; break;
    case index_coding::raw_u32: {
      std::uint64_t lo = 0, hi = e.kept;  // the first index at or above i
      while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (gradcomp::detail::load_le<std::uint32_t>(msg + e.index_at + 4 * mid) < i) lo = mid + 1;
        else hi = mid;
      }
      if (lo == e.kept || gradcomp::detail::load_le<std::uint32_t>(msg + e.index_at + 4 * lo) != i) return false;
      j = lo;
      break;
    }
    case index_coding::bitmap: {
      const std::uint64_t x = e.index_at + i / 8;
      const unsigned byte = static_cast<unsigned>(msg[x]), bit = static_cast<unsigned>(i % 8);
      if (((byte >> bit) & 1u) == 0) return false;
      j = (marks[x] - marks[e.index_at]) + popcount8(byte & ((1u << bit) - 1u));
      break;
    }
    case index_coding::delta_varint: {
      // The gap sums (sums[x] - base: index + 1 at a varint's last byte) grow along the payload.
      const std::uint32_t* sums = b.sums_of(r);
      const std::uint32_t base = sums[e.index_at - 1];
      std::uint64_t lo = e.index_at, hi = e.value_at;  // the first byte whose sum reaches i + 1
      while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (static_cast<std::uint64_t>(sums[mid] - base) < i + 1) lo = mid + 1;
        else hi = mid;
      }
      if (lo == e.value_at || static_cast<std::uint64_t>(sums[lo] - base) != i + 1) return false;
      j = marks[lo] - marks[e.index_at];
      break;
    }
    default: return false;  // serial codings: never looked up (serial_tail adds them)
  }
  value_of<T> f{msg + e.value_at, j};
  (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
  v = f.v;
  return true;
}

// Whether message r is among those added: with `settled`, its verdict is errc::ok; before the
// sums are checked, its structural verdict is.
template <class T>
GRADCOMP_HD bool is_added(const batch<T>& b, std::uint64_t r, bool settled) {
  return (settled ? b.states[r].verdict : b.states[r].structural) == 0;
}

// Element i of tensor t as the host decoder finds it before message r: `start` plus the values
// the messages added before r hold for it, in message order.
template <class T>
GRADCOMP_HD T sum_before(const batch<T>& b, std::uint64_t r, std::uint64_t t, std::uint64_t i, T start, bool settled) {
  for (std::uint64_t q = 0; q < r; ++q) {
    T v;
    if (is_added(b, q, settled) && value_at(b, q, t, i, v)) start += v;
  }
  return start;
}

// take_entries's work per entry of message r in one pass over every message's bytes, in the
// host decoder's order of additions: Check (check_sums) records the first entry of each section
// whose sum, after the messages structurally sound before r, is not finite; otherwise, the last
// message added that holds an element writes its sum, every added message's value in order.
template <class T, bool Check>
struct fold_entry {
  batch<T> b;
  std::uint64_t r;
  std::uint64_t end;  // messages r and later: serial_tail's
  bool entries = true;
  GRADCOMP_HD void operator()(decode_entry<T>& e, std::uint64_t j, std::uint64_t i) const {
    value_of<T> f{b.msg(r) + e.value_at, j};
    (void)visit_codec(gradcomp::detail::parallel_value_codecs{}, static_cast<value_coding>(e.values), f);
    if constexpr (Check) {
      const T sum = sum_before(b, r, e.tensor, i, e.acc[i], false) + f.v;
      if (!(sum - sum == T(0))) atomic_min_u64(&e.sum_error, error_key(j, errc::state_overflow));
    } else {
      for (std::uint64_t q = r + 1; q < end; ++q) {
        T later;
        if (is_added(b, q, true) && value_at(b, q, e.tensor, i, later)) return;  // q writes it
      }
      e.acc[i] = sum_before(b, r, e.tensor, i, e.acc[i], true) + f.v;
    }
  }
};

struct no_take {
  bool entries = false;
  template <class E>
  GRADCOMP_HD void operator()(E&, std::uint64_t, std::uint64_t) const {}
};

// The per-message kernels over every message of the batch at once: thread x of message r is
// thread r * span + x (per byte), r * slots + s (per section) or r (per message).
template <class T>
struct walk_all {
  batch<T> b;
  const accumulator_entry<T>* dest;
  std::uint8_t* seen;
  bool every_tensor;
  message_kind kind;
  GRADCOMP_HD void operator()(std::size_t r) const {
    if (r == 0) {
      b.limits[0] = b.messages;
      b.limits[1] = b.messages;
    }
    walk_headers<T>{b.msg(r), b.room(r), b.lengths != nullptr ? b.lengths + r : nullptr, dest, b.count,
                    seen + r * b.count, b.table(r), b.states + r, every_tensor, b.outcomes + 2 * r, kind}(0);
  }
};

template <class T>
struct crc_all {
  batch<T> b;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const std::uint64_t r = x / b.chunks;
    chunk_crc{b.msg(r), &b.states[r].crc_length, crc_chunk_bytes, static_cast<std::uint32_t>(checksum_bytes),
              b.crcs + r * b.chunks}(x % b.chunks);
  }
};

template <class T>
struct check_all {
  batch<T> b;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const std::uint64_t r = x / b.span();
    check_bytes<T>{b.msg(r), b.table(r), b.states + r, b.marks_of(r)}(x % b.span());
  }
};

template <class T>
struct varints_all {
  batch<T> b;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const std::uint64_t r = x / b.span();
    decode_varints<T>{b.msg(r), b.table(r), b.states + r, b.marks_of(r), b.sums_of(r)}(x % b.span());
  }
};

// Structure (Pass 0): every message; sums (Pass 1, check_sums): the messages before the first
// with a serial section; additions (Pass 2): those before limits[1] that are added.
template <class T, int Pass>
struct entries_all {
  batch<T> b;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const std::uint64_t r = x / b.span();
    const std::uint64_t local = x % b.span();
    if (Pass == 0) {
      take_entries<T, no_take>{b.msg(r), b.table(r), b.states + r, b.marks_of(r), b.sums_of(r), no_take{}}(local);
    } else if (Pass == 1) {
      if (r >= b.limits[0]) return;
      take_entries<T, fold_entry<T, true>>{b.msg(r), b.table(r), b.states + r, b.marks_of(r), b.sums_of(r),
                                           fold_entry<T, true>{b, r, b.limits[0]}}(local);
    } else {
      if (r >= b.limits[1] || b.states[r].verdict != 0) return;
      take_entries<T, fold_entry<T, false>>{b.msg(r), b.table(r), b.states + r, b.marks_of(r), b.sums_of(r),
                                            fold_entry<T, false>{b, r, b.limits[1]}}(local);
    }
  }
};

template <class T>
struct serial_all {
  batch<T> b;
  GRADCOMP_HD void operator()(std::size_t x) const {
    const std::uint64_t r = x / b.slots;
    serial_sections<T>{b.msg(r), b.table(r), b.states + r}(x % b.slots);
  }
};

// Per message: its verdict before the sums (structural), its sections by tensor where it is
// sound, and the first message with a section read in order (limits[0]).
template <class T>
struct decide_structure {
  batch<T> b;
  struct none {
    GRADCOMP_HD bool operator()(std::uint64_t) const { return false; }
  };
  GRADCOMP_HD void operator()(std::size_t r) const {
    decode_state& st = b.states[r];
    decode_entry<T>* table = b.table(r);
    none f;
    st.structural = message_verdict(&st, table, b.msg(r), b.crcs_of(r), f);
    st.verdict = st.structural;
    std::uint32_t* of = b.section_of + r * b.count;
    for (std::uint64_t t = 0; t < b.count; ++t) of[t] = no_section;
    bool serial = false;
    for (std::uint64_t s = 0; st.frame_error == 0 && s < st.sound; ++s) {
      if (st.structural == 0) of[table[s].tensor] = static_cast<std::uint32_t>(s);
      serial = serial || is_serial(table[s]);
    }
    if (serial) atomic_min_u64(&b.limits[0], r);
  }
};

// One thread, in message order: each verdict with its sums, up to the first message that
// serial_tail takes (limits[1]): the first with a serial section, or the one after a message
// refused for its sums alone (the later ones' sums were checked as if it were added).
template <class T>
struct decide_all {
  batch<T> b;
  bool check_sums;
  struct recorded {
    const decode_entry<T>* table;
    GRADCOMP_HD bool operator()(std::uint64_t s) const { return table[s].sum_error != no_error; }
  };
  GRADCOMP_HD void operator()(std::size_t) const {
    std::uint64_t limit = b.limits[0];
    for (std::uint64_t r = 0; r < b.messages; ++r) {
      if (!check_sums) {
        b.finish(r, b.states[r].structural);
        continue;
      }
      if (r >= limit) break;
      recorded f{b.table(r)};
      const std::uint64_t v = message_verdict(b.states + r, b.table(r), b.msg(r), b.crcs_of(r), f);
      b.finish(r, v);
      if (v != 0 && b.states[r].structural == 0) limit = r + 1;
    }
    b.limits[1] = limit;
  }
};

// A section read in order by one thread: with Apply its values added, else its sums checked
// (sum_error).
template <class T, bool Apply>
GRADCOMP_HD void serial_section(const std::byte* msg, decode_entry<T>& e) {
  if (static_cast<value_coding>(e.values) == value_coding::qsgd_gamma) {
    gamma_section<T, Apply>{msg, &e, !Apply}.run();
    return;
  }
  struct sink {
    const std::byte* msg;
    decode_entry<T>* e;
    GRADCOMP_HD void operator()(std::uint64_t j, std::uint64_t i) const { take<T, Apply>(msg, *e, j, i); }
  } f{msg, &e};
  const std::byte* p = msg + e.index_at;
  switch (static_cast<index_coding>(e.indices)) {
    case index_coding::dense:
      for (std::uint64_t j = 0; j < e.kept; ++j) f(j, j);
      return;
    case index_coding::raw_u32:
      for (std::uint64_t j = 0; j < e.kept; ++j) f(j, gradcomp::detail::load_le<std::uint32_t>(p + 4 * j));
      return;
    case index_coding::bitmap: {
      std::uint64_t j = 0;
      for (std::uint64_t i = 0; i < e.numel && j < e.kept; ++i)
        if (bit_at(p, i) != 0) f(j++, i);
      return;
    }
    case index_coding::delta_varint: {
      std::uint64_t at = 0, next = 0;
      for (std::uint64_t j = 0; j < e.kept; ++j) {
        std::uint64_t d = 0;
        unsigned shift = 0, byte = 0;
        do {
          byte = static_cast<unsigned>(p[at++]);
          d |= static_cast<std::uint64_t>(byte & 0x7fu) << shift;
          shift += 7;
        } while ((byte & 0x80u) != 0);
        f(j, next + d);
        next += d + 1;
      }
      return;
    }
    case index_coding::rice: {
      std::uint64_t at = 0;
      (void)decode_rice_serial(p, e.index_bytes, e.parameter, e.numel, e.kept, at, f);
      return;
    }
    default: return;
  }
}

// The messages from limits[1] on, in order, read by one thread each section: with check_sums,
// one thread decides and adds them one after the other, as the host decoder does; otherwise
// (verdicts already decided) thread t adds every one's section of tensor t.
template <class T>
struct serial_tail {
  batch<T> b;
  bool check_sums;
  struct checked {
    const std::byte* msg;
    decode_entry<T>* table;
    GRADCOMP_HD bool operator()(std::uint64_t s) const {
      table[s].sum_error = no_error;  // checked here against the sums as they now are
      serial_section<T, false>(msg, table[s]);
      return table[s].sum_error != no_error;
    }
  };
  GRADCOMP_HD void operator()(std::size_t t) const {
    for (std::uint64_t r = b.limits[1]; r < b.messages; ++r) {
      decode_state& st = b.states[r];
      decode_entry<T>* table = b.table(r);
      if (check_sums) {
        checked f{b.msg(r), table};
        b.finish(r, message_verdict(&st, table, b.msg(r), b.crcs_of(r), f));
        if (st.verdict == 0)
          for (std::uint64_t s = 0; s < st.sound; ++s) serial_section<T, true>(b.msg(r), table[s]);
      } else if (st.verdict == 0 && t < b.count) {
        const std::uint32_t s = b.section_of[r * b.count + t];
        if (s != no_section) serial_section<T, true>(b.msg(r), table[s]);
      }
    }
  }
};

}  // namespace detail

template <class T, class Backend>
class device_accumulator;

/**
 * @brief Decodes gradient messages held in the Thrust backend's memory and adds them into
 * accumulators there, on its system (see the top of thrust/wire_decode.hpp).
 *
 * Set up once with the accumulators (their memory stays valid while it is used), the most bytes
 * a message may have and the most messages one call takes; holds its workspace (about 8 bytes
 * per byte of that capacity and message, plus a table per tensor and message) in backend memory.
 * Each message is added completely or not at all, in the order given (`accumulate`: one after
 * the other; `accumulate_all`: the messages of one call in their order), so the sums are bitwise
 * those of `wire::decode_accumulate` called on the same messages in the same order.
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
   * @param max_message_bytes  the longest message (`accumulate_all`: the longest slot) taken.
   * @param opt  what it requires of a message beyond the rules every receiver applies.
   * @param dense_form  where not empty, the form of each accumulator's sections (host memory,
   *        read here): 1, the dense index coding only; 0, the sparse codings only; a section of
   *        the other form refuses the message with `errc::layout_mismatch`, as an `aggregator`
   *        refuses it. Empty: either form.
   * @param max_messages  the most messages one `accumulate_all` call takes (`accumulate`: 1).
   * @throws gradcomp::error `invalid_argument` (a capacity of 0 or above `capacity_limit`, no
   *         messages, or `dense_form` neither empty nor one per accumulator), `size_overflow`
   *         (2^32 accumulators or more, or a workspace beyond 2^63 bytes), `device_error`.
   */
  device_accumulator(const backend& on, span<const span<T, space>> dest, std::uint64_t max_message_bytes,
                     const device_accumulate_options& opt = {}, span<const std::uint8_t> dense_form = {},
                     std::uint64_t max_messages = 1)
      : opt_(opt), count_(dest.size()), capacity_(max_message_bytes), max_messages_(max_messages) {
    using detail::accumulator_entry;
    if (max_message_bytes == 0 || max_message_bytes > capacity_limit)
      throw error(errc::invalid_argument, "device_accumulator: a message capacity in [1, 2^29] bytes");
    if (max_messages == 0) throw error(errc::invalid_argument, "device_accumulator: at least one message");
    if (dest.size() > std::numeric_limits<std::uint32_t>::max() ||
        max_messages > (std::uint64_t(1) << 60) / (8 * (capacity_ + 1) + 64 * (count_ + 1)))
      throw error(errc::size_overflow);
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
    const std::uint64_t m = max_messages;
    seen_ = allocate_buffer<std::uint8_t>(on, m * slots);
    table_ = allocate_buffer<detail::decode_entry<T>>(on, m * slots);
    section_of_ = allocate_buffer<std::uint32_t>(on, m * slots);
    state_ = allocate_buffer<detail::decode_state>(on, m);
    marks_ = allocate_buffer<std::uint32_t>(on, m * (capacity_ + 1));
    sums_ = allocate_buffer<std::uint32_t>(on, m * (capacity_ + 1));
    crcs_ = allocate_buffer<std::uint32_t>(
        on, m * ((capacity_ + detail::crc_chunk_bytes - 1) / detail::crc_chunk_bytes));
    limits_ = allocate_buffer<std::uint64_t>(on, 2);
    synchronize(on);
  }

  /// The longest message `accumulate` takes (the longest slot of `accumulate_all`).
  std::uint64_t max_message_bytes() const noexcept { return capacity_; }
  /// The most messages one `accumulate_all` call takes.
  std::uint64_t max_messages() const noexcept { return max_messages_; }

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
    if (msg.size() > capacity_) return fail(errc::workspace_too_small);
    if (outcome.size() < 2) return fail(errc::size_mismatch);
    issue(on, msg.data(), msg.size(), nullptr, msg.size(), 1, length, outcome.data());
    return {};
  }

  /**
   * @brief Issues, on `on`'s stream, the decoding of every message in `msgs` and their addition
   * into the accumulators in their order, in a number of kernel launches that does not depend on
   * how many there are; returns without waiting.
   *
   * Message r is in slot r of `msgs` (bytes [r * stride, (r + 1) * stride): the receive buffer of
   * an allgather), `msgs.size() / stride` of them; its length is `lengths[r]` (backend memory,
   * read when the work runs) or, with `lengths` empty, the whole slot. `outcomes[2 r]` and
   * `outcomes[2 r + 1]` receive message r's outcome as `accumulate` gives it: the sums and every
   * outcome are those of `accumulate` called on the messages one after the other. Sections whose
   * codes one thread reads in order (Rice indices, `qsgd_gamma` values) are added, from the first
   * message that has one, by one thread per tensor (with `check_sums`, by one thread): device
   * receivers ask for the parallel codings.
   * @return `errc::workspace_too_small` (a stride above `max_message_bytes()`, or more messages
   *         than `max_messages()`) or `errc::size_mismatch` (a stride of 0, `msgs` not a whole
   *         number of slots, `lengths` neither empty nor one per message, `outcomes` shorter than
   *         two per message), checked before anything is issued.
   */
  result<void> accumulate_all(const backend& on, span<const std::byte, space> msgs, std::uint64_t stride,
                              span<const std::uint64_t, space> lengths, span<std::uint64_t, space> outcomes) {
    if (stride == 0 || msgs.size() % stride != 0) return fail(errc::size_mismatch);
    const std::uint64_t n = msgs.size() / stride;
    if (stride > capacity_ || n > max_messages_) return fail(errc::workspace_too_small);
    if ((!lengths.empty() && lengths.size() != n) || outcomes.size() < 2 * n) return fail(errc::size_mismatch);
    if (n != 0)
      issue(on, msgs.data(), msgs.size(), nullptr, stride, n, lengths.empty() ? nullptr : lengths.data(),
            outcomes.data());
    return {};
  }

  /**
   * @brief `accumulate_all` over messages anywhere in `msgs` (the receive buffer of an
   * allgatherv): message r is the `lengths[r]` bytes at `offsets[r]` (both in backend memory, read
   * when the work runs), one message per offset, in that order.
   *
   * A message that does not lie within `msgs`, or is longer than `max_message_bytes()`, gets the
   * outcome `errc::size_mismatch`, as a length beyond the buffer does for `accumulate`.
   * @return `errc::workspace_too_small` (more messages than `max_messages()`) or
   *         `errc::size_mismatch` (`lengths` not one per offset, `outcomes` shorter than two per
   *         message), checked before anything is issued.
   */
  result<void> accumulate_all(const backend& on, span<const std::byte, space> msgs,
                              span<const std::uint64_t, space> offsets, span<const std::uint64_t, space> lengths,
                              span<std::uint64_t, space> outcomes) {
    const std::uint64_t n = offsets.size();
    if (n > max_messages_) return fail(errc::workspace_too_small);
    if (lengths.size() != n || outcomes.size() < 2 * n) return fail(errc::size_mismatch);
    if (n != 0) issue(on, msgs.data(), msgs.size(), offsets.data(), capacity_, n, lengths.data(), outcomes.data());
    return {};
  }

 private:
  // Every check of every message, then the additions in message order (the kernels above, in a
  // fixed sequence of launches).
  void issue(const backend& on, const std::byte* msgs, std::uint64_t total, const std::uint64_t* offsets,
             std::uint64_t stride, std::uint64_t n, const std::uint64_t* lengths, std::uint64_t* outcomes) {
    using namespace detail;
    const auto policy = gradcomp::detail::thrust_impl::exec<System>(on.stream);
    const thrust::counting_iterator<std::size_t> first(0);
    const std::uint64_t slots = count_ == 0 ? 1 : count_;
    const batch<T> b{msgs,
                     total,
                     offsets,
                     stride,
                     lengths,
                     n,
                     count_,
                     slots,
                     (stride + crc_chunk_bytes - 1) / crc_chunk_bytes,
                     table_.view().data(),
                     state_.view().data(),
                     marks_.view().data(),
                     sums_.view().data(),
                     crcs_.view().data(),
                     section_of_.view().data(),
                     outcomes,
                     limits_.view().data()};
    const std::uint64_t bytes = n * b.span();
    thrust::for_each_n(policy, first, n,
                       walk_all<T>{b, dest_.view().data(), seen_.view().data(), opt_.every_tensor, opt_.kind});
    if (b.chunks != 0) thrust::for_each_n(policy, first, n * b.chunks, crc_all<T>{b});
    thrust::for_each_n(policy, first, bytes, check_all<T>{b});
    thrust::exclusive_scan(policy, b.marks, b.marks + bytes, b.marks);
    thrust::for_each_n(policy, first, bytes, varints_all<T>{b});
    thrust::inclusive_scan(policy, b.sums, b.sums + bytes, b.sums);
    thrust::for_each_n(policy, first, bytes, entries_all<T, 0>{b});
    thrust::for_each_n(policy, first, n * slots, serial_all<T>{b});
    thrust::for_each_n(policy, first, n, decide_structure<T>{b});
    if (opt_.check_sums) thrust::for_each_n(policy, first, bytes, entries_all<T, 1>{b});
    gradcomp::detail::thrust_impl::run_once<System>(on.stream, decide_all<T>{b, opt_.check_sums});
    thrust::for_each_n(policy, first, bytes, entries_all<T, 2>{b});
    thrust::for_each_n(policy, first, opt_.check_sums ? std::uint64_t(1) : slots, serial_tail<T>{b, opt_.check_sums});
  }

  device_accumulate_options opt_;
  std::uint64_t count_ = 0;
  std::uint64_t capacity_ = 0;
  std::uint64_t max_messages_ = 1;
  backend_buffer<detail::accumulator_entry<T>, backend> dest_;
  backend_buffer<std::uint8_t, backend> seen_;
  backend_buffer<detail::decode_entry<T>, backend> table_;
  backend_buffer<std::uint32_t, backend> section_of_;
  backend_buffer<detail::decode_state, backend> state_;
  backend_buffer<std::uint32_t, backend> marks_;
  backend_buffer<std::uint32_t, backend> sums_;
  backend_buffer<std::uint32_t, backend> crcs_;
  backend_buffer<std::uint64_t, backend> limits_;
};

}  // namespace wire
}  // namespace gradcomp
