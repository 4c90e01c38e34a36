// Index codings of the wire format: exact sizes, encoders and validating decoders. Positions are
// strictly increasing and below numel. Gap codings code d_0 = i_0 and d_j = i_j - i_{j-1} - 1.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../config.hpp"
#include "kernels.hpp"
#include "../../error.hpp"
#include "../../span.hpp"
#include "../../detail/bytes.hpp"

namespace gradcomp {
namespace detail {

inline int count_trailing_zeros64(std::uint64_t x) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return x == 0 ? 64 : __builtin_ctzll(x);
#else
  int n = 0;
  while (n < 64 && ((x >> n) & 1u) == 0) ++n;
  return n;
#endif
}

// Sizes of every coding for one index list, gathered in one pass, with the list's verdict:
// errc::ok, or the first index_out_of_range / indices_not_increasing in list order.
struct index_sizes {
  std::uint64_t raw = 0;
  std::uint64_t varint = 0;
  std::uint64_t bitmap = 0;
  std::uint64_t rice = 0;
  int rice_parameter = 0;
  errc error = errc::ok;
};

// Rice parameter candidates around the optimum for geometric gaps of mean (n - k) / k.
inline int rice_center(std::uint64_t n, std::uint64_t k) noexcept {
  if (k == 0 || n <= k) return 0;
  const double mean_gap = static_cast<double>(n - k) / static_cast<double>(k);
  int r = 0;
  while (r < 31 && static_cast<double>(std::uint64_t(1) << (r + 1)) <= mean_gap * 0.6931471805599453) ++r;
  return r;
}

inline std::uint64_t rice_bytes_bound(std::uint64_t n, std::uint64_t k, int r) noexcept {
  // Sum of gaps <= n - k, so sum of quotients <= (n - k) >> r, plus k * (1 + r) bits.
  return (((n - k) >> r) + k * (1 + static_cast<std::uint64_t>(r)) + 7) / 8;
}

// The first error of an index list in order (index_out_of_range, indices_not_increasing), or ok.
inline errc first_index_error(span<const std::uint32_t> idx, std::uint32_t n) noexcept {
  std::uint64_t next_min = 0;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] >= n) return errc::index_out_of_range;
    if (idx[j] < next_min) return errc::indices_not_increasing;
    next_min = static_cast<std::uint64_t>(idx[j]) + 1;
  }
  return errc::ok;
}

// One pass over the gaps gives every coding's size and the list's validity (AVX2 where the CPU
// has it: wire/codecs/kernels.hpp); the branch-free loop only notes that something is wrong, and a
// second look finds the first error in order.
inline index_sizes measure_indices(span<const std::uint32_t> idx, std::uint32_t n) noexcept {
  index_sizes s;
  const std::uint64_t k = idx.size();
  s.raw = 4 * k;
  s.bitmap = (static_cast<std::uint64_t>(n) + 7) / 8;
  const int center = rice_center(n, k);
  const int r0 = std::max(0, center - 1);
  const int rs[3] = {r0, std::min(r0 + 1, 31), std::min(r0 + 2, 31)};
  cpu::gap_sums g;
  std::size_t j = 0;
  std::uint64_t prev_plus_one = 0;
  auto scalar = [&](std::size_t to) {
    std::uint32_t bad = 0;
    for (; j < to; ++j) {
      const std::uint32_t i = idx[j];
      bad |= static_cast<std::uint32_t>(i >= n) | static_cast<std::uint32_t>(i < prev_plus_one);
      const auto d = static_cast<std::uint32_t>(i - prev_plus_one);
      prev_plus_one = static_cast<std::uint64_t>(i) + 1;
      g.varint_extra += static_cast<std::uint64_t>(d >= (1u << 7)) + static_cast<std::uint64_t>(d >= (1u << 14)) +
                        static_cast<std::uint64_t>(d >= (1u << 21)) + static_cast<std::uint64_t>(d >= (1u << 28));
      g.quotients[0] += d >> rs[0];
      g.quotients[1] += d >> rs[1];
      g.quotients[2] += d >> rs[2];
    }
    g.bad |= bad != 0;
  };
#if GRADCOMP_HAVE_AVX2_KERNELS
  if (k > 8 && cpu::use_avx2()) {
    scalar(1);
    j = cpu::measure_gaps_avx2(idx.data(), 1, idx.size(), n, rs, g);
    prev_plus_one = static_cast<std::uint64_t>(idx[j - 1]) + 1;
  }
#endif
  scalar(idx.size());
  if (g.bad) {
    s.error = first_index_error(idx, n);
    return s;
  }
  s.varint = k + g.varint_extra;
  s.rice = ~std::uint64_t(0);
  for (int c = 0; c < 3; ++c) {
    const std::uint64_t bits = g.quotients[c] + k * (1 + static_cast<std::uint64_t>(rs[c]));
    if ((bits + 7) / 8 < s.rice) {
      s.rice = (bits + 7) / 8;
      s.rice_parameter = rs[c];
    }
  }
  return s;
}

