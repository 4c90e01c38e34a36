// Fuzz harness of the receiving side above the decoder: dgc_aggregator::add(bytes) and finish.
//
// The input is a program that builds messages which are sound on the wire but may be wrong for
// the receiver: sections for tensors the layout does not have, a tensor twice or not at all, a
// dense section for a compressed tensor (or the reverse), a wrong element count, values near the
// largest float that make sums overflow, in every value coding; then a raw byte change may damage
// the message. Properties, for every message:
//   - a refused add leaves every sum bitwise unchanged (and is not counted: finish sees only the
//     accepted messages);
//   - an accepted add came from a message that validates, carries every tensor exactly once in
//     the layout's form and size, and its sums are bitwise those of a reference that decodes the
//     message with wire::decode and adds in the same order, all finite;
//   - a message that validates and fits the layout is accepted exactly when the reference sums
//     are finite, and otherwise refused with state_overflow;
//   - a message that validates but does not fit the layout is refused with a layout error (or
//     with state_overflow when one of its well-placed sections overflows);
//   - finish either succeeds with every update finite or refuses with state_overflow and changes
//     nothing.
#include <gradcomp/dgc/compressor.hpp>
#include <gradcomp/dgc/snapshot.hpp>
#include <gradcomp/wire/crc32c.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_common.hpp"

namespace {

using gradcomp::errc;
using gradcomp::span;
using gradcomp::tensor_message;
namespace wire = gradcomp::wire;
using gradcomp_fuzz::byte_reader;

// The receiver's layout: two compressed weights and a dense bias (which gets receiver momentum).
constexpr std::size_t kNumel[3] = {64, 300, 8};

gradcomp::dgc_compressor<float> make_layout() {
  gradcomp::dgc_config cfg;
  gradcomp::dgc_compressor<float> c(cfg);
  c.add_tensor("w0", {8, 8});
  c.add_tensor("w1", {300, 1}, gradcomp::tensor_mode::compressed);
  c.add_tensor("bias", {8});
  return c;
}

float value_from(byte_reader& in) {
  static const float palette[] = {0.5f, -1.25f, 3e38f, -3e38f, 1.7e38f, 65504.0f, 1e-30f, 0.0f};
  const std::uint8_t b = in.u8();
  if (b < 200) return palette[b % 8];
  std::uint32_t bits = in.u32();
  if ((bits & 0x7f800000u) == 0x7f800000u) bits &= 0xff7fffffu;  // keep it finite
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void put_u32(std::vector<std::byte>& b, std::size_t at, std::uint32_t x) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>((x >> (8 * i)) & 0xffu);
}
void put_u64(std::vector<std::byte>& b, std::size_t at, std::uint64_t x) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>((x >> (8 * i)) & 0xffu);
}

// One message: sections encoded one by one (so that nothing stops a tensor from appearing twice),
// then put behind one header, with an optional checksum and an optional damaged byte.
std::vector<std::byte> build_message(byte_reader& in) {
  const std::uint8_t shape = in.u8();
  const std::size_t sections = (shape & 7u) % 6;
  const bool checksum = (shape & 0x40u) != 0;
  std::vector<std::byte> body;
  std::uint32_t count = 0;
  for (std::size_t s = 0; s < sections; ++s) {
    const std::uint8_t b = in.u8();
    const std::size_t tensor = (b & 3u) == 3 ? 7 : (b & 3u);
    const std::size_t right = kNumel[tensor == 7 ? 0 : tensor];
    const bool dense = (tensor == 2) != ((b & 4u) != 0);  // the layout's form unless bit 2 flips it
    const std::size_t numel = (b & 8u) != 0 ? right + 1 : right;
    wire::encode_options opt;
    static const wire::value_coding codings[] = {wire::value_coding::fp32, wire::value_coding::fp64,
                                                 wire::value_coding::fp16, wire::value_coding::bf16};
    opt.values = opt.dense_values = codings[(b >> 4) & 3u];
    const bool sign = (b & 0x40u) != 0;  // scaled_sign: the values get one magnitude
    if (sign) opt.values = opt.dense_values = wire::value_coding::scaled_sign;
    std::vector<std::uint32_t> idx;
    std::vector<float> val;
    if (dense) {
      const float fill = value_from(in);
      val.assign(numel, fill);
      const std::size_t special = in.u8() % numel;
      val[special] = value_from(in);
    } else {
      std::size_t pos = in.u8() % 16;
      const std::size_t kept = in.u8() % 8;
      for (std::size_t j = 0; j < kept && pos < numel; ++j) {
        idx.push_back(static_cast<std::uint32_t>(pos));
        val.push_back(value_from(in));
        pos += 1 + in.u8() % 64;
      }
    }
    if (sign)
      for (float& v : val) v = std::signbit(v) ? -std::fabs(val[0]) : std::fabs(val[0]);
    const tensor_message<float> m{tensor, numel, dense, {idx.data(), idx.size()}, {val.data(), val.size()}};
    std::vector<std::byte> one(4096);
    const auto n = wire::encode(span<const tensor_message<float>>(&m, 1), opt, span<std::byte>(one.data(), one.size()));
    if (!n) continue;  // a value the coding cannot hold (fp16 above 65504): leave the section out
    body.insert(body.end(), one.begin() + wire::message_header_bytes, one.begin() + static_cast<std::ptrdiff_t>(*n));
    ++count;
  }
  std::vector<std::byte> msg(wire::message_header_bytes);
  std::memcpy(msg.data(), wire::magic, 4);
  msg[4] = std::byte{1};
  msg[6] = checksum ? std::byte{1} : std::byte{0};
  put_u32(msg, 12, count);
  msg.insert(msg.end(), body.begin(), body.end());
  if (checksum) msg.resize(msg.size() + wire::checksum_bytes);
  put_u64(msg, 16, msg.size());
  if (checksum) {
    const std::uint32_t crc = gradcomp::crc32c(span<const std::byte>(msg.data(), msg.size() - 4));
    put_u32(msg, msg.size() - 4, crc);
  }
  const std::uint8_t damage = in.u8();
  if (damage >= 224 && !msg.empty()) msg[in.u16() % msg.size()] ^= static_cast<std::byte>(1u << (damage & 7u));
  return msg;
}

