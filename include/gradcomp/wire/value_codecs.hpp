/// @file value_codecs.hpp
/// @brief What each value coding of the wire format is: its name, its payload size, whether this
/// version knows it (docs/wire_format.md, "Value codings").
#pragma once

#include <cstddef>
#include <cstdint>

#include "codecs/values.hpp"
#include "../error.hpp"
#include "format.hpp"

namespace gradcomp {
namespace wire {

/// True when this version reads and writes the coding.
inline bool is_known(value_coding c) noexcept {
  return gradcomp::detail::visit_value_codec(c, [](auto) {});
}

/// Returns the coding's name as in the spec (`"bf16"`, `"scaled_sign"`), or `"unknown"`.
inline const char* to_string(value_coding c) noexcept {
  const char* name = "unknown";
  gradcomp::detail::visit_value_codec(c, [&](auto codec) { name = decltype(codec)::name; });
  return name;
}

/// Bytes per value of a coding that stores each value in whole bytes (4 for fp32); 0 for a
/// packed coding (`scaled_sign`) and for a code this version does not know.
inline std::size_t value_bytes_per_element(value_coding c) noexcept {
  std::size_t bytes = 0;
  gradcomp::detail::visit_value_codec(c, [&](auto codec) { bytes = decltype(codec)::fixed_bytes; });
  return bytes;
}

/**
 * @brief The length of a value payload of `kept` values in coding `c`, parameter block included
 * (for `scaled_sign`: 4 + ceil(kept / 8)), laid out as `params` says where the coding has a layout
 * of its own (`one_bit`: 4 + 8 columns + ceil(kept / 8)).
 * @return the length, or `errc::unknown_coding`, `errc::invalid_argument` (a coding whose payload
 *         its producer writes, `isgq`: its length is the payload's, not a function of `kept`).
 */
inline result<std::uint64_t> value_payload_bytes(value_coding c, std::uint64_t kept,
                                                 const coding_parameters& params = {}) noexcept {
  if (gradcomp::detail::is_payload_coding(c)) return fail(errc::invalid_argument);
  bool known = false;
  const std::uint64_t bytes = gradcomp::detail::value_payload_bytes(c, kept, known, params);
  if (!known) return fail(errc::unknown_coding);
  return bytes;
}

}  // namespace wire
}  // namespace gradcomp