inline std::uint64_t rice_bytes(span<const std::uint32_t> idx, int r) noexcept {
  std::uint64_t bits = 0;
  std::uint32_t prev_plus_one = 0;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    bits += ((idx[j] - prev_plus_one) >> r) + 1 + static_cast<std::uint64_t>(r);
    prev_plus_one = idx[j] + 1;
  }
  return (bits + 7) / 8;
}

// ---- encoders: dst has exactly the measured size, `bytes` ----

inline void encode_raw(span<const std::uint32_t> idx, std::byte* dst) noexcept {
  if constexpr (host_is_little_endian()) {
    if (!idx.empty()) std::memcpy(dst, idx.data(), 4 * idx.size());
  } else {
    for (std::size_t j = 0; j < idx.size(); ++j) store_le<std::uint32_t>(dst + 4 * j, idx[j]);
  }
}

// Gaps as varints (7 bits a byte, least significant first, the top bit set on every byte but
// the last), byte by byte: the loop's branch predicts well for gaps of one length.
inline void encode_varint(span<const std::uint32_t> idx, std::byte* dst) noexcept {
  std::uint32_t prev_plus_one = 0;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    std::uint32_t d = idx[j] - prev_plus_one;
    prev_plus_one = idx[j] + 1;
    while (d >= 0x80u) {
      *dst++ = static_cast<std::byte>((d & 0x7fu) | 0x80u);
      d >>= 7;
    }
    *dst++ = static_cast<std::byte>(d);
  }
}

// LSB-first bit writer into a payload of known length. Bits gather in a 64-bit register and go
// out 32 at a time: while 4 bytes of the payload are left, every put stores the register's low
// word at the write position, which moves on by 4 bytes once the word is complete (so stores
// never overlap in part, which costs more than the store itself); near the end, whole bytes are
// stored one by one. Never writes past the payload.
class bit_writer {
 public:
  bit_writer(std::byte* dst, std::uint64_t bytes) noexcept : dst_(dst), end_(dst + bytes) {}
  // Appends the low `count` bits of v, least significant first; v has no bits above them and
  // count <= 32.
  void put(std::uint64_t v, unsigned count) noexcept {
    acc_ |= v << fill_;  // fill_ <= 31, so nothing is lost
    fill_ += count;
    if (end_ - dst_ >= 4) {
      store_le<std::uint32_t>(dst_, static_cast<std::uint32_t>(acc_));
      const unsigned full = fill_ & 32u;
      dst_ += full >> 3;
      acc_ >>= full;
      fill_ -= full;
    } else {
      for (; fill_ >= 8; fill_ -= 8, acc_ >>= 8) *dst_++ = static_cast<std::byte>(acc_ & 0xffu);
    }
  }
  void put_ones(std::uint64_t count) noexcept {
    for (; count > 32; count -= 32) put(0xffffffffu, 32);
    put((std::uint64_t(1) << count) - 1, static_cast<unsigned>(count));
  }
  // Writes the last, partly filled bytes.
  void flush() noexcept {
    for (; fill_ > 0; fill_ = fill_ > 8 ? fill_ - 8 : 0, acc_ >>= 8) *dst_++ = static_cast<std::byte>(acc_ & 0xffu);
  }

 private:
  std::byte* dst_;
  std::byte* end_;
  std::uint64_t acc_ = 0;
  unsigned fill_ = 0;
};

// Rice codes of the gaps: q = d >> r one-bits, a zero-bit, the r low bits of d. A code of at
// most 32 bits (every code of a sound parameter choice but rare long gaps) is
// ((2 * low + 1) << q) - 1 in q + 1 + r bits, written by one put.
inline void encode_rice(span<const std::uint32_t> idx, int r, std::byte* dst, std::uint64_t bytes) noexcept {
  bit_writer w(dst, bytes);
  const auto rr = static_cast<unsigned>(r);
  const std::uint32_t low_mask = static_cast<std::uint32_t>((std::uint64_t(1) << rr) - 1);
  std::uint32_t prev_plus_one = 0;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    const std::uint32_t d = idx[j] - prev_plus_one;
    prev_plus_one = idx[j] + 1;
    const unsigned q = d >> rr;
    const std::uint64_t low = d & low_mask;
    if (q + 1 + rr <= 32) {
      w.put(((2 * low + 1) << q) - 1, q + 1 + rr);
    } else {
      w.put_ones(q);
      w.put(low << 1, 1 + rr);
    }
  }
  w.flush();
}

