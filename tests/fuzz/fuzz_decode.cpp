// Fuzz target: the decoding side of wire format v1 on arbitrary bytes.
//
// The input is taken as a message. Besides running without memory errors, the harness checks:
//   - peek, validate and for_each_section agree: a peek error is also theirs, with the same errc,
//     except that the checksum is verified right after the fields that locate it (magic,
//     version, flags, total_bytes), so a wrong kind or section count under a wrong CRC-32C
//     (checked here with an independent CRC) reads as checksum_mismatch; validate reports the
//     first error in message order;
//   - every section header for_each_section accepts is self-consistent (lengths add up, payload
//     sizes match the codings, sections tile the message);
//   - decode_section<float/double> accepts a section exactly when an independent bit-by-bit
//     reference decoder does, then returns kept, strictly increasing indices below numel and the
//     reference's values (all finite); on error it writes nothing; too-small outputs are refused;
//   - decode_section refuses, with invalid_argument and without writing, a section header that
//     differs from the message's in one field (offset, bytes, kept, numel, index_bytes, codings);
//   - if validate succeeds every decode_section succeeds (float may refuse an fp64 value beyond
//     its range with value_out_of_range, and only then);
//   - validate and validate<float> report exactly the error of a model: per section in message
//     order the rules of the message's kind (checked by an independent reference of the spec's
//     "Rules of each kind": roles, dense snapshots, the state section and its words, the groups
//     of residual, momentum and factor sections, receiver momentum, increasing ids, one coding,
//     repeated tensors), then the payload; after the last section the grouping rule's end;
//   - decode_accumulate, with a matching layout and with mismatched ones, fails with exactly the
//     documented error and leaves the accumulators bitwise unchanged, or adds the decoded values;
//   - the throwing decode<T> agrees with validate<T> and decode_section;
//   - a valid section re-encoded with its own codings gives back the same bytes where the coding
//     admits a single encoding (raw_u32, bitmap, dense, delta_varint; rice when the encoder
//     picks the same parameter; an isgq payload handed back as the producer's payload).
// An isgq section states n_in x n_out values in far fewer bytes: an input with one whose
// batch x n_in x n_out exceeds max_products is checked up to its section headers only (its
// decoding would take that many operations).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include "fuzz_common.hpp"

