// QSGD's value codings (docs/wire_format.md, "Value codings"): the values of a section form
// buckets of B consecutive values, each with a binary32 norm (0 or normal), and value j is
// +-norm * (l_j / s) for an integer level l_j in [0, s]. Two forms of one content:
//   qsgd (19)        block: B, s, N = ceil(kept / B) (u32 each), N norms; then a code of
//                    w = 1 + bit_width(s) bits per value (the level, then the sign as the top bit),
//                    least significant bit first: decodable value by value, in parallel;
//   qsgd_gamma (20)  block: B, s, N, m (the non-zero values), L (the stream's bytes), N norms; then
//                    for each non-zero value in order the Elias-gamma code of its gap (position
//                    minus the previous one's, the first counted from -1), its sign bit and the
//                    Elias-gamma code of its level: far smaller when most levels are 0 or 1, read
//                    in order only (a device decoder reads each such section on one thread).
// The encoder writes whichever is smaller (qsgd on a tie); see values.hpp for the members
// a codec has.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../span.hpp"
#include "../format.hpp"
#include "../../detail/bytes.hpp"
#include "index.hpp"
#include "../../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// The largest level count the codings take.
inline constexpr std::uint32_t qsgd_max_levels = 65535;

// Bits of x without its leading zeros (0 for 0).
GRADCOMP_HD constexpr unsigned bit_width32(std::uint32_t x) noexcept {
  unsigned n = 0;
  for (; x != 0; x >>= 1) ++n;
  return n;
}

// The magnitude of level l of s under a bucket's norm: norm * (l / s), each operation rounded to
// binary32 (never above the norm). Every producer and receiver computes a value this way.
GRADCOMP_HD inline float qsgd_magnitude(float norm, std::uint32_t level, std::uint32_t levels) noexcept {
  const float fraction = static_cast<float>(level) / static_cast<float>(levels);
  return norm * fraction;
}

// Value (level, negative) under a norm, as T: +0 for level 0.
template <class T>
GRADCOMP_HD T qsgd_value(float norm, std::uint32_t level, std::uint32_t levels, bool negative) noexcept {
  const T m = static_cast<T>(qsgd_magnitude(norm, level, levels));
  return negative && level != 0 ? -m : m;
}


// w bits (w <= 25) at bit k of q, least significant first, reading only the bytes they lie in.
GRADCOMP_HD inline std::uint32_t load_bits(const std::byte* q, std::uint64_t k, unsigned w) noexcept {
  std::uint32_t v = 0;
  unsigned got = 0, shift = static_cast<unsigned>(k % 8);
  for (const std::byte* b = q + k / 8; got < w; ++b, shift = 0) {
    v |= (static_cast<std::uint32_t>(*b) >> shift) << got;
    got += 8 - shift;
  }
  return v & ((1u << w) - 1u);
}

// The 64 bits of x in reverse order.
GRADCOMP_HD constexpr std::uint64_t reverse64(std::uint64_t x) noexcept {
  x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
  x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
  x = ((x >> 4) & 0x0f0f0f0f0f0f0f0full) | ((x & 0x0f0f0f0f0f0f0f0full) << 4);
  x = ((x >> 8) & 0x00ff00ff00ff00ffull) | ((x & 0x00ff00ff00ff00ffull) << 8);
  x = ((x >> 16) & 0x0000ffff0000ffffull) | ((x & 0x0000ffff0000ffffull) << 16);
  return (x >> 32) | (x << 32);
}

// Bits of x >= 1 without its leading zeros, on the host.
inline unsigned bit_width64(std::uint64_t x) noexcept { return 64u - static_cast<unsigned>(__builtin_clzll(x)); }

// The trailing zero bits of x != 0, on the host or a device.
GRADCOMP_HD inline unsigned trailing_zeros64(std::uint64_t x) noexcept {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__ffsll(static_cast<long long>(x)) - 1);
#else
  return static_cast<unsigned>(__builtin_ctzll(x));
