// Fuzz target: encode -> validate -> decode round trips of wire format v1.
//
// The input bytes describe a step: element type (float or double), options (index coding forced
// or automatic, value codings, checksum) and up to four sections (tensor id, numel up to 2^16,
// or up to 2^32 - 1 for sparse sections, dense or sparse, an index set drawn at some density or
// spelled out, and values drawn from a generator, from the bytes, or from a table of rounding
// and range boundaries), optionally with one defect (unsorted, duplicate or out-of-range index,
// size mismatches, NaN, ...). Input layout: see `read_step`.
//
// Properties checked:
//   - encode fails exactly when an independent model of the documented rules says so, with the
//     documented errc (first failing section, structure before values), and never crashes;
//   - on success: the size equals encoded_bytes and is at most max_encoded_bytes, one byte less
//     of output is refused with output_too_small, encoding is deterministic;
//   - validate accepts the message, for_each_section reports the sections as given, with the
//     forced index coding or, for `automatic`, one no larger than raw, delta_varint and bitmap;
//     every index payload has exactly the size an independent computation gives;
//   - decode_section / decode / decode_accumulate give back exactly the indices and, for fp32
//     and fp64, bitwise the values (fp32 from double inputs: the correctly rounded float); for
//     fp16 and bf16 the library's own rounding (detail::float_to_half / float_to_bf16), which
//     must equal a reference round-to-nearest-even and lie within half an ulp of the input
//     (double inputs: of the input rounded to float first, as docs/wire_format.md specifies).
//
// Deviations of the library found by this harness and not fixed yet are tolerated unless the
// harness is built with -DGRADCOMP_FUZZ_STRICT=1 (see the report next to each).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <gradcomp/detail/half.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include "fuzz_common.hpp"

#ifndef GRADCOMP_FUZZ_STRICT
// Known deviations from the documentation (0 tolerates them; 1 checks the documented behaviour):
//  1. encoded_bytes does not look at values, so for a NaN it returns a size where encode
//     returns non_finite_input (it is documented to return the error encode would report).
//  2. The allocating encode sizes its vector with max_encoded_bytes before checking the input:
//     a sparse section with kept > numel and forced rice coding asks for ~2^60 bytes
//     (std::bad_alloc; AddressSanitizer aborts) instead of throwing kept_exceeds_numel.
//  3. max_section_bytes of a sparse section with kept == 0 and forced rice coding is
//     32 + ceil(numel / 8) instead of 32, so the allocating encode of an empty section of a
//     2^32-element tensor allocates 512 MiB.
#define GRADCOMP_FUZZ_STRICT 0
#endif

