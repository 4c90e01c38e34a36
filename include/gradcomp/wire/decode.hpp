/// @file decode.hpp
/// @brief Decoding of wire messages: peek, validate, decode, decode-and-accumulate.
///
/// Nothing here trusts the message. Every length is checked against the buffer before it is used,
/// nothing is allocated from a size that was not checked, every index is checked against its
/// tensor and against its predecessor, and every value must be finite. Each kind of damage has
/// its own `errc` (listed in docs/wire_format.md). Functions that write into caller memory check
/// the whole input first, so an error leaves the destination unchanged.
///
/// Layers: `peek` reads the message header; `for_each_section` walks the section headers;
/// `validate` and `decode` check everything, including the rules of the message's kind (which
/// roles, codings and tensor ids its sections may have: `detail::kind_rules`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <set>
#include <type_traits>
#include <vector>

#include "../detail/bytes.hpp"
#include "codecs/index.hpp"
#include "codecs/values.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "crc32c.hpp"
#include "format.hpp"
#include "value_codecs.hpp"

namespace gradcomp {
namespace wire {

/**
 * @brief Reads and checks the message header without looking at the sections.
 * @return the header, or `errc::truncated` (buffer shorter than the header or than the declared
 *         length), `errc::trailing_bytes` (buffer longer than the declared length),
 *         `errc::bad_magic`, `errc::unsupported_version`, `errc::reserved_field` (unknown flag
 *         bits), `errc::unknown_coding` (unknown message kind), `errc::malformed_payload` (a
 *         declared length shorter than the header), `errc::size_overflow` (more sections than the
 *         declared length can hold).
 */
[[nodiscard]] inline result<message_header> peek(span<const std::byte> msg) noexcept;

namespace detail {

// The header checks below are written once for the host and for devices (GRADCOMP_HD): the
// Thrust backend's decoder runs them on its system. Each returns errc::ok or the first error and
// fills its output as far as it got.

// The fields needed to find the message's end and its checksum: magic, version, flags, length,
// for a buffer of `size` bytes at p.
GRADCOMP_HD inline errc parse_frame(const std::byte* p, std::uint64_t size, message_header& h) noexcept {
  using gradcomp::detail::load_le;
  if (size < message_header_bytes) return errc::truncated;
  constexpr std::uint32_t magic_word = 0x46574347u;  // "GCWF" read as a little-endian word
  static_assert(magic[0] == 0x47 && magic[1] == 0x43 && magic[2] == 0x57 && magic[3] == 0x46, "GCWF");
  if (load_le<std::uint32_t>(p) != magic_word) return errc::bad_magic;
  h.version = load_le<std::uint16_t>(p + 4);
  h.flags = load_le<std::uint16_t>(p + 6);
  h.section_count = load_le<std::uint32_t>(p + 12);
  h.total_bytes = load_le<std::uint64_t>(p + 16);
  if (h.version == 0 || h.version > format_version) return errc::unsupported_version;
  if ((h.flags & ~flag_checksum) != 0) return errc::reserved_field;
  const std::uint64_t fixed = message_header_bytes + (h.has_checksum() ? checksum_bytes : 0);
  if (h.total_bytes < fixed) return errc::malformed_payload;
  if (size < h.total_bytes) return errc::truncated;
  if (size > h.total_bytes) return errc::trailing_bytes;
  return errc::ok;
}

// The remaining header fields, once the frame is known to be sound.
GRADCOMP_HD inline errc parse_header_rest(const std::byte* p, message_header& h) noexcept {
  const std::uint32_t kind = gradcomp::detail::load_le<std::uint32_t>(p + 8);
  if (kind > last_message_kind) return errc::unknown_coding;
  h.kind = static_cast<message_kind>(kind);
  const std::uint64_t fixed = message_header_bytes + (h.has_checksum() ? checksum_bytes : 0);
  if (h.section_count > (h.total_bytes - fixed) / section_header_bytes) return errc::size_overflow;
  return errc::ok;
}

// The checks of read_section_header (below) on a message of `size` bytes at `msg`.
GRADCOMP_HD inline errc parse_section_header(const std::byte* msg, std::uint64_t size, std::uint64_t offset,
                                             std::uint64_t end, section_header& s) noexcept {
  using gradcomp::detail::load_le;
  if (end > size || offset > end || end - offset < section_header_bytes) return errc::truncated;
  const std::byte* p = msg + offset;
  s.offset = offset;
  s.bytes = load_le<std::uint64_t>(p);
  s.tensor = load_le<std::uint32_t>(p + 8);
  s.numel = load_le<std::uint32_t>(p + 12);
  s.kept = load_le<std::uint32_t>(p + 16);
  const auto ic = static_cast<std::uint8_t>(p[20]);
  const auto vc = static_cast<std::uint8_t>(p[21]);
  s.index_parameter = static_cast<std::uint8_t>(p[22]);
  const auto role = static_cast<std::uint8_t>(p[23]);
  s.index_bytes = load_le<std::uint64_t>(p + 24);
  if (s.bytes < section_header_bytes) return errc::malformed_payload;
  if (s.bytes > end - offset) return errc::truncated;  // past the section area
  if (s.kept > s.numel) return errc::kept_exceeds_numel;
  if (ic > static_cast<std::uint8_t>(index_coding::bitmap)) return errc::unknown_coding;
  s.indices = static_cast<index_coding>(ic);
  s.values = static_cast<value_coding>(vc);
  if (!gradcomp::detail::is_known_coding(gradcomp::detail::value_codecs{}, s.values)) return errc::unknown_coding;
  if (role > static_cast<std::uint8_t>(section_role::factor)) return errc::unknown_coding;
  s.role = static_cast<section_role>(role);
  if (s.indices == index_coding::rice ? s.index_parameter > 31 : s.index_parameter != 0) return errc::reserved_field;
  if (s.index_bytes > s.bytes - section_header_bytes) return errc::malformed_payload;
  s.value_bytes = s.bytes - section_header_bytes - s.index_bytes;
  // The payload lies within the section, which lies within the message.
  if (!gradcomp::detail::value_payload_fits(s.values, p + section_header_bytes + s.index_bytes, s.value_bytes, s.kept))
    return errc::malformed_payload;
  // A coding of a whole tensor (isgq) only in a dense section.
  if (gradcomp::detail::is_payload_coding(s.values) && s.indices != index_coding::dense) return errc::malformed_payload;
  s.parameters = gradcomp::detail::value_parameters(s.values, p + section_header_bytes + s.index_bytes);
  const std::uint64_t k = s.kept, n = s.numel;
  switch (s.indices) {
    case index_coding::dense:
      if (k != n || s.index_bytes != 0) return errc::malformed_payload;
      break;
    case index_coding::raw_u32:
      if (s.index_bytes != 4 * k) return errc::malformed_payload;
      break;
    case index_coding::bitmap:
      if (s.index_bytes != (n + 7) / 8) return errc::malformed_payload;
      break;
    case index_coding::delta_varint:
      if (s.index_bytes < k || s.index_bytes > 5 * k) return errc::malformed_payload;
      break;
    case index_coding::rice:
      if (s.index_bytes < (k * (1 + static_cast<std::uint64_t>(s.index_parameter)) + 7) / 8)
        return errc::malformed_payload;
      break;
    default:
      return errc::unknown_coding;
  }
  return errc::ok;
}

inline result<message_header> read_frame(span<const std::byte> msg) noexcept {
  message_header h;
  if (const errc e = parse_frame(msg.data(), msg.size(), h); e != errc::ok) return fail(e);
  return h;
}

inline result<message_header> read_header_rest(span<const std::byte> msg, message_header h) noexcept {
  if (const errc e = parse_header_rest(msg.data(), h); e != errc::ok) return fail(e);
  return h;
}

}  // namespace detail

inline result<message_header> peek(span<const std::byte> msg) noexcept {
  auto h = detail::read_frame(msg);
  if (!h) return h;
  return detail::read_header_rest(msg, *h);
}

/**
 * @brief Reads and checks the header of the section at `offset`, which must end by `end` (the
 * start of the checksum, or the message end). Payloads are not decoded, and the rules of the
 * message's kind are not applied.
 * @return the section header, or `errc::truncated` (fewer than 32 bytes before `end`, or a
 *         `section_bytes` that runs past `end`, however large), `errc::kept_exceeds_numel`,
 *         `errc::unknown_coding`, `errc::reserved_field` (a parameter on a coding that has none,
 *         or a Rice parameter of 32 or more), `errc::malformed_payload` (a `section_bytes` below
 *         32, payload lengths that disagree with the codings, a dense section with
 *         `kept < numel`).
 */
[[nodiscard]] inline result<section_header> read_section_header(span<const std::byte> msg,
                                                                std::uint64_t offset,
                                                                std::uint64_t end) noexcept {
  section_header s;
  if (const errc e = detail::parse_section_header(msg.data(), msg.size(), offset, end, s); e != errc::ok)
    return fail(e);
  return s;
}

namespace detail {

// Decodes the indices of a checked section header, calling sink(j, index) for each.
template <class Sink>
errc for_each_index(span<const std::byte> msg, const section_header& s, Sink&& sink) noexcept {
  const std::byte* p = msg.data() + s.offset + section_header_bytes;
  switch (s.indices) {
    case index_coding::dense:
      for (std::uint32_t j = 0; j < s.kept; ++j) sink(j, j);
      return errc::ok;
    case index_coding::raw_u32: return gradcomp::detail::decode_raw(p, s.numel, s.kept, sink);
    case index_coding::delta_varint:
      return gradcomp::detail::decode_varint(p, s.index_bytes, s.numel, s.kept, sink);
    case index_coding::rice:
      return gradcomp::detail::decode_rice(p, s.index_bytes, s.index_parameter, s.numel, s.kept, sink);
    case index_coding::bitmap: return gradcomp::detail::decode_bitmap(p, s.numel, s.kept, sink);
    default: return errc::unknown_coding;
  }
}

inline const std::byte* value_payload(span<const std::byte> msg, const section_header& s) noexcept {
  return msg.data() + s.offset + section_header_bytes + s.index_bytes;
}

/**
 * @brief The rules of a message's kind (docs/wire_format.md, "Rules of each kind"), applied to
 * its section headers one by one in message order, then `finish()` after the last one.
 *
 * Gradient messages: every section has role `gradient`, and each tensor id appears at most once.
 * Round messages (`first_round`, `second_round`): the same, and every section dense.
 * Snapshots: dense sections only, no `gradient` role, and one of two forms: a compressor
 * snapshot (a state section first, then a group of sections per tensor with state in increasing
 * tensor id order, each group's roles in the order `residual`, `momentum` (only after a
 * `residual`), `factor`, every group with the same roles, all in one value coding, fp32 or fp64)
 * or an aggregator snapshot (only
 * `receiver_momentum` sections, tensor ids strictly increasing, all in one value coding, fp32 or
 * fp64; possibly none).
 *
 * Errors: `errc::section_not_allowed` (a role, coding, tensor id or position the kind does not
 * allow), `errc::duplicate_tensor` (a section whose role and tensor id repeat those of an earlier
 * section, its role, codings and form being allowed; repeats are checked before the order of ids
 * and the grouping), and `errc::size_overflow`
 * when the memory to remember the tensor ids seen cannot be allocated. Once an error was
 * reported, later calls are meaningless. The state section's payload is checked by
 * `check_state_words`, not here.
 *
 * Time is linear in the section count when tensor ids come in increasing order (as gradcomp's
 * encoder writes them) and O(n log n) otherwise; memory is O(section count): the ids seen. Given
 * the message itself, a gradient message whose ids increase is checked without any memory: the
 * ids of earlier sections are read back from the message only if an id comes out of order.
 */
class kind_rules {
 public:
  /// Starts the rules of `h`'s kind; `h` was returned by `peek` or an equivalent header check.
  explicit kind_rules(const message_header& h) noexcept
      : kind_(h.kind), count_(h.section_count) {}
  /// The same for the message `msg` whose header is `h`, whose section headers are passed to
  /// `section` in order after `read_section_header` checked them: allocates nothing for a
  /// gradient message whose tensor ids increase.
  kind_rules(const message_header& h, span<const std::byte> msg) noexcept : kind_rules(h) { msg_ = msg; }

