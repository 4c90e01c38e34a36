/// @file format.hpp
/// @brief Constants and field types of wire format version 1 (normative spec: docs/wire_format.md).
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>

#include "../config.hpp"

namespace gradcomp {
namespace wire {

/// The format version this library writes and the newest it reads. Independent of the library
/// version: it changes only when the layout of existing fields changes.
inline constexpr std::uint16_t format_version = 1;
/// The four magic bytes every message starts with: "GCWF".
inline constexpr std::uint8_t magic[4] = {0x47, 0x43, 0x57, 0x46};
/// Bytes of the message header.
inline constexpr std::size_t message_header_bytes = 24;
/// Bytes of each section header.
inline constexpr std::size_t section_header_bytes = 32;
/// Bytes of the CRC-32C trailer, when present.
inline constexpr std::size_t checksum_bytes = 4;
/// Message flag bit: a CRC-32C trailer follows the last section.
inline constexpr std::uint16_t flag_checksum = 0x0001;

/// What a message carries (message header, offset 8).
enum class message_kind : std::uint32_t {
  gradients = 0,  ///< One worker's step: one section per tensor.
  snapshot = 1,   ///< A compressor's or an aggregator's saved state (see dgc/snapshot.hpp).
  /// One worker's part of the first round of a method that averages dense vectors over the
  /// workers in several rounds per step (PowerSGD: its dense tensors and every P): dense
  /// sections, one per vector of the round.
  first_round = 2,
  /// The same for the second round (PowerSGD: every Q). A receiver expecting one round refuses
  /// the other's messages.
  second_round = 3,
};
/// The largest `message_kind` code of this version.
inline constexpr std::uint32_t last_message_kind = 3;

/// Whether messages of kind `k` are a round of a multi-round method (dense sections only).
GRADCOMP_HD constexpr bool is_round(message_kind k) noexcept {
  return k == message_kind::first_round || k == message_kind::second_round;
}

/// How a section stores its kept positions (section header, offset 20).
enum class index_coding : std::uint8_t {
  dense = 0,         ///< No indices: all `numel` elements, in order (`kept == numel`).
  raw_u32 = 1,       ///< 4 bytes per index, little-endian.
  delta_varint = 2,  ///< Gaps as unsigned LEB128 varints.
  rice = 3,          ///< Gaps Golomb-Rice coded with parameter r (section header, offset 22).
  bitmap = 4,        ///< One bit per element, ceil(numel / 8) bytes.
  automatic = 255,   ///< Encoder option only: pick the smallest of the above. Never on the wire.
};

/// How a section stores its values (section header, offset 21). Codes 16-63 are the quantised
/// payloads, which carry their own scales in a parameter block at the start of the value
/// payload; the codes not listed here are reserved. Each coding's payload size, validation and
/// decoding are in `<gradcomp/wire/value_codecs.hpp>`.
enum class value_coding : std::uint8_t {
  unspecified = 0,  ///< In a `tensor_message` only: the encoder's options decide. Never on the wire.
  fp32 = 1,  ///< IEEE binary32, 4 bytes per value.
  fp64 = 2,  ///< IEEE binary64, 8 bytes per value.
  fp16 = 3,  ///< IEEE binary16, 2 bytes per value, round to nearest even.
  bf16 = 4,  ///< bfloat16 (high half of binary32), 2 bytes per value, round to nearest even.
  scaled_sign = 16,  ///< One binary32 scale per section, then one sign bit per value: +-scale.
  ternary = 17,      ///< One binary32 scale per section, then a 2-bit code per value: 0, +scale, -scale.
  one_bit = 18,      ///< Two binary32 values per column, then one bit per value choosing its column's one.
  qsgd = 19,         ///< A binary32 norm per bucket, then a sign and a level per value in fixed-width codes.
  qsgd_gamma = 20,   ///< As `qsgd`, the non-zero levels and the gaps between them Elias-gamma coded.
  isgq = 21,         ///< A dense section given as the two quantised factors of a product X^T Delta.
};

/// What a value coding with a layout of its own needs besides the values: the producer states it
/// in `tensor_message::parameters`, the decoder reads it back from the parameter block into
/// `section_header::parameters`. The float codings, `scaled_sign` and `ternary` ignore it.
struct coding_parameters {
  /// `one_bit`: the values form a row-major matrix of this many columns (value j is in column
  /// j mod columns), each with its own two values. At least 1, and it divides the value count.
  std::uint32_t columns = 1;
  /// `qsgd`, `qsgd_gamma`: values j with the same j / bucket share a norm. At least 1.
  std::uint32_t bucket = 0;
  /// `qsgd`, `qsgd_gamma`: the levels s; a value is +-norm * (l / s) for an integer l in [0, s].
  /// In [1, 65535].
  std::uint32_t levels = 0;
  /// `qsgd`, `qsgd_gamma`, encoding only: each bucket's norm (ceil(values / bucket) binary32
  /// values, in host memory), which the values alone may not state. Null: each bucket's norm is its
  /// largest magnitude (what max-norm QSGD sends). A decoder leaves it null.
  const float* scales = nullptr;
};

/// What a section's values mean (section header, offset 23).
enum class section_role : std::uint8_t {
  gradient = 0,           ///< Values to add into the tensor's update (gradient messages).
  residual = 1,           ///< A compressor's residual accumulator V (snapshots).
  momentum = 2,           ///< A compressor's momentum buffer U (snapshots).
  receiver_momentum = 3,  ///< An aggregator's momentum buffer (snapshots).
  state = 4,              ///< A compressor's counters (snapshots).
  factor = 5,             ///< A low-rank compressor's factor Q, its next step's start (snapshots).
};

/// Tensor id of a compressor snapshot's state section (docs/wire_format.md, "Snapshots"). No
/// other section of a snapshot may carry it.
inline constexpr std::uint32_t snapshot_state_tensor = 0xffffffffu;
/// Words (fp64 values, `numel == kept`) of the state section in the current layout.
inline constexpr std::uint32_t snapshot_state_words = 9;
/// Words of the state section in the layout written by earlier releases, still readable.
inline constexpr std::uint32_t snapshot_legacy_state_words = 4;

/**
 * @brief Positions of the words of a state section of `snapshot_state_words` words. Each word is
 * an integer stored exactly as a binary64 value: the 64-bit counters and the seed are split into
 * their low and high 32 bits (each in [0, 2^32)), the flags are 0 or 1.
 */
namespace state_word {
inline constexpr std::size_t step_low = 0;             ///< Step counter, bits 0-31.
inline constexpr std::size_t step_high = 1;            ///< Step counter, bits 32-63.
inline constexpr std::size_t epoch_low = 2;            ///< Epoch counter, bits 0-31.
inline constexpr std::size_t epoch_high = 3;           ///< Epoch counter, bits 32-63.
inline constexpr std::size_t seed_low = 4;             ///< Sampling seed, bits 0-31.
inline constexpr std::size_t seed_high = 5;            ///< Sampling seed, bits 32-63.
inline constexpr std::size_t momentum_correction = 6;  ///< 1 when momentum correction is on, else 0.
inline constexpr std::size_t nesterov = 7;             ///< 1 for Nesterov momentum, else 0.
inline constexpr std::size_t selection = 8;            ///< A `snapshot_selection` value: the method.
}  // namespace state_word

/**
 * @brief Positions of the words of a legacy state section (`snapshot_legacy_state_words` words):
 * step and epoch as integers in [0, 2^53), the seed split into its low and high 32 bits.
 */
namespace legacy_state_word {
inline constexpr std::size_t step = 0;       ///< Step counter.
inline constexpr std::size_t epoch = 1;      ///< Epoch counter.
inline constexpr std::size_t seed_low = 2;   ///< Sampling seed, bits 0-31.
inline constexpr std::size_t seed_high = 3;  ///< Sampling seed, bits 32-63.
}  // namespace legacy_state_word

/// The method recorded in word `state_word::selection` of a state section: which compressor, and
/// how it chooses what it sends.
enum class snapshot_selection : std::uint32_t {
  sampled_threshold = 0,  ///< DGC, threshold estimated from a sample (the default).
  exact_topk = 1,         ///< DGC, exact top-k.
  scaled_sign = 2,        ///< EF-SignSGD: every element as a scaled sign.
  ternary = 3,            ///< TernGrad: every element as a stochastic ternary value.
  one_bit = 4,            ///< 1-bit SGD: every element as one bit, two values per column.
  qsgd = 5,               ///< QSGD: every element as a stochastic level of its bucket's norm.
  adacomp = 6,            ///< AdaComp: the elements each bin selects, as scaled signs.
  powersgd = 7,           ///< PowerSGD: each compressed tensor as the product of two low-rank factors.
};
/// Number of `snapshot_selection` values of gradcomp's own methods.
inline constexpr std::uint32_t snapshot_selection_count = 8;
/// The first code of the methods outside gradcomp: a method of a program's own records a code in
/// [`snapshot_selection_external`, 2^32) (`static_cast<snapshot_selection>(code)`), which a decoder
/// accepts and only a compressor of the same code restores. Word `state_word::selection` is below
/// `snapshot_selection_count` or in that range.
inline constexpr std::uint32_t snapshot_selection_external = 65536;
/// Whether a state section's method word `w` (an integer stored as binary64) names a method: one of
/// gradcomp's or a code of the external range.
/// (Negative zero is not.)
inline bool is_snapshot_selection_word(double w) noexcept {
  return !std::signbit(w) && w < 4294967296.0 && std::floor(w) == w &&
         (w < static_cast<double>(snapshot_selection_count) || w >= static_cast<double>(snapshot_selection_external));
}

/// Returns the coding's name as in the spec (`"rice"`), or `"unknown"`.
constexpr const char* to_string(index_coding c) noexcept {
  switch (c) {
    case index_coding::dense: return "dense";
    case index_coding::raw_u32: return "raw_u32";
    case index_coding::delta_varint: return "delta_varint";
    case index_coding::rice: return "rice";
    case index_coding::bitmap: return "bitmap";
    case index_coding::automatic: return "automatic";
  }
  return "unknown";
}

/// Returns the kind's name as in the spec (`"first_round"`), or `"unknown"`.
constexpr const char* to_string(message_kind k) noexcept {
  constexpr const char* names[last_message_kind + 1] = {"gradients", "snapshot", "first_round", "second_round"};
  const auto code = static_cast<std::uint32_t>(k);
  return code <= last_message_kind ? names[code] : "unknown";
}

/// Returns the role's name as in the spec, or `"unknown"`.
constexpr const char* to_string(section_role r) noexcept {
  switch (r) {
    case section_role::gradient: return "gradient";
    case section_role::residual: return "residual";
    case section_role::momentum: return "momentum";
    case section_role::receiver_momentum: return "receiver_momentum";
    case section_role::state: return "state";
    case section_role::factor: return "factor";
  }
  return "unknown";
}

/// The decoded message header.
struct message_header {
  std::uint16_t version = 0;       ///< Format version of the message.
  std::uint16_t flags = 0;         ///< Flag bits (`flag_checksum`).
  message_kind kind = message_kind::gradients;  ///< What the message carries.
  std::uint32_t section_count = 0;  ///< Number of sections.
  std::uint64_t total_bytes = 0;    ///< Length of the whole message, trailer included.
  /// True when a CRC-32C trailer is present.
  GRADCOMP_HD bool has_checksum() const noexcept { return (flags & flag_checksum) != 0; }
};

/// The decoded header of one section, with where its payloads lie in the message.
struct section_header {
  std::uint64_t offset = 0;        ///< Offset of the section in the message.
  std::uint64_t bytes = 0;         ///< Length of the section, header included.
  std::uint32_t tensor = 0;        ///< Tensor id.
  std::uint32_t numel = 0;         ///< Elements of the tensor.
  std::uint32_t kept = 0;          ///< Elements carried.
  index_coding indices = index_coding::dense;  ///< Index coding.
  value_coding values = value_coding::fp32;    ///< Value coding.
  std::uint8_t index_parameter = 0;            ///< Rice parameter r (0 for other codings).
  section_role role = section_role::gradient;  ///< Meaning of the values.
  std::uint64_t index_bytes = 0;   ///< Length of the index payload.
  std::uint64_t value_bytes = 0;   ///< Length of the value payload.
  coding_parameters parameters{};  ///< The layout a value coding states in its parameter block.
};

}  // namespace wire
}  // namespace gradcomp