#endif
}

// A reader of a bit stream of `end` bits (a whole number of bytes) at p, least significant bit of
// each byte first; every read fails (false) rather than pass the end.
struct gamma_reader {
  const std::byte* p;
  std::uint64_t end;
  std::uint64_t at = 0;
  // The stream's bits from `at` on, at least 57 of them (0 beyond the end).
  GRADCOMP_HD std::uint64_t window() const noexcept {
    const std::uint64_t first = at / 8, bytes = end / 8;
    std::uint64_t w = 0;
    if (bytes - first >= 8) {
      w = load_le<std::uint64_t>(p + first);
    } else {
      for (std::uint64_t i = first; i < bytes; ++i) w |= static_cast<std::uint64_t>(p[i]) << (8 * (i - first));
    }
    return w >> (at % 8);
  }
  GRADCOMP_HD bool bit(unsigned& b) noexcept {
    if (at >= end) return false;
    b = (static_cast<unsigned>(p[at / 8]) >> (at % 8)) & 1u;
    ++at;
    return true;
  }
  // An Elias-gamma code: z zero bits, then the z + 1 bits of n from the most significant (a 1);
  // z <= 32.
  GRADCOMP_HD bool gamma(std::uint64_t& n) noexcept {
    const std::uint64_t w = window();
    if (w == 0) return false;  // no 1 in the next 57 bits: more than 32 zeros, or the end
    const unsigned zeros = trailing_zeros64(w);
    if (zeros > 32 || end - at < 2 * static_cast<std::uint64_t>(zeros) + 1) return false;
    at += zeros;
    const std::uint64_t bits = window() & ((std::uint64_t(2) << zeros) - 1);  // the 1 first, then n's other bits
    n = reverse64(bits) >> (63 - zeros);
    at += zeros + 1;
    return true;
  }
};

// fl(l / s) for every level of s <= 255 (computed once), else for each level as it comes: the
// fraction of qsgd_magnitude, bit for bit.
struct qsgd_fractions {
  explicit qsgd_fractions(std::uint32_t s) noexcept : levels(s), small(s < 256) {
    for (std::uint32_t l = 0; small && l <= s; ++l) f[l] = static_cast<float>(l) / static_cast<float>(s);
  }
  float magnitude(float norm, std::uint32_t level) const noexcept {
    return norm * (small ? f[level] : static_cast<float>(level) / static_cast<float>(levels));
  }
  template <class T>
  T value(float norm, std::uint32_t level, bool negative) const noexcept {
    const T m = static_cast<T>(magnitude(norm, level));
    return negative && level != 0 ? -m : m;
  }
  std::uint32_t levels;
  bool small;
  float f[256];
};

// An Elias-gamma code of 1 <= n < 2^32: its value bits reversed, as bit_writer (index_codec.hpp)
// takes them, least significant first.
inline void put_gamma(bit_writer& out, std::uint64_t n) noexcept {
  const unsigned width = bit_width64(n);
  if (width > 1) out.put(0, width - 1);
  out.put(reverse64(n) >> (64 - width), width);
}