inline void encode_bitmap(span<const std::uint32_t> idx, std::uint32_t n, std::byte* dst) noexcept {
  std::memset(dst, 0, (static_cast<std::size_t>(n) + 7) / 8);
  for (std::size_t j = 0; j < idx.size(); ++j)
    dst[idx[j] >> 3] |= static_cast<std::byte>(1u << (idx[j] & 7u));
}

// ---- decoders: validate everything, call sink(j, index) for each index in order ----

template <class Sink>
errc decode_raw(const std::byte* p, std::uint32_t n, std::uint32_t k, Sink&& sink) noexcept {
  std::uint64_t next_min = 0;  // each index must be >= previous + 1
  for (std::uint32_t j = 0; j < k; ++j) {
    const std::uint32_t i = load_le<std::uint32_t>(p + 4 * static_cast<std::size_t>(j));
    if (i >= n) return errc::index_out_of_range;
    if (i < next_min) return errc::indices_not_increasing;
    next_min = static_cast<std::uint64_t>(i) + 1;
    sink(j, i);
  }
  return errc::ok;
}

template <class Sink>
errc decode_varint(const std::byte* p, std::uint64_t bytes, std::uint32_t n, std::uint32_t k,
                   Sink&& sink) noexcept {
  std::uint64_t pos = 0;
  std::uint64_t next = 0;  // previous index + 1
  for (std::uint32_t j = 0; j < k; ++j) {
    // Byte by byte: the branch on each byte's top bit predicts well for gaps of one length,
    // which lets the processor run ahead, where a word-at-a-time decoder waits on each length.
    std::uint64_t d = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= bytes) return errc::malformed_payload;
      const auto b = static_cast<std::uint32_t>(p[pos++]);
      if (shift == 28 && (b & 0xf0u) != 0) return errc::malformed_payload;  // > 32 bits
      d |= static_cast<std::uint64_t>(b & 0x7fu) << shift;
      if ((b & 0x80u) == 0) {
        if (b == 0 && shift > 0) return errc::malformed_payload;  // not the shortest form
        break;
      }
    }
    const std::uint64_t i = next + d;
    if (i >= n) return errc::index_out_of_range;
    sink(j, static_cast<std::uint32_t>(i));
    next = i + 1;
  }
  return pos == bytes ? errc::ok : errc::malformed_payload;
}

// LSB-first bit reader over a bounded payload. It buffers the complement of the stream's bits,
// so that a run of one-bits in the stream is a run of trailing zeros, counted with one
// instruction: ones() is on the chain of operations that links one Rice code to the next, and
// keeping the complement takes the negation off that chain.
//
// At most 63 bits are buffered (avail() <= 63), so bit 63 of the buffer is never a buffered bit;
// it is kept set. That makes the count well defined (the buffer is never zero), and consume()
// shifts arithmetically, so the bits it brings in at the top are set too: past the buffered
// bits, the buffer holds either set bits (stream zeros, which end a run there) or the complement
// of the stream's next bits. refill() keeps at least 56 bits buffered while whole words remain
// (one unaligned 8-byte load per refill, combined with one and-not: both kinds of bits past the
// buffered ones combine correctly with the complement of the new bits) and reads the tail byte by
// byte, so it never touches memory past the payload.
class bit_reader {
 public:
  bit_reader(const std::byte* p, std::uint64_t bytes) noexcept : p_(p), end_(p + bytes) {}
  // Forced inline: left to its heuristics, the compiler may call it out of line in some
  // translation units, which doubles the decoder's time.
  GRADCOMP_FORCE_INLINE void refill() noexcept {
    if (end_ - p_ >= 8) {
      complement_ &= ~((load_le<std::uint64_t>(p_) << avail_) & ~top_bit);
      p_ += (63 - avail_) >> 3;
      avail_ |= 56;
    } else {
      refill_tail();
    }
  }
  // Length of the run of one-bits at the bottom of the stream, up to the first zero-bit or the
  // end of the buffered bits, whichever is first; at least avail() means the run may continue.
  unsigned ones() const noexcept { return static_cast<unsigned>(count_trailing_zeros64(complement_)); }
  // The next `count` bits (count < 64), valid where count <= avail().
  std::uint64_t peek(unsigned skip, std::uint64_t mask) const noexcept { return ~(complement_ >> skip) & mask; }
  unsigned avail() const noexcept { return avail_; }
  void consume(unsigned count) noexcept {  // count <= avail() and < 64
    // An arithmetic shift: bit 63 is set, so the bits brought in at the top are set.
    complement_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(complement_) >> count);
    avail_ -= count;
  }
  void consume_all() noexcept {
    complement_ = ~std::uint64_t(0);
    avail_ = 0;
  }
  // Unread bits left in the payload.
  std::uint64_t remaining() const noexcept {
    return avail_ + 8 * static_cast<std::uint64_t>(end_ - p_);
  }

 private:
  static constexpr std::uint64_t top_bit = std::uint64_t(1) << 63;
  void refill_tail() noexcept {
    while (avail_ < 56 && p_ < end_) {  // keeps avail_ <= 63 and bit 63 set
      complement_ &= ~(static_cast<std::uint64_t>(*p_++) << avail_);
      avail_ += 8;
    }
  }
  const std::byte* p_;
  const std::byte* end_;
  std::uint64_t complement_ = ~std::uint64_t(0);
  unsigned avail_ = 0;
};

