/// @file accumulate.hpp
/// @brief Decode-and-accumulate: the receiving side of an allgather, which adds every section of
/// a gradient message into the receiver's accumulators, all or nothing.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../detail/simd.hpp"
#include "../detail/bytes.hpp"
#include "codecs/index.hpp"
#include "codecs/values.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "decode.hpp"
#include "format.hpp"

namespace gradcomp {
namespace wire {

/**
 * @brief What a receiver accepts, for `decode_accumulate`: the rules every receiver applies
 * (accept every sound section that fits its accumulator) and nothing more. A receiver with a
 * stricter layout (every tensor exactly once, a fixed dense/sparse form, an overflow guard), such
 * as `dgc_aggregator`, passes its own type with the same two members. A receiver of the rounds
 * of a multi-round method also has `message_kind kind() const`, the kind it accepts (without it:
 * `message_kind::gradients`); a message of another kind is refused with `errc::layout_mismatch`.
 */
struct accept_all {
  /**
   * @brief Called once per section, in message order, after the section was checked completely
   * and before anything is written. A message with a checksum is checked in the same read as its
   * sections, so `section` and `complete` may be called for a message that is then refused
   * with `errc::checksum_mismatch` (nothing is written then either).
   * @param s        the section's header.
   * @param largest  the largest magnitude among the section's values (0 when it carries none).
   * @param check_sums  set to true to have `decode_accumulate` verify, before anything is
   *                 written, that every sum this section produces stays finite
   *                 (`errc::state_overflow` otherwise).
   * @return `errc::ok` to accept the section, or the error to refuse the whole message with.
   */
  errc section(const section_header& s, double largest, bool& check_sums) noexcept {
    (void)s;
    (void)largest;
    (void)check_sums;
    return errc::ok;
  }
  /// Called after the last section was accepted, before anything is written.
  errc complete() noexcept { return errc::ok; }
};

namespace detail {

// The kind of message `rules` accept: their `kind()` where they have one, else gradients.
template <class Rules>
auto accepted_kind(const Rules& rules, int) noexcept -> decltype(rules.kind()) {
  return rules.kind();
}
template <class Rules>
message_kind accepted_kind(const Rules&, long) noexcept {
  return message_kind::gradients;
}

// True when acc[i] + value stays finite at every position of the section (values already checked).
template <class T>
bool sums_stay_finite(span<const std::byte> msg, const section_header& s, const T* acc) noexcept {
  const std::byte* v = value_payload(msg, s);
  bool finite = true;
  gradcomp::detail::visit_value_codec(s.values, [&](auto codec) {
    (void)for_each_index(msg, s, [&](std::uint32_t j, std::uint32_t i) {
      finite &= static_cast<bool>(std::isfinite(acc[i] + decltype(codec)::template value<T>(v, j)));
    });
  });
  return finite;
}

// Positions of gap and bitmap codings go to the index scratch while it has room; raw and dense
// positions are cheap to read again.
inline bool stores_positions(const section_header& s) noexcept {
  return s.indices == index_coding::delta_varint || s.indices == index_coding::rice ||
         s.indices == index_coding::bitmap;
}

// The checking pass of decode_accumulate, which writes nothing but the scratch: the header, then
// every section against the kind's rules, `count` accumulators of `size_of(t)` elements and
// `rules`; `sums_finite(s)` answers for a section whose rules asked for its sums to be checked.
// Positions of compact codings are saved in `index_scratch` as decode_accumulate's apply pass
// expects them. One read of the message: the checksum follows the checks block by block, and a
// mismatch takes precedence over any other error.
template <class T, class Rules, class SizeOf, class AccumulatorOf, class SumsFinite>
result<message_header> check_accumulate(span<const std::byte> msg, std::size_t count, SizeOf&& size_of,
                                        AccumulatorOf&& accumulator_of, span<std::uint32_t> index_scratch,
                                        Rules& rules, SumsFinite&& sums_finite) {
  return checked_in_one_pass(msg, [&](const message_header& frame, checksum_follower& crc) -> result<message_header> {
    const auto h = read_header_rest(msg, frame);
    if (!h) return h;
    if (h->kind != accepted_kind(rules, 0)) return fail(errc::layout_mismatch);
    std::uint64_t used = 0;
    kind_rules kind(*h, msg);  // gradient roles only, each tensor at most once (a round's dense)
    auto checked = walk(msg, [&](const section_header& s) {
      if (const errc e = kind.section(s); e != errc::ok) return e;
      if (s.tensor >= count) return errc::unknown_tensor;
      const std::size_t size = size_of(s.tensor);
      if (size < s.numel) return errc::output_too_small;
      if (size > s.numel) return errc::size_mismatch;
      crc.through(value_payload_offset(s));
      errc e = errc::ok;
      if (stores_positions(s) && s.kept <= index_scratch.size() - used) {
        std::uint32_t* out = index_scratch.data() + used;
        if (const T* acc = accumulator_of(s.tensor)) {
          e = for_each_index(msg, s, [out, acc](std::uint32_t j, std::uint32_t i) {
            out[j] = i;
            gradcomp::detail::cpu::prefetch_for_write(acc + i);
          });
        } else {
          e = for_each_index(msg, s, [out](std::uint32_t j, std::uint32_t i) { out[j] = i; });
        }
        used += s.kept;
      } else {
        e = for_each_index(msg, s, [](std::uint32_t, std::uint32_t) {});
      }
      if (e != errc::ok) return e;
      double largest = 0.0;
      e = check_section_values<T>(msg, s, crc, largest);
      if (e != errc::ok) return e;
      bool check_sums = false;
      e = rules.section(s, largest, check_sums);
      if (e != errc::ok) return e;
      if (check_sums && !sums_finite(s)) return errc::state_overflow;
      return errc::ok;
    });
    if (!checked) return checked;
    if (const errc e = kind.finish(); e != errc::ok) return fail(e);
    if (const errc e = rules.complete(); e != errc::ok) return fail(e);
    return h;
  });
}

}  // namespace detail

/**
 * @brief The receiving side of an allgather: adds every section of a gradient message into
 * `dest[section.tensor]` (`dest[t]` holds tensor t's dense accumulator, in host memory).
 *
 * The whole message is validated first, every section checked against `dest` and offered to
 * `rules`, so an error leaves every accumulator unchanged: a message is applied completely or not
 * at all. Sums are computed in `T`; with `accept_all` they are not checked for overflow (the
 * values themselves are always finite): a receiver that must never hold an infinity bounds its
 * sums through `rules` (`check_sums`), as `dgc_aggregator` does.
 *
 * `index_scratch` is optional working memory: when it holds at least the total `kept` of the
 * message's sparse sections, positions are decoded once (into it) instead of twice (once to
 * validate, once to apply). Its content on return is unspecified.
 *
 * @param rules  the receiver's rules (see `accept_all` for the two members it needs).
 * @return the message header, or any error of `validate` (`errc::section_not_allowed` for a
 *         role other than `gradient`, `errc::duplicate_tensor` for a tensor carried twice),
 *         `errc::layout_mismatch` (not a gradient message), `errc::unknown_tensor`
 *         (a tensor id beyond `dest`), `errc::output_too_small` (an accumulator shorter than
 *         its tensor), `errc::size_mismatch` (an accumulator longer than its tensor),
 *         `errc::state_overflow` (a section `rules` asked to check would make a sum overflow),
 *         or whatever `rules` refuses with.
 */
template <class T, class Rules>
[[nodiscard]] result<message_header> decode_accumulate(span<const std::byte> msg,
                                                       span<const span<T>> dest,
                                                       span<std::uint32_t> index_scratch,
                                                       Rules& rules) {
  auto stored = [](const section_header& s) { return detail::stores_positions(s); };
  const auto h = detail::check_accumulate<T>(
      msg, dest.size(), [&](std::uint32_t t) { return dest[t].size(); },
      [&](std::uint32_t t) -> const T* { return dest[t].data(); }, index_scratch, rules,
      [&](const section_header& s) { return detail::sums_stay_finite<T>(msg, s, dest[s.tensor].data()); });
  if (!h) return h;
  std::uint64_t used = 0;
  (void)detail::walk(msg, [&](const section_header& s) {
    T* acc = dest[s.tensor].data();
    const std::byte* v = detail::value_payload(msg, s);
    if (stored(s) && s.kept <= index_scratch.size() - used) {
      const std::uint32_t* idx = index_scratch.data() + used;
      gradcomp::detail::add_values<T>(v, s.values, 0, s.kept, acc, [idx](std::size_t j) { return idx[j]; });
      used += s.kept;
      return errc::ok;
    }
    if (s.indices == index_coding::raw_u32) {
      const std::byte* raw = msg.data() + s.offset + section_header_bytes;
      gradcomp::detail::add_values<T>(v, s.values, 0, s.kept, acc, [raw](std::size_t j) {
        return gradcomp::detail::load_le<std::uint32_t>(raw + 4 * j);
      });
      return errc::ok;
    }
    if (s.indices == index_coding::dense) {
      gradcomp::detail::add_values<T>(v, s.values, 0, s.kept, acc, [](std::size_t j) { return j; });
      return errc::ok;
    }
    // Without room in the scratch: decode positions in blocks on the stack, add each block.
    constexpr std::uint32_t block = 256;
    std::uint32_t positions[block] = {};  // zeroed: nvcc's front end cannot see the writes come first
    auto flush = [&](std::uint32_t first, std::uint32_t count) {
      gradcomp::detail::add_values<T>(v, s.values, first, count, acc,
                                      [&positions](std::size_t j) { return positions[j]; });
    };
    (void)detail::for_each_index(msg, s, [&](std::uint32_t j, std::uint32_t i) {
      positions[j % block] = i;
      if (j % block == block - 1) flush(j - (block - 1), block);
    });
    if (s.kept % block != 0) flush(s.kept - s.kept % block, s.kept % block);
    return errc::ok;
  });
  return h;
}

/// `decode_accumulate` with the rules every receiver applies (`accept_all`).
template <class T>
[[nodiscard]] result<message_header> decode_accumulate(span<const std::byte> msg,
                                                       span<const span<T>> dest,
                                                       span<std::uint32_t> index_scratch) {
  accept_all rules;
  return decode_accumulate<T>(msg, dest, index_scratch, rules);
}

/// Positions `decode_accumulate` without caller scratch keeps on the stack (8 KiB).
inline constexpr std::size_t decode_accumulate_stack_positions = 2048;

/// `decode_accumulate` without caller scratch memory: the positions of compact codings are kept
/// in `decode_accumulate_stack_positions` entries on the stack while they fit (a message of a
/// few thousand kept entries is decoded once), and decoded twice beyond.
template <class T>
[[nodiscard]] result<message_header> decode_accumulate(span<const std::byte> msg,
                                                       span<const span<T>> dest) {
  std::uint32_t positions[decode_accumulate_stack_positions];
  return decode_accumulate<T>(msg, dest, span<std::uint32_t>(positions, decode_accumulate_stack_positions));
}

}  // namespace wire
}  // namespace gradcomp