namespace {

using gradcomp::errc;
using gradcomp::span;
using gradcomp::tensor_message;
using gradcomp::wire::index_coding;
using gradcomp::wire::section_header;
using gradcomp::wire::value_coding;
namespace wire = gradcomp::wire;
namespace gdetail = gradcomp::detail;
using namespace gradcomp_fuzz;

constexpr std::uint32_t max_dense_numel = std::uint32_t(1) << 16;
constexpr std::size_t max_kept = std::size_t(1) << 16;
// Buffers the harness allocates stay below this (checked before allocating).
constexpr std::uint64_t max_buffer_bytes = std::uint64_t(1) << 26;

enum class defect : std::uint8_t {
  none,
  swap_indices,        // indices_not_increasing
  duplicate_index,     // indices_not_increasing
  index_too_large,     // index_out_of_range
  values_size,         // size_mismatch (sparse: values vs indices; dense: values vs numel)
  kept_above_numel,    // kept_exceeds_numel
  sparse_marked_dense, // size_mismatch (dense with indices)
  tensor_id_too_large, // size_overflow
  non_finite_value,    // non_finite_input
};

template <class T>
struct section_data {
  std::size_t tensor = 0;
  std::size_t numel = 0;
  bool dense = false;
  std::vector<std::uint32_t> indices;
  std::vector<T> values;
  std::uint32_t columns = 1;  // one_bit's layout (tensor_message::parameters)
  std::uint32_t bucket = 0;   // qsgd's layout
  std::uint32_t levels = 0;
  std::vector<float> norms;   // qsgd's norms (tensor_message::parameters.scales)
  bool with_norms = false;
};

template <class T>
struct step {
  wire::encode_options opt;
  std::vector<section_data<T>> sections;
  std::vector<tensor_message<T>> messages;  // views of `sections`, built last
};

value_coding pick_value_coding(unsigned sel) {
  switch (sel & 15u) {
    case 0: case 4: case 8: return value_coding::fp32;
    case 1: case 5: return value_coding::fp64;
    case 9: return value_coding::qsgd;
    case 2: case 6: case 10: return value_coding::fp16;
    case 3: case 7: return value_coding::bf16;
    case 11: return static_cast<value_coding>(0);  // not a coding
    case 12: return value_coding::scaled_sign;
    case 13: return value_coding::ternary;
    case 14: return value_coding::one_bit;
    default: return static_cast<value_coding>(22);  // reserved range
  }
}

// Values that sit on the rounding and range boundaries of the value codings.
const double boundary_values[] = {
    0.0,
    1.0,
    65504.0,                                       // largest half
    65519.99609375,                                // largest float rounding to 65504
    65520.0,                                       // first float rounding to infinity
    65536.0,
    6.103515625e-05,                               // 2^-14, smallest normal half
    5.9604644775390625e-08,                        // 2^-24, smallest subnormal half
    2.98023223876953125e-08,                       // 2^-25, ties to zero
    4.470348358154296875e-08,                      // 1.5 * 2^-24, tie between subnormals
    1.00048828125,                                 // 1 + 2^-11: half tie
    1.00146484375,                                 // 1 + 3 * 2^-11: half tie, rounds up
    1.00390625,                                    // 1 + 2^-8: bf16 tie
    1.01171875,                                    // 1 + 3 * 2^-8: bf16 tie, rounds up
    1.0004882812500009,                            // just above a half tie (double only)
    1.0039062500000009,                            // just above a bf16 tie (double only)
    65519.999999046326,                            // 65520 - 2^-20 (double only)
    3.3895313892515355e+38,                        // largest bf16 (0x7f7f)
    3.3961775292304611e+38,                        // bf16 tie to infinity (0x7f7f8000)
    3.4028234663852886e+38,                        // largest float
    3.4028235677973366e+38,                        // largest double rounding to float max
    3.4028235677973370e+38,                        // rounds to float infinity
    1.1754943508222875e-38,                        // smallest normal float
    1.4012984643248171e-45,                        // smallest subnormal float
    7.0064923216240854e-46,                        // half of it (float tie to zero)
    1.0e300,
    std::numeric_limits<double>::max(),
    std::numeric_limits<double>::denorm_min(),
};

template <class T>
T next_ulps(T x, int k) {
  for (; k > 0; --k) x = std::nextafter(x, std::numeric_limits<T>::infinity());
  for (; k < 0; ++k) x = std::nextafter(x, -std::numeric_limits<T>::infinity());
  return x;
}

template <class T>
T draw_value(unsigned mode, byte_reader& in, splitmix64& rng, unsigned scale) {
  switch (mode) {
    case 0: {  // smooth: uniform in [-1, 1) times 2^(scale - 24)
      const double u = static_cast<double>(rng.next() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
      return static_cast<T>(std::ldexp(u, static_cast<int>(scale % 48) - 24));
    }
    case 1: {  // bits straight from the input
      if constexpr (std::is_same_v<T, float>) return float_from_bits(in.u32());
      else return (in.u8() & 1) ? static_cast<double>(float_from_bits(in.u32()))
                                : double_from_bits(in.u64());
    }
    case 2: {  // a boundary, a few ulps around it, either sign
      const std::uint64_t r = rng.next();
      const std::size_t n = sizeof boundary_values / sizeof boundary_values[0];
      T x = static_cast<T>(boundary_values[r % n]);
      x = next_ulps(x, static_cast<int>((r >> 8) % 5) - 2);
      return ((r >> 16) & 1) ? -x : x;
    }
    default: {  // small integers, lots of exact ties in every coding
      const std::uint64_t r = rng.next();
      return std::ldexp(static_cast<T>(static_cast<int>(r % 9) - 4),
                        static_cast<int>((r >> 8) % 64) - 32);
    }
  }
}

// Input layout (every read past the end gives zero):
//   byte 0: bit 0 element type (double), bit 1 checksum, bits 2-4 index coding, bit 5 which
//           invalid index coding, bits 6-7 unused
//   byte 1: value coding (low nibble) and dense value coding (high nibble): see pick_value_coding
//           (qsgd sections draw their bucket, levels, norms and levels from the section's seed)
//   byte 2: bits 0-2 number of sections (mod 5), bits 3-7 defect (0-7 as in `defect` after
//           `none`, 8-31 none)
//   per section:
//     flags: bit 0 dense, bits 1-2 numel mode (0: one byte, 1: two bytes, 2: 2^16 minus one
//            byte & 63, 3: four bytes for sparse sections unless bitmap is forced, else two),
//            bits 3-4 index mode (0: density d/256, 3: (d/256)^4, 1: gaps from the input,
//            2: by d & 3 none / all / the last d / a stride), bits 5-6 value mode (0: smooth,
//            1: bits from the input, 2: boundary table, 3: small integers), bit 7 mix modes
//     tensor id (1 byte), numel (per mode), density d (1 byte), seed (8 bytes),
//     then in index mode 1 the gaps (one byte each; 255 is followed by a four-byte gap; a gap
//     reaching numel ends the list), then in value mode 1 the values (float: 4 bytes; double:
//     a selector byte, odd -> 4 bytes of float, even -> 8 bytes of double).
//   All multi-byte numbers are little-endian.
template <class T>
step<T> read_step(byte_reader& in, std::uint8_t b0) {
  step<T> st;
  st.opt.checksum = (b0 & 2u) != 0;
  switch ((b0 >> 2) & 7u) {
    case 2: st.opt.indices = index_coding::raw_u32; break;
    case 3: st.opt.indices = index_coding::delta_varint; break;
    case 4: st.opt.indices = index_coding::rice; break;
    case 5: st.opt.indices = index_coding::bitmap; break;
    case 7:
      st.opt.indices = (b0 & 0x20u) ? index_coding::dense : static_cast<index_coding>(0x80);
      break;
    default: st.opt.indices = index_coding::automatic; break;
  }
  const std::uint8_t b1 = in.u8();
  st.opt.values = pick_value_coding(b1 & 15u);
  st.opt.dense_values = pick_value_coding(b1 >> 4);
  const std::uint8_t b2 = in.u8();
  const unsigned count = (b2 & 7u) % 5u;
  const unsigned d = b2 >> 3;
  const defect def = d <= 7 ? static_cast<defect>(d + 1) : defect::none;

  for (unsigned s = 0; s < count; ++s) {
    section_data<T> sec;
    const std::uint8_t f = in.u8();
    sec.tensor = in.u8();
    sec.dense = (f & 1u) != 0;
    const unsigned numel_mode = (f >> 1) & 3u;
    const unsigned index_mode = (f >> 3) & 3u;
    const unsigned value_mode = (f >> 5) & 3u;
    const bool value_flag = (f & 0x80u) != 0;
    // Huge tensors only for sparse sections whose coding does not take numel / 8 bytes.
    const bool huge_ok = !sec.dense && st.opt.indices != index_coding::bitmap;
    switch (numel_mode) {
      case 0: sec.numel = in.u8(); break;
      case 1: sec.numel = in.u16(); break;
      case 2: sec.numel = max_dense_numel - (in.u8() & 0x3fu); break;
      default: sec.numel = huge_ok ? in.u32() : in.u16(); break;
    }
    const std::uint8_t density = in.u8();
    splitmix64 rng(in.u64() ^ (std::uint64_t(s) << 56));
    const std::uint64_t n = sec.numel;

    if (!sec.dense) {
      auto& idx = sec.indices;
      switch (index_mode) {
        case 0:
        case 3: {  // each element with probability p (skewed towards sparse for mode 3)
          double p = density / 256.0;
          if (index_mode == 3) p = p * p * p * p;
          if (n <= max_dense_numel) {
            // Geometric gaps: the same distribution as one coin per element, in O(kept).
            const double log_miss = std::log1p(-std::min(p, 0.999999));
            for (std::uint64_t i = 0; p > 0 && idx.size() < max_kept;) {
              const double u = (static_cast<double>(rng.next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
              i += static_cast<std::uint64_t>(std::min(std::log(u) / log_miss, 1e12));
              if (i >= n) break;
              idx.push_back(static_cast<std::uint32_t>(i++));
            }
          } else {
            const std::uint64_t k = std::min<std::uint64_t>(n, 16u * density);
            for (std::uint64_t j = 0; j < k; ++j) idx.push_back(static_cast<std::uint32_t>(rng.below(n)));
            std::sort(idx.begin(), idx.end());
            idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
          }
          break;
        }
        case 1: {  // gaps from the input: one byte, 255 escapes to four
          std::uint64_t next = 0;
          const std::size_t limit = std::min<std::size_t>(max_kept, 4096);
          while (!in.empty() && idx.size() < limit) {
            std::uint64_t gap = in.u8();
            if (gap == 255) gap = in.u32();
            if (next + gap >= n) break;
            idx.push_back(static_cast<std::uint32_t>(next + gap));
            next += gap + 1;
          }
          break;
        }
        default: {  // none, all, the last few, or a fixed stride
          const std::uint64_t m = std::min<std::uint64_t>(n, density);
          switch (density & 3u) {
            case 0: break;
            case 1:
              for (std::uint64_t i = 0; i < std::min<std::uint64_t>(n, max_kept); ++i)
                idx.push_back(static_cast<std::uint32_t>(i));
              break;
            case 2:
              for (std::uint64_t i = n - m; i < n; ++i) idx.push_back(static_cast<std::uint32_t>(i));
              break;
            default: {
              const std::uint64_t stride = 1 + (rng.next() % (1 + density)) *
                                                   (n > max_dense_numel ? (n >> 12) + 1 : 1);
              for (std::uint64_t i = rng.below(stride); i < n && idx.size() < max_kept; i += stride)
                idx.push_back(static_cast<std::uint32_t>(i));
              break;
            }
          }
          break;
        }
      }
    }
    const std::size_t nvalues = sec.dense ? static_cast<std::size_t>(n) : sec.indices.size();
    sec.values.resize(nvalues);
    for (auto& v : sec.values) {
      // value_flag mixes the modes within a section.
      const unsigned mode = value_flag ? static_cast<unsigned>(rng.next() % 4) : value_mode;
      v = draw_value<T>(mode, in, rng, density);
    }
    // scaled_sign holds one magnitude per section: mostly give it one (the signs stay drawn).
    const value_coding coding = sec.dense ? st.opt.dense_values : st.opt.values;
    if (coding == value_coding::scaled_sign && !sec.values.empty() && rng.next() % 4 != 0) {
      const T magnitude = std::fabs(sec.values[rng.below(sec.values.size())]);
      for (auto& v : sec.values) v = std::signbit(v) ? -magnitude : magnitude;
    }
    // ternary holds 0 and one magnitude: mostly give it those (signs drawn, about a third zeros).
    if (coding == value_coding::ternary && !sec.values.empty() && rng.next() % 4 != 0) {
      const T magnitude = std::fabs(sec.values[rng.below(sec.values.size())]);
      for (auto& v : sec.values) v = rng.next() % 3 == 0 ? T(0) : (std::signbit(v) ? -magnitude : magnitude);
    }
    // one_bit: mostly a column count that divides the values (else any, up to one past them), and
    // mostly two values per column, one of each sign (the signs stay drawn).
    if (coding == value_coding::one_bit) {
      const std::size_t kept = sec.values.size();
      std::uint32_t cols = 1;
      if (rng.next() % 8 == 0) {
        cols = static_cast<std::uint32_t>(rng.below(kept + 2));
      } else if (kept != 0) {
        for (int tries = 0; tries < 4; ++tries) {
          const auto c = static_cast<std::uint32_t>(1 + rng.below(std::min<std::size_t>(kept, 64)));
          if (kept % c == 0) cols = c;
        }
      }
      sec.columns = cols;
      if (cols != 0 && kept % cols == 0 && rng.next() % 4 != 0) {
        for (std::size_t c = 0; c < cols && c < kept; ++c) {
          const T neg = -std::fabs(sec.values[rng.below(kept)]), pos = std::fabs(sec.values[rng.below(kept)]);
          for (std::size_t j = c; j < kept; j += cols) sec.values[j] = std::signbit(sec.values[j]) ? neg : pos;
        }
      }
    }
    // qsgd: mostly a bucket in [1, 64] and levels in [1, 300] (else 0, or levels beyond 65535),
    // mostly norms given (else each bucket's largest magnitude), and mostly values on the levels
    // (about half of them level 0; else the drawn values, rarely on a level).
    if (coding == value_coding::qsgd) {
      const std::size_t kept = sec.values.size();
      sec.bucket = rng.next() % 16 == 0 ? 0u : static_cast<std::uint32_t>(1 + rng.below(64));
      const auto l = rng.next() % 16;
      sec.levels = l == 0 ? 0u : l == 1 ? 65536u : l == 2 ? 65535u : static_cast<std::uint32_t>(1 + rng.below(300));
      sec.with_norms = rng.next() % 4 != 0;
      if (sec.bucket != 0 && sec.levels != 0 && sec.levels <= 65535 && rng.next() % 4 != 0) {
        const std::size_t buckets = (kept + sec.bucket - 1) / sec.bucket;
        sec.norms.resize(buckets);
        for (auto& x : sec.norms)
          x = static_cast<float>(rng.next() % 8 == 0 ? 0.0 : std::ldexp(1.0 + rng.below(1000), -5));
        for (std::size_t j = 0; j < kept; ++j) {
          const float norm = sec.norms[j / sec.bucket];
          const bool zero = rng.next() % 2 == 0 || norm == 0.0f;
          const auto level = zero ? 0u : static_cast<std::uint32_t>(1 + rng.below(sec.levels));
          sec.values[j] = gdetail::qsgd_value<T>(norm, level, sec.levels, rng.next() % 2 != 0);
        }
        // Without norms the encoder takes each bucket's largest magnitude: put one at level s.
        if (!sec.with_norms)
          for (std::size_t b = 0; b < buckets; ++b)
            if (rng.next() % 4 != 0) sec.values[b * sec.bucket] = static_cast<T>(sec.norms[b]);
      } else {
        sec.norms.assign(sec.bucket == 0 ? 0 : (kept + sec.bucket - 1) / sec.bucket, 1.0f);
      }
      if (sec.with_norms && !sec.norms.empty() && rng.next() % 16 == 0)
        sec.norms[rng.below(sec.norms.size())] = rng.next() % 2 ? -1.0f : std::numeric_limits<float>::infinity();
    }
    st.sections.push_back(std::move(sec));
  }

  // At most one defect, in the last section.
  if (!st.sections.empty() && def != defect::none) {
    auto& sec = st.sections.back();
    auto& idx = sec.indices;
    switch (def) {
      case defect::swap_indices:
        if (idx.size() >= 2) std::swap(idx[idx.size() / 2 - 1], idx[idx.size() / 2]);
        break;
      case defect::duplicate_index:
        if (idx.size() >= 2) idx[idx.size() - 1] = idx[idx.size() - 2];
        break;
      case defect::index_too_large:
        if (!sec.dense) {
          sec.values.push_back(T(1));
          idx.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(sec.numel, 0xffffffffu)));
        }
        break;
      case defect::values_size:
        if (!sec.values.empty()) sec.values.pop_back();
        else sec.values.push_back(T(0));
        break;
      case defect::kept_above_numel:
        if (!sec.dense && !idx.empty()) sec.numel = idx.size() - 1;
        break;
      case defect::sparse_marked_dense:
        if (!idx.empty()) sec.dense = true;
        break;
      case defect::tensor_id_too_large:
        if (sizeof(std::size_t) > 4) sec.tensor = static_cast<std::size_t>(0xffffffffu) + 1;
        break;
      case defect::non_finite_value:
        if (!sec.values.empty())
          sec.values[sec.values.size() / 2] = (idx.size() & 1) ? std::numeric_limits<T>::infinity()
                                                               : std::numeric_limits<T>::quiet_NaN();
        break;
      case defect::none: break;
    }
  }

  for (const auto& sec : st.sections) {
    tensor_message<T> m;
    m.tensor = sec.tensor;
    m.numel = sec.numel;
    m.dense = sec.dense;
    m.indices = span<const std::uint32_t>(sec.indices.data(), sec.indices.size());
    m.values = span<const T>(sec.values.data(), sec.values.size());
    m.parameters.columns = sec.columns;
    m.parameters.bucket = sec.bucket;
    m.parameters.levels = sec.levels;
    // Norms for every bucket of the values the section ends with (a defect may change their count).
    if (sec.with_norms && sec.bucket != 0 && sec.norms.size() * sec.bucket >= sec.values.size())
      m.parameters.scales = sec.norms.data();
    st.messages.push_back(m);
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Independent model of the encoder's documented rules.
// ---------------------------------------------------------------------------------------------

bool known_value_coding(value_coding c) {
  return c == value_coding::fp32 || c == value_coding::fp64 || c == value_coding::fp16 ||
         c == value_coding::bf16 || c == value_coding::scaled_sign || c == value_coding::ternary ||
         c == value_coding::one_bit || c == value_coding::qsgd || c == value_coding::qsgd_gamma;
}

// QSGD's levels of the values of m as the format defines them: bucket by bucket, its norm (given,
// or the bucket's largest magnitude), then each value's level and sign; the first error in that
// order (non_finite_input, value_out_of_range), and the lengths of both forms.
template <class T>
struct qsgd_model {
  errc error = errc::ok;
  std::uint64_t fixed = 0, gamma = 0;
};
template <class T>
qsgd_model<T> model_qsgd(const tensor_message<T>& m) {
  qsgd_model<T> q;
  const std::uint64_t n = m.values.size(), b = m.parameters.bucket, s = m.parameters.levels;
  const std::uint64_t buckets = (n + b - 1) / b;
  std::uint64_t bits = 0, previous = 0;
  bool any = false;
  auto gamma_bits = [](std::uint64_t x) {
    unsigned width = 0;
    for (; x != 0; x >>= 1) ++width;
    return 2 * width - 1;
  };
  for (std::uint64_t k = 0; k < buckets; ++k) {
    const std::uint64_t first = k * b, last = std::min(n, first + b);
    float norm;
    if (m.parameters.scales != nullptr) {
      norm = m.parameters.scales[k];
      if (!std::isfinite(norm)) return q.error = errc::non_finite_input, q;
    } else {
      double top = 0.0;
      for (std::uint64_t j = first; j < last; ++j) {
        if (!std::isfinite(m.values[j])) return q.error = errc::non_finite_input, q;
        top = std::max(top, std::fabs(static_cast<double>(m.values[j])));
      }
      norm = static_cast<float>(top);
      if (!std::isfinite(norm) || static_cast<double>(norm) != top) return q.error = errc::value_out_of_range, q;
    }
    // Norms are 0 or normal, sign bit clear.
    if (std::signbit(norm) || std::fpclassify(norm) == FP_SUBNORMAL) return q.error = errc::value_out_of_range, q;
    for (std::uint64_t j = first; j < last; ++j) {
      const T x = m.values[j];
      if (!std::isfinite(x)) return q.error = errc::non_finite_input, q;
      if (x == T(0)) continue;
      // The level whose value is |x|, if one is: |x| = norm * (l / s) in binary32, exactly. Levels
      // 1/s apart give values at least 2^-16 apart relatively, so only the levels next to
      // |x| / norm * s can.
      bool found = false;
      const double ratio = std::fabs(static_cast<double>(x)) / static_cast<double>(norm);
      const double near = norm > 0.0f ? std::floor(ratio * static_cast<double>(s)) : 0.0;
      const std::uint64_t lowest = near > 1.0 ? static_cast<std::uint64_t>(std::min(near, 65536.0)) - 1 : 1;
      for (std::uint64_t l = lowest; l <= std::min<std::uint64_t>(s, lowest + 3) && !found && norm > 0.0f; ++l) {
        const float magnitude = norm * (static_cast<float>(l) / static_cast<float>(s));
        if (static_cast<T>(magnitude) != std::fabs(x)) continue;
        found = true;
        bits += gamma_bits(any ? j - previous : j + 1) + 1 + gamma_bits(l);
        previous = j;
        any = true;
      }
      if (!found) return q.error = errc::value_out_of_range, q;
    }
  }
  unsigned width = 1;
  for (std::uint64_t x = s; x != 0; x >>= 1) ++width;
  q.fixed = 12 + 4 * buckets + (n * width + 7) / 8;
  q.gamma = 20 + 4 * buckets + (bits + 7) / 8;
  return q;
}

// Length of a value payload of `kept` values (`columns`: one_bit's; qsgd's from model_qsgd).
std::uint64_t model_value_bytes(value_coding c, std::uint64_t kept, std::uint64_t columns) {
  switch (c) {
    case value_coding::qsgd:
    case value_coding::qsgd_gamma: break;  // from model_qsgd
    case value_coding::fp32: return 4 * kept;
    case value_coding::fp64: return 8 * kept;
    case value_coding::fp16:
    case value_coding::bf16: return 2 * kept;
    case value_coding::scaled_sign: return 4 + (kept + 7) / 8;
    case value_coding::ternary: return 4 + (kept + 3) / 4;
    case value_coding::one_bit: return 4 + 8 * columns + (kept + 7) / 8;
    case value_coding::isgq: break;         // a producer's payload, never drawn here
    case value_coding::unspecified: break;  // never on the wire
  }
  return 0;
}

// one_bit's column count: at least 1, dividing the number of values; qsgd's bucket (at least 1)
// and levels (1 to 65535). Then qsgd's values, which the plan of a section reads to choose the
// shorter form.
template <class T>
errc model_layout_error(const tensor_message<T>& m, value_coding c) {
  const std::uint64_t cols = m.parameters.columns;
  if (c == value_coding::one_bit && (cols == 0 || m.values.size() % cols != 0)) return errc::invalid_argument;
  if (c == value_coding::qsgd || c == value_coding::qsgd_gamma) {
    const std::uint64_t levels = m.parameters.levels;
    if (m.parameters.bucket == 0 || levels == 0 || levels > 65535) return errc::invalid_argument;
    return model_qsgd(m).error;
  }
  return errc::ok;
}

// Structural checks of one section (encoded_bytes and encode), in the documented order.
template <class T>
errc model_plan_error(const tensor_message<T>& m, const wire::encode_options& opt) {
  if (m.tensor > 0xffffffffull || m.numel > 0xffffffffull) return errc::size_overflow;
  if (m.dense) {
    if (m.values.size() != m.numel || !m.indices.empty()) return errc::size_mismatch;
    if (!known_value_coding(opt.dense_values)) return errc::unknown_coding;
    return model_layout_error(m, opt.dense_values);
  }
  if (m.values.size() != m.indices.size()) return errc::size_mismatch;
  if (m.indices.size() > m.numel) return errc::kept_exceeds_numel;
  if (!known_value_coding(opt.values)) return errc::unknown_coding;
  for (std::size_t j = 0; j < m.indices.size(); ++j) {
    if (m.indices[j] >= m.numel) return errc::index_out_of_range;
    if (j > 0 && m.indices[j] <= m.indices[j - 1]) return errc::indices_not_increasing;
  }
  switch (opt.indices) {
    case index_coding::automatic:
    case index_coding::raw_u32:
    case index_coding::delta_varint:
    case index_coding::rice:
    case index_coding::bitmap: return model_layout_error(m, opt.values);
    default: return errc::invalid_argument;
  }
}

// How the value x must come back from coding c (as a double), or false when c cannot hold it.
// fp16 and bf16 round binary64 inputs to binary32 first (docs/wire_format.md, value codings).
template <class T>
bool model_value(T x, value_coding c, double* out) {
  const double xd = static_cast<double>(x);
  const double src = static_cast<double>(static_cast<float>(x));
  switch (c) {
    case value_coding::fp32: return reference_float(xd, out);
    case value_coding::fp64: *out = xd; return true;
    case value_coding::fp16: return std::isfinite(src) && reference_half(src, out);
    case value_coding::bf16: return std::isfinite(src) && reference_bf16(src, out);
    case value_coding::scaled_sign: *out = xd; return true;  // once model_value_error accepted the section
    case value_coding::ternary:  // likewise; a zero comes back +0
    case value_coding::qsgd:
    case value_coding::qsgd_gamma: *out = xd == 0.0 ? 0.0 : xd; return true;
    case value_coding::one_bit: *out = xd; return true;  // likewise
    case value_coding::isgq: break;         // a producer's payload, never drawn here
    case value_coding::unspecified: break;  // never on the wire
  }
  return false;
}

template <class T>
errc model_value_error(const tensor_message<T>& m, const wire::encode_options& opt) {
  const value_coding c = m.dense ? opt.dense_values : opt.values;
  if (c == value_coding::one_bit) {
    // Value by value: finite, held exactly by binary32, and the first value of its sign in its
    // column or equal to it (bitwise).
    const std::size_t cols = m.parameters.columns;
    std::vector<std::uint64_t> first(2 * cols, ~std::uint64_t(0));
    for (std::size_t j = 0; j < m.values.size(); ++j) {
      const T x = m.values[j];
      if (!std::isfinite(x)) return errc::non_finite_input;
      const float f = static_cast<float>(x);
      if (!std::isfinite(f) || static_cast<T>(f) != x) return errc::value_out_of_range;
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      auto& slot = first[2 * (j % cols) + (bits >> 31)];
      if (slot == ~std::uint64_t(0)) slot = bits;
      else if (slot != bits) return errc::value_out_of_range;
    }
    return errc::ok;
  }
  if (c == value_coding::ternary) {
    // Every value finite first; then the largest magnitude, which binary32 must hold exactly, and
    // every other value 0 or of that magnitude.
    double top = 0.0;
    for (const T x : m.values) {
      if (!std::isfinite(x)) return errc::non_finite_input;
      top = std::max(top, std::fabs(static_cast<double>(x)));
    }
    if (static_cast<double>(static_cast<float>(top)) != top) return errc::value_out_of_range;
    for (const T x : m.values)
      if (x != T(0) && std::fabs(static_cast<double>(x)) != top) return errc::value_out_of_range;
    return errc::ok;
  }
  for (std::size_t j = 0; j < m.values.size(); ++j) {
    const T x = m.values[j];
    if (!std::isfinite(x)) return errc::non_finite_input;
    if (c == value_coding::scaled_sign) {
      // One magnitude, the first value's, which binary32 must hold exactly.
      const double first = std::fabs(static_cast<double>(m.values[0]));
      if (static_cast<double>(static_cast<float>(first)) != first || std::fabs(static_cast<double>(x)) != first)
        return errc::value_out_of_range;
      continue;
    }
    double unused;
    if (!model_value(x, c, &unused)) return errc::value_out_of_range;
  }
  return errc::ok;
}

// Exact index payload sizes, computed here from the definitions of the codings.
struct index_payload_sizes {
  std::uint64_t raw = 0, varint = 0, bitmap = 0;
};

index_payload_sizes exact_sizes(const std::vector<std::uint32_t>& idx, std::uint64_t n) {
  index_payload_sizes s;
  s.raw = 4 * idx.size();
  s.bitmap = (n + 7) / 8;
  std::uint64_t next = 0;
  for (const std::uint32_t i : idx) {
    std::uint64_t gap = i - next;
    do {
      ++s.varint;
      gap >>= 7;
    } while (gap != 0);
    next = std::uint64_t(i) + 1;
  }
  return s;
}

std::uint64_t exact_rice_bytes(const std::vector<std::uint32_t>& idx, unsigned r) {
  std::uint64_t bits = 0, next = 0;
  for (const std::uint32_t i : idx) {
    bits += ((i - next) >> r) + 1 + r;
    next = std::uint64_t(i) + 1;
  }
  return (bits + 7) / 8;
}

// ---------------------------------------------------------------------------------------------
// Checks of a successful encoding.
// ---------------------------------------------------------------------------------------------

template <class T, class U>
void check_values(const tensor_message<T>& m, value_coding c, const std::vector<U>& got) {
  FUZZ_CHECK(got.size() == m.values.size());
  for (std::size_t j = 0; j < got.size(); ++j) {
    const T x = m.values[j];
    const double xd = static_cast<double>(x);
    double want = 0;
    switch (c) {
      case value_coding::fp32: {
        // Bitwise the input for float; for double the correctly rounded float.
        FUZZ_CHECK(reference_float(xd, &want));
        FUZZ_CHECK(same_bits(got[j], static_cast<U>(static_cast<float>(x))));
        FUZZ_CHECK(static_cast<double>(got[j]) == want);
        FUZZ_CHECK(std::fabs(static_cast<double>(got[j]) - xd) <= half_ulp(xd, 23, -126));
        break;
      }
      case value_coding::fp64:
      case value_coding::one_bit:
      case value_coding::scaled_sign:  // the input's exact value, sign of zero included
        FUZZ_CHECK(same_bits(got[j], static_cast<U>(x)));
        break;
      case value_coding::ternary:  // the input's exact value; a zero of either sign as +0
      case value_coding::qsgd:
      case value_coding::qsgd_gamma:
        FUZZ_CHECK(same_bits(got[j], x == T(0) ? U(0) : static_cast<U>(x)));
        break;
      case value_coding::fp16:
      case value_coding::bf16: {
        const bool half = c == value_coding::fp16;
        // The library's own rounding of the float value of x.
        std::uint16_t bits = 0;
        const float f = static_cast<float>(x);
        const bool fits = half ? gdetail::float_to_half(f, &bits) : gdetail::float_to_bf16(f, &bits);
        FUZZ_CHECK(fits);
        const float lib = half ? gdetail::half_to_float(bits) : gdetail::bf16_to_float(bits);
        FUZZ_CHECK_MSG(same_bits(got[j], static_cast<U>(lib)),
                       "decoded value differs from the library's own rounding");
        // Round to nearest even of float(x), and the error bound that implies.
        FUZZ_CHECK(model_value(x, c, &want));
        FUZZ_CHECK_MSG(same_bits(static_cast<double>(lib), want),
                       "fp16/bf16 rounding is not round-to-nearest-even");
        const double fd = static_cast<double>(f);
        FUZZ_CHECK_MSG(std::fabs(static_cast<double>(lib) - fd) <=
                           half_ulp(fd, half ? 10 : 7, half ? -14 : -126),
                       "fp16/bf16 value farther than half an ulp from the input");
        break;
      }
      case value_coding::unspecified: FUZZ_CHECK_MSG(false, "a section without a coding was written"); break;
      case value_coding::isgq: FUZZ_CHECK_MSG(false, "values written as a producer's payload"); break;
    }
    FUZZ_CHECK(std::isfinite(got[j]));
  }
}

template <class T>
void check_encoded(const step<T>& st, const std::vector<std::byte>& out) {
  const span<const std::byte> msg(out.data(), out.size());
  const auto validated = wire::validate(msg);
  FUZZ_CHECK_MSG(validated.has_value(), gradcomp::to_string(validated.error()));
  FUZZ_CHECK(validated->version == wire::format_version);
  FUZZ_CHECK(validated->has_checksum() == st.opt.checksum);
  FUZZ_CHECK(validated->flags == (st.opt.checksum ? wire::flag_checksum : 0));
  FUZZ_CHECK(validated->kind == wire::message_kind::gradients);
  FUZZ_CHECK(validated->section_count == st.messages.size());
  FUZZ_CHECK(validated->total_bytes == out.size());

  std::vector<section_header> headers;
  const auto walked = wire::for_each_section(msg, [&](const section_header& s) { headers.push_back(s); });
  FUZZ_CHECK(walked.has_value());
  FUZZ_CHECK(headers.size() == st.messages.size());

  std::vector<std::vector<T>> decoded(headers.size());  // values checked once, then compared
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const section_header& s = headers[i];
    const tensor_message<T>& m = st.messages[i];
    const auto& idx = st.sections[i].indices;
    FUZZ_CHECK(s.tensor == m.tensor);
    FUZZ_CHECK(s.numel == m.numel);
    FUZZ_CHECK(s.kept == m.values.size());
    FUZZ_CHECK(s.role == wire::section_role::gradient);
    // qsgd is written in its shorter form, which may be qsgd_gamma.
    auto written_as = [&](value_coding asked) {
      return s.values == asked || (asked == value_coding::qsgd && s.values == value_coding::qsgd_gamma);
    };
    if (m.dense) {
      FUZZ_CHECK(s.indices == index_coding::dense);
      FUZZ_CHECK(written_as(st.opt.dense_values));
      FUZZ_CHECK(s.index_bytes == 0);
    } else {
      FUZZ_CHECK(written_as(st.opt.values));
      FUZZ_CHECK(s.indices != index_coding::dense);
      if (st.opt.indices != index_coding::automatic) FUZZ_CHECK(s.indices == st.opt.indices);
      const index_payload_sizes ex = exact_sizes(idx, m.numel);
      std::uint64_t want = 0;
      switch (s.indices) {
        case index_coding::raw_u32: want = ex.raw; break;
        case index_coding::delta_varint: want = ex.varint; break;
        case index_coding::bitmap: want = ex.bitmap; break;
        case index_coding::rice:
          FUZZ_CHECK(s.index_parameter <= 31);
          want = exact_rice_bytes(idx, s.index_parameter);
          break;
        default: FUZZ_CHECK(false);
      }
      FUZZ_CHECK(s.index_bytes == want);
      if (s.indices != index_coding::rice) FUZZ_CHECK(s.index_parameter == 0);
      if (st.opt.indices == index_coding::automatic) {
        // `automatic` picks the smallest: never larger than any fixed-size choice.
        FUZZ_CHECK(s.index_bytes <= ex.raw);
        FUZZ_CHECK(s.index_bytes <= ex.varint);
        FUZZ_CHECK(s.index_bytes <= ex.bitmap);
      }
    }
    if (s.values == value_coding::qsgd || s.values == value_coding::qsgd_gamma) {
      // The shorter form, the fixed one on a tie; bucket and levels read back.
      const auto q = model_qsgd(m);
      FUZZ_CHECK(q.error == errc::ok);
      FUZZ_CHECK(s.values == (q.gamma < q.fixed ? value_coding::qsgd_gamma : value_coding::qsgd));
      FUZZ_CHECK(s.value_bytes == std::min(q.fixed, q.gamma));
      FUZZ_CHECK(s.parameters.bucket == m.parameters.bucket && s.parameters.levels == m.parameters.levels);
    } else {
      FUZZ_CHECK(s.value_bytes == model_value_bytes(s.values, m.values.size(), m.parameters.columns));
    }
    if (s.values == value_coding::one_bit) FUZZ_CHECK(s.parameters.columns == m.parameters.columns);

    // Exact indices and values, in the element type of the step.
    std::vector<std::uint32_t> got_idx(m.dense ? 0 : s.kept);
    std::vector<T> got_val(s.kept);
    const auto r = wire::decode_section<T>(msg, s, span<std::uint32_t>(got_idx.data(), got_idx.size()),
                                           span<T>(got_val.data(), got_val.size()));
    FUZZ_CHECK_MSG(r.has_value(), gradcomp::to_string(r.error()));
    FUZZ_CHECK(*r == s.kept);
    if (!m.dense) FUZZ_CHECK(got_idx == idx);
    check_values(m, s.values, got_val);
    decoded[i] = std::move(got_val);
  }

  // The throwing decoder gives the same.
  const auto all = wire::decode<T>(msg);
  FUZZ_CHECK(all.size() == st.messages.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!st.messages[i].dense) FUZZ_CHECK(all[i].indices == st.sections[i].indices);
    FUZZ_CHECK(all[i].header.offset == headers[i].offset);
    FUZZ_CHECK(all[i].values.size() == decoded[i].size());
    FUZZ_CHECK(same_bytes(all[i].values.data(), decoded[i].data(), decoded[i].size() * sizeof(T)));
  }

  // decode_accumulate into zeroed accumulators, when the tensors are distinct and small.
  std::uint64_t total = 0;
  std::size_t tensors = 0;
  for (const auto& m : st.messages) {
    total += m.numel;
    tensors = std::max<std::size_t>(tensors, m.tensor + 1);
  }
  bool distinct = tensors <= 256 && total <= (std::uint64_t(1) << 20);
  std::vector<int> owner(distinct ? tensors : 0, -1);
  for (std::size_t i = 0; distinct && i < st.messages.size(); ++i) {
    if (owner[st.messages[i].tensor] >= 0) distinct = false;
    else owner[st.messages[i].tensor] = static_cast<int>(i);
  }
  if (distinct) {
    std::vector<std::vector<T>> acc(tensors);
    std::vector<span<T>> dest;
    for (std::size_t t = 0; t < tensors; ++t) {
      acc[t].assign(owner[t] >= 0 ? st.messages[owner[t]].numel : 0, T(0));
      dest.emplace_back(acc[t].data(), acc[t].size());
    }
    const auto r = wire::decode_accumulate<T>(msg, span<const span<T>>(dest.data(), dest.size()));
    FUZZ_CHECK_MSG(r.has_value(), gradcomp::to_string(r.error()));
    for (std::size_t i = 0; i < st.messages.size(); ++i) {
      const auto& m = st.messages[i];
      const auto& a = acc[m.tensor];
      // Each kept position holds 0 + its value (so -0 reads back as +0), every other one 0.
      std::vector<bool> kept(a.size(), false);
      for (std::size_t j = 0; j < m.values.size(); ++j) {
        const std::size_t pos = m.dense ? j : m.indices[j];
        kept[pos] = true;
        FUZZ_CHECK(same_bits(a[pos], T(0) + decoded[i][j]));
      }
      for (std::size_t pos = 0; pos < a.size(); ++pos)
        if (!kept[pos]) FUZZ_CHECK(same_bits(a[pos], T(0)));
    }
  }
}

template <class T>
void run(byte_reader& in, std::uint8_t b0) {
  const step<T> st = read_step<T>(in, b0);
  const span<const tensor_message<T>> sections(st.messages.data(), st.messages.size());
  const wire::encode_options& opt = st.opt;

  // The model's verdict: the first section with a structural error or a value error.
  errc expected = errc::ok, expected_plan = errc::ok;
  bool value_error_first = false;
  for (const auto& m : st.messages) {
    const errc pe = model_plan_error(m, opt);
    if (pe != errc::ok) {
      if (expected_plan == errc::ok) expected_plan = pe;
      if (expected == errc::ok) expected = pe;
      continue;
    }
    const errc ve = model_value_error(m, opt);
    if (ve != errc::ok && expected == errc::ok) {
      expected = ve;
      value_error_first = true;
    }
  }
  // A gradient message carries each tensor at most once: checked before any section.
  for (std::size_t i = 0; i < st.messages.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (st.messages[i].tensor == st.messages[j].tensor) {
        expected = expected_plan = errc::duplicate_tensor;
        value_error_first = false;
      }

  // A buffer for the sections encode gets to write: those before the first structural error
  // (that section fails before any size check), each of the size encoded_bytes announces for
  // it alone (checked against the actual output below). Sizes of sections with a defect are
  // never used, so the harness allocates nothing unchecked.
  const std::uint64_t overhead = wire::message_overhead_bytes(opt);
  std::uint64_t room = overhead;
  for (const auto& m : st.messages) {
    if (model_plan_error(m, opt) != errc::ok) break;
    const auto one = wire::encoded_bytes(span<const tensor_message<T>>(&m, 1), opt);
    FUZZ_CHECK_MSG(one.has_value(), gradcomp::to_string(one.error()));
    FUZZ_CHECK(*one >= overhead + wire::section_header_bytes);
    room += *one - overhead;
#if GRADCOMP_FUZZ_STRICT
    if (!m.dense && m.values.empty() && opt.indices != index_coding::bitmap)  // deviation 3
      FUZZ_CHECK(*wire::max_section_bytes(m.numel, 0, false, opt) == wire::section_header_bytes);
#endif
  }
  FUZZ_CHECK(room <= max_buffer_bytes);
  std::vector<std::byte> out(static_cast<std::size_t>(room));
  const auto n = wire::encode(sections, opt, span<std::byte>(out.data(), out.size()));
  const auto predicted = wire::encoded_bytes(sections, opt);
  const auto bound = wire::max_encoded_bytes(sections, opt);

  if (expected != errc::ok) {
    FUZZ_CHECK_MSG(!n.has_value(), "encode accepted an invalid step");
    FUZZ_CHECK_ERRC(n.error(), expected);
    if (!value_error_first) {
      FUZZ_CHECK_ERRC(predicted.error(), expected);
    } else if (GRADCOMP_FUZZ_STRICT) {
      FUZZ_CHECK_ERRC(predicted.error(), expected);  // deviation 1
    } else {
      FUZZ_CHECK_ERRC(predicted.error(), expected_plan);
    }
    // The allocating overload must throw the same error (deviation 2: it may first try to
    // allocate the unchecked bound, which the harness must not let it do).
    if (!bound) {
      // The bound itself is refused (a section beyond 2^32 - 1 elements or keeping more than
      // it has): the allocating encode throws that error before allocating anything.
      try {
        (void)wire::encode(sections, opt);
        FUZZ_CHECK_MSG(false, "the allocating encode accepted an invalid step");
      } catch (const gradcomp::error& e) {
        FUZZ_CHECK_ERRC(e.code(), bound.error());
      }
    } else if (*bound <= max_buffer_bytes) {
      try {
        (void)wire::encode(sections, opt);
        FUZZ_CHECK_MSG(false, "the allocating encode accepted an invalid step");
      } catch (const gradcomp::error& e) {
        FUZZ_CHECK_ERRC(e.code(), expected);
      }
    } else {
      FUZZ_CHECK_MSG(!GRADCOMP_FUZZ_STRICT, "the allocating encode would allocate an unchecked size");
    }
    return;
  }

  FUZZ_CHECK_MSG(n.has_value(), gradcomp::to_string(n.error()));
  FUZZ_CHECK_MSG(predicted.has_value(), gradcomp::to_string(predicted.error()));
  FUZZ_CHECK(*predicted == *n);
  FUZZ_CHECK(*n == room);
  FUZZ_CHECK_MSG(bound.has_value(), gradcomp::to_string(bound.error()));
  FUZZ_CHECK(*n <= *bound);
  out.resize(*n);

  // One byte less, or any shorter buffer, is refused (and written only within its bounds); the
  // allocating overload gives the same bytes.
  {
    std::vector<std::byte> small(*n - 1);
    const auto r = wire::encode(sections, opt, span<std::byte>(small.data(), small.size()));
    FUZZ_CHECK(!r.has_value());
    FUZZ_CHECK_ERRC(r.error(), errc::output_too_small);
    std::vector<std::byte> part(static_cast<std::size_t>(out[*n / 2]) * (*n - 1) / 255);
    const auto rp = wire::encode(sections, opt, span<std::byte>(part.data(), part.size()));
    FUZZ_CHECK(!rp.has_value());
    FUZZ_CHECK_ERRC(rp.error(), errc::output_too_small);
    if (*bound <= max_buffer_bytes) FUZZ_CHECK(wire::encode(sections, opt) == out);
  }

  check_encoded(st, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  byte_reader in(data, size);
  const std::uint8_t b0 = in.u8();
  if (b0 & 1u) run<double>(in, b0);
  else run<float>(in, b0);
  return 0;
}