namespace {

using gradcomp::errc;
using gradcomp::span;
using gradcomp::wire::index_coding;
using gradcomp::wire::message_header;
using gradcomp::wire::section_header;
using gradcomp::wire::value_coding;
namespace wire = gradcomp::wire;
using namespace gradcomp_fuzz;

// The harness allocates at most this many accumulator elements (decode_accumulate is skipped for
// larger layouts; the sections themselves are bounded by the message length).
constexpr std::uint64_t max_elements = std::uint64_t(1) << 20;
constexpr std::uint32_t index_pattern = 0xa5a5a5a5u;
constexpr std::uint64_t max_products = std::uint64_t(1) << 22;

// ---------------------------------------------------------------------------------------------
// Independent reference of the payload rules (written from the format description, not from the
// library's decoder): bit by bit, no word tricks.
// ---------------------------------------------------------------------------------------------

struct reference_section {
  bool indices_ok = false;
  std::vector<std::uint32_t> indices;  // decoded positions (also for dense: 0..numel-1)
  std::vector<double> values;          // exact values of the payload, finite or not
  errc parameters = errc::ok;          // what the parameter block and padding are worth
  double isgq_bound = -1.0;            // isgq: the bound of the values' magnitudes (sound payloads)
};

std::uint64_t le(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

bool reference_index_payload(const std::byte* p, const section_header& s,
                             std::vector<std::uint32_t>& out) {
  const std::uint64_t n = s.numel, k = s.kept, bytes = s.index_bytes;
  out.clear();
  switch (s.indices) {
    case index_coding::dense:
      for (std::uint64_t i = 0; i < n; ++i) out.push_back(static_cast<std::uint32_t>(i));
      return bytes == 0 && k == n;
    case index_coding::raw_u32: {
      if (bytes != 4 * k) return false;
      for (std::uint64_t j = 0; j < k; ++j) {
        const std::uint64_t i = le(p + 4 * j, 4);
        if (i >= n || (j > 0 && i <= out.back())) return false;
        out.push_back(static_cast<std::uint32_t>(i));
      }
      return true;
    }
    case index_coding::delta_varint: {
      std::uint64_t pos = 0, next = 0;
      for (std::uint64_t j = 0; j < k; ++j) {
        std::uint64_t gap = 0;
        for (int b = 0;; ++b) {
          if (b == 5 || pos >= bytes) return false;  // at most 5 bytes for a 32-bit gap
          const std::uint64_t byte = static_cast<std::uint64_t>(p[pos++]);
          gap |= (byte & 0x7f) << (7 * b);
          if ((byte & 0x80) == 0) {
            if (byte == 0 && b > 0) return false;  // not the shortest form
            break;
          }
        }
        if (gap > 0xffffffffull) return false;
        const std::uint64_t i = next + gap;
        if (i >= n) return false;
        out.push_back(static_cast<std::uint32_t>(i));
        next = i + 1;
      }
      return pos == bytes;
    }
    case index_coding::rice: {
      const unsigned r = s.index_parameter;
      if (r > 31) return false;
      const std::uint64_t total_bits = 8 * bytes;
      std::uint64_t bit = 0, next = 0;
      auto get = [&](std::uint64_t b) {
        return (static_cast<unsigned>(p[b / 8]) >> (b % 8)) & 1u;
      };
      for (std::uint64_t j = 0; j < k; ++j) {
        std::uint64_t q = 0;
        for (;;) {
          if (bit >= total_bits) return false;
          if (get(bit++) == 0) break;
          ++q;
          if ((q << r) >= n) return false;  // the gap alone already reaches numel
        }
        std::uint64_t low = 0;
        for (unsigned t = 0; t < r; ++t) {
          if (bit >= total_bits) return false;
          low |= static_cast<std::uint64_t>(get(bit++)) << t;
        }
        const std::uint64_t i = next + ((q << r) | low);
        if (i >= n) return false;
        out.push_back(static_cast<std::uint32_t>(i));
        next = i + 1;
      }
      if (total_bits - bit >= 8) return false;  // a whole unused byte
      for (std::uint64_t b = bit; b < total_bits; ++b)
        if (get(b) != 0) return false;  // padding must be zero
      return true;
    }
    case index_coding::bitmap: {
      if (bytes != (n + 7) / 8) return false;
      for (std::uint64_t i = 0; i < 8 * bytes; ++i) {
        if (((static_cast<unsigned>(p[i / 8]) >> (i % 8)) & 1u) == 0) continue;
        if (i >= n) return false;  // padding bit set
        out.push_back(static_cast<std::uint32_t>(i));
        if (out.size() > k) return false;
      }
      return out.size() == k;
    }
    default:
      return false;
  }
}

// Exact value of element j of a payload, as a double (every coding's values are doubles).
double reference_value(const std::byte* p, value_coding c, std::uint64_t j) {
  switch (c) {
    case value_coding::fp32:
      return static_cast<double>(float_from_bits(static_cast<std::uint32_t>(le(p + 4 * j, 4))));
    case value_coding::fp64: return double_from_bits(le(p + 8 * j, 8));
    case value_coding::fp16: {
      const auto h = static_cast<std::uint32_t>(le(p + 2 * j, 2));
      const bool neg = (h & 0x8000u) != 0;
      const int e = static_cast<int>((h >> 10) & 0x1fu);
      const double m = static_cast<double>(h & 0x3ffu);
      double v;
      if (e == 0x1f) v = m == 0 ? std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::quiet_NaN();
      else if (e == 0) v = std::ldexp(m, -24);
      else v = std::ldexp(m + 1024.0, e - 25);
      return neg ? -v : v;
    }
    case value_coding::bf16:
      return static_cast<double>(
          float_from_bits(static_cast<std::uint32_t>(le(p + 2 * j, 2)) << 16));
    case value_coding::scaled_sign: {
      const double scale = static_cast<double>(float_from_bits(static_cast<std::uint32_t>(le(p, 4))));
      const bool negative = ((static_cast<unsigned>(p[4 + j / 8]) >> (j % 8)) & 1u) != 0;
      return negative ? -scale : scale;
    }
    case value_coding::ternary: {
      const double scale = static_cast<double>(float_from_bits(static_cast<std::uint32_t>(le(p, 4))));
      const unsigned code = (static_cast<unsigned>(p[4 + j / 4]) >> (2 * (j % 4))) & 3u;
      return code == 0 ? 0.0 : (code == 3 ? -scale : scale);
    }
    case value_coding::one_bit: {
      // Column j mod C; its pair (value of a set bit, value of a clear bit) after the count C.
      const std::uint64_t cols = le(p, 4);
      const std::uint64_t pair = 4 + 8 * (j % cols);
      const bool set = ((static_cast<unsigned>(p[4 + 8 * cols + j / 8]) >> (j % 8)) & 1u) != 0;
      return static_cast<double>(float_from_bits(static_cast<std::uint32_t>(le(p + pair + (set ? 0 : 4), 4))));
    }
    case value_coding::qsgd:
    case value_coding::qsgd_gamma: return 0.0;  // reference_qsgd reads the whole payload
    case value_coding::isgq: return 0.0;        // reference_isgq likewise
    case value_coding::unspecified: break;  // never accepted: falls to the check below
  }
  FUZZ_CHECK_MSG(false, "section header with an unknown value coding was accepted");
  return 0;
}

// QSGD's payloads (both forms) bit by bit: every value, and the first fault in the order the
// format lists the checks: the norms (finite, then the sign bit, then 0 or normal), then for the
// fixed form the padding and each code in order (a level above s, a sign on level 0, a level
// under a zero norm), for the Elias-gamma form each entry of the stream in order, then its end
// and padding.
void reference_qsgd(const std::byte* p, const section_header& s, reference_section& r) {
  const bool gamma = s.values == value_coding::qsgd_gamma;
  const std::uint64_t bucket = le(p, 4), levels = le(p + 4, 4), buckets = le(p + 8, 4);
  const std::uint64_t head = gamma ? 20 : 12;
  auto norm = [&](std::uint64_t b) {
    return float_from_bits(static_cast<std::uint32_t>(le(p + head + 4 * b, 4)));
  };
  for (std::uint64_t b = 0; b < buckets; ++b) {
    const auto bits = static_cast<std::uint32_t>(le(p + head + 4 * b, 4));
    if (!std::isfinite(float_from_bits(bits))) return void(r.parameters = errc::non_finite_input);
    if ((bits >> 31) != 0) return void(r.parameters = errc::malformed_payload);
    if (std::fpclassify(float_from_bits(bits)) == FP_SUBNORMAL)
      return void(r.parameters = errc::malformed_payload);
  }
  auto value = [&](std::uint64_t j, std::uint64_t level, bool negative) {
    const float fraction = static_cast<float>(level) / static_cast<float>(levels);
    const float magnitude = norm(j / bucket) * fraction;
    r.values[j] = level == 0 ? 0.0 : static_cast<double>(negative ? -magnitude : magnitude);
  };
  const std::byte* body = p + head + 4 * buckets;
  auto bit = [&](std::uint64_t k) { return (static_cast<unsigned>(body[k / 8]) >> (k % 8)) & 1u; };
  std::fill(r.values.begin(), r.values.end(), 0.0);
  if (!gamma) {
    unsigned width = 1;
    for (std::uint64_t x = levels; x != 0; x >>= 1) ++width;
    const std::uint64_t total = s.kept * width;
    for (std::uint64_t k = total; k < (total + 7) / 8 * 8; ++k)
      if (bit(k) != 0) return void(r.parameters = errc::malformed_payload);
    for (std::uint64_t j = 0; j < s.kept; ++j) {
      std::uint64_t level = 0;
      for (unsigned t = 0; t + 1 < width; ++t) level |= static_cast<std::uint64_t>(bit(width * j + t)) << t;
      const bool negative = bit(width * j + width - 1) != 0;
      if (level > levels || (level == 0 && negative) || (level != 0 && norm(j / bucket) == 0.0f))
        return void(r.parameters = errc::malformed_payload);
      value(j, level, negative);
    }
    return;
  }
  const std::uint64_t entries = le(p + 12, 4), length = le(p + 16, 4);
  std::uint64_t at = 0, next = 0;
  auto read_gamma = [&](std::uint64_t& x) {
    unsigned zeros = 0;
    for (;;) {
      if (at >= 8 * length || zeros > 32) return false;
      if (bit(at++) != 0) break;
      ++zeros;
    }
    if (zeros > 32) return false;
    x = 1;
    for (unsigned t = 0; t < zeros; ++t) {
      if (at >= 8 * length) return false;
      x = 2 * x + bit(at++);
    }
    return true;
  };
  for (std::uint64_t e = 0; e < entries; ++e) {
    std::uint64_t gap = 0, level = 0;
    if (!read_gamma(gap) || at >= 8 * length) return void(r.parameters = errc::malformed_payload);
    const bool negative = bit(at++) != 0;
    if (!read_gamma(level)) return void(r.parameters = errc::malformed_payload);
    const std::uint64_t j = next + gap - 1;
    if (j >= s.kept || level > levels || norm(j / bucket) == 0.0f) return void(r.parameters = errc::malformed_payload);
    value(j, level, negative);
    next = j + 1;
  }
  if ((at + 7) / 8 != length) return void(r.parameters = errc::malformed_payload);
  for (; at < 8 * length; ++at)
    if (bit(at) != 0) return void(r.parameters = errc::malformed_payload);
}

// ISGQ's payload bit by bit: the block, the parameters in order (finite, then a scale's sign bit),
// the codes in order (within range; none but 0 under a zero scale), the padding; then the factors
// rebuilt and the values X^^T Delta^ summed over the batch in order, and their bound.
void reference_isgq(const std::byte* p, const section_header& s, reference_section& r) {
  const std::uint64_t batch = le(p, 4), n_in = le(p + 4, 4), n_out = le(p + 8, 4);
  const bool out_in = le(p + 12, 1) == 1, dithered = le(p + 13, 1) == 0;
  const std::uint64_t levels = le(p + 14, 2), bucket = le(p + 16, 4), stream = le(p + 20, 4);
  const std::uint64_t key = le(p + 24, 8), step = le(p + 32, 8);
  const std::uint64_t elements[2] = {batch * n_in, batch * n_out};
  std::uint64_t params[2];
  for (int f = 0; f < 2; ++f) params[f] = dithered ? (elements[f] + bucket - 1) / bucket : levels;
  auto parameter = [&](int f, std::uint64_t k) {
    return static_cast<std::uint32_t>(le(p + 40 + 4 * ((f == 0 ? 0 : params[0]) + k), 4));
  };
  for (int f = 0; f < 2; ++f)
    for (std::uint64_t k = 0; k < params[f]; ++k) {
      const std::uint32_t bits = parameter(f, k);
      if (!std::isfinite(float_from_bits(bits))) return void(r.parameters = errc::non_finite_input);
      if (dithered && (bits >> 31) != 0) return void(r.parameters = errc::malformed_payload);
    }
  const std::uint64_t top = dithered ? 2 * levels + 1 : levels;
  unsigned width = 0;
  for (std::uint64_t x = top; x != 0; x >>= 1) ++width;
  const std::byte* codes = p + 40 + 4 * (params[0] + params[1]);
  auto bit = [&](std::uint64_t k) { return (static_cast<unsigned>(codes[k / 8]) >> (k % 8)) & 1u; };
  std::vector<double> hat[2];
  std::uint64_t at = 0;
  for (int f = 0; f < 2; ++f) {
    hat[f].assign(elements[f], 0.0);
    for (std::uint64_t i = 0; i < elements[f]; ++i) {
      std::uint64_t code = 0;
      for (unsigned t = 0; t < width; ++t) code |= static_cast<std::uint64_t>(bit(at++)) << t;
      if (code > top) return void(r.parameters = errc::malformed_payload);
      if (dithered) {
        const float scale = float_from_bits(parameter(f, i / bucket));
        if (code != 0 && scale == 0.0f) return void(r.parameters = errc::malformed_payload);
        if (code == 0) continue;
        const std::uint32_t draw = gradcomp::detail::element_draw(
            key, step, static_cast<std::uint32_t>(2 * stream + f), static_cast<std::uint32_t>(i));
        const double u = (static_cast<double>(draw) + 0.5) / 4294967296.0 - 0.5;
        hat[f][i] = static_cast<double>(scale) * (static_cast<double>(code) - 1.0 - static_cast<double>(levels) - u);
      } else if (code < levels) {
        hat[f][i] = static_cast<double>(float_from_bits(parameter(f, code)));
      }
    }
  }
  for (; at % 8 != 0; ++at)
    if (bit(at) != 0) return void(r.parameters = errc::malformed_payload);
  double bound = 0.0;
  for (std::uint64_t b = 0; b < batch; ++b) {
    double mx = 0.0, md = 0.0;
    for (std::uint64_t i = 0; i < n_in; ++i) mx = std::max(mx, std::fabs(hat[0][b * n_in + i]));
    for (std::uint64_t o = 0; o < n_out; ++o) md = std::max(md, std::fabs(hat[1][b * n_out + o]));
    bound += mx * md;
  }
  r.isgq_bound = bound;
  for (std::uint64_t i = 0; i < n_in; ++i)
    for (std::uint64_t o = 0; o < n_out; ++o) {
      double v = 0.0;
      for (std::uint64_t b = 0; b < batch; ++b) v += hat[0][b * n_in + i] * hat[1][b * n_out + o];
      r.values[out_in ? o * n_in + i : i * n_out + o] = v;
    }
  (void)s;
}

// The operations an isgq section's decoding takes (0 for other codings).
std::uint64_t isgq_products(span<const std::byte> msg, const section_header& s) {
  if (s.values != value_coding::isgq) return 0;
  return le(msg.data() + s.offset + wire::section_header_bytes + s.index_bytes, 4) * std::uint64_t(s.kept);
}

reference_section reference_decode(span<const std::byte> msg, const section_header& s) {
  reference_section r;
  const std::byte* idx = msg.data() + s.offset + wire::section_header_bytes;
  r.indices_ok = reference_index_payload(idx, s, r.indices);
  const std::byte* val = idx + s.index_bytes;
  r.values.resize(s.kept);
  for (std::uint64_t j = 0; j < s.kept; ++j) r.values[j] = reference_value(val, s.values, j);
  if (s.values == value_coding::scaled_sign) {
    // The scale is checked even when no value uses it; then its sign and the padding bits.
    const auto bits = static_cast<std::uint32_t>(le(val, 4));
    const float scale = float_from_bits(bits);
    const unsigned last = s.kept % 8 == 0 ? 0u : static_cast<unsigned>(val[4 + s.kept / 8]) >> (s.kept % 8);
    if (!std::isfinite(scale)) r.parameters = errc::non_finite_input;
    else if ((bits >> 31) != 0 || last != 0) r.parameters = errc::malformed_payload;
  }
  if (s.values == value_coding::ternary) {
    // The scale, its sign and the padding bits; then no code 2, and no non-zero code under a zero
    // scale (the values are finite once the scale is, so no other error of a value comes first).
    const auto bits = static_cast<std::uint32_t>(le(val, 4));
    const unsigned last = s.kept % 4 == 0 ? 0u : static_cast<unsigned>(val[4 + s.kept / 4]) >> (2 * (s.kept % 4));
    if (!std::isfinite(float_from_bits(bits))) r.parameters = errc::non_finite_input;
    else if ((bits >> 31) != 0 || last != 0) r.parameters = errc::malformed_payload;
    for (std::uint64_t j = 0; j < s.kept && r.parameters == errc::ok; ++j) {
      const unsigned code = (static_cast<unsigned>(val[4 + j / 4]) >> (2 * (j % 4))) & 3u;
      if (code == 2 || (code != 0 && bits == 0)) r.parameters = errc::malformed_payload;
    }
  }
  if (s.values == value_coding::one_bit) {
    // Each column's pair in order, every member checked whether a value uses it or not: finite,
    // then the sign bit (set for the first, clear for the second); then the padding bits.
    const std::uint64_t cols = le(val, 4);
    for (std::uint64_t c = 0; c < cols && r.parameters == errc::ok; ++c) {
      for (int member = 0; member < 2 && r.parameters == errc::ok; ++member) {
        const auto bits = static_cast<std::uint32_t>(le(val + 4 + 8 * c + 4 * member, 4));
        if (!std::isfinite(float_from_bits(bits))) r.parameters = errc::non_finite_input;
        else if ((bits >> 31) != (member == 0 ? 1u : 0u)) r.parameters = errc::malformed_payload;
      }
    }
    const unsigned last = s.kept % 8 == 0 ? 0u : static_cast<unsigned>(val[4 + 8 * cols + s.kept / 8]) >> (s.kept % 8);
    if (r.parameters == errc::ok && last != 0) r.parameters = errc::malformed_payload;
  }
  if (s.values == value_coding::qsgd || s.values == value_coding::qsgd_gamma) reference_qsgd(val, s, r);
  if (s.values == value_coding::isgq) reference_isgq(val, s, r);
  return r;
}

// The error decode_section<T> must report for the values, once the indices are sound.
template <class T>
errc reference_value_error(const reference_section& r) {
  // isgq: refused when the bound exceeds half of T's largest value, whatever the values.
  if (r.isgq_bound >= 0.0)
    return r.isgq_bound <= 0.5 * static_cast<double>(std::numeric_limits<T>::max()) ? errc::ok
                                                                                     : errc::value_out_of_range;
  for (const double v : r.values) {
    if (!std::isfinite(v)) return errc::non_finite_input;
    // The spec's limit for binary32 (docs/wire_format.md): a magnitude of FLT_MAX + 2^103 or
    // more, the midpoint that rounds up to an infinity; below it a value rounds to FLT_MAX.
    if constexpr (std::is_same<T, float>::value) {
      if (std::fabs(v) >= 0x1.ffffffp+127) return errc::value_out_of_range;
    }
  }
  return errc::ok;
}

// ---------------------------------------------------------------------------------------------
// Independent reference of the rules of each kind (docs/wire_format.md, "Rules of each kind"),
// quadratic and direct: section i is judged against all sections before it, which obey the rules.
// ---------------------------------------------------------------------------------------------

constexpr std::uint32_t state_tensor = 0xffffffffu;

// The position of a role in a compressor snapshot's group: residual 0, momentum 1, factor 2.
int group_rank(wire::section_role r) {
  switch (r) {
    case wire::section_role::residual: return 0;
    case wire::section_role::momentum: return 1;
    case wire::section_role::factor: return 2;
    default: return -1;
  }
}

// The roles (bit 0 residual, 1 momentum, 2 factor) of each group of sections 1 .. end-1 of a
// compressor snapshot, in order. Sections of other roles (a message that broke a rule before its
// end) are passed over.
std::vector<unsigned> reference_groups(const std::vector<section_header>& all, std::size_t end) {
  std::vector<unsigned> groups;
  for (std::size_t j = 1; j < end; ++j) {
    if (group_rank(all[j].role) < 0) continue;
    const bool continues = j > 1 && !groups.empty() && all[j - 1].tensor == all[j].tensor &&
                           group_rank(all[j].role) > group_rank(all[j - 1].role);
    if (!continues) groups.push_back(0);
    groups.back() |= 1u << group_rank(all[j].role);
  }
  return groups;
}

// The error of the rules for section i (sections 0..i-1 obey them), or ok.
errc reference_kind_error(wire::message_kind kind, const std::vector<section_header>& all,
                          std::size_t i) {
  using wire::section_role;
  const section_header& s = all[i];
  const bool round = kind == wire::message_kind::first_round || kind == wire::message_kind::second_round;
  if (kind == wire::message_kind::gradients || round) {
    if (s.role != section_role::gradient) return errc::section_not_allowed;
    if (round && s.indices != index_coding::dense) return errc::section_not_allowed;
    for (std::size_t j = 0; j < i; ++j)
      if (all[j].tensor == s.tensor) return errc::duplicate_tensor;
    return errc::ok;
  }
  // 1. What a section may be, whatever comes before it.
  if (s.role == section_role::gradient || s.indices != index_coding::dense)
    return errc::section_not_allowed;
  if (s.role == section_role::state)
    return i == 0 && s.tensor == state_tensor && s.values == value_coding::fp64 &&
                   (s.numel == 9 || s.numel == 4)
               ? errc::ok
               : errc::section_not_allowed;
  if (s.tensor == state_tensor ||
      (s.values != value_coding::fp32 && s.values != value_coding::fp64))
    return errc::section_not_allowed;
  // 2. The form: a compressor snapshot starts with its state section, an aggregator's does not.
  const bool compressor = all[0].role == section_role::state;
  if (compressor == (s.role == section_role::receiver_momentum)) return errc::section_not_allowed;
  // 3. The same role and tensor as an earlier section.
  for (std::size_t j = 0; j < i; ++j)
    if (all[j].role == s.role && all[j].tensor == s.tensor) return errc::duplicate_tensor;
  // 4. Order, grouping and one value coding.
  const std::size_t first = compressor ? 1 : 0;
  if (i > first && s.values != all[first].values) return errc::section_not_allowed;
  if (!compressor) {
    if (i > 0 && s.tensor < all[i - 1].tensor) return errc::section_not_allowed;
    return errc::ok;
  }
  // A compressor snapshot's sections after the state form groups: a section continues the
  // previous one's group when it has the same tensor and a later role (residual, momentum,
  // factor); otherwise it starts a group of a larger tensor. A momentum section directly follows
  // its residual; every group has the roles of the first one.
  const std::vector<unsigned> groups = reference_groups(all, i);
  const bool continues = i > 1 && all[i - 1].tensor == s.tensor && group_rank(s.role) > group_rank(all[i - 1].role);
  if (s.role == section_role::momentum && (!continues || all[i - 1].role != section_role::residual))
    return errc::section_not_allowed;
  const unsigned bit = 1u << group_rank(s.role);
  if (continues) {
    // The group may only take a role of the first group, if that one is complete.
    if (groups.size() > 1 && (groups[0] & bit) == 0) return errc::section_not_allowed;
    return errc::ok;
  }
  if (i > 1 && s.tensor <= all[i - 1].tensor) return errc::section_not_allowed;
  if (groups.size() > 1 && groups.back() != groups[0]) return errc::section_not_allowed;
  if (!groups.empty()) {
    unsigned lowest = 1;
    while ((groups[0] & lowest) == 0) lowest <<= 1;
    if (lowest != bit) return errc::section_not_allowed;
  }
  return errc::ok;
}

// The rule checked after the last section: a compressor snapshot's last group has the roles of
// its first.
errc reference_kind_end_error(wire::message_kind kind, const std::vector<section_header>& all) {
  if (kind != wire::message_kind::snapshot || all.empty() || all[0].role != wire::section_role::state) return errc::ok;
  const std::vector<unsigned> groups = reference_groups(all, all.size());
  return groups.size() > 1 && groups.back() != groups[0] ? errc::section_not_allowed : errc::ok;
}

// The words of a state section (sound payload): integers in their ranges, no negative zero.
errc reference_state_words_error(const reference_section& r) {
  auto count = [](double x, double limit) {
    return !std::signbit(x) && x < limit && std::trunc(x) == x;
  };
  const double two32 = 4294967296.0, two53 = 9007199254740992.0;
  const std::vector<double>& w = r.values;
  bool ok = false;
  if (w.size() == 9) {
    ok = true;
    for (int j = 0; j < 6; ++j) ok = ok && count(w[j], two32);
    for (int j = 6; j < 8; ++j) ok = ok && (w[j] == 0.0 || w[j] == 1.0) && !std::signbit(w[j]);
    // The method: 0 and 1 (DGC), 2 (EF-SignSGD), 3 (TernGrad), 4 (1-bit SGD), 5 (QSGD), 6 (AdaComp),
    // 7 (PowerSGD), or a program's own method, from 65,536 up (docs/wire_format.md).
    ok = ok && ((w[8] >= 0.0 && w[8] <= 7.0 && count(w[8], 8.0)) || (w[8] >= 65536.0 && count(w[8], two32))) &&
         !std::signbit(w[8]);
  } else if (w.size() == 4) {
    ok = count(w[0], two53) && count(w[1], two53) && count(w[2], two32) && count(w[3], two32);
  }
  return ok ? errc::ok : errc::malformed_payload;
}

// True when the checksum flag is set and the trailer differs from the CRC-32C of the bytes
// before it (the buffer holds at least the header and the trailer).
bool crc_mismatch(const std::vector<std::byte>& buf) {
  if (buf.size() < wire::message_header_bytes + wire::checksum_bytes) return false;
  if ((static_cast<unsigned>(buf[6]) & 1u) == 0) return false;
  const std::size_t body = buf.size() - wire::checksum_bytes;
  return le(buf.data() + body, 4) != reference_crc32c(buf.data(), body);
}

// ---------------------------------------------------------------------------------------------
// Checks of the header layer.
// ---------------------------------------------------------------------------------------------

void check_message_header(const message_header& h, std::size_t size) {
  FUZZ_CHECK(h.version == wire::format_version);
  FUZZ_CHECK((h.flags & ~wire::flag_checksum) == 0);
  FUZZ_CHECK(static_cast<std::uint32_t>(h.kind) <= 3);  // gradients, snapshot, the two rounds
  FUZZ_CHECK(h.total_bytes == size);
  const std::uint64_t fixed =
      wire::message_header_bytes + (h.has_checksum() ? wire::checksum_bytes : 0);
  FUZZ_CHECK(h.total_bytes >= fixed);
  FUZZ_CHECK(static_cast<std::uint64_t>(h.section_count) * wire::section_header_bytes <=
             h.total_bytes - fixed);
}

bool same_header(const message_header& a, const message_header& b) {
  return a.version == b.version && a.flags == b.flags && a.kind == b.kind &&
         a.section_count == b.section_count && a.total_bytes == b.total_bytes;
}

void check_section_header(const section_header& s) {
  const std::uint64_t vsize = wire::value_bytes_per_element(s.values);
  const bool qsgd = s.values == value_coding::qsgd || s.values == value_coding::qsgd_gamma;
  const bool isgq = s.values == value_coding::isgq;
  FUZZ_CHECK(vsize != 0 || s.values == value_coding::scaled_sign || s.values == value_coding::ternary ||
             s.values == value_coding::one_bit || qsgd || isgq);
  FUZZ_CHECK(std::strcmp(wire::to_string(s.role), "unknown") != 0);
  FUZZ_CHECK(s.kept <= s.numel);
  FUZZ_CHECK(s.bytes == wire::section_header_bytes + s.index_bytes + s.value_bytes);
  if (s.values == value_coding::one_bit) {
    // The column count the block states: at least 1, dividing kept, and fixing the length.
    const std::uint64_t cols = s.parameters.columns;
    FUZZ_CHECK(cols != 0 && s.kept % cols == 0);
    FUZZ_CHECK(s.value_bytes == 4 + 8 * cols + (std::uint64_t(s.kept) + 7) / 8);
  } else if (qsgd) {
    // Bucket and levels in their bounds, a norm per bucket, the length the block states.
    const std::uint64_t b = s.parameters.bucket, levels = s.parameters.levels;
    FUZZ_CHECK(b != 0 && levels != 0 && levels <= 65535 && s.parameters.columns == 1);
    const std::uint64_t norms = 4 * ((std::uint64_t(s.kept) + b - 1) / b);
    unsigned width = 1;
    for (std::uint64_t x = levels; x != 0; x >>= 1) ++width;
    if (s.values == value_coding::qsgd)
      FUZZ_CHECK(s.value_bytes == 12 + norms + (std::uint64_t(s.kept) * width + 7) / 8);
    else
      FUZZ_CHECK(s.value_bytes >= 20 + norms);
  } else if (isgq) {
    // Dense, the block's sizes fixing kept and the length (read back from the message by the
    // caller's reference; here the invariants that need no payload).
    FUZZ_CHECK(s.indices == index_coding::dense && s.value_bytes >= 40);
  } else {
    FUZZ_CHECK(s.parameters.columns == 1 && s.parameters.bucket == 0 && s.parameters.levels == 0);
    const std::uint64_t per_byte = s.values == value_coding::scaled_sign ? 8 : 4;  // of the packed codings
    FUZZ_CHECK(s.value_bytes ==
               (vsize == 0 ? 4 + (std::uint64_t(s.kept) + per_byte - 1) / per_byte : vsize * s.kept));
  }
  const std::uint64_t k = s.kept, n = s.numel;
  switch (s.indices) {
    case index_coding::dense: FUZZ_CHECK(k == n && s.index_bytes == 0); break;
    case index_coding::raw_u32: FUZZ_CHECK(s.index_bytes == 4 * k); break;
    case index_coding::bitmap: FUZZ_CHECK(s.index_bytes == (n + 7) / 8); break;
    case index_coding::delta_varint: FUZZ_CHECK(s.index_bytes >= k && s.index_bytes <= 5 * k); break;
    case index_coding::rice:
      FUZZ_CHECK(s.index_parameter <= 31);
      FUZZ_CHECK(8 * s.index_bytes >= k * (1 + std::uint64_t(s.index_parameter)));
      break;
    default: FUZZ_CHECK_MSG(false, "unknown index coding accepted");
  }
  if (s.indices != index_coding::rice) FUZZ_CHECK(s.index_parameter == 0);
}

// ---------------------------------------------------------------------------------------------
// decode_section against the reference.
// ---------------------------------------------------------------------------------------------

template <class T>
struct decoded {
  errc error = errc::ok;
  std::vector<std::uint32_t> indices;
  std::vector<T> values;
};

template <class T>
T value_pattern(std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 7) % 17) - 8) * static_cast<T>(0.25);
}