  /// Checks the next section header (already checked by `read_section_header`).
  errc section(const section_header& s) noexcept {
    try {
      const errc e = kind_ == message_kind::snapshot ? snapshot_section(s) : gradient_section(s);
      prev_role_ = s.role;
      prev_tensor_ = s.tensor;
      ++seen_;
      return e;
    } catch (const std::bad_alloc&) {
      return errc::size_overflow;
    }
  }

  /// Checks what only the end of the message can tell (a last group of a compressor snapshot
  /// without a role the others have, such as a momentum section after its residual).
  errc finish() const noexcept {
    if (kind_ == message_kind::snapshot && form_ == form::compressor && pattern_ != 0 && group_ != pattern_)
      return errc::section_not_allowed;
    return errc::ok;
  }

 private:
  enum class form : std::uint8_t { undecided, compressor, aggregator };

  // Tensor ids accepted in increasing order: a sorted vector, so that "seen before" costs nothing
  // for an id above the last one and a binary search otherwise.
  struct increasing_ids {
    std::vector<std::uint32_t> ids;
    bool contains(std::uint32_t t) const noexcept {
      if (ids.empty() || t > ids.back()) return false;
      return std::binary_search(ids.begin(), ids.end(), t);
    }
    void add(std::uint32_t t, std::uint32_t count) {
      // One allocation for the usual model sizes; beyond that the vector grows as ids come.
      if (ids.empty()) ids.reserve(std::min<std::uint32_t>(count, 4096));
      ids.push_back(t);
    }
  };