template <class Sink>
errc decode_rice(const std::byte* p, std::uint64_t bytes, int r, std::uint32_t n,
                 std::uint32_t k, Sink&& sink) noexcept {
  bit_reader in(p, bytes);
  const auto rr = static_cast<unsigned>(r);
  const std::uint64_t low_mask = (std::uint64_t(1) << rr) - 1;
  const std::uint64_t max_quotient = static_cast<std::uint64_t>(n) >> rr;
  std::uint64_t next = 0;
  for (std::uint32_t j = 0; j < k; ++j) {
    if (in.avail() < 32) in.refill();
    unsigned ones = in.ones();
    std::uint64_t q, low;
    if (ones + 1 + rr <= in.avail()) {  // the whole code is buffered: quotient < 64, no overflow
      // One shift moves past the whole code; the low bits are read beside it, off the chain
      // of dependent operations that links one code to the next.
      q = ones;
      low = in.peek(ones + 1, low_mask);
      in.consume(ones + 1 + rr);
    } else {
      q = 0;
      while (ones >= in.avail()) {  // the run of one-bits continues past the buffer
        if (in.avail() == 0) return errc::malformed_payload;
        q += in.avail();
        in.consume_all();
        if (q > max_quotient) return errc::index_out_of_range;
        in.refill();
        ones = in.ones();
      }
      q += ones;
      in.consume(ones + 1);
      if (q > max_quotient) return errc::index_out_of_range;
      if (in.avail() < rr) {
        in.refill();
        if (in.avail() < rr) return errc::malformed_payload;
      }
      low = in.peek(0, low_mask);
      in.consume(rr);
    }
    const std::uint64_t i = next + ((q << rr) | low);
    if (i >= n) return errc::index_out_of_range;
    sink(j, static_cast<std::uint32_t>(i));
    next = i + 1;
  }
  // Only the last byte may be partly used, and its unused bits must be zero.
  in.refill();
  if (in.remaining() >= 8) return errc::malformed_payload;
  if (in.peek(0, (std::uint64_t(1) << in.avail()) - 1) != 0) return errc::malformed_payload;
  return errc::ok;
}

template <class Sink>
errc decode_bitmap(const std::byte* p, std::uint32_t n, std::uint32_t k, Sink&& sink) noexcept {
  const std::uint64_t bytes = (static_cast<std::uint64_t>(n) + 7) / 8;
  std::uint32_t j = 0;
  for (std::uint64_t w = 0; w < bytes; w += 8) {
    std::uint64_t word = 0;
    const std::uint64_t take = std::min<std::uint64_t>(8, bytes - w);
    for (std::uint64_t b = 0; b < take; ++b) word |= static_cast<std::uint64_t>(p[w + b]) << (8 * b);
    if (w + 8 >= bytes && (n & 63u) != 0 && w * 8 + 64 > n) {
      const std::uint64_t valid = n - w * 8;
      if (valid < 64 && (word >> valid) != 0) return errc::malformed_payload;  // padding bits
    }
    while (word != 0) {
      if (j == k) return errc::malformed_payload;  // more bits set than kept
      const int bit = count_trailing_zeros64(word);
      sink(j++, static_cast<std::uint32_t>(w * 8 + static_cast<std::uint64_t>(bit)));
      word &= word - 1;
    }
  }
  return j == k ? errc::ok : errc::malformed_payload;
}

}  // namespace detail
}  // namespace gradcomp
