// The value codings of the wire format as a table of codecs. Each codec is a type with the same
// members; `value_codecs` lists them and `visit_value_codec` finds the one of a code, so adding a
// coding is adding a codec type and its line in the list (and its code in wire::value_coding).
//
// A codec works on a section's value payload `p` (docs/wire_format.md, "Value codings"): the
// parameter block first (a quantised coding's scales; empty for the float codings), then the
// values. Its members:
//   code, name                        the wire code and the spec's name
//   fixed_bytes                       bytes per value, or 0 when values are packed below a byte
//   parameter_bytes_at(p),            a packed coding's parameter block length (of the payload at
//   value_bits_at(p)                  p) and the bits of each value after it
//   payload_bytes(kept)               the payload length of `kept` values with the parameters the
//                                     encoder writes (for the float codings and scaled_sign: from
//                                     the header alone)
//   payload_fits(p, bytes, kept)      optional, for a coding whose length depends on its parameter
//                                     block (per-bucket or per-column scales, whose count the block
//                                     states): whether `bytes` bytes at p, all readable, are a
//                                     payload of `kept` values. It must read only the `bytes` bytes
//                                     at p. Without it the length must be payload_bytes(kept).
//   check<T>(p, kept, largest)        errc::ok, non_finite_input (a NaN or an infinity, in a value
//                                     or a scale), value_out_of_range (beyond T) or
//                                     malformed_payload (a parameter or padding the spec forbids);
//                                     sets `largest` to the largest magnitude (0 when none)
//   value<T>(p, j)                    value j of a checked payload
//   add<T>(p, first, count, acc, at)  acc[at(j)] += value(first + j) for j < count, checked payload
//   check_parameters(p, kept)         the checks of `check` that concern the payload as a whole
//                                     (parameters, padding): errc::ok or the first error
//   check_one<T>(p, j)                the checks of `check` that concern value j alone
//                                     (check == check_parameters, then check_one for every j in
//                                     order, largest aside)
//   encode<T>(v, dst)                 writes payload_bytes(v.size()) bytes; errc::non_finite_input,
//                                     value_out_of_range (a value the coding cannot hold)
// A coding whose layout the producer chooses (one_bit's column count: wire::coding_parameters)
// also has payload_bytes(kept, params), layout_fits(kept, params), encode<T>(v, params, dst) and
// parameters(p) (the layout its parameter block states); codec_payload_bytes, codec_encode and
// the others below call them where they exist and the plain members elsewhere. A coding with two
// forms of one content (qsgd, qsgd_gamma) has plan<T>(v, params, chosen, bytes): the form to write
// and its length, the values checked; its payload_bytes(kept, params) is then the longest form
// an encoder writes. A coding whose values can only be read in order has `parallel = false`: the
// device decoders' passes over every byte leave it out (parallel_value_codecs); the Thrust
// decoder reads a qsgd_gamma section on one thread instead.
// payload_bytes, payload_fits, value, check_parameters and check_one also compile for devices
// (GRADCOMP_HD): the Thrust backend's decoder reads payloads through them.
// Encoding refuses NaN, infinities and values that do not fit; decoding refuses non-finite values
// and values that do not fit the destination type, so a message can never poison a receiver.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../../detail/simd.hpp"
#include "kernels.hpp"
#include "../../error.hpp"
#include "../../span.hpp"
#include "../format.hpp"
#include "../../detail/bytes.hpp"
#include "crc32c.hpp"
#include "../../detail/half.hpp"
#include "isgq.hpp"
#include "qsgd.hpp"

