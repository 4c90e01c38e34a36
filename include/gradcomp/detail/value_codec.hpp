// Value codings of the wire format. Encoding refuses NaN, infinities and finite values that do
// not fit the coding; decoding refuses non-finite values and values that do not fit the
// destination type, so a message can never poison a receiver's accumulator.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../error.hpp"
#include "../span.hpp"
#include "../wire/format.hpp"
#include "bytes.hpp"
#include "half.hpp"

namespace gradcomp {
namespace detail {

template <class T>
errc encode_values(span<const T> v, wire::value_coding c, std::byte* dst) noexcept {
  for (std::size_t j = 0; j < v.size(); ++j) {
    const T x = v[j];
    if (!std::isfinite(x)) return errc::non_finite_input;
    switch (c) {
      case wire::value_coding::fp32: {
        const float f = static_cast<float>(x);
        if (!std::isfinite(f)) return errc::value_out_of_range;
        store_le<std::uint32_t>(dst + 4 * j, float_bits(f));
        break;
      }
      case wire::value_coding::fp64:
        store_le<std::uint64_t>(dst + 8 * j, double_bits(static_cast<double>(x)));
        break;
      case wire::value_coding::fp16: {
        std::uint16_t h;
        const float f = static_cast<float>(x);
        if (!std::isfinite(f) || !float_to_half(f, &h)) return errc::value_out_of_range;
        store_le<std::uint16_t>(dst + 2 * j, h);
        break;
      }
      case wire::value_coding::bf16: {
        std::uint16_t b;
        const float f = static_cast<float>(x);
        if (!std::isfinite(f) || !float_to_bf16(f, &b)) return errc::value_out_of_range;
        store_le<std::uint16_t>(dst + 2 * j, b);
        break;
      }
      default:
        return errc::unknown_coding;
    }
  }
  return errc::ok;
}

// Value j of a payload whose coding was validated by the caller. Sets err to non_finite_input for
// a NaN or infinity on the wire, and to value_out_of_range for a finite fp64 value beyond T.
template <class T>
inline T load_value(const std::byte* p, wire::value_coding c, std::size_t j, errc& err) noexcept {
  float f = 0.0f;
  switch (c) {
    case wire::value_coding::fp32: f = bits_float(load_le<std::uint32_t>(p + 4 * j)); break;
    case wire::value_coding::fp16: f = half_to_float(load_le<std::uint16_t>(p + 2 * j)); break;
    case wire::value_coding::bf16: f = bf16_to_float(load_le<std::uint16_t>(p + 2 * j)); break;
    case wire::value_coding::fp64: {
      const double d = bits_double(load_le<std::uint64_t>(p + 8 * j));
      const T t = static_cast<T>(d);
      if (!std::isfinite(d)) err = errc::non_finite_input;
      else if (!std::isfinite(t)) err = errc::value_out_of_range;
      return t;
    }
    default:
      err = errc::unknown_coding;
      return T(0);
  }
  if (!std::isfinite(f)) err = errc::non_finite_input;
  return static_cast<T>(f);
}

// Checks `count` values of a payload: errc::ok, non_finite_input or value_out_of_range (fp64
// beyond T), and sets `largest` to the largest magnitude among them (as T would hold it; 0 for an
// empty payload) when they are sound. The coding is dispatched once, outside the loop; for the
// 16- and 32-bit codings one integer maximum of the magnitude bits gives both answers.
template <class T>
errc check_values(const std::byte* p, wire::value_coding c, std::size_t count, double& largest) noexcept {
  largest = 0.0;
  switch (c) {
    case wire::value_coding::fp32: {
      std::uint32_t top = 0;
      for (std::size_t j = 0; j < count; ++j) {
        const std::uint32_t bits = load_le<std::uint32_t>(p + 4 * j) & 0x7fffffffu;
        top = bits > top ? bits : top;
      }
      if (top >= 0x7f800000u) return errc::non_finite_input;
      largest = static_cast<double>(bits_float(top));
      return errc::ok;
    }
    case wire::value_coding::fp16:
    case wire::value_coding::bf16: {
      const bool half = c == wire::value_coding::fp16;
      const std::uint16_t exp = half ? 0x7c00u : 0x7f80u;
      std::uint16_t top = 0;
      for (std::size_t j = 0; j < count; ++j) {
        const auto bits = static_cast<std::uint16_t>(load_le<std::uint16_t>(p + 2 * j) & 0x7fffu);
        top = bits > top ? bits : top;
      }
      if (top >= exp) return errc::non_finite_input;
      largest = static_cast<double>(half ? half_to_float(top) : bf16_to_float(top));
      return errc::ok;
    }
    default: {
      errc e = errc::ok;
      for (std::size_t j = 0; j < count && e == errc::ok; ++j) {
        const double x = std::fabs(static_cast<double>(load_value<T>(p, c, j, e)));
        largest = x > largest ? x : largest;
      }
      if (e != errc::ok) largest = 0.0;
      return e;
    }
  }
}

// check_values without the largest magnitude.
template <class T>
errc check_values(const std::byte* p, wire::value_coding c, std::size_t count) noexcept {
  double unused = 0.0;
  return check_values<T>(p, c, count, unused);
}

// acc[index(j)] += value j, for a payload already checked; index(j) gives the position.
template <class T, class IndexAt>
void add_values(const std::byte* p, wire::value_coding c, std::size_t count, T* acc,
                IndexAt&& index) noexcept {
  switch (c) {
    case wire::value_coding::fp32:
      for (std::size_t j = 0; j < count; ++j)
        acc[index(j)] += static_cast<T>(bits_float(load_le<std::uint32_t>(p + 4 * j)));
      break;
    case wire::value_coding::fp16:
      for (std::size_t j = 0; j < count; ++j)
        acc[index(j)] += static_cast<T>(half_to_float(load_le<std::uint16_t>(p + 2 * j)));
      break;
    case wire::value_coding::bf16:
      for (std::size_t j = 0; j < count; ++j)
        acc[index(j)] += static_cast<T>(bf16_to_float(load_le<std::uint16_t>(p + 2 * j)));
      break;
    default: {
      errc unused = errc::ok;
      for (std::size_t j = 0; j < count; ++j) acc[index(j)] += load_value<T>(p, c, j, unused);
      break;
    }
  }
}

}  // namespace detail
}  // namespace gradcomp