  // A gradient message's section, or a round's (which is dense).
  errc gradient_section(const section_header& s) {
    if (s.role != section_role::gradient) return errc::section_not_allowed;
    if (is_round(kind_) && s.indices != index_coding::dense) return errc::section_not_allowed;
    if (!unordered_) {
      const bool increasing = seen_ == 0 || s.tensor > prev_tensor_;
      if (!msg_.empty()) {
        if (increasing) return errc::ok;  // the ids seen so far are in the message
        // Ids out of order: the earlier sections' ids, read back from the message (their headers
        // were checked, so their lengths chain up to this section), then a balanced tree.
        std::uint64_t offset = message_header_bytes;
        for (std::uint32_t i = 0; i < seen_; ++i) {
          unordered_ids_.insert(gradcomp::detail::load_le<std::uint32_t>(msg_.data() + offset + 8));
          offset += gradcomp::detail::load_le<std::uint64_t>(msg_.data() + offset);
        }
        unordered_ = true;
        return unordered_ids_.insert(s.tensor).second ? errc::ok : errc::duplicate_tensor;
      }
      if (increasing) {
        ids_.add(s.tensor, count_);
        return errc::ok;
      }
      if (ids_.contains(s.tensor)) return errc::duplicate_tensor;
      // Ids out of order: from here on, a balanced tree of every id seen.
      unordered_ = true;
      for (const std::uint32_t t : ids_.ids) unordered_ids_.insert(unordered_ids_.end(), t);
      std::vector<std::uint32_t>().swap(ids_.ids);
    }
    return unordered_ids_.insert(s.tensor).second ? errc::ok : errc::duplicate_tensor;
  }