namespace gradcomp {
namespace detail {

// The largest of (word & mask) over n little-endian words of `Bits` (32 or 16 bits) at p, at any
// alignment: AVX2 where the CPU has it (detail/simd.hpp), word by word elsewhere.
template <class Bits>
std::uint32_t largest_magnitude_bits(const std::byte* p, std::size_t n, Bits mask) noexcept {
#if GRADCOMP_HAVE_AVX2_KERNELS
  if (host_is_little_endian() && cpu::use_avx2()) {
    if constexpr (sizeof(Bits) == 4) return cpu::largest_masked_le32_avx2(p, n, mask);
    if constexpr (sizeof(Bits) == 2) return cpu::largest_masked_le16_avx2(p, n, mask);
  }
#endif
  Bits top = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const auto bits = static_cast<Bits>(load_le<Bits>(p + sizeof(Bits) * j) & mask);
    top = bits > top ? bits : top;
  }
  return top;
}

// Codings of one value per fixed number of bytes, decoded through binary32 (fp32, fp16, bf16):
// `Bits` is the stored integer, `to_float` its value, `encode_one` its encoding. A coding may
// have vector conversions of many values (wire/codecs/kernels.hpp), bitwise the per-value
// functions: `floats_to` (encode binary32 values; false when one is refused or no vector path is
// available, and the values are then encoded again one by one so that the first refused value
// decides the error) and `to_floats` (decode, for a coding whose `add` converts in blocks).
template <class Derived, class Bits>
struct float_codec_base {
  static constexpr std::size_t fixed_bytes = sizeof(Bits);
  GRADCOMP_HD static constexpr std::uint64_t payload_bytes(std::uint64_t kept) noexcept { return sizeof(Bits) * kept; }

  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    return static_cast<T>(Derived::to_float(load_le<Bits>(p + sizeof(Bits) * j)));
  }
  GRADCOMP_HD static errc check_parameters(const std::byte*, std::uint64_t) noexcept { return errc::ok; }
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte* p, std::size_t j) noexcept {
    const auto bits = static_cast<Bits>(load_le<Bits>(p + sizeof(Bits) * j) & Derived::magnitude_mask);
    return bits >= Derived::infinity_bits ? errc::non_finite_input : errc::ok;
  }
  // Values 0..count-1 of p as binary32 into out, one by one.
  static void to_floats(const std::byte* p, std::size_t count, float* out) noexcept {
    for (std::size_t j = 0; j < count; ++j) out[j] = Derived::to_float(load_le<Bits>(p + sizeof(Bits) * j));
  }
  // No vector encoding unless the coding has one.
  static bool floats_to(const float*, std::size_t, std::byte*) noexcept { return false; }

  // Value by value: the compiler vectorises a dense section's loop (at(j) == j) where the
  // conversion is a shift or a copy (fp32, bf16).
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const std::byte* q = p + sizeof(Bits) * first;
    for (std::size_t j = 0; j < count; ++j) acc[at(j)] += static_cast<T>(Derived::to_float(load_le<Bits>(q + sizeof(Bits) * j)));
  }
  // Blocks of values converted together by to_floats (vector conversions where the coding has
  // them), then added: for a conversion the compiler cannot vectorise (fp16).
  template <class T, class IndexAt>
  static void add_converted(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const std::byte* q = p + sizeof(Bits) * first;
    constexpr std::size_t block = 256;
    float converted[block];
    for (std::size_t b = 0; b < count; b += block) {
      const std::size_t c = count - b < block ? count - b : block;
      Derived::to_floats(q + sizeof(Bits) * b, c, converted);
      for (std::size_t j = 0; j < c; ++j) acc[at(b + j)] += static_cast<T>(converted[j]);
    }
  }
  // One integer maximum of the magnitude bits gives both the finiteness and the largest value.
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    const auto top = static_cast<Bits>(largest_magnitude_bits<Bits>(p, kept, Derived::magnitude_mask));
    if (top >= Derived::infinity_bits) return errc::non_finite_input;
    largest = static_cast<double>(Derived::to_float(top));
    return errc::ok;
  }
  template <class T>
  static errc encode(span<const T> v, std::byte* dst) noexcept {
    if constexpr (std::is_same<T, float>::value && host_is_little_endian()) {
      if (Derived::floats_to(v.data(), v.size(), dst)) return errc::ok;
    }
    return encode_each(v, dst);
  }
  // Value by value: refuses a non-finite value or one the coding cannot hold.
  template <class T>
  static errc encode_each(span<const T> v, std::byte* dst) noexcept {
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j])) return errc::non_finite_input;
      Bits b;
      const float f = static_cast<float>(v[j]);
      if (!std::isfinite(f) || !Derived::encode_one(f, &b)) return errc::value_out_of_range;
      store_le<Bits>(dst + sizeof(Bits) * j, b);
    }
    return errc::ok;
  }
  // The values from `done` on, one by one, after a vector loop encoded those before it; false
  // when one is refused.
  static bool floats_to_tail(const float* v, std::size_t done, std::size_t n, std::byte* dst) noexcept {
    for (std::size_t j = done; j < n; ++j) {
      Bits b;
      if (!std::isfinite(v[j]) || !Derived::encode_one(v[j], &b)) return false;
      store_le<Bits>(dst + sizeof(Bits) * j, b);
    }
    return true;
  }
};

struct fp32_codec : float_codec_base<fp32_codec, std::uint32_t> {
  static constexpr wire::value_coding code = wire::value_coding::fp32;
  static constexpr const char* name = "fp32";
  static constexpr std::uint32_t magnitude_mask = 0x7fffffffu;
  static constexpr std::uint32_t infinity_bits = 0x7f800000u;
  GRADCOMP_HD static float to_float(std::uint32_t b) noexcept { return bits_float(b); }
  static bool encode_one(float f, std::uint32_t* b) noexcept {
    *b = float_bits(f);
    return true;
  }
  // binary32 values on a little-endian host: the bytes as they are, once a read of their
  // magnitude bits has found every one finite.
  static bool floats_to(const float* v, std::size_t n, std::byte* dst) noexcept {
    if (!host_is_little_endian()) return false;
    const auto* src = reinterpret_cast<const std::byte*>(v);
    if (largest_magnitude_bits<std::uint32_t>(src, n, magnitude_mask) >= infinity_bits) return false;
    if (n != 0) std::memcpy(dst, src, 4 * n);
    return true;
  }
  // The same bytes with the checksum continuing *crc over them, in one read of the values: block
  // by block, the magnitude check brings the block into the L1 cache, the checksum reads it
  // there, and the copy streams it out past the caches (copy_streaming). For payloads larger than
  // the caches. False, with *crc unchanged, when a value is not finite or the host is not
  // little-endian.
  static bool floats_to_streaming(const float* v, std::size_t n, std::byte* dst, std::uint32_t* crc) noexcept {
    if (!host_is_little_endian()) return false;
    const auto* src = reinterpret_cast<const std::byte*>(v);
    constexpr std::size_t per_block = crc32c_follow_block / 4;
    std::uint32_t c = *crc;
    for (std::size_t at = 0; at < n; at += per_block) {
      const std::size_t count = n - at < per_block ? n - at : per_block;
      const std::byte* block = src + 4 * at;
      if (largest_magnitude_bits<std::uint32_t>(block, count, magnitude_mask) >= infinity_bits) return false;
      c = crc32c_update(c, block, 4 * count);
      copy_streaming(dst + 4 * at, block, 4 * count);
    }
    streaming_fence();
    *crc = c;
    return true;
  }
};

