// The value coding of Indirect Stochastic Gradient Quantization (docs/wire_format.md, "isgq"):
// a dense section of a fully connected layer's weight gradient G = X^T Delta (n_in x n_out, or its
// transpose), carried as its two quantised factors X^ (B x n_in) and Delta^ (B x n_out) instead of
// its n_in * n_out values. Value j of the section is sum over b of X^[b][i] * Delta^[b][o], in
// binary64 from +0 in ascending b, rounded to the receiver's type, with (i, o) = (j / n_out, j % n_out) for
// the in_out layout and (j % n_in, j / n_in) for out_in.
//
// The payload: a 40-byte block (B, n_in, n_out as u32; layout, variant as u8; the level count as
// u16; bucket, stream as u32; key, step as u64), then X's parameters and Delta's parameters, then
// the codes of X (row after row) and of Delta, w bits each, least significant bit first, the
// padding bits 0.
//   dithered (variant 0): s levels (1..127); parameters: a binary32 scale (finite, sign clear) per
//     bucket of `bucket` consecutive elements of the factor; code 0 is an exact 0, code c in
//     [1, 2s + 1] is q = c - 1 - s, rebuilt as scale * (q - u) with u the subtractive dither of the
//     element (isgq_dither of key, step, stream, factor, element); w = bit_width(2s + 1). A code
//     other than 0 under a zero scale is malformed.
//   levels (variant 1): L levels (2..255); parameters: L binary32 values (finite); code c < L is
//     value c, code L an exact 0; w = bit_width(L); bucket, stream, key and step are 0.
// The producer writes the payload (tensor_message::payload): the encoder checks it as a decoder
// does and copies it. Decoding rebuilds the factors once (16 bytes of scratch per factor element)
// and forms the product; it is read on the host only (`parallel = false`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../span.hpp"
#include "../format.hpp"
#include "../../detail/bytes.hpp"
#include "index.hpp"
#include "../../detail/philox.hpp"
#include "qsgd.hpp"
#include "../../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// The dither of element i of factor `factor` (0: X, 1: Delta) of stream `stream` at a step, under
// `key`: (draw + 1/2) / 2^32 - 1/2, symmetric in (-1/2, 1/2), its mean over all draws exactly 0.
GRADCOMP_HD inline double isgq_dither_of_draw(std::uint32_t draw) noexcept {
  return rounded((static_cast<double>(draw) + 0.5) * (1.0 / 4294967296.0)) - 0.5;
}
inline double isgq_dither(std::uint64_t key, std::uint64_t step, std::uint32_t stream, std::uint32_t factor,
                          std::uint32_t i) noexcept {
  return isgq_dither_of_draw(element_draw(key, step, 2 * stream + factor, i));
}

// The dithers of a factor's elements in order: one Philox call per four elements.
class isgq_dither_stream {
 public:
  GRADCOMP_HD isgq_dither_stream(std::uint64_t key, std::uint64_t step, std::uint32_t stream,
                                 std::uint32_t factor) noexcept
      : key_(key), step_(step), counter_(2 * stream + factor) {}
  // The dither of element i (any order; consecutive elements share a call).
  GRADCOMP_HD double operator()(std::uint32_t i) noexcept {
    if (i / 4 != block_ || !filled_) {
      block_ = i / 4;
      filled_ = true;
      draws_ = element_block(key_, step_, counter_, block_);
    }
    return isgq_dither_of_draw(draws_.w[i % 4]);
  }

 private:
  std::uint64_t key_, step_;
  std::uint32_t counter_, block_ = 0;
  bool filled_ = false;
  philox_block draws_{};
};

// The quantiser of a payload (block offset 13).
enum class isgq_variant : std::uint8_t { dithered = 0, levels = 1 };

// The largest s of the dithered quantiser and L of the level quantiser on the wire (codes of at
// most 8 bits).
inline constexpr std::uint32_t isgq_max_dither_levels = 127;
inline constexpr std::uint32_t isgq_max_levels = 255;
inline constexpr std::uint64_t isgq_block_bytes = 40;

// The parameter block's fields.
struct isgq_block {
  std::uint32_t batch = 0, n_in = 0, n_out = 0;
  std::uint8_t layout = 0;  // 0: in_out, 1: out_in
  isgq_variant variant = isgq_variant::dithered;
  std::uint16_t levels = 0;
  std::uint32_t bucket = 0, stream = 0;
  std::uint64_t key = 0, step = 0;