  static bool exact_coding(value_coding c) noexcept {
    return c == value_coding::fp32 || c == value_coding::fp64;
  }

  // The checks that do not depend on earlier sections, then the form, then repeated ids, then
  // the order of ids and sections.
  errc snapshot_section(const section_header& s) {
    if (s.role == section_role::gradient) return errc::section_not_allowed;
    if (s.indices != index_coding::dense) return errc::section_not_allowed;
    if (s.role == section_role::state) {
      if (seen_ != 0 || s.tensor != snapshot_state_tensor || s.values != value_coding::fp64 ||
          (s.numel != snapshot_state_words && s.numel != snapshot_legacy_state_words))
        return errc::section_not_allowed;
      form_ = form::compressor;
      return errc::ok;
    }
    if (s.tensor == snapshot_state_tensor || !exact_coding(s.values))
      return errc::section_not_allowed;
    if (seen_ == 0) {
      if (s.role != section_role::receiver_momentum) return errc::section_not_allowed;
      form_ = form::aggregator;
    }
    if ((form_ == form::aggregator) != (s.role == section_role::receiver_momentum))
      return errc::section_not_allowed;
    if (s.role == section_role::receiver_momentum) {
      if (ids_.contains(s.tensor)) return errc::duplicate_tensor;
      if (!ids_.ids.empty() && (s.tensor < ids_.ids.back() || s.values != coding_))
        return errc::section_not_allowed;
      coding_ = s.values;
      ids_.add(s.tensor, count_);
      return errc::ok;
    }
    return group_section(s);
  }