struct fp16_codec : float_codec_base<fp16_codec, std::uint16_t> {
  static constexpr wire::value_coding code = wire::value_coding::fp16;
  static constexpr const char* name = "fp16";
  static constexpr std::uint16_t magnitude_mask = 0x7fffu;
  static constexpr std::uint16_t infinity_bits = 0x7c00u;
  GRADCOMP_HD static float to_float(std::uint16_t b) noexcept { return half_to_float(b); }
  static bool encode_one(float f, std::uint16_t* b) noexcept { return float_to_half(f, b); }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    add_converted<T>(p, first, count, acc, at);
  }
#if GRADCOMP_HAVE_AVX2_KERNELS
  // F16C where the CPU has it (wire/codecs/kernels.hpp).
  static bool floats_to(const float* v, std::size_t n, std::byte* dst) noexcept {
    if (!host_is_little_endian() || !cpu::use_f16c()) return false;
    const std::size_t done = n - n % 8;
    return cpu::floats_to_half_f16c(v, done, dst) && floats_to_tail(v, done, n, dst);
  }
  static void to_floats(const std::byte* p, std::size_t count, float* out) noexcept {
    std::size_t done = 0;
    if (host_is_little_endian() && cpu::use_f16c()) {
      done = count - count % 8;
      cpu::half_to_floats_f16c(p, done, out);
    }
    float_codec_base::to_floats(p + 2 * done, count - done, out + done);
  }
#endif
};

struct bf16_codec : float_codec_base<bf16_codec, std::uint16_t> {
  static constexpr wire::value_coding code = wire::value_coding::bf16;
  static constexpr const char* name = "bf16";
  static constexpr std::uint16_t magnitude_mask = 0x7fffu;
  static constexpr std::uint16_t infinity_bits = 0x7f80u;
  GRADCOMP_HD static float to_float(std::uint16_t b) noexcept { return bf16_to_float(b); }
  static bool encode_one(float f, std::uint16_t* b) noexcept { return float_to_bf16(f, b); }
#if GRADCOMP_HAVE_AVX2_KERNELS
  // AVX2 where the CPU has it (wire/codecs/kernels.hpp).
  static bool floats_to(const float* v, std::size_t n, std::byte* dst) noexcept {
    if (!host_is_little_endian() || !cpu::use_avx2()) return false;
    const std::size_t done = n - n % 16;
    return cpu::floats_to_bf16_avx2(v, done, dst) && floats_to_tail(v, done, n, dst);
  }
#endif
};

struct fp64_codec {
  static constexpr wire::value_coding code = wire::value_coding::fp64;
  static constexpr const char* name = "fp64";
  static constexpr std::size_t fixed_bytes = 8;
  GRADCOMP_HD static constexpr std::uint64_t payload_bytes(std::uint64_t kept) noexcept { return 8 * kept; }

  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    return static_cast<T>(bits_double(load_le<std::uint64_t>(p + 8 * j)));
  }
  GRADCOMP_HD static errc check_parameters(const std::byte*, std::uint64_t) noexcept { return errc::ok; }
  // Finite, and finite once converted to T (written with subtractions, which also compile for
  // devices: x - x is 0 exactly for a finite x).
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte* p, std::size_t j) noexcept {
    const double d = bits_double(load_le<std::uint64_t>(p + 8 * j));
    if (!(d - d == 0.0)) return errc::non_finite_input;
    const T t = static_cast<T>(d);
    return t - t == T(0) ? errc::ok : errc::value_out_of_range;
  }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    for (std::size_t j = 0; j < count; ++j) acc[at(j)] += value<T>(p, first + j);
  }
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    for (std::size_t j = 0; j < kept; ++j) {
      const double d = bits_double(load_le<std::uint64_t>(p + 8 * j));
      if (!std::isfinite(d)) return largest = 0.0, errc::non_finite_input;
      const T t = static_cast<T>(d);
      if (!std::isfinite(t)) return largest = 0.0, errc::value_out_of_range;
      const double x = std::fabs(static_cast<double>(t));
      largest = x > largest ? x : largest;
    }
    return errc::ok;
  }
  template <class T>
  static errc encode(span<const T> v, std::byte* dst) noexcept {
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j])) return errc::non_finite_input;
      store_le<std::uint64_t>(dst + 8 * j, double_bits(static_cast<double>(v[j])));
    }
    return errc::ok;
  }
};

// Whether the padding bits after `kept` codes of `code_bits` bits each, packed from `codes` on (the
// first code at the least significant bits), are all 0.
GRADCOMP_HD inline bool padding_clear(const std::byte* codes, std::uint64_t kept, unsigned code_bits) noexcept {
  const std::uint64_t per_byte = 8 / code_bits;
  if (kept % per_byte == 0) return true;
  return (static_cast<unsigned>(codes[kept / per_byte]) >> (code_bits * (kept % per_byte))) == 0;
}

