// Helpers shared by the fuzz harnesses: a checked assertion that survives NDEBUG, a reader that
// turns fuzzer bytes into numbers, and independent references for the wire format's rules.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <gradcomp/error.hpp>

namespace gradcomp_fuzz {

[[noreturn]] inline void check_failed(const char* cond, const char* file, int line,
                                      const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz property violated: %s%s%s\n", file, line, cond,
               what[0] != '\0' ? " -- " : "", what);
  std::fflush(stderr);
#if defined(__GNUC__) || defined(__clang__)
  __builtin_trap();
#else
  std::abort();
#endif
}

}  // namespace gradcomp_fuzz

// Active in every build type (the harnesses are built in Release too): a violated property aborts
// the process, which libFuzzer reports as a crash and the corpus runner as a failed test.
#define FUZZ_CHECK(cond) \
  ((cond) ? (void)0 : ::gradcomp_fuzz::check_failed(#cond, __FILE__, __LINE__, ""))
#define FUZZ_CHECK_MSG(cond, what) \
  ((cond) ? (void)0 : ::gradcomp_fuzz::check_failed(#cond, __FILE__, __LINE__, (what)))
// Compares two error codes and prints both names when they differ.
#define FUZZ_CHECK_ERRC(actual, expected)                                                     \
  do {                                                                                        \
    const ::gradcomp::errc fuzz_a_ = (actual);                                                \
    const ::gradcomp::errc fuzz_e_ = (expected);                                              \
    if (fuzz_a_ != fuzz_e_) {                                                                 \
      char fuzz_buf_[160];                                                                    \
      std::snprintf(fuzz_buf_, sizeof fuzz_buf_, "got %s, expected %s",                       \
                    ::gradcomp::to_string(fuzz_a_), ::gradcomp::to_string(fuzz_e_));          \
      ::gradcomp_fuzz::check_failed(#actual " == " #expected, __FILE__, __LINE__, fuzz_buf_); \
    }                                                                                         \
  } while (0)

namespace gradcomp_fuzz {

// Consumes the fuzzer's bytes front to back; past the end every read gives zero.
class byte_reader {
 public:
  byte_reader(const std::uint8_t* data, std::size_t size) noexcept : p_(data), n_(size) {}
  bool empty() const noexcept { return pos_ >= n_; }
  std::size_t remaining() const noexcept { return empty() ? 0 : n_ - pos_; }
  std::uint8_t u8() noexcept { return empty() ? 0 : p_[pos_++]; }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept {
    const std::uint32_t lo = u16();
    return lo | (static_cast<std::uint32_t>(u16()) << 16);
  }
  std::uint64_t u64() noexcept {
    const std::uint64_t lo = u32();
    return lo | (static_cast<std::uint64_t>(u32()) << 32);
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
};

// SplitMix64: cheap, deterministic, good enough to spread a seed over many elements.
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) noexcept : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0.
  std::uint64_t below(std::uint64_t bound) noexcept { return next() % bound; }

 private:
  std::uint64_t s_;
};

inline std::uint32_t bits_of(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline std::uint64_t bits_of(double d) noexcept {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
inline float float_from_bits(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline double double_from_bits(std::uint64_t u) noexcept {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// memcmp that accepts empty (possibly null) ranges.
inline bool same_bytes(const void* a, const void* b, std::size_t n) noexcept {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

// Same value and same bits (distinguishes -0 from +0; NaN never appears where this is used).
inline bool same_bits(float a, float b) noexcept { return bits_of(a) == bits_of(b); }
inline bool same_bits(double a, double b) noexcept { return bits_of(a) == bits_of(b); }

// CRC-32C, bit by bit (reflected polynomial 0x82F63B78), independent of the library's tables.
inline std::uint32_t reference_crc32c(const std::byte* p, std::size_t n) noexcept {
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= static_cast<std::uint32_t>(p[i]);
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// Reference rounding of any finite double to a binary format with `mantissa_bits` stored
// fraction bits and normal exponents from `min_exp` (the exponent of the smallest normal) up,
// round to nearest, ties to even, written without bit tricks: every step is exact in double.
// Returns false when the rounded magnitude exceeds `max_finite`.
inline bool reference_round(double x, int mantissa_bits, int min_exp, double max_finite,
                            double* out) noexcept {
  if (x == 0.0) {
    *out = x;
    return true;
  }
  const double a = std::fabs(x);
  int e = 0;
  (void)std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the exponent of a is e - 1
  int exp = e - 1;
  if (exp < min_exp) exp = min_exp;  // subnormal range: fixed quantum
  const int quantum_exp = exp - mantissa_bits;
  // a / quantum is exact (power-of-two scaling of a double that stays in range here).
  const double scaled = std::ldexp(a, -quantum_exp);
  double q = std::floor(scaled);
  const double frac = scaled - q;  // exact: scaled and q are close doubles
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;
  const double r = std::ldexp(q, quantum_exp);
  if (r > max_finite) return false;
  *out = std::signbit(x) ? -r : r;
  return true;
}

// Correctly rounded binary16 and bfloat16 values of x (as doubles), or false on overflow.
inline bool reference_half(double x, double* out) noexcept {
  return reference_round(x, 10, -14, 65504.0, out);
}
inline bool reference_bf16(double x, double* out) noexcept {
  return reference_round(x, 7, -126, static_cast<double>(float_from_bits(0x7f7f0000u)), out);
}
inline bool reference_float(double x, double* out) noexcept {
  return reference_round(x, 23, -126, static_cast<double>(std::numeric_limits<float>::max()), out);
}

// Half the spacing of the format's values in the binade of x: a correctly rounded result is never
// farther from x than this.
inline double half_ulp(double x, int mantissa_bits, int min_exp) noexcept {
  int e = 0;
  (void)std::frexp(std::fabs(x), &e);
  int exp = x == 0.0 ? min_exp : e - 1;
  if (exp < min_exp) exp = min_exp;
  return std::ldexp(1.0, exp - mantissa_bits - 1);
}

}  // namespace gradcomp_fuzz