  // A compressor snapshot's sections after the state: groups of one tensor each, in strictly
  // increasing tensor id order, whose roles come in the order residual, momentum, factor (a
  // momentum section only directly after its residual), every group with the same roles.
  static int group_rank(section_role r) noexcept {
    return r == section_role::residual ? 0 : r == section_role::momentum ? 1 : r == section_role::factor ? 2 : -1;
  }
  errc group_section(const section_header& s) {
    const int rank = group_rank(s.role);
    if (role_ids_[rank].contains(s.tensor)) return errc::duplicate_tensor;
    if (groups_ != 0 && s.values != coding_) return errc::section_not_allowed;
    const auto bit = static_cast<std::uint8_t>(1u << rank);
    if (group_rank(prev_role_) >= 0 && s.tensor == prev_tensor_ && rank > group_rank(prev_role_)) {
      // The group goes on.
      if ((pattern_ != 0 && (pattern_ & bit) == 0) ||
          (s.role == section_role::momentum && prev_role_ != section_role::residual))
        return errc::section_not_allowed;
      group_ = static_cast<std::uint8_t>(group_ | bit);
    } else {
      // A new group: after the last one, which is complete.
      if (s.role == section_role::momentum || (groups_ != 0 && s.tensor <= prev_tensor_))
        return errc::section_not_allowed;
      if (const errc e = close_group(); e != errc::ok) return e;
      if (pattern_ != 0 && (pattern_ & -pattern_) != bit) return errc::section_not_allowed;
      group_ = bit;
      ++groups_;
    }
    coding_ = s.values;
    role_ids_[rank].add(s.tensor, count_);
    return errc::ok;
  }
  // The group just ended: the first one sets the roles of all.
  errc close_group() noexcept {
    if (group_ == 0) return errc::ok;
    if (pattern_ == 0) pattern_ = group_;
    return group_ == pattern_ ? errc::ok : errc::section_not_allowed;
  }

  message_kind kind_;
  span<const std::byte> msg_;  // the message, when given: ids are read back instead of kept
  std::uint32_t count_;     // the header's section count, to reserve memory once
  std::uint32_t seen_ = 0;  // sections checked so far
  section_role prev_role_ = section_role::gradient;
  std::uint32_t prev_tensor_ = 0;
  // Gradient messages: ids seen, in a sorted vector while they increase, then in a tree.
  // Aggregator snapshots: ids of the receiver_momentum sections (always increasing).
  increasing_ids ids_;
  bool unordered_ = false;
  std::set<std::uint32_t> unordered_ids_;
  // Compressor snapshots: the ids of each group role (residual, momentum, factor), the groups
  // seen, the roles of the open group and of the first one (bit 0 residual, 1 momentum, 2 factor).
  form form_ = form::undecided;
  increasing_ids role_ids_[3];
  std::uint32_t groups_ = 0;
  std::uint8_t group_ = 0;
  std::uint8_t pattern_ = 0;
  value_coding coding_ = value_coding::fp32;  // of the first residual / receiver_momentum
};

// True when x is an integer in [0, limit) stored exactly (negative zero is not).
inline bool is_state_count(double x, double limit) noexcept {
  return !std::signbit(x) && x < limit && std::floor(x) == x;
}

// The words of a state section (role state, fp64, dense, 9 or 4 words, payload already checked
// by check_section): errc::ok or errc::malformed_payload.
inline errc check_state_words(span<const std::byte> msg, const section_header& s) noexcept {
  const std::byte* v = value_payload(msg, s);
  double w[snapshot_state_words] = {};
  if (s.values != value_coding::fp64 || s.kept > snapshot_state_words) return errc::malformed_payload;
  for (std::uint32_t j = 0; j < s.kept; ++j)
    w[j] = gradcomp::detail::bits_double(gradcomp::detail::load_le<std::uint64_t>(v + 8 * j));
  const double two32 = 4294967296.0, two53 = 9007199254740992.0;
  if (s.kept == snapshot_state_words) {
    for (std::size_t j = state_word::step_low; j <= state_word::seed_high; ++j)
      if (!is_state_count(w[j], two32)) return errc::malformed_payload;
    if (!is_state_count(w[state_word::momentum_correction], 2.0) || !is_state_count(w[state_word::nesterov], 2.0) ||
        !is_snapshot_selection_word(w[state_word::selection]))
      return errc::malformed_payload;
    return errc::ok;
  }
  if (s.kept == snapshot_legacy_state_words) {
    if (!is_state_count(w[legacy_state_word::step], two53) ||
        !is_state_count(w[legacy_state_word::epoch], two53) ||
        !is_state_count(w[legacy_state_word::seed_low], two32) ||
        !is_state_count(w[legacy_state_word::seed_high], two32))
      return errc::malformed_payload;
    return errc::ok;
  }
  return errc::malformed_payload;
}

// Walks every section header; f(section_header) returns errc::ok to continue.
template <class F>
result<message_header> walk(span<const std::byte> msg, F&& f) noexcept {
  auto h = peek(msg);
  if (!h) return h;
  const std::uint64_t end = h->total_bytes - (h->has_checksum() ? checksum_bytes : 0);
  std::uint64_t offset = message_header_bytes;
  for (std::uint32_t i = 0; i < h->section_count; ++i) {
    auto s = read_section_header(msg, offset, end);
    if (!s) return fail(s.error());
    const errc e = f(*s);
    if (e != errc::ok) return fail(e);
    offset += s->bytes;
  }
  if (offset != end) return fail(errc::trailing_bytes);
  return h;
}

inline errc verify_checksum(span<const std::byte> msg, const message_header& h) noexcept {
  if (!h.has_checksum()) return errc::ok;
  const std::uint64_t body = h.total_bytes - checksum_bytes;
  const std::uint32_t stored = gradcomp::detail::load_le<std::uint32_t>(msg.data() + body);
  const std::uint32_t actual = crc32c(span<const std::byte>(msg.data(), static_cast<std::size_t>(body)));
  return stored == actual ? errc::ok : errc::checksum_mismatch;
}

// Header frame, then the checksum (before any other field is interpreted), then the rest.
inline result<message_header> checked_header(span<const std::byte> msg) noexcept {
  auto frame = read_frame(msg);
  if (!frame) return frame;
  if (const errc e = verify_checksum(msg, *frame); e != errc::ok) return fail(e);
  return read_header_rest(msg, *frame);
}

// The CRC-32C of a message computed along a walk over it: `through(offset)` folds in the bytes
// up to `offset` not folded in yet, so that the checksum reads each block just before (or after)
// the checks read it and the message comes from memory once. Does nothing for a message without
// a checksum.
class checksum_follower {
 public:
  checksum_follower(span<const std::byte> msg, const message_header& frame) noexcept
      : msg_(msg), on_(frame.has_checksum()), body_(on_ ? frame.total_bytes - checksum_bytes : 0) {}
  bool on() const noexcept { return on_; }
  void through(std::uint64_t offset) noexcept {
    if (offset > body_) offset = body_;
    if (offset <= done_) return;
    crc_ = gradcomp::detail::crc32c_update(crc_, msg_.data() + done_, static_cast<std::size_t>(offset - done_));
    done_ = offset;
  }
  // Folds in the rest of the message: errc::ok or errc::checksum_mismatch.
  errc verdict() noexcept {
    if (!on_) return errc::ok;
    through(body_);
    return gradcomp::detail::load_le<std::uint32_t>(msg_.data() + body_) == crc_ ? errc::ok : errc::checksum_mismatch;
  }