// What the packed codings with one scale per section share: the parameter block, the scale as
// binary32 (finite, sign bit clear), then ceil(kept / PerByte) bytes of codes, value j's in byte
// j / PerByte at bits (8 / PerByte) (j % PerByte) onwards (least significant first), the padding
// bits 0.
template <std::size_t PerByte>
struct one_scale_codec {
  static constexpr std::size_t fixed_bytes = 0;
  static constexpr std::size_t parameter_bytes = 4;
  static constexpr unsigned code_bits = 8 / PerByte;
  GRADCOMP_HD static constexpr std::uint64_t parameter_bytes_at(const std::byte*) noexcept { return parameter_bytes; }
  GRADCOMP_HD static constexpr unsigned value_bits_at(const std::byte*) noexcept { return code_bits; }
  GRADCOMP_HD static constexpr std::uint64_t payload_bytes(std::uint64_t kept) noexcept {
    return parameter_bytes + (kept + PerByte - 1) / PerByte;
  }
  GRADCOMP_HD static float scale(const std::byte* p) noexcept { return bits_float(load_le<std::uint32_t>(p)); }
  GRADCOMP_HD static unsigned code_of(const std::byte* p, std::size_t j) noexcept {
    return (static_cast<unsigned>(p[parameter_bytes + j / PerByte]) >> (code_bits * (j % PerByte))) &
           ((1u << code_bits) - 1u);
  }
  // The scale (finite, sign bit clear), then the padding bits.
  GRADCOMP_HD static errc check_parameters(const std::byte* p, std::uint64_t kept) noexcept {
    const std::uint32_t bits = load_le<std::uint32_t>(p);
    if ((bits & 0x7f800000u) == 0x7f800000u) return errc::non_finite_input;
    if ((bits & 0x80000000u) != 0) return errc::malformed_payload;
    return padding_clear(p + parameter_bytes, kept, code_bits) ? errc::ok : errc::malformed_payload;
  }
  // The code bytes of `count` codes, zeroed.
  static void clear_codes(std::byte* codes, std::size_t count) noexcept {
    for (std::size_t b = 0; b < (count + PerByte - 1) / PerByte; ++b) codes[b] = std::byte{0};
  }
  static void set_code(std::byte* codes, std::size_t j, unsigned code) noexcept {
    codes[j / PerByte] |= static_cast<std::byte>(code << (code_bits * (j % PerByte)));
  }
};

// One scale for the section and one sign bit per value: value j is -scale when bit j is set, else
// +scale (one_scale_codec<8>). Encoding takes values that all have one magnitude, exactly
// representable in binary32 (what a scaled-sign compressor sends); zeros keep their sign bit.
struct scaled_sign_codec : one_scale_codec<8> {
  static constexpr wire::value_coding code = wire::value_coding::scaled_sign;
  static constexpr const char* name = "scaled_sign";

  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    const T s = static_cast<T>(scale(p));
    return code_of(p, j) != 0 ? -s : s;
  }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const T s = static_cast<T>(scale(p));
    for (std::size_t j = 0; j < count; ++j) acc[at(j)] += code_of(p, first + j) != 0 ? -s : s;
  }
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte*, std::size_t) noexcept { return errc::ok; }
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    if (const errc e = check_parameters(p, kept); e != errc::ok) return e;
    if (kept != 0) largest = static_cast<double>(scale(p));
    return errc::ok;
  }
  template <class T>
  static errc encode(span<const T> v, std::byte* dst) noexcept {
    float s = 0.0f;
    if (!v.empty()) {
      if (!std::isfinite(v[0])) return errc::non_finite_input;
      s = static_cast<float>(std::fabs(v[0]));
      if (!std::isfinite(s) || static_cast<T>(s) != std::fabs(v[0])) return errc::value_out_of_range;
    }
    store_le<std::uint32_t>(dst, float_bits(s));
    std::byte* codes = dst + parameter_bytes;
    clear_codes(codes, v.size());
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j])) return errc::non_finite_input;
      if (static_cast<T>(std::fabs(v[j])) != static_cast<T>(s)) return errc::value_out_of_range;
      if (std::signbit(v[j])) set_code(codes, j, 1u);
    }
    return errc::ok;
  }
};

// One scale for the section and a two-bit code per value (one_scale_codec<4>): 0 is 0, 1 is
// +scale, 3 is -scale, 2 is reserved; a zero scale has only zero codes. Encoding takes values that
// are all 0 or +-s for one s that binary32 holds exactly (what a ternary compressor such as
// TernGrad sends); s is the largest magnitude, and a zero of either sign is written as 0.
struct ternary_codec : one_scale_codec<4> {
  static constexpr wire::value_coding code = wire::value_coding::ternary;
  static constexpr const char* name = "ternary";

  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    const unsigned c = code_of(p, j);
    const T s = static_cast<T>(scale(p));
    return c == 0 ? T(0) : (c == 3 ? -s : s);
  }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const T s = static_cast<T>(scale(p));
    for (std::size_t j = 0; j < count; ++j) {
      const unsigned c = code_of(p, first + j);
      acc[at(j)] += c == 0 ? T(0) : (c == 3 ? -s : s);
    }
  }
  // The reserved code, and a non-zero code under a zero scale.
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte* p, std::size_t j) noexcept {
    const unsigned c = code_of(p, j);
    if (c == 2 || (c != 0 && load_le<std::uint32_t>(p) == 0)) return errc::malformed_payload;
    return errc::ok;
  }
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    if (const errc e = check_parameters(p, kept); e != errc::ok) return e;
    bool any = false;
    for (std::size_t j = 0; j < kept; ++j) {
      if (const errc e = check_one<T>(p, j); e != errc::ok) return e;
      any = any || code_of(p, j) != 0;
    }
    if (any) largest = static_cast<double>(scale(p));
    return errc::ok;
  }
  template <class T>
  static errc encode(span<const T> v, std::byte* dst) noexcept {
    T s = 0;
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j])) return errc::non_finite_input;
      s = std::fabs(v[j]) > s ? std::fabs(v[j]) : s;
    }
    const float fs = static_cast<float>(s);
    if (!std::isfinite(fs) || static_cast<T>(fs) != s) return errc::value_out_of_range;
    store_le<std::uint32_t>(dst, float_bits(fs));
    std::byte* codes = dst + parameter_bytes;
    clear_codes(codes, v.size());
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (v[j] == T(0)) continue;
      if (std::fabs(v[j]) != s) return errc::value_out_of_range;
      set_code(codes, j, v[j] < T(0) ? 3u : 1u);
    }
    return errc::ok;
  }
};