  GRADCOMP_HD bool dithered() const noexcept { return variant == isgq_variant::dithered; }
  // Elements of factor f (0: X, 1: Delta).
  GRADCOMP_HD std::uint64_t elements(unsigned f) const noexcept {
    return static_cast<std::uint64_t>(batch) * (f == 0 ? n_in : n_out);
  }
  // binary32 parameters of factor f: scales (one per bucket) or level values.
  GRADCOMP_HD std::uint64_t parameters(unsigned f) const noexcept {
    return dithered() ? (elements(f) + bucket - 1) / bucket : levels;
  }
  GRADCOMP_HD unsigned code_bits() const noexcept { return bit_width32(dithered() ? 2u * levels + 1u : levels); }
  GRADCOMP_HD std::uint64_t code_bytes() const noexcept { return ((elements(0) + elements(1)) * code_bits() + 7) / 8; }
  GRADCOMP_HD std::uint64_t payload_bytes() const noexcept {
    return isgq_block_bytes + 4 * (parameters(0) + parameters(1)) + code_bytes();
  }
  // Whether the fields are ones a payload may hold (sizes not yet checked against a length).
  GRADCOMP_HD bool valid() const noexcept {
    if (batch == 0 || n_in == 0 || n_out == 0 || layout > 1) return false;
    if (dithered()) return levels >= 1 && levels <= isgq_max_dither_levels && bucket != 0;
    return variant == isgq_variant::levels && levels >= 2 && levels <= isgq_max_levels && bucket == 0 &&
           stream == 0 && key == 0 && step == 0;
  }

  GRADCOMP_HD static isgq_block read(const std::byte* p) noexcept {
    isgq_block b;
    b.batch = load_le<std::uint32_t>(p);
    b.n_in = load_le<std::uint32_t>(p + 4);
    b.n_out = load_le<std::uint32_t>(p + 8);
    b.layout = static_cast<std::uint8_t>(p[12]);
    b.variant = static_cast<isgq_variant>(p[13]);
    b.levels = load_le<std::uint16_t>(p + 14);
    b.bucket = load_le<std::uint32_t>(p + 16);
    b.stream = load_le<std::uint32_t>(p + 20);
    b.key = load_le<std::uint64_t>(p + 24);
    b.step = load_le<std::uint64_t>(p + 32);
    return b;
  }
  void write(std::byte* p) const noexcept {
    store_le<std::uint32_t>(p, batch);
    store_le<std::uint32_t>(p + 4, n_in);
    store_le<std::uint32_t>(p + 8, n_out);
    p[12] = static_cast<std::byte>(layout);
    p[13] = static_cast<std::byte>(variant);
    store_le<std::uint16_t>(p + 14, levels);
    store_le<std::uint32_t>(p + 16, bucket);
    store_le<std::uint32_t>(p + 20, stream);
    store_le<std::uint64_t>(p + 24, key);
    store_le<std::uint64_t>(p + 32, step);
  }
};

// Writes a payload: the block, each factor's parameters, each factor's codes (one byte each, below
// 2^code_bits). `dst` holds b.payload_bytes() bytes.
inline void isgq_write_payload(const isgq_block& b, const float* x_parameters, const float* delta_parameters,
                               const std::uint8_t* x_codes, const std::uint8_t* delta_codes, std::byte* dst) noexcept {
  b.write(dst);
  std::byte* q = dst + isgq_block_bytes;
  for (unsigned f = 0; f < 2; ++f) {
    const float* v = f == 0 ? x_parameters : delta_parameters;
    for (std::uint64_t k = 0; k < b.parameters(f); ++k, q += 4) store_le<std::uint32_t>(q, float_bits(v[k]));
  }
  // The codes of both factors in one stream of w-bit codes, least significant bit first: whole
  // 32-bit words while they fill, the last bytes at the end.
  const unsigned w = b.code_bits();
  std::uint64_t acc = 0;
  unsigned fill = 0;
  for (unsigned f = 0; f < 2; ++f) {
    const std::uint8_t* c = f == 0 ? x_codes : delta_codes;
    for (std::uint64_t i = 0, n = b.elements(f); i < n; ++i) {
      acc |= static_cast<std::uint64_t>(c[i]) << fill;
      fill += w;
      if (fill >= 32) {
        store_le<std::uint32_t>(q, static_cast<std::uint32_t>(acc));
        q += 4;
        acc >>= 32;
        fill -= 32;
      }
    }
  }
  for (; fill > 0; fill = fill > 8 ? fill - 8 : 0, acc >>= 8) *q++ = static_cast<std::byte>(acc & 0xffu);
}