 private:
  span<const std::byte> msg_;
  bool on_;
  std::uint64_t body_;  // the bytes the checksum covers
  std::uint64_t done_ = 0;
  std::uint32_t crc_ = 0;
};

// The header's frame, then `checks(frame, crc)` (the rest of the header and every section, with
// the checksum following), then the checksum's verdict, which takes precedence over whatever the
// checks found: the result is that of checking the checksum first, from one read of the message.
template <class Checks>
result<message_header> checked_in_one_pass(span<const std::byte> msg, Checks&& checks) {
  const auto frame = read_frame(msg);
  if (!frame) return frame;
  checksum_follower crc(msg, *frame);
  auto checked = checks(*frame, crc);
  if (const errc e = crc.verdict(); e != errc::ok) return fail(e);
  return checked;
}

// The bytes of section s up to its value payload.
inline std::uint64_t value_payload_offset(const section_header& s) noexcept {
  return s.offset + section_header_bytes + s.index_bytes;
}

// check_values over the value payload of s with the checksum following: a coding of a fixed
// size per value is checked block by block, each block checksummed first.
template <class T>
errc check_section_values(span<const std::byte> msg, const section_header& s, checksum_follower& crc,
                          double& largest) noexcept {
  const std::byte* v = value_payload(msg, s);
  const std::uint64_t at = value_payload_offset(s);
  const std::size_t width = value_bytes_per_element(s.values);
  const std::size_t per_block = width == 0 ? 0 : gradcomp::detail::crc32c_follow_block / width;
  if (!crc.on() || width == 0 || s.kept <= per_block) {
    crc.through(at + s.value_bytes);
    return gradcomp::detail::check_values<T>(v, s.values, s.kept, largest);
  }
  largest = 0.0;
  for (std::size_t first = 0; first < s.kept; first += per_block) {
    const std::size_t count = std::min<std::size_t>(per_block, s.kept - first);
    crc.through(at + width * (first + count));
    double block_largest = 0.0;
    const errc e = gradcomp::detail::check_values<T>(v + width * first, s.values, count, block_largest);
    if (e != errc::ok) return e;
    largest = std::max(largest, block_largest);
  }
  return errc::ok;
}

// Checks a section's payloads completely (indices and values), writing nothing, with the
// checksum following.
template <class T>
errc check_section(span<const std::byte> msg, const section_header& s, checksum_follower& crc) noexcept {
  crc.through(value_payload_offset(s));
  const errc e = for_each_index(msg, s, [](std::uint32_t, std::uint32_t) {});
  if (e != errc::ok) return e;
  double largest = 0.0;
  return check_section_values<T>(msg, s, crc, largest);
}

// The same without a checksum.
template <class T>
errc check_section(span<const std::byte> msg, const section_header& s) noexcept {
  checksum_follower none(msg, message_header{});
  return check_section<T>(msg, s, none);
}

// validate, checking values as decode_section<T> would, in one read of the message. Per section:
// its header, the kind's rules, its payload (and a state section's words); after the last: the
// kind's final rule; a checksum mismatch before all of them.
template <class T>
result<message_header> validate_as(span<const std::byte> msg) noexcept {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "values are checked as float or double");
  return checked_in_one_pass(msg, [&](const message_header& frame, checksum_follower& crc) -> result<message_header> {
    const auto h = read_header_rest(msg, frame);
    if (!h) return h;
    kind_rules rules(*h, msg);
    auto walked = walk(msg, [&](const section_header& s) {
      errc e = rules.section(s);
      if (e == errc::ok) e = check_section<T>(msg, s, crc);
      if (e == errc::ok && s.role == section_role::state) e = check_state_words(msg, s);
      return e;
    });
    if (!walked) return walked;
    if (const errc e = rules.finish(); e != errc::ok) return fail(e);
    return walked;
  });
}

}  // namespace detail

/**
 * @brief Calls `f(const section_header&)` for each section, in order, after checking the message
 * header, the checksum and each section header. This is a walk over headers: payloads are not
 * decoded and the rules of the message's kind are not applied (use `validate` first to know the
 * message is sound). `f` returns nothing.
 * @return the message header, or the first error found (see `peek`, `read_section_header`, plus
 *         `errc::checksum_mismatch`, `errc::trailing_bytes` when the sections end before the
 *         declared length).
 */
template <class F>
[[nodiscard]] result<message_header> for_each_section(span<const std::byte> msg, F&& f) {
  auto h = detail::checked_header(msg);
  if (!h) return h;
  return detail::walk(msg, [&](const section_header& s) {
    f(s);
    return errc::ok;
  });
}

/**
 * @brief Checks a whole message: header, checksum, every section header, the rules of the
 * message's kind (see `detail::kind_rules`: roles, codings, tensor ids, the snapshot layouts and
 * the state words) and every payload (all indices strictly increasing and in range, payloads
 * consumed exactly with zero padding, all values finite).
 *
 * Values are checked as binary64: an fp64 value is accepted whatever its magnitude, so a message
 * this accepts may still be refused by `decode_section<float>`, `decode<float>` or
 * `decode_accumulate<float>` with `errc::value_out_of_range`. Use `validate<float>` to check
 * for a float destination.
 *
 * @return the message header, or the first error found, in the order: header, checksum, then
 *         for each section its header, the kind's rules and its payload, then the kind's final
 *         rule (see `peek`, `read_section_header`, plus `errc::checksum_mismatch`,
 *         `errc::section_not_allowed`, `errc::duplicate_tensor`, `errc::index_out_of_range`,
 *         `errc::indices_not_increasing`, `errc::non_finite_input`, `errc::malformed_payload`
 *         for state words out of their range, `errc::trailing_bytes` when the sections end
 *         before the declared length, `errc::size_overflow` when memory for the tensor ids seen
 *         cannot be allocated).
 */
[[nodiscard]] inline result<message_header> validate(span<const std::byte> msg) noexcept {
  return detail::validate_as<double>(msg);
}

/**
 * @brief `validate` for a destination type `T` (`float` or `double`): checks the values as
 * `decode_section<T>`, `decode<T>` and `decode_accumulate<T>` read them, so an fp64 value beyond
 * the range of `T` gives `errc::value_out_of_range`. `validate<double>` is `validate`.
 * @return as `validate`, plus `errc::value_out_of_range`.
 */
template <class T>
[[nodiscard]] result<message_header> validate(span<const std::byte> msg) noexcept {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "validate<T> takes float or double");
  return detail::validate_as<T>(msg);
}