// Two binary32 values per column and one bit per value (1-bit SGD's payload). The parameter
// block is the column count C (u32: at least 1, dividing kept), then each column's pair
// (neg_c, pos_c): both finite, neg_c with the sign bit set, pos_c with it clear; then
// ceil(kept / 8) bytes of bits, bit j at bit j % 8 of byte j / 8, the padding bits 0. Value j lies
// in column j % C and is neg_c when bit j is set, pos_c otherwise. Encoding takes values whose
// columns each hold at most one value with the sign bit set and one with it clear, which binary32
// holds exactly; a column without one of them gets -0 or +0 in its place.
struct one_bit_codec {
  static constexpr wire::value_coding code = wire::value_coding::one_bit;
  static constexpr const char* name = "one_bit";
  static constexpr std::size_t fixed_bytes = 0;
  GRADCOMP_HD static constexpr std::uint64_t parameter_bytes(std::uint64_t columns) noexcept { return 4 + 8 * columns; }
  GRADCOMP_HD static std::uint64_t parameter_bytes_at(const std::byte* p) noexcept {
    return parameter_bytes(columns(p));
  }
  GRADCOMP_HD static constexpr unsigned value_bits_at(const std::byte*) noexcept { return 1; }
  GRADCOMP_HD static constexpr std::uint64_t payload_bytes(std::uint64_t kept,
                                                           const wire::coding_parameters& c = {}) noexcept {
    return parameter_bytes(c.columns) + (kept + 7) / 8;
  }
  GRADCOMP_HD static bool layout_fits(std::uint64_t kept, const wire::coding_parameters& c) noexcept {
    return c.columns != 0 && kept % c.columns == 0;
  }
  GRADCOMP_HD static std::uint32_t columns(const std::byte* p) noexcept { return load_le<std::uint32_t>(p); }
  GRADCOMP_HD static bool payload_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept) noexcept {
    if (bytes < 4) return false;
    const std::uint32_t c = columns(p);
    return c != 0 && kept % c == 0 && bytes == parameter_bytes(c) + (kept + 7) / 8;
  }
  GRADCOMP_HD static wire::coding_parameters parameters(const std::byte* p) noexcept {
    wire::coding_parameters c;
    c.columns = columns(p);
    return c;
  }
  GRADCOMP_HD static unsigned bit_of(const std::byte* p, std::uint32_t cols, std::size_t j) noexcept {
    return (static_cast<unsigned>(p[parameter_bytes(cols) + j / 8]) >> (j % 8)) & 1u;
  }
  // The bits of the value a set (1) or clear (0) bit gives in column c.
  GRADCOMP_HD static std::uint32_t value_bits(const std::byte* p, std::uint32_t c, unsigned bit) noexcept {
    return load_le<std::uint32_t>(p + 4 + 8 * static_cast<std::uint64_t>(c) + (bit != 0 ? 0 : 4));
  }
  template <class T>
  GRADCOMP_HD static T value(const std::byte* p, std::size_t j) noexcept {
    const std::uint32_t cols = columns(p);
    return static_cast<T>(bits_float(value_bits(p, static_cast<std::uint32_t>(j % cols), bit_of(p, cols, j))));
  }
  template <class T, class IndexAt>
  static void add(const std::byte* p, std::size_t first, std::size_t count, T* acc, IndexAt&& at) noexcept {
    const std::uint32_t cols = columns(p);
    auto c = static_cast<std::uint32_t>(first % cols);
    for (std::size_t j = 0; j < count; ++j) {
      acc[at(j)] += static_cast<T>(bits_float(value_bits(p, c, bit_of(p, cols, first + j))));
      c = c + 1 == cols ? 0 : c + 1;
    }
  }
  // Each column's pair in order (finiteness, then the sign bit), then the padding bits.
  GRADCOMP_HD static errc check_parameters(const std::byte* p, std::uint64_t kept) noexcept {
    const std::uint32_t cols = columns(p);
    for (std::uint32_t c = 0; c < cols; ++c) {
      for (unsigned k = 0; k < 2; ++k) {
        const unsigned bit = 1u - k;  // neg_c, then pos_c
        const std::uint32_t v = value_bits(p, c, bit);
        if ((v & 0x7f800000u) == 0x7f800000u) return errc::non_finite_input;
        if (((v >> 31) != 0) != (bit != 0)) return errc::malformed_payload;
      }
    }
    return padding_clear(p + parameter_bytes(cols), kept, 1) ? errc::ok : errc::malformed_payload;
  }
  template <class T>
  GRADCOMP_HD static errc check_one(const std::byte*, std::size_t) noexcept { return errc::ok; }
  // The largest magnitude among the values the bits choose (not the pairs' unused members).
  template <class T>
  static errc check(const std::byte* p, std::size_t kept, double& largest) noexcept {
    largest = 0.0;
    if (const errc e = check_parameters(p, kept); e != errc::ok) return e;
    const std::uint32_t cols = columns(p);
    std::uint32_t top = 0;
    std::uint32_t c = 0;
    for (std::size_t j = 0; j < kept; ++j) {
      const std::uint32_t m = value_bits(p, c, bit_of(p, cols, j)) & 0x7fffffffu;
      top = m > top ? m : top;
      c = c + 1 == cols ? 0 : c + 1;
    }
    largest = static_cast<double>(bits_float(top));
    return errc::ok;
  }
  // The column count from `c`, which must fit v (layout_fits): errc::invalid_argument otherwise.
  template <class T>
  static errc encode(span<const T> v, const wire::coding_parameters& c, std::byte* dst) noexcept {
    if (!layout_fits(v.size(), c)) return errc::invalid_argument;
    const std::uint32_t cols = c.columns;
    constexpr std::uint32_t unset = 0x7fc00000u;  // a NaN: no value is one
    store_le<std::uint32_t>(dst, cols);
    for (std::uint64_t b = 4; b < parameter_bytes(cols); b += 4) store_le<std::uint32_t>(dst + b, unset);
    std::byte* bits = dst + parameter_bytes(cols);
    for (std::size_t b = 0; b < (v.size() + 7) / 8; ++b) bits[b] = std::byte{0};
    std::uint32_t col = 0;
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j])) return errc::non_finite_input;
      const float f = static_cast<float>(v[j]);
      if (!std::isfinite(f) || static_cast<T>(f) != v[j]) return errc::value_out_of_range;
      const unsigned bit = std::signbit(f) ? 1u : 0u;
      std::byte* slot = dst + 4 + 8 * static_cast<std::uint64_t>(col) + (bit != 0 ? 0 : 4);
      const std::uint32_t held = load_le<std::uint32_t>(slot), now = float_bits(f);
      if (held == unset)
        store_le<std::uint32_t>(slot, now);
      else if (held != now)
        return errc::value_out_of_range;  // a second value of one sign in the column
      if (bit != 0) bits[j / 8] |= static_cast<std::byte>(1u << (j % 8));
      col = col + 1 == cols ? 0 : col + 1;
    }
    for (std::uint32_t k = 0; k < cols; ++k)
      for (unsigned bit = 0; bit < 2; ++bit) {
        std::byte* slot = dst + 4 + 8 * static_cast<std::uint64_t>(k) + (bit != 0 ? 0 : 4);
        if (load_le<std::uint32_t>(slot) == unset) store_le<std::uint32_t>(slot, bit != 0 ? 0x80000000u : 0u);
      }
    return errc::ok;
  }
  // One column.
  template <class T>
  static errc encode(span<const T> v, std::byte* dst) noexcept {
    return encode(v, wire::coding_parameters{}, dst);
  }
};