// What both forms share: the first three words of the parameter block (B, s, N), the norms after
// the form's header words, the checks of the layout and of the norms, and the encoder's walk.
template <std::uint64_t HeaderBytes>
struct qsgd_codec_base {
  static constexpr std::size_t fixed_bytes = 0;
  static constexpr std::uint64_t header_bytes = HeaderBytes;
  GRADCOMP_HD static std::uint32_t bucket(const std::byte* p) noexcept { return load_le<std::uint32_t>(p); }
  GRADCOMP_HD static std::uint32_t levels(const std::byte* p) noexcept { return load_le<std::uint32_t>(p + 4); }
  GRADCOMP_HD static std::uint32_t buckets(const std::byte* p) noexcept { return load_le<std::uint32_t>(p + 8); }
  GRADCOMP_HD static std::uint64_t buckets_of(std::uint64_t kept, std::uint32_t bucket) noexcept {
    return bucket == 0 ? 0 : (kept + bucket - 1) / bucket;
  }
  GRADCOMP_HD static float norm(const std::byte* p, std::uint64_t b) noexcept {
    return bits_float(load_le<std::uint32_t>(p + header_bytes + 4 * b));
  }
  GRADCOMP_HD static std::uint64_t parameter_bytes_at(const std::byte* p) noexcept {
    return header_bytes + 4 * static_cast<std::uint64_t>(buckets(p));
  }
  GRADCOMP_HD static bool layout_fits(std::uint64_t, const wire::coding_parameters& c) noexcept {
    return c.bucket != 0 && c.levels != 0 && c.levels <= qsgd_max_levels;
  }
  GRADCOMP_HD static wire::coding_parameters parameters(const std::byte* p) noexcept {
    wire::coding_parameters c;
    c.bucket = bucket(p);
    c.levels = levels(p);
    return c;
  }
  // The block's layout words against `bytes` readable bytes and `kept` values; sets the length
  // of the block.
  GRADCOMP_HD static bool block_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept,
                                     std::uint64_t& block) noexcept {
    if (bytes < header_bytes) return false;
    const std::uint32_t b = bucket(p), s = levels(p);
    if (b == 0 || s == 0 || s > qsgd_max_levels || buckets(p) != buckets_of(kept, b)) return false;
    block = parameter_bytes_at(p);
    return bytes >= block;
  }
  // Each norm in order: finite, then the sign bit clear and not subnormal (0 or normal: a
  // subnormal norm would give two levels the same value, and a payload two encodings).
  GRADCOMP_HD static errc check_norms(const std::byte* p) noexcept {
    const std::uint32_t n = buckets(p);
    for (std::uint32_t b = 0; b < n; ++b) {
      const std::uint32_t bits = load_le<std::uint32_t>(p + header_bytes + 4 * static_cast<std::uint64_t>(b));
      if ((bits & 0x7f800000u) == 0x7f800000u) return errc::non_finite_input;
      if ((bits & 0x80000000u) != 0 || !usable_norm_bits(bits)) return errc::malformed_payload;
    }
    return errc::ok;
  }
  // A norm of 0 or a normal binary32 (sign bit clear).
  GRADCOMP_HD static bool usable_norm_bits(std::uint32_t bits) noexcept {
    return bits == 0 || (bits & 0x7f800000u) != 0;
  }

  // The encoder's reading of v: bucket by bucket, its norm (c.scales[b], or the bucket's largest
  // magnitude, which binary32 must hold exactly) through on_bucket(b, norm), then each value's
  // level and sign through on_value(j, level, negative). A value is refused unless some level
  // gives it exactly: non_finite_input for a NaN or an infinity (values or norms), else
  // value_out_of_range; invalid_argument for a layout outside its bounds.
  template <class T, class OnBucket, class OnValue>
  static errc read_levels(span<const T> v, const wire::coding_parameters& c, OnBucket&& on_bucket,
                          OnValue&& on_value) noexcept {
    if (!layout_fits(v.size(), c)) return errc::invalid_argument;
    const std::uint64_t n = v.size(), count = buckets_of(n, c.bucket);
    const qsgd_fractions fractions(c.levels);
    for (std::uint64_t b = 0; b < count; ++b) {
      const std::uint64_t first = b * c.bucket, last = n - first < c.bucket ? n : first + c.bucket;
      float norm = 0.0f;
      if (c.scales != nullptr) {
        norm = c.scales[b];
        if (!std::isfinite(norm)) return errc::non_finite_input;
      } else {
        T top = 0;
        for (std::uint64_t j = first; j < last; ++j) {
          if (!std::isfinite(v[j])) return errc::non_finite_input;
          top = std::fabs(v[j]) > top ? std::fabs(v[j]) : top;
        }
        norm = static_cast<float>(top);
        if (!std::isfinite(norm) || static_cast<T>(norm) != top) return errc::value_out_of_range;
      }
      // Negative and subnormal norms are not in the format.
      if (std::signbit(norm) || !usable_norm_bits(float_bits(norm))) return errc::value_out_of_range;
      on_bucket(b, norm);
      // The level nearest a / norm * s (the values of two levels are at least 2^-16 apart
      // relatively, so this is the one that can give a), then its value checked bit for bit.
      const double per_norm = static_cast<double>(c.levels) / static_cast<double>(norm);
      for (std::uint64_t j = first; j < last; ++j) {
        if (!std::isfinite(v[j])) return errc::non_finite_input;
        const T a = std::fabs(v[j]);
        if (a == T(0)) {
          on_value(j, 0u, false);
          continue;
        }
        const double guess = rounded(static_cast<double>(a) * per_norm) + 0.5;
        if (!(guess >= 1.0 && guess < static_cast<double>(c.levels) + 1.0)) return errc::value_out_of_range;
        const auto level = static_cast<std::uint32_t>(guess);
        if (fractions.value<T>(norm, level, false) != a) return errc::value_out_of_range;
        on_value(j, level, v[j] < T(0));
      }
    }
    return errc::ok;
  }

  // The lengths of v's payload in both forms; errc of read_levels.
  template <class T>
  static errc measure(span<const T> v, const wire::coding_parameters& c, std::uint64_t& fixed,
                      std::uint64_t& gamma) noexcept {
    std::uint64_t bits = 0, previous = 0;
    bool any = false;
    const errc e = read_levels(v, c, [](std::uint64_t, float) {}, [&](std::uint64_t j, std::uint32_t level, bool) {
      if (level == 0) return;
      bits += 2 * (bit_width64(any ? j - previous : j + 1) + bit_width64(level)) - 1;  // two codes and a sign
      previous = j;
      any = true;
    });
    if (e != errc::ok) return e;
    const std::uint64_t norms = 4 * buckets_of(v.size(), c.bucket);
    fixed = 12 + norms + (v.size() * (1 + bit_width32(c.levels)) + 7) / 8;
    gamma = 20 + norms + (bits + 7) / 8;
    return errc::ok;
  }
};