std::vector<std::vector<float>> sums_of(const gradcomp::dgc_aggregator<float>& a) {
  std::vector<std::vector<float>> out;
  for (std::size_t t = 0; t < a.num_tensors(); ++t) out.emplace_back(a.update(t).begin(), a.update(t).end());
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t)
    if (a[t].size() != b[t].size() ||
        (!a[t].empty() && std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0))
      return false;
  return true;
}

bool is_layout_error(errc e) {
  return e == errc::unknown_tensor || e == errc::duplicate_tensor || e == errc::missing_tensor ||
         e == errc::layout_mismatch || e == errc::output_too_small || e == errc::size_mismatch;
}

// The reference: the layout verdict of a message that validates, and the sums it would give.
errc reference(span<const std::byte> msg, std::vector<std::vector<float>>& sums) {
  const auto decoded = wire::decode<float>(msg);
  std::vector<int> seen(3, 0);
  errc layout = errc::ok;
  for (const auto& d : decoded) {
    const auto& s = d.header;
    if (s.tensor >= 3) {
      layout = errc::unknown_tensor;
      continue;
    }
    if (seen[s.tensor]++ != 0 || s.numel != kNumel[s.tensor] ||
        (s.indices == wire::index_coding::dense) != (s.tensor == 2)) {
      layout = errc::layout_mismatch;  // some layout error
      continue;
    }
    for (std::size_t j = 0; j < d.values.size(); ++j)
      sums[s.tensor][s.indices == wire::index_coding::dense ? j : d.indices[j]] += d.values[j];
  }
  for (int s : seen)
    if (s == 0 && layout == errc::ok) layout = errc::missing_tensor;
  return layout;
}

bool all_finite(const std::vector<std::vector<float>>& s) {
  for (const auto& v : s)
    for (const float x : v)
      if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  byte_reader in(data, size);
  static const auto layout = make_layout();
  gradcomp::dgc_aggregator<float> agg(layout);
  const std::size_t steps = 1 + in.u8() % 3;
  for (std::size_t step = 0; step < steps; ++step) {
    agg.begin();
    std::size_t accepted = 0;
    const std::size_t messages = 1 + in.u8() % 4;
    for (std::size_t m = 0; m < messages; ++m) {
      const auto msg = build_message(in);
      const span<const std::byte> bytes(msg.data(), msg.size());
      const auto before = sums_of(agg);
      const auto r = agg.add(bytes);
      const bool valid = static_cast<bool>(wire::validate<float>(bytes));
      if (!r) {
        FUZZ_CHECK_MSG(same_bits(sums_of(agg), before), "a refused add changed a sum");
        if (valid) {
          auto ref = before;
          const errc layout_error = reference(bytes, ref);
          if (layout_error == errc::ok) {
            FUZZ_CHECK_MSG(!all_finite(ref), gradcomp::to_string(r.error()));
            FUZZ_CHECK_ERRC(r.error(), errc::state_overflow);
          } else {
            // Several faults: an overflow of a well-placed section may be found first.
            FUZZ_CHECK_MSG(is_layout_error(r.error()) || (r.error() == errc::state_overflow && !all_finite(ref)),
                           gradcomp::to_string(r.error()));
          }
        }
        continue;
      }
      FUZZ_CHECK_MSG(valid, "add accepted a message that does not validate");
      auto ref = before;
      FUZZ_CHECK_ERRC(reference(bytes, ref), errc::ok);
      FUZZ_CHECK_MSG(all_finite(ref), "add accepted a message whose sums overflow");
      FUZZ_CHECK_MSG(same_bits(sums_of(agg), ref), "sums differ from the reference");
      ++accepted;
    }
    if (accepted == 0) {
      FUZZ_CHECK(!agg.finish(1));
      continue;
    }
    FUZZ_CHECK(!agg.finish(accepted + 1));  // refused messages were not counted
    const auto sums = sums_of(agg);
    const auto momentum = gradcomp::save_snapshot(agg, false);
    const auto f = agg.finish(accepted);
    if (f) {
      FUZZ_CHECK_MSG(all_finite(sums_of(agg)), "finish left a non-finite update");
    } else {
      FUZZ_CHECK_ERRC(f.error(), errc::state_overflow);
      FUZZ_CHECK_MSG(same_bits(sums_of(agg), sums), "a refused finish changed a sum");
      FUZZ_CHECK_MSG(gradcomp::save_snapshot(agg, false) == momentum, "a refused finish changed the momentum");
    }
  }
  return 0;
}