template <class... Codecs>
struct codec_list {};

// Every value coding this version reads and writes.
using value_codecs = codec_list<fp32_codec, fp64_codec, fp16_codec, bf16_codec, scaled_sign_codec, ternary_codec,
                                one_bit_codec, qsgd_codec, qsgd_gamma_codec, isgq_codec>;

// Whether a codec's values can be read one by one in any order (Codec::parallel, true unless the
// codec says otherwise): what the device decoders need.
template <class Codec>
constexpr auto codec_parallel(int) -> decltype(static_cast<bool>(Codec::parallel)) {
  return Codec::parallel;
}
template <class Codec>
constexpr bool codec_parallel(long) {
  return true;
}

// The codecs of a list whose values can be read in any order.
template <class Done, class... Rest>
struct parallel_filter {
  using type = Done;
};
template <class... Done, class First, class... Rest>
struct parallel_filter<codec_list<Done...>, First, Rest...> {
  using type = typename parallel_filter<
      std::conditional_t<codec_parallel<First>(0), codec_list<Done..., First>, codec_list<Done...>>, Rest...>::type;
};
template <class List>
struct parallel_codecs_of;
template <class... Codecs>
struct parallel_codecs_of<codec_list<Codecs...>> {
  using type = typename parallel_filter<codec_list<>, Codecs...>::type;
};

// The value codings a device decoder reads (every one but qsgd_gamma).
using parallel_value_codecs = typename parallel_codecs_of<value_codecs>::type;

// Calls f(Codec{}) for the codec of `c`; false when `c` is not a known coding.
template <class F, class... Codecs>
bool visit_value_codec(codec_list<Codecs...>, wire::value_coding c, F&& f) {
  return ((c == Codecs::code ? (f(Codecs{}), true) : false) || ...);
}
template <class F>
bool visit_value_codec(wire::value_coding c, F&& f) {
  return visit_value_codec(value_codecs{}, c, f);
}

// Whether `bytes` bytes at p are a payload of `kept` values in Codec (see payload_fits above).
template <class Codec>
GRADCOMP_HD auto payload_fits(Codec, const std::byte* p, std::uint64_t bytes, std::uint64_t kept, int) noexcept
    -> decltype(Codec::payload_fits(p, bytes, kept)) {
  return Codec::payload_fits(p, bytes, kept);
}
template <class Codec>
GRADCOMP_HD bool payload_fits(Codec, const std::byte*, std::uint64_t bytes, std::uint64_t kept, long) noexcept {
  return bytes == Codec::payload_bytes(kept);
}