/**
 * @brief Decodes one section (from `for_each_section`) into caller memory: the first `kept`
 * entries of `indices` and `values` (for a dense section all `numel` values, and `indices` is
 * not touched).
 *
 * `s` is not trusted: the section header at `s.offset` is read again from `msg` (within the
 * message's section area) and must equal `s` in every field, so a forged or stale header can
 * never make this read outside `msg`. The rules of the message's kind are not applied (that is
 * `validate`'s job).
 *
 * @return `kept`, or any error of `peek`'s frame checks on `msg` (`errc::truncated`,
 *         `errc::trailing_bytes`, `errc::bad_magic`, `errc::unsupported_version`,
 *         `errc::reserved_field`, `errc::malformed_payload`), `errc::invalid_argument` (`s` is
 *         not the header of a sound section at `s.offset` of `msg`), `errc::output_too_small`,
 *         any payload error of `validate`, or `errc::value_out_of_range` (an fp64 value beyond
 *         the range of `T`); on error nothing is written.
 */
template <class T>
[[nodiscard]] result<std::size_t> decode_section(span<const std::byte> msg,
                                                 const section_header& s,
                                                 span<std::uint32_t> indices, span<T> values) {
  const auto frame = detail::read_frame(msg);
  if (!frame) return fail(frame.error());
  const std::uint64_t end = frame->total_bytes - (frame->has_checksum() ? checksum_bytes : 0);
  if (s.offset < message_header_bytes || s.offset > end) return fail(errc::invalid_argument);
  const auto again = read_section_header(msg, s.offset, end);
  if (!again || again->bytes != s.bytes || again->tensor != s.tensor ||
      again->numel != s.numel || again->kept != s.kept || again->indices != s.indices ||
      again->values != s.values || again->index_parameter != s.index_parameter ||
      again->role != s.role || again->index_bytes != s.index_bytes ||
      again->value_bytes != s.value_bytes)
    return fail(errc::invalid_argument);
  if (values.size() < s.kept || (s.indices != index_coding::dense && indices.size() < s.kept))
    return fail(errc::output_too_small);
  if (const errc e = detail::check_section<T>(msg, s); e != errc::ok) return fail(e);
  if (s.indices != index_coding::dense)
    (void)detail::for_each_index(msg, s, [&](std::uint32_t j, std::uint32_t i) { indices[j] = i; });
  gradcomp::detail::decode_values<T>(detail::value_payload(msg, s), s.values, s.kept, values.data());
  return static_cast<std::size_t>(s.kept);
}