template <class T>
decoded<T> decode_and_check(span<const std::byte> msg, const section_header& s,
                            const reference_section& ref) {
  decoded<T> d;
  const bool dense = s.indices == index_coding::dense;
  std::vector<std::uint32_t> idx(s.kept, index_pattern);
  std::vector<T> val(s.kept);
  for (std::size_t j = 0; j < val.size(); ++j) val[j] = value_pattern<T>(j);
  const std::vector<std::uint32_t> idx0 = idx;
  const std::vector<T> val0 = val;

  // Outputs one element too short must be refused before anything is written.
  if (s.kept > 0) {
    const auto r1 = wire::decode_section<T>(msg, s, span<std::uint32_t>(idx.data(), idx.size()),
                                            span<T>(val.data(), val.size() - 1));
    FUZZ_CHECK(!r1);
    FUZZ_CHECK_ERRC(r1.error(), errc::output_too_small);
    if (!dense) {
      const auto r2 = wire::decode_section<T>(
          msg, s, span<std::uint32_t>(idx.data(), idx.size() - 1), span<T>(val.data(), val.size()));
      FUZZ_CHECK(!r2);
      FUZZ_CHECK_ERRC(r2.error(), errc::output_too_small);
    }
    FUZZ_CHECK(idx == idx0);
    FUZZ_CHECK(same_bytes(val.data(), val0.data(), val.size() * sizeof(T)));
  }

  // A header that differs from the message's in one field is refused before anything is read
  // through it (outputs large enough for the lie, so only the header check can refuse).
  {
    std::vector<section_header> lies(8, s);
    lies[0].offset += 1;
    lies[1].bytes += 1;
    lies[2].kept += 1;
    lies[3].numel ^= 1u;
    lies[4].index_bytes += 8;
    lies[5].values = s.values == value_coding::fp64 ? value_coding::fp32 : value_coding::fp64;
    lies[6].indices = dense ? index_coding::raw_u32 : index_coding::dense;
    lies[7].offset = msg.size() + 64;
    std::vector<std::uint32_t> big_idx(std::size_t(s.kept) + 2, index_pattern);
    std::vector<T> big_val(std::size_t(s.kept) + 2, value_pattern<T>(1));
    for (const auto& lie : lies) {
      const auto r = wire::decode_section<T>(msg, lie,
                                             span<std::uint32_t>(big_idx.data(), big_idx.size()),
                                             span<T>(big_val.data(), big_val.size()));
      FUZZ_CHECK_ERRC(r.error(), errc::invalid_argument);
    }
    FUZZ_CHECK(std::all_of(big_idx.begin(), big_idx.end(),
                           [](std::uint32_t x) { return x == index_pattern; }));
    for (const T x : big_val) FUZZ_CHECK(same_bits(x, value_pattern<T>(1)));
  }

  // A dense section does not touch `indices`, so an empty span must do.
  const auto r = dense ? wire::decode_section<T>(msg, s, span<std::uint32_t>(),
                                                 span<T>(val.data(), val.size()))
                       : wire::decode_section<T>(msg, s,
                                                 span<std::uint32_t>(idx.data(), idx.size()),
                                                 span<T>(val.data(), val.size()));
  const errc expected = !ref.indices_ok                ? errc::malformed_payload  // some payload error
                        : ref.parameters != errc::ok ? ref.parameters
                                                     : reference_value_error<T>(ref);
  if (expected == errc::ok) {
    if (!r.has_value()) {
      char what[120];
      std::snprintf(what, sizeof what, "decode_section refused a payload the reference accepts: %s",
                    gradcomp::to_string(r.error()));
      FUZZ_CHECK_MSG(r.has_value(), what);
    }
    FUZZ_CHECK(*r == s.kept);
    if (dense) {
      FUZZ_CHECK(idx == idx0);
    } else {
      FUZZ_CHECK(idx == ref.indices);
      for (std::size_t j = 0; j < idx.size(); ++j) {
        FUZZ_CHECK(idx[j] < s.numel);
        FUZZ_CHECK(j == 0 || idx[j] > idx[j - 1]);
      }
    }
    for (std::size_t j = 0; j < val.size(); ++j) {
      FUZZ_CHECK(std::isfinite(val[j]));
      FUZZ_CHECK(same_bits(val[j], static_cast<T>(ref.values[j])));
    }
    d.indices = dense ? ref.indices : idx;
    d.values = val;
  } else {
    FUZZ_CHECK_MSG(!r.has_value(), "decode_section accepted a payload the reference refuses");
    if (ref.indices_ok) {
      FUZZ_CHECK_ERRC(r.error(), expected);
    } else {
      FUZZ_CHECK_MSG(r.error() == errc::malformed_payload || r.error() == errc::index_out_of_range ||
                         r.error() == errc::indices_not_increasing,
                     gradcomp::to_string(r.error()));
    }
    FUZZ_CHECK(idx == idx0);
    FUZZ_CHECK(same_bytes(val.data(), val0.data(), val.size() * sizeof(T)));
    d.error = r.error();
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// decode_accumulate against a model of its documented behaviour.
// ---------------------------------------------------------------------------------------------

struct message_view {
  span<const std::byte> msg;
  bool peeked = false;
  errc header_error = errc::ok;  // what validate reports before reading any section
  message_header header;
  errc walk_error = errc::ok;  // for_each_section's error (ok when it succeeded)
  std::vector<section_header> sections;  // sections whose headers were read
  std::vector<errc> kind_errors;         // the reference's kind rule error of each section
  std::vector<errc> state_errors;        // the reference's state word error of each section
  errc kind_end_error = errc::ok;        // the reference's rule after the last section
  std::vector<decoded<float>> as_float;
  std::vector<decoded<double>> as_double;
};

// What validate<T> (and detail::validate_as<T>, the first step of decode_accumulate<T>) must
// report, and the index of the section it comes from (sections.size() when from none): per
// section in order its kind rule error, then its payload error, then its state words; else the
// walk's error; else the rule after the last section.
template <class T>
std::pair<errc, std::size_t> expected_validation(const message_view& m) {
  const auto& dec = [&]() -> const auto& {
    if constexpr (std::is_same_v<T, float>) return m.as_float;
    else return m.as_double;
  }();
  for (std::size_t i = 0; i < dec.size(); ++i) {
    if (m.kind_errors[i] != errc::ok) return {m.kind_errors[i], i};
    if (dec[i].error != errc::ok) return {dec[i].error, i};
    if (m.state_errors[i] != errc::ok) return {m.state_errors[i], i};
  }
  if (m.walk_error != errc::ok) return {m.walk_error, dec.size()};
  return {m.kind_end_error, dec.size()};
}

template <class T>
errc expected_validation_error(const message_view& m) {
  return expected_validation<T>(m).first;
}

// A section's fit with the accumulators (a role other than gradient is a kind rule error, part
// of the validation error).
errc layout_error(const section_header& s, const std::vector<std::size_t>& sizes) {
  if (s.tensor >= sizes.size()) return errc::unknown_tensor;
  if (sizes[s.tensor] < s.numel) return errc::output_too_small;
  if (sizes[s.tensor] > s.numel) return errc::size_mismatch;
  return errc::ok;
}

// The errors decode_accumulate<T> may report. For a sound message exactly one: the kind, then
// each section's layout, in order. For a damaged message (a broken kind rule included) the
// documentation fixes no order between the damage and the layout checks, so any of: the
// validation error, or a layout error of the kind or of a section up to the damaged one; a
// damaged message header always comes first.
template <class T>
std::vector<errc> expected_accumulate_errors(const message_view& m,
                                             const std::vector<std::size_t>& sizes) {
  const auto [v, damaged] = expected_validation<T>(m);
  if (v == errc::ok) {
    if (m.header.kind != wire::message_kind::gradients) return {errc::layout_mismatch};
    for (const auto& s : m.sections)
      if (const errc e = layout_error(s, sizes); e != errc::ok) return {e};
    return {errc::ok};
  }
  if (m.header_error != errc::ok) return {v};
  std::vector<errc> allowed = {v};
  if (m.header.kind != wire::message_kind::gradients) allowed.push_back(errc::layout_mismatch);
  for (std::size_t i = 0; i < m.sections.size() && i <= damaged; ++i)
    if (const errc e = layout_error(m.sections[i], sizes); e != errc::ok) allowed.push_back(e);
  return allowed;
}

// decode_accumulate<T> into accumulators of the given sizes, with `scratch` elements of index
// scratch memory (none when 0).
template <class T>
void check_accumulate(const message_view& m, const std::vector<std::size_t>& sizes,
                      std::size_t scratch = 0) {
  std::uint64_t total = 0;
  for (const std::size_t n : sizes) total += n;
  if (total > max_elements || sizes.size() > 4096) return;

  std::vector<std::vector<T>> acc(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    acc[t].resize(sizes[t]);
    for (std::size_t i = 0; i < sizes[t]; ++i) acc[t][i] = value_pattern<T>(i + 3 * t);
  }
  std::vector<span<T>> dest;
  for (auto& a : acc) dest.emplace_back(a.data(), a.size());

  std::vector<std::uint32_t> scratch_memory(scratch, index_pattern);
  const auto r =
      scratch == 0
          ? wire::decode_accumulate<T>(m.msg, span<const span<T>>(dest.data(), dest.size()))
          : wire::decode_accumulate<T>(m.msg, span<const span<T>>(dest.data(), dest.size()),
                                       span<std::uint32_t>(scratch_memory.data(), scratch));
  const std::vector<errc> allowed = expected_accumulate_errors<T>(m, sizes);
  const errc expected = allowed.front();
  if (allowed.size() == 1) {
    FUZZ_CHECK_ERRC(r.error(), expected);
  } else {
    FUZZ_CHECK_MSG(std::find(allowed.begin(), allowed.end(), r.error()) != allowed.end(),
                   gradcomp::to_string(r.error()));
  }

  if (expected != errc::ok) {
    for (std::size_t t = 0; t < acc.size(); ++t)
      for (std::size_t i = 0; i < acc[t].size(); ++i)
        FUZZ_CHECK_MSG(same_bits(acc[t][i], value_pattern<T>(i + 3 * t)),
                       "a failed decode_accumulate modified an accumulator");
    return;
  }
  FUZZ_CHECK(same_header(*r, m.header));
  std::vector<std::vector<T>> want(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    want[t].resize(sizes[t]);
    for (std::size_t i = 0; i < sizes[t]; ++i) want[t][i] = value_pattern<T>(i + 3 * t);
  }
  const auto& dec = [&]() -> const auto& {
    if constexpr (std::is_same_v<T, float>) return m.as_float;
    else return m.as_double;
  }();
  for (std::size_t si = 0; si < m.sections.size(); ++si) {
    auto& a = want[m.sections[si].tensor];
    for (std::size_t j = 0; j < dec[si].values.size(); ++j) a[dec[si].indices[j]] += dec[si].values[j];
  }
  for (std::size_t t = 0; t < acc.size(); ++t)
    FUZZ_CHECK_MSG(same_bytes(acc[t].data(), want[t].data(), acc[t].size() * sizeof(T)),
                   "accumulators differ from the decoded sums");
}

// ---------------------------------------------------------------------------------------------
// Re-encoding a valid section with its own codings.
// ---------------------------------------------------------------------------------------------

void check_reencode(span<const std::byte> msg, const section_header& s,
                    const decoded<double>& d) {
  if (s.role != wire::section_role::gradient) return;
  gradcomp::tensor_message<double> tm;
  tm.tensor = s.tensor;
  tm.numel = s.numel;
  tm.dense = s.indices == index_coding::dense;
  if (!tm.dense) tm.indices = span<const std::uint32_t>(d.indices.data(), d.indices.size());
  tm.values = span<const double>(d.values.data(), d.values.size());
  tm.parameters = s.parameters;
  if (s.values == value_coding::isgq) {
    // The producer's payload, handed back as it was: the same bytes.
    tm.values = {};
    tm.coding = value_coding::isgq;
    tm.payload = span<const std::byte>(msg.data() + s.offset + wire::section_header_bytes, s.value_bytes);
  }
  // QSGD's norms, which the values alone do not state, as the producer gives them.
  const bool qsgd = s.values == value_coding::qsgd || s.values == value_coding::qsgd_gamma;
  std::vector<float> norms;
  if (qsgd) {
    const std::byte* block = msg.data() + s.offset + wire::section_header_bytes + s.index_bytes;
    const std::uint64_t head = s.values == value_coding::qsgd ? 12 : 20;
    for (std::uint64_t b = 0; b < le(block + 8, 4); ++b)
      norms.push_back(float_from_bits(static_cast<std::uint32_t>(le(block + head + 4 * b, 4))));
    tm.parameters.scales = norms.data();
  }
  wire::encode_options opt;
  opt.indices = tm.dense ? index_coding::automatic : s.indices;
  opt.values = s.values;
  opt.dense_values = s.values;
  const span<const gradcomp::tensor_message<double>> one(&tm, 1);
  const auto bound = wire::max_encoded_bytes(one, opt);
  FUZZ_CHECK_MSG(bound.has_value(), gradcomp::to_string(bound.error()));
  const auto size = wire::encoded_bytes(one, opt);
  FUZZ_CHECK_MSG(size.has_value(), gradcomp::to_string(size.error()));
  FUZZ_CHECK(*size <= *bound);
  std::vector<std::byte> out(*size);
  const auto n = wire::encode(one, opt, span<std::byte>(out.data(), out.size()));
  FUZZ_CHECK_MSG(n.has_value(), gradcomp::to_string(n.error()));
  FUZZ_CHECK(*n == out.size());
  const std::byte* const again = out.data() + wire::message_header_bytes;
  const std::byte* const orig = msg.data() + s.offset;
  bool must_match = false;
  switch (s.indices) {
    case index_coding::dense:
    case index_coding::raw_u32:
    case index_coding::bitmap: must_match = true; break;
    // Gaps are in their shortest form (the decoder refuses others), which is unique.
    case index_coding::delta_varint: must_match = true; break;
    // The encoder chooses r itself; with the same r the bits are determined.
    case index_coding::rice: must_match = static_cast<std::uint8_t>(again[22]) == s.index_parameter; break;
    default: break;
  }
  // QSGD's encoder writes the shorter form (the fixed one on a tie): each form's bits are
  // determined, the choice is the encoder's.
  if (qsgd) {
    const auto written = static_cast<value_coding>(again[21]);
    FUZZ_CHECK(written == value_coding::qsgd || written == value_coding::qsgd_gamma);
    must_match = must_match && written == s.values;
  }
  // A scale that no value uses (no value kept, or every ternary code 0) may hold any allowed
  // value; the encoder writes 0. It is the one field that need not match.
  bool unused_scale = s.values == value_coding::scaled_sign || s.values == value_coding::ternary;
  for (const double v : d.values) unused_scale = unused_scale && v == 0.0;
  if (must_match && unused_scale && out.size() == wire::message_header_bytes + s.bytes) {
    const std::size_t scale_at = wire::message_header_bytes + wire::section_header_bytes + s.index_bytes;
    std::memcpy(out.data() + scale_at, orig + wire::section_header_bytes + s.index_bytes, 4);
  }
  // Likewise a one_bit pair member that no value of its column uses (the encoder writes -0 or +0).
  if (must_match && s.values == value_coding::one_bit && out.size() == wire::message_header_bytes + s.bytes) {
    const std::uint64_t cols = s.parameters.columns;
    std::vector<bool> used(2 * cols, false);
    for (std::size_t j = 0; j < d.values.size(); ++j) used[2 * (j % cols) + (std::signbit(d.values[j]) ? 0 : 1)] = true;
    const std::size_t pairs = wire::section_header_bytes + s.index_bytes + 4;
    for (std::uint64_t slot = 0; slot < 2 * cols; ++slot)
      if (!used[slot])
        std::memcpy(out.data() + wire::message_header_bytes + pairs + 4 * slot, orig + pairs + 4 * slot, 4);
  }
  if (must_match) {
    FUZZ_CHECK(out.size() == wire::message_header_bytes + s.bytes);
    FUZZ_CHECK_MSG(same_bytes(again, orig, static_cast<std::size_t>(s.bytes)),
                   "re-encoding a valid section gave different bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exact-size heap copy, so that AddressSanitizer sees any read past the message.
  std::vector<std::byte> buf(size);
  if (size > 0) std::memcpy(buf.data(), data, size);
  message_view m;
  m.msg = span<const std::byte>(buf.data(), buf.size());

  // ---- peek, validate, for_each_section agree ----
  const auto peeked = wire::peek(m.msg);
  const auto validated = wire::validate(m.msg);
  m.peeked = peeked.has_value();

  // The error validate and for_each_section report before any section: peek's, except that a
  // wrong CRC-32C is found as soon as the frame (magic, version, flags, total_bytes) is sound,
  // before the kind and the section count are looked at.
  const bool frame_sound = peeked.has_value() || peeked.error() == errc::unknown_coding ||
                           peeked.error() == errc::size_overflow;
  const errc header_error =
      frame_sound && crc_mismatch(buf) ? errc::checksum_mismatch : peeked.error();
  m.header_error = header_error;
  if (peeked) {
    check_message_header(*peeked, size);
    m.header = *peeked;
    if (validated) FUZZ_CHECK(same_header(*validated, *peeked));
  } else {
    FUZZ_CHECK_MSG(!validated, "validate accepted a message peek refused");
  }
  if (header_error != errc::ok) FUZZ_CHECK_ERRC(validated.error(), header_error);

  const auto walked = wire::for_each_section(m.msg, [&](const section_header& s) {
    FUZZ_CHECK(m.sections.size() < (size / wire::section_header_bytes) + 1);
    m.sections.push_back(s);
  });
  m.walk_error = walked.error();
  if (header_error != errc::ok) {
    FUZZ_CHECK_ERRC(walked.error(), header_error);
    FUZZ_CHECK(m.sections.empty());
  }
  if (validated) FUZZ_CHECK_MSG(walked.has_value(), gradcomp::to_string(walked.error()));
  if (walked) {
    FUZZ_CHECK(same_header(*walked, *peeked));
    FUZZ_CHECK(m.sections.size() == walked->section_count);
  }

  // Section headers tile the message: contiguous from the header to the checksum.
  std::uint64_t offset = wire::message_header_bytes;
  for (const auto& s : m.sections) {
    check_section_header(s);
    FUZZ_CHECK(s.offset == offset);
    offset += s.bytes;
    FUZZ_CHECK(offset <= size);
  }
  if (walked)
    FUZZ_CHECK(offset + (walked->has_checksum() ? wire::checksum_bytes : 0) == size);

  // ---- every section: decode_section<float> and <double> against the reference ----
  for (const auto& s : m.sections)
    if (isgq_products(m.msg, s) > max_products) return 0;
  for (const auto& s : m.sections) {
    // Header lengths are bounded by the message (isgq's by max_products), so allocating is safe.
    FUZZ_CHECK(s.kept <= size || s.values == value_coding::isgq);
    const reference_section ref = reference_decode(m.msg, s);
    m.as_double.push_back(decode_and_check<double>(m.msg, s, ref));
    m.as_float.push_back(decode_and_check<float>(m.msg, s, ref));
    const errc ed = m.as_double.back().error, ef = m.as_float.back().error;
    // float refuses whatever double refuses, and in addition only fp64 values beyond its range
    // (which may come before the value double refuses).
    const bool wider = s.values == value_coding::fp64 || s.values == value_coding::isgq;  // values beyond float
    if (ed != errc::ok) {
      if (ef != ed) {
        FUZZ_CHECK_ERRC(ef, errc::value_out_of_range);
        FUZZ_CHECK(wider);
      }
    } else if (ef != errc::ok) {
      FUZZ_CHECK_ERRC(ef, errc::value_out_of_range);
      FUZZ_CHECK(wider);
    }
    if (ed == errc::ok && ef == errc::ok) {
      for (std::size_t j = 0; j < s.kept; ++j)
        FUZZ_CHECK(wider ? m.as_float.back().values[j] == static_cast<float>(m.as_double.back().values[j])
                         : static_cast<double>(m.as_float.back().values[j]) == m.as_double.back().values[j]);
    }
  }

  // ---- the kind's rules, by the reference ----
  for (std::size_t i = 0; i < m.sections.size(); ++i) {
    m.kind_errors.push_back(reference_kind_error(m.header.kind, m.sections, i));
    const bool state = m.sections[i].role == wire::section_role::state &&
                       m.kind_errors.back() == errc::ok && m.as_double[i].error == errc::ok;
    m.state_errors.push_back(state ? reference_state_words_error(reference_decode(m.msg, m.sections[i]))
                                   : errc::ok);
    if (m.kind_errors.back() != errc::ok) break;  // later sections are judged against sound ones
  }
  m.kind_errors.resize(m.sections.size(), errc::ok);
  m.state_errors.resize(m.sections.size(), errc::ok);
  if (walked) m.kind_end_error = reference_kind_end_error(m.header.kind, m.sections);

  // ---- validate reports the first error in message order, and succeeds when all is sound ----
  FUZZ_CHECK_ERRC(validated.error(), expected_validation_error<double>(m));
  if (validated)
    for (const auto& d : m.as_double) FUZZ_CHECK(d.error == errc::ok);
  const auto validated_float = wire::validate<float>(m.msg);
  FUZZ_CHECK_ERRC(validated_float.error(), expected_validation_error<float>(m));
  FUZZ_CHECK_ERRC(wire::validate<double>(m.msg).error(), validated.error());

  // ---- decode_accumulate: matching layout, then two mismatched ones ----
  std::vector<std::size_t> sizes;
  bool layout_known = walked.has_value() && !m.sections.empty();
  if (layout_known) {
    std::uint32_t max_tensor = 0;
    for (const auto& s : m.sections) max_tensor = std::max(max_tensor, s.tensor);
    if (max_tensor >= 4096) {
      layout_known = false;
    } else {
      sizes.assign(std::size_t(max_tensor) + 1, 0);
      std::vector<bool> seen(sizes.size(), false);
      for (const auto& s : m.sections) {
        if (seen[s.tensor]) continue;
        seen[s.tensor] = true;
        sizes[s.tensor] = s.numel;
      }
    }
  }
  if (!layout_known) sizes.assign(1, 8);
  // Index scratch: none, enough for every section, and about half of that.
  std::size_t total_kept = 0;
  for (const auto& s : m.sections) total_kept += s.kept;
  check_accumulate<float>(m, sizes);
  check_accumulate<double>(m, sizes);
  if (total_kept > 0) {
    check_accumulate<float>(m, sizes, total_kept);
    check_accumulate<double>(m, sizes, total_kept / 2 + 1);
  }
  if (layout_known) {
    std::vector<std::size_t> longer = sizes;
    longer[m.sections.front().tensor] += 1;
    check_accumulate<float>(m, longer);
    if (sizes[m.sections.front().tensor] > 0) {
      std::vector<std::size_t> shorter = sizes;
      shorter[m.sections.front().tensor] -= 1;
      check_accumulate<float>(m, shorter);
    }
    std::vector<std::size_t> fewer = sizes;
    fewer.pop_back();
    check_accumulate<double>(m, fewer);
  }

  // ---- the throwing convenience decoder ----
  try {
    const auto all = wire::decode<double>(m.msg);
    FUZZ_CHECK_MSG(validated.has_value(), "decode<double> accepted what validate refused");
    FUZZ_CHECK(all.size() == m.sections.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      FUZZ_CHECK(all[i].header.offset == m.sections[i].offset);
      FUZZ_CHECK(all[i].values.size() == m.as_double[i].values.size());
      FUZZ_CHECK(same_bytes(all[i].values.data(), m.as_double[i].values.data(),
                             all[i].values.size() * sizeof(double)));
      if (m.sections[i].indices != index_coding::dense)
        FUZZ_CHECK(all[i].indices == m.as_double[i].indices);
      else
        FUZZ_CHECK(all[i].indices.empty());
    }
  } catch (const gradcomp::error& e) {
    FUZZ_CHECK_MSG(!validated.has_value(), "decode<double> threw on a valid message");
    FUZZ_CHECK_ERRC(e.code(), validated.error());
  }
  try {
    const auto all = wire::decode<float>(m.msg);
    FUZZ_CHECK_MSG(validated_float.has_value(), "decode<float> accepted what validate<float> refused");
    FUZZ_CHECK(all.size() == m.sections.size());
  } catch (const gradcomp::error& e) {
    FUZZ_CHECK_MSG(!validated_float.has_value(), "decode<float> threw on a valid message");
    FUZZ_CHECK_ERRC(e.code(), validated_float.error());
  }

  // ---- re-encoding valid sections ----
  if (validated)
    for (std::size_t i = 0; i < m.sections.size(); ++i)
      check_reencode(m.msg, m.sections[i], m.as_double[i]);
  return 0;
}