// Whether the value payload of a section, `bytes` bytes at p (the section header's length, within
// the message), is a payload of `kept` values in coding c; false for an unknown coding. Also
// compiles for devices (a fold rather than a visit with a lambda).
template <class... Codecs>
GRADCOMP_HD bool value_payload_fits(codec_list<Codecs...>, wire::value_coding c, const std::byte* p,
                                    std::uint64_t bytes, std::uint64_t kept) noexcept {
  return ((c == Codecs::code && payload_fits(Codecs{}, p, bytes, kept, 0)) || ...);
}
template <class Codecs = value_codecs>
GRADCOMP_HD bool value_payload_fits(wire::value_coding c, const std::byte* p, std::uint64_t bytes,
                                    std::uint64_t kept) noexcept {
  return value_payload_fits(Codecs{}, c, p, bytes, kept);
}

// Whether this version knows coding c, for devices too.
template <class... Codecs>
GRADCOMP_HD constexpr bool is_known_coding(codec_list<Codecs...>, wire::value_coding c) noexcept {
  return ((c == Codecs::code) || ...);
}

// Whether a codec's payload is written by its producer (Codec::from_payload, false unless the
// codec says otherwise): a coding of a whole tensor whose payload is not a function of its values
// (isgq), carried in `tensor_message::payload`, only in dense sections.
template <class Codec>
GRADCOMP_HD constexpr auto codec_from_payload(int) -> decltype(static_cast<bool>(Codec::from_payload)) {
  return Codec::from_payload;
}
template <class Codec>
GRADCOMP_HD constexpr bool codec_from_payload(long) {
  return false;
}
template <class... Codecs>
GRADCOMP_HD constexpr bool is_payload_coding(codec_list<Codecs...>, wire::value_coding c) noexcept {
  return ((c == Codecs::code && codec_from_payload<Codecs>(0)) || ...);
}
GRADCOMP_HD constexpr bool is_payload_coding(wire::value_coding c) noexcept {
  return is_payload_coding(value_codecs{}, c);
}

// A codec's members that take the producer's coding_parameters, for the codings with a layout of
// their own (payload_bytes(kept, params), layout_fits(kept, params), encode(v, params, dst),
// parameters(p)); the other codings ignore the parameters.
template <class Codec>
GRADCOMP_HD auto codec_payload_bytes(Codec, std::uint64_t kept, const wire::coding_parameters& c, int) noexcept
    -> decltype(Codec::payload_bytes(kept, c)) {
  return Codec::payload_bytes(kept, c);
}
template <class Codec>
GRADCOMP_HD std::uint64_t codec_payload_bytes(Codec, std::uint64_t kept, const wire::coding_parameters&,
                                              long) noexcept {
  return Codec::payload_bytes(kept);
}
template <class Codec>
auto codec_layout_fits(Codec, std::uint64_t kept, const wire::coding_parameters& c, int) noexcept
    -> decltype(Codec::layout_fits(kept, c)) {
  return Codec::layout_fits(kept, c);
}
template <class Codec>
bool codec_layout_fits(Codec, std::uint64_t, const wire::coding_parameters&, long) noexcept {
  return true;
}
template <class Codec, class T>
auto codec_encode(Codec, span<const T> v, const wire::coding_parameters& c, std::byte* dst, int) noexcept
    -> decltype(Codec::template encode<T>(v, c, dst)) {
  return Codec::template encode<T>(v, c, dst);
}
template <class Codec, class T>
errc codec_encode(Codec, span<const T> v, const wire::coding_parameters&, std::byte* dst, long) noexcept {
  return Codec::template encode<T>(v, dst);
}
// With the payload's length as the plan found it, for a codec whose length depends on the values
// (encode(v, params, dst, bytes)), which then need not be measured again.
template <class Codec, class T>
auto codec_encode_planned(Codec, span<const T> v, const wire::coding_parameters& c, std::byte* dst,
                          std::uint64_t bytes, int) noexcept -> decltype(Codec::template encode<T>(v, c, dst, bytes)) {
  return Codec::template encode<T>(v, c, dst, bytes);
}
template <class Codec, class T>
errc codec_encode_planned(Codec codec, span<const T> v, const wire::coding_parameters& c, std::byte* dst,
                          std::uint64_t, long) noexcept {
  return codec_encode(codec, v, c, dst, 0);
}
template <class Codec>
GRADCOMP_HD auto codec_parameters(Codec, const std::byte* p, int) noexcept -> decltype(Codec::parameters(p)) {
  return Codec::parameters(p);
}
template <class Codec>
GRADCOMP_HD wire::coding_parameters codec_parameters(Codec, const std::byte*, long) noexcept {
  return {};
}

// The coding an encoder writes for v when asked for coding Codec, and its payload length: a codec
// with forms of one content (qsgd) picks the shorter through Codec::plan, which also checks the
// values; the others write themselves, whose length follows from the layout.
// `in_order`: whether a form read in order only (qsgd_gamma) may be chosen.
template <class Codec, class T>
auto codec_plan(Codec, span<const T> v, const wire::coding_parameters& c, bool in_order, wire::value_coding& chosen,
                std::uint64_t& bytes, int) noexcept
    -> decltype(Codec::template plan<T>(v, c, in_order, chosen, bytes)) {
  return Codec::template plan<T>(v, c, in_order, chosen, bytes);
}
template <class Codec, class T>
errc codec_plan(Codec, span<const T> v, const wire::coding_parameters& c, bool, wire::value_coding& chosen,
                std::uint64_t& bytes, long) noexcept {
  chosen = Codec::code;
  bytes = codec_payload_bytes(Codec{}, v.size(), c, 0);
  return errc::ok;
}
template <class T>
errc plan_values(span<const T> v, wire::value_coding c, const wire::coding_parameters& params, bool in_order,
                 wire::value_coding& chosen, std::uint64_t& bytes) noexcept {
  errc e = errc::unknown_coding;
  visit_value_codec(c, [&](auto codec) { e = codec_plan(codec, v, params, in_order, chosen, bytes, 0); });
  return e;
}