// A payload's rebuilt factors, in binary64: X^ (B x n_in) and Delta^ (B x n_out), row-major.
struct isgq_factors_hat {
  std::vector<double> x, delta;
};

struct isgq_codec {
  static constexpr wire::value_coding code = wire::value_coding::isgq;
  static constexpr const char* name = "isgq";
  static constexpr std::size_t fixed_bytes = 0;
  static constexpr bool parallel = false;
  // The producer writes the payload (tensor_message::payload); it is not a function of values.
  static constexpr bool from_payload = true;

  // Not a function of the value count: the producer states the length (tensor_message::payload).
  GRADCOMP_HD static constexpr std::uint64_t payload_bytes(std::uint64_t) noexcept { return 0; }

  // The block's fields valid, n_in * n_out == kept, and the length exactly the block's.
  GRADCOMP_HD static bool payload_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept) noexcept {
    if (bytes < isgq_block_bytes) return false;
    const isgq_block b = isgq_block::read(p);
    if (!b.valid()) return false;
    if (static_cast<std::uint64_t>(b.n_in) * b.n_out != kept) return false;
    // Each factor's elements below 2^32 (the dither's element index), so no size below overflows.
    if (b.elements(0) > 0xffffffffull || b.elements(1) > 0xffffffffull)
      return false;
    return bytes == b.payload_bytes();
  }

  static float parameter(const std::byte* p, const isgq_block& b, unsigned f, std::uint64_t k) noexcept {
    const std::uint64_t first = f == 0 ? 0 : b.parameters(0);
    return bits_float(load_le<std::uint32_t>(p + isgq_block_bytes + 4 * (first + k)));
  }
  static const std::byte* codes(const std::byte* p, const isgq_block& b) noexcept {
    return p + isgq_block_bytes + 4 * (b.parameters(0) + b.parameters(1));
  }

  // The parameters (finite; scales with the sign bit clear), every code, the padding bits.
  static errc check_parameters(const std::byte* p, std::uint64_t) noexcept {
    const isgq_block b = isgq_block::read(p);
    for (unsigned f = 0; f < 2; ++f)
      for (std::uint64_t k = 0; k < b.parameters(f); ++k) {
        const std::uint32_t bits = float_bits(parameter(p, b, f, k));
        if ((bits & 0x7f800000u) == 0x7f800000u) return errc::non_finite_input;
        if (b.dithered() && (bits & 0x80000000u) != 0) return errc::malformed_payload;
      }
    const std::byte* c = codes(p, b);
    const unsigned w = b.code_bits();
    const std::uint32_t top = b.dithered() ? 2u * b.levels + 1u : b.levels;
    std::uint64_t at = 0;
    for (unsigned f = 0; f < 2; ++f)
      for (std::uint64_t i = 0; i < b.elements(f); ++i, at += w) {
        const std::uint32_t code = load_bits(c, at, w);
        if (code > top) return errc::malformed_payload;
        if (b.dithered() && code != 0 && float_bits(parameter(p, b, f, i / b.bucket)) == 0)
          return errc::malformed_payload;
      }
    const std::uint64_t bits = at, bytes = b.code_bytes();
    if (bits % 8 != 0 && (static_cast<unsigned>(c[bytes - 1]) >> (bits % 8)) != 0) return errc::malformed_payload;
    return errc::ok;
  }

  // The rebuilt factors of a checked payload.
  static isgq_factors_hat rebuild(const std::byte* p) {
    const isgq_block b = isgq_block::read(p);
    isgq_factors_hat h;
    const std::byte* c = codes(p, b);
    const unsigned w = b.code_bits();
    std::uint64_t at = 0;
    for (unsigned f = 0; f < 2; ++f) {
      std::vector<double>& out = f == 0 ? h.x : h.delta;
      out.assign(static_cast<std::size_t>(b.elements(f)), 0.0);
      isgq_dither_stream dither(b.key, b.step, b.stream, f);
      for (std::uint64_t i = 0; i < b.elements(f); ++i, at += w) {
        const std::uint32_t code = load_bits(c, at, w);
        if (b.dithered()) {
          if (code == 0) continue;
          const double u = dither(static_cast<std::uint32_t>(i));
          const double q = static_cast<double>(code) - 1.0 - b.levels;
          out[i] = static_cast<double>(parameter(p, b, f, i / b.bucket)) * (q - u);
        } else if (code < b.levels) {
          out[i] = static_cast<double>(parameter(p, b, f, code));
        }
      }
    }
    return h;
  }

  // Calls row(r, sums) for each row r of the section's values in [first / cols, ...) covering
  // values first .. first + count - 1, sums[c] being value r * cols + c (binary64, b ascending).
  template <class Row>
  static void for_each_row(const std::byte* p, std::size_t first, std::size_t count, Row&& row) {
    if (count == 0) return;
    const isgq_block b = isgq_block::read(p);
    const isgq_factors_hat h = rebuild(p);
    const bool in_out = b.layout == 0;
    const std::size_t rows = in_out ? b.n_in : b.n_out, cols = in_out ? b.n_out : b.n_in;
    const std::vector<double>& a = in_out ? h.x : h.delta;
    const std::vector<double>& o = in_out ? h.delta : h.x;
    std::vector<double> sums(cols);
    for (std::size_t r = first / cols; r <= (first + count - 1) / cols; ++r) {
      std::fill(sums.begin(), sums.end(), 0.0);
      for (std::size_t k = 0; k < b.batch; ++k) {
        const double ar = a[k * rows + r];
        if (ar == 0.0) continue;  // adds only zeros: the sums stay bitwise the same
        const double* orow = o.data() + k * cols;
        for (std::size_t c = 0; c < cols; ++c) sums[c] += rounded(ar * orow[c]);
      }
      row(r, sums.data(), cols);
    }
  }

  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) {
    const std::size_t last = first + count;
    for_each_row(p, first, count, [&](std::size_t r, const double* sums, std::size_t cols) {
      const std::size_t lo = std::max(first, r * cols), hi = std::min(last, (r + 1) * cols);
      for (std::size_t j = lo; j < hi; ++j) acc[at(j - first)] += static_cast<T>(sums[j - r * cols]);
    });
  }
  // The values themselves (a sum below T's range rounds to a zero of its sign, as in value()).
  template <class T>
  static void values(const std::byte* p, std::size_t count, T* out) {
    for_each_row(p, 0, count, [&](std::size_t r, const double* sums, std::size_t cols) {
      const std::size_t lo = r * cols, hi = std::min(count, (r + 1) * cols);
      for (std::size_t j = lo; j < hi; ++j) out[j] = static_cast<T>(sums[j - lo]);
    });
  }
  template <class T>
  static T value(const std::byte* p, std::size_t j) {
    T v = T(0);
    for_each_row(p, j, 1, [&](std::size_t r, const double* sums, std::size_t cols) {
      v = static_cast<T>(sums[j - r * cols]);
    });
    return v;
  }

  // Parameters and codes, then a bound of the values' magnitudes: the sum over b of the largest
  // magnitudes of row b of each factor. A payload whose bound exceeds half of T's largest value is
  // refused with value_out_of_range (whether or not a value would overflow: the check stays
  // O(B (n_in + n_out)), however large the product); below it every value fits T, and `largest`
  // is the bound (an upper bound of the largest magnitude, not the magnitude itself).
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) {
    largest = 0.0;
    if (const errc e = check_parameters(p, kept); e != errc::ok) return e;
    const isgq_block b = isgq_block::read(p);
    const isgq_factors_hat h = rebuild(p);
    double bound = 0.0;
    for (std::size_t k = 0; k < b.batch; ++k) {
      double mx = 0.0, md = 0.0;
      for (std::size_t i = 0; i < b.n_in; ++i) mx = std::max(mx, std::fabs(h.x[k * b.n_in + i]));
      for (std::size_t o = 0; o < b.n_out; ++o) md = std::max(md, std::fabs(h.delta[k * b.n_out + o]));
      bound += rounded(mx * md);
    }
    if (!(bound <= 0.5 * static_cast<double>(std::numeric_limits<T>::max()))) return errc::value_out_of_range;
    largest = bound;
    return errc::ok;
  }

  // Values alone cannot be written in this coding: the producer writes the payload.
  template <class T>
  static errc encode(span<const T>, std::byte*) noexcept {
    return errc::invalid_argument;
  }
};

}  // namespace detail
}  // namespace gradcomp