/// A section decoded into owned memory (see `decode`).
template <class T>
struct decoded_section {
  section_header header;               ///< The section's header.
  std::vector<std::uint32_t> indices;  ///< Kept positions (empty for dense sections).
  std::vector<T> values;               ///< Kept values (all values for dense sections).
};

/**
 * @brief Convenience: validates (as `validate<T>`, kind rules included) and decodes every section
 * into vectors. Throws `gradcomp::error` with the first error found. Allocations are bounded by
 * the message length.
 */
template <class T>
std::vector<decoded_section<T>> decode(span<const std::byte> msg) {
  detail::validate_as<T>(msg).value();
  std::vector<decoded_section<T>> out;
  (void)for_each_section(msg, [&](const section_header& s) {
    decoded_section<T> d;
    d.header = s;
    d.values.resize(s.kept);
    if (s.indices != index_coding::dense) d.indices.resize(s.kept);
    decode_section<T>(msg, s, span<std::uint32_t>(d.indices.data(), d.indices.size()),
                      span<T>(d.values.data(), d.values.size()))
        .value();
    out.push_back(std::move(d));
  });
  return out;
}

}  // namespace wire
}  // namespace gradcomp

// decode_accumulate, the receiving side of an allgather, builds on the checks above.
#include "accumulate.hpp"  // IWYU pragma: export