// The payload length of `kept` values laid out as `params` says, or 0 with `known` false for an
// unknown coding.
inline std::uint64_t value_payload_bytes(wire::value_coding c, std::uint64_t kept, bool& known,
                                         const wire::coding_parameters& params = {}) noexcept {
  std::uint64_t bytes = 0;
  known = visit_value_codec(c, [&](auto codec) { bytes = codec_payload_bytes(codec, kept, params, 0); });
  return bytes;
}

// Whether `kept` values can be laid out as `params` says in coding c (true for the codings without
// a layout of their own, and for unknown ones, which are refused elsewhere).
inline bool value_layout_fits(wire::value_coding c, std::uint64_t kept,
                              const wire::coding_parameters& params) noexcept {
  bool fits = true;
  visit_value_codec(c, [&](auto codec) { fits = codec_layout_fits(codec, kept, params, 0); });
  return fits;
}

// The layout the parameter block of a payload in coding c states (a fitting payload); also
// compiles for devices.
template <class... Codecs>
GRADCOMP_HD wire::coding_parameters value_parameters(codec_list<Codecs...>, wire::value_coding c,
                                                     const std::byte* p) noexcept {
  wire::coding_parameters params;
  (void)((c == Codecs::code ? (params = codec_parameters(Codecs{}, p, 0), true) : false) || ...);
  return params;
}
GRADCOMP_HD inline wire::coding_parameters value_parameters(wire::value_coding c, const std::byte* p) noexcept {
  return value_parameters(value_codecs{}, c, p);
}

// Codings whose payload can be streamed past the caches with its checksum (Codec::floats_to_streaming).
template <class Codec>
auto encode_streaming(Codec, span<const float> v, std::byte* dst, std::uint32_t* crc, int) noexcept
    -> decltype(Codec::floats_to_streaming(v.data(), v.size(), dst, crc)) {
  return Codec::floats_to_streaming(v.data(), v.size(), dst, crc);
}
template <class Codec, class T>
bool encode_streaming(Codec, span<const T>, std::byte*, std::uint32_t*, long) noexcept {
  return false;
}

// The payload of v in coding c at dst, with the checksum continuing *crc over it, written with
// non-temporal stores, where the coding can (a payload that is the values' own bytes); false
// where it cannot, or a value is refused: the caller then takes the ordinary path, which also
// reports the error.
template <class T>
bool encode_values_streaming(span<const T> v, wire::value_coding c, std::byte* dst, std::uint32_t* crc) noexcept {
  bool done = false;
  visit_value_codec(c, [&](auto codec) { done = encode_streaming(codec, v, dst, crc, 0); });
  return done;
}

template <class T>
errc encode_values(span<const T> v, wire::value_coding c, std::byte* dst,
                   const wire::coding_parameters& params = {}) noexcept {
  errc e = errc::unknown_coding;
  visit_value_codec(c, [&](auto codec) { e = codec_encode(codec, v, params, dst, 0); });
  return e;
}
// encode_values of a payload whose length plan_values gave.
template <class T>
errc encode_planned_values(span<const T> v, wire::value_coding c, std::byte* dst, const wire::coding_parameters& params,
                           std::uint64_t bytes) noexcept {
  errc e = errc::unknown_coding;
  visit_value_codec(c, [&](auto codec) { e = codec_encode_planned(codec, v, params, dst, bytes, 0); });
  return e;
}

// out[j] = value j for j < count: through Codec::values where the codec has it (a coding read in
// order only, whose value(p, j) reads the payload up to j), else value by value.
template <class Codec, class T>
auto codec_decode(Codec, const std::byte* p, std::size_t count, T* out, int) noexcept
    -> decltype(Codec::template values<T>(p, count, out)) {
  return Codec::template values<T>(p, count, out);
}
template <class Codec, class T>
void codec_decode(Codec, const std::byte* p, std::size_t count, T* out, long) noexcept {
  for (std::size_t j = 0; j < count; ++j) out[j] = Codec::template value<T>(p, j);
}

// out[j] = value j for j < count, for a payload checked by check_values.
template <class T>
void decode_values(const std::byte* p, wire::value_coding c, std::size_t count, T* out) noexcept {
  visit_value_codec(c, [&](auto codec) { codec_decode(codec, p, count, out, 0); });
}

// Checks `count` values of a payload (see the codec members above).
template <class T>
errc check_values(const std::byte* p, wire::value_coding c, std::size_t count, double& largest) noexcept {
  errc e = errc::unknown_coding;
  largest = 0.0;
  visit_value_codec(c, [&](auto codec) { e = decltype(codec)::template check<T>(p, count, largest); });
  return e;
}

// check_values without the largest magnitude.
template <class T>
errc check_values(const std::byte* p, wire::value_coding c, std::size_t count) noexcept {
  double unused = 0.0;
  return check_values<T>(p, c, count, unused);
}

// acc[index(j)] += value (first + j) for j < count, for a payload already checked.
template <class T, class IndexAt>
void add_values(const std::byte* p, wire::value_coding c, std::size_t first, std::size_t count, T* acc,
                IndexAt&& index) noexcept {
  visit_value_codec(c, [&](auto codec) { decltype(codec)::template add<T>(p, first, count, acc, index); });
}

}  // namespace detail
}  // namespace gradcomp
