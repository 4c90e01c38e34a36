/// @file wire/device_section.hpp
/// @brief A message described by views of a backend's memory, for an encoder that runs where the
/// data is (`wire::device_encoder`, `<gradcomp/thrust/wire_encode.hpp>`).
#pragma once

#include <cstdint>
#include <vector>

#include "../span.hpp"
#include "format.hpp"

namespace gradcomp {
namespace wire {

/// One section of a message whose indices, values and count live in `Space` (a backend's memory).
template <class T, class Space>
struct device_section {
  std::uint32_t tensor = 0;  ///< Tensor id.
  std::uint32_t numel = 0;   ///< Elements of the tensor.
  bool dense = false;        ///< Every element, in order (`values` holds `numel` of them).
  span<const std::uint32_t, Space> indices;  ///< Sparse: room for the most entries the section keeps.
  span<const T, Space> values;               ///< As many entries as `indices` (or `numel`, dense).
  /// Sparse: where the count kept is (one value in `Space`); null: every entry of `indices`.
  const std::uint64_t* kept = nullptr;
  /// The section's own value coding: `unspecified` takes the encoder's options; `scaled_sign`
  /// sends values that all have one magnitude as that magnitude and a sign bit each; `ternary`
  /// sends values that are 0 or of one magnitude as that magnitude and a two-bit code each.
  value_coding coding = value_coding::unspecified;
};

/// A whole message as views of `Space`: its sections in message order and, where the data
/// belongs to a step that may have been refused, the step's verdict.
template <class T, class Space>
struct device_message {
  std::vector<device_section<T, Space>> sections;  ///< The sections, in message order.
  /// Where the verdict is (one `errc` value as `std::int32_t` in `Space`): anything but
  /// `errc::ok` is the encoder's outcome instead of a message. Null: no verdict.
  const std::int32_t* verdict = nullptr;
};

}  // namespace wire
}  // namespace gradcomp
