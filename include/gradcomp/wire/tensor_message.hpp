/// @file tensor_message.hpp
/// @brief `tensor_message`: one tensor's part of a worker's step, as views of caller memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../span.hpp"
#include "format.hpp"

namespace gradcomp {

/**
 * @brief One tensor's part of a step message: either sparse (ascending indices and their values)
 * or dense (all values). Compressors produce it, the wire format encodes and decodes it (in host
 * memory), and aggregators consume it. It only views memory, of the memory space `Space`; the
 * producer documents how long.
 */
template <class T, class Space = host_space>
struct tensor_message {
  std::size_t tensor = 0;                    ///< Tensor id (registration order).
  std::size_t numel = 0;                     ///< Elements of the tensor.
  bool dense = false;                        ///< True: `values` holds all `numel` values.
  span<const std::uint32_t, Space> indices;  ///< Sent positions, strictly ascending (empty when dense).
  span<const T, Space> values;               ///< Sent values.
  /// The value coding this tensor must be sent in, when its producer fixes one (a scaled-sign
  /// compressor's `scaled_sign`); `unspecified` leaves it to the encoder's options.
  wire::value_coding coding = wire::value_coding::unspecified;
  /// The layout a coding with per-column (or per-bucket) parameters needs (`one_bit`'s column
  /// count); codings without such parameters ignore it.
  wire::coding_parameters parameters{};
  /// A value payload its producer wrote, for a coding whose payload is not a function of values
  /// (`isgq`: the two quantised factors of a product, written by `isgq_compressor`). Only with
  /// `dense` true, `values` and `indices` empty and `coding` set to that coding; the encoder
  /// checks it as a decoder does and copies it. Empty for every other coding.
  span<const std::byte> payload{};
};

}  // namespace gradcomp