struct qsgd_gamma_codec;

// The fixed-width form.
struct qsgd_codec : qsgd_codec_base<12> {
  static constexpr wire::value_coding code = wire::value_coding::qsgd;
  static constexpr const char* name = "qsgd";
  GRADCOMP_HD static unsigned code_bits(std::uint32_t levels) noexcept { return 1 + bit_width32(levels); }
  GRADCOMP_HD static unsigned value_bits_at(const std::byte* p) noexcept { return code_bits(levels(p)); }
  // The fixed form's length: the most an encoder writes for these values (it writes qsgd_gamma
  // only where that is shorter).
  GRADCOMP_HD static std::uint64_t payload_bytes(std::uint64_t kept, const wire::coding_parameters& c = {}) noexcept {
    return header_bytes + 4 * buckets_of(kept, c.bucket) + (kept * code_bits(c.levels) + 7) / 8;
  }
  GRADCOMP_HD static bool payload_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept) noexcept {
    std::uint64_t block = 0;
    return block_fits(p, bytes, kept, block) && bytes - block == (kept * value_bits_at(p) + 7) / 8;
  }
  GRADCOMP_HD static std::uint32_t code_of(const std::byte* p, std::size_t j) noexcept {
    const unsigned w = value_bits_at(p);
    return load_bits(p + parameter_bytes_at(p), static_cast<std::uint64_t>(j) * w, w);
  }
  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    const std::uint32_t s = levels(p), c = code_of(p, j), top = 1u << (value_bits_at(p) - 1);
    return qsgd_value<T>(norm(p, j / bucket(p)), c & (top - 1u), s, (c & top) != 0);
  }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const std::uint32_t s = levels(p), b = bucket(p);
    const unsigned w = value_bits_at(p);
    const std::uint32_t top = 1u << (w - 1);
    const std::byte* codes = p + parameter_bytes_at(p);
    const qsgd_fractions fractions(s);
    std::size_t k = first / b, bucket_end = (k + 1) * static_cast<std::size_t>(b);
    float n = count != 0 ? norm(p, k) : 0.0f;
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t x = first + j;
      if (x == bucket_end) {
        n = norm(p, ++k);
        bucket_end += b;
      }
      const std::uint32_t c = load_bits(codes, static_cast<std::uint64_t>(x) * w, w);
      acc[at(j)] += fractions.value<T>(n, c & (top - 1u), (c & top) != 0);
    }
  }
  // The norms, then the padding bits after the last code.
  GRADCOMP_HD static errc check_parameters(const std::byte* p, std::uint64_t kept) noexcept {
    if (const errc e = check_norms(p); e != errc::ok) return e;
    const std::uint64_t bits = kept * value_bits_at(p);
    if (bits % 8 == 0) return errc::ok;
    const auto last = static_cast<unsigned>(p[parameter_bytes_at(p) + bits / 8]);
    return (last >> (bits % 8)) == 0 ? errc::ok : errc::malformed_payload;
  }
  // A level above s, a sign on level 0, a non-zero level under a zero norm.
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte* p, std::size_t j) noexcept {
    const std::uint32_t c = code_of(p, j), top = 1u << (value_bits_at(p) - 1), level = c & (top - 1u);
    if (level > levels(p) || (level == 0 && c != 0)) return errc::malformed_payload;
    if (level != 0 && norm(p, j / bucket(p)) == 0.0f) return errc::malformed_payload;
    return errc::ok;
  }
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    if (const errc e = check_parameters(p, kept); e != errc::ok) return e;
    // Each value's checks (check_one's) in order; the largest magnitude from each bucket's largest
    // level.
    const std::uint32_t s = levels(p), b = bucket(p), w = value_bits_at(p), mask = (1u << (w - 1)) - 1u;
    const std::byte* codes = p + parameter_bytes_at(p);
    const qsgd_fractions fractions(s);
    double top = 0.0;
    for (std::size_t first = 0; first < kept; first += b) {
      const std::size_t last = kept - first < b ? kept : first + b;
      const float n = norm(p, first / b);
      std::uint32_t most = 0;
      for (std::size_t j = first; j < last; ++j) {
        const std::uint32_t c = load_bits(codes, static_cast<std::uint64_t>(j) * w, w), level = c & mask;
        if (level > s || (level == 0 && c != 0) || (level != 0 && n == 0.0f)) return errc::malformed_payload;
        most = level > most ? level : most;
      }
      const double x = static_cast<double>(fractions.magnitude(n, most));
      top = x > top ? x : top;
    }
    largest = top;
    return errc::ok;
  }
  template <class T>
  static errc encode(span<const T> v, const wire::coding_parameters& c, std::byte* dst) noexcept {
    if (!layout_fits(v.size(), c)) return errc::invalid_argument;
    const auto count = static_cast<std::uint32_t>(buckets_of(v.size(), c.bucket));
    const unsigned w = code_bits(c.levels);
    store_le<std::uint32_t>(dst, c.bucket);
    store_le<std::uint32_t>(dst + 4, c.levels);
    store_le<std::uint32_t>(dst + 8, count);
    bit_writer out(dst + header_bytes + 4 * static_cast<std::uint64_t>(count), (v.size() * w + 7) / 8);
    const errc e = read_levels(
        v, c,
        [&](std::uint64_t b, float norm) { store_le<std::uint32_t>(dst + header_bytes + 4 * b, float_bits(norm)); },
        [&](std::uint64_t, std::uint32_t level, bool negative) {
          out.put(level | (negative ? 1u << (w - 1) : 0u), w);
        });
    out.flush();
    return e;
  }
  // The form the encoder writes for v (this one, or qsgd_gamma where `in_order` allows a form
  // read in order only and it is shorter) and its length.
  template <class T>
  static errc plan(span<const T> v, const wire::coding_parameters& c, bool in_order, wire::value_coding& chosen,
                   std::uint64_t& bytes) noexcept {
    std::uint64_t fixed = 0, gamma = 0;
    if (const errc e = measure(v, c, fixed, gamma); e != errc::ok) return e;
    const bool shorter = in_order && gamma < fixed;
    chosen = shorter ? wire::value_coding::qsgd_gamma : code;
    bytes = shorter ? gamma : fixed;
    return errc::ok;
  }
};

// The Elias-gamma form. Read in order only: the device decoders read a section of it on one
// thread (parallel = false).
struct qsgd_gamma_codec : qsgd_codec_base<20> {
  static constexpr wire::value_coding code = wire::value_coding::qsgd_gamma;
  static constexpr const char* name = "qsgd_gamma";
  static constexpr bool parallel = false;
  GRADCOMP_HD static std::uint32_t nonzero(const std::byte* p) noexcept { return load_le<std::uint32_t>(p + 12); }
  GRADCOMP_HD static std::uint32_t stream_bytes(const std::byte* p) noexcept { return load_le<std::uint32_t>(p + 16); }
  // As qsgd's: the encoder writes this form only where it is shorter.
  GRADCOMP_HD static std::uint64_t payload_bytes(std::uint64_t kept, const wire::coding_parameters& c = {}) noexcept {
    return qsgd_codec::payload_bytes(kept, c);
  }
  GRADCOMP_HD static bool payload_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept) noexcept {
    std::uint64_t block = 0;
    return block_fits(p, bytes, kept, block) && nonzero(p) <= kept && bytes - block == stream_bytes(p);
  }

  // Calls f(position, level, negative, norm) for each entry of the stream in order, checking it
  // as it goes: positions increasing and below kept, levels in [1, s], no entry under a zero norm,
  // the stream ending in its last byte with the padding bits 0; malformed_payload otherwise.
  GRADCOMP_HD_TEMPLATE
  template <class F>
  GRADCOMP_HD static errc walk(const std::byte* p, std::uint64_t kept, F&& f) noexcept {
    const std::uint64_t length = stream_bytes(p);
    const std::uint32_t s = levels(p), b = bucket(p);
    gamma_reader in{p + parameter_bytes_at(p), 8 * length};
    std::uint64_t next = 0;                   // the lowest position the next entry may take
    std::uint64_t k = 0, bucket_end = b;      // the bucket of the last entry, and where it ends
    for (std::uint32_t i = 0, m = nonzero(p); i < m; ++i) {
      std::uint64_t gap = 0, level = 0;
      unsigned negative = 0;
      if (!in.gamma(gap) || !in.bit(negative) || !in.gamma(level)) return errc::malformed_payload;
      const std::uint64_t j = next + gap - 1;
      if (j >= kept || level > s) return errc::malformed_payload;
      if (j >= bucket_end) {
        k = j / b;
        bucket_end = (k + 1) * b;
      }
      const float n = norm(p, k);
      if (n == 0.0f) return errc::malformed_payload;
      f(j, static_cast<std::uint32_t>(level), negative != 0, n);
      next = j + 1;
    }
    if ((in.at + 7) / 8 != length) return errc::malformed_payload;
    for (unsigned dummy = 0; in.at < in.end;)
      if (!in.bit(dummy) || dummy != 0) return errc::malformed_payload;
    return errc::ok;
  }
  struct ignore_entries {
    GRADCOMP_HD void operator()(std::uint64_t, std::uint32_t, bool, float) const noexcept {}
  };
  GRADCOMP_HD static errc check_parameters(const std::byte* p, std::uint64_t kept) noexcept {
    if (const errc e = check_norms(p); e != errc::ok) return e;
    return walk(p, kept, ignore_entries{});
  }
  template <class T>
  static errc check_one(const std::byte*, std::size_t) noexcept {
    return errc::ok;
  }
  // acc[at(j)] += value first + j for j < count: the zeros too, as the fixed form adds them.
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const qsgd_fractions fractions(levels(p));
    std::size_t done = 0;  // values first .. first + done - 1 are added
    (void)walk(p, first + count, [&](std::uint64_t j, std::uint32_t level, bool negative, float n) {
      if (j < first) return;
      for (; first + done < j; ++done) acc[at(done)] += T(0);
      acc[at(done++)] += fractions.value<T>(n, level, negative);
    });
    for (; done < count; ++done) acc[at(done)] += T(0);
  }
  // out[j] = value j for j < count (count <= kept): zeros, then the stream's entries.
  template <class T>
  static void values(const std::byte* p, std::size_t count, T* out) noexcept {
    for (std::size_t j = 0; j < count; ++j) out[j] = T(0);
    const qsgd_fractions fractions(levels(p));
    (void)walk(p, count, [&](std::uint64_t j, std::uint32_t level, bool negative, float n) {
      out[j] = fractions.value<T>(n, level, negative);
    });
  }
  // value j: the stream read up to it.
  template <class T>
  static T value(const std::byte* p, std::size_t j) noexcept {
    T v = T(0);
    add<T>(p, j, 1, &v, [](std::size_t) { return std::size_t(0); });
    return v;
  }
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    if (const errc e = check_norms(p); e != errc::ok) return e;
    double top = 0.0;
    const qsgd_fractions fractions(levels(p));
    const errc e = walk(p, kept, [&](std::uint64_t, std::uint32_t level, bool, float n) {
      const double x = static_cast<double>(fractions.magnitude(n, level));
      top = x > top ? x : top;
    });
    if (e == errc::ok) largest = top;
    return e;
  }
  template <class T>
  static errc encode(span<const T> v, const wire::coding_parameters& c, std::byte* dst) noexcept {
    std::uint64_t fixed = 0, gamma = 0;
    if (const errc e = measure(v, c, fixed, gamma); e != errc::ok) return e;
    return encode(v, c, dst, gamma);
  }
  // The payload of v, `bytes` long as plan() found it (the encoder's path: one read of v).
  template <class T>
  static errc encode(span<const T> v, const wire::coding_parameters& c, std::byte* dst, std::uint64_t bytes) noexcept {
    const auto count = buckets_of(v.size(), c.bucket);
    const std::uint64_t block = header_bytes + 4 * count, length = bytes - block;
    store_le<std::uint32_t>(dst, c.bucket);
    store_le<std::uint32_t>(dst + 4, c.levels);
    store_le<std::uint32_t>(dst + 8, static_cast<std::uint32_t>(count));
    store_le<std::uint32_t>(dst + 16, static_cast<std::uint32_t>(length));
    bit_writer out(dst + block, length);
    std::uint64_t next = 0;
    std::uint32_t m = 0;
    const errc e = read_levels(
        v, c,
        [&](std::uint64_t b, float norm) { store_le<std::uint32_t>(dst + header_bytes + 4 * b, float_bits(norm)); },
        [&](std::uint64_t j, std::uint32_t level, bool negative) {
          if (level == 0) return;
          put_gamma(out, j + 1 - next);
          out.put(negative ? 1u : 0u, 1);
          put_gamma(out, level);
          next = j + 1;
          ++m;
        });
    out.flush();
    store_le<std::uint32_t>(dst + 12, m);
    return e;
  }
  // Either form's plan: the shorter one.
  template <class T>
  static errc plan(span<const T> v, const wire::coding_parameters& c, bool in_order, wire::value_coding& chosen,
                   std::uint64_t& bytes) noexcept {
    return qsgd_codec::plan(v, c, in_order, chosen, bytes);
  }
};

}  // namespace detail
}  // namespace gradcomp
