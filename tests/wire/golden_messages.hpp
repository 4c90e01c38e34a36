// The content of the frozen golden messages under tests/wire/golden/ and of the worked examples
// in docs/wire_format.md. The files were written once by the encoder from these definitions;
// they must keep decoding to exactly this content for as long as format version 1 is supported.
#pragma once

#include <gradcomp/wire/codecs/isgq.hpp>
#include <gradcomp/wire/tensor_message.hpp>
#include <gradcomp/wire/encode.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gradcomp_test {

struct golden_section {
  std::uint32_t tensor;
  std::uint32_t numel;
  bool dense;
  std::vector<std::uint32_t> indices;
  std::vector<float> values;
  std::uint32_t columns = 1;  // one_bit's layout
  std::uint32_t bucket = 0;   // qsgd's layout
  std::uint32_t levels = 0;
  std::vector<float> scales{};  // qsgd's norms (empty: each bucket's largest magnitude)
  std::vector<std::byte> payload{};  // isgq: the producer's payload (`values`: what it decodes to)
};

struct golden_message {
  std::string file;
  gradcomp::wire::encode_options options;
  std::vector<golden_section> sections;
  gradcomp::wire::message_kind kind = gradcomp::wire::message_kind::gradients;
};

inline gradcomp::wire::encode_options golden_options(gradcomp::wire::index_coding ic,
                                                     gradcomp::wire::value_coding vc,
                                                     bool checksum) {
  gradcomp::wire::encode_options o;
  o.indices = ic;
  o.values = vc;
  o.dense_values = vc;
  o.checksum = checksum;
  return o;
}

// 40 values, 0 but for 1 at 2, 3 at 9 and -3.5 at 29.
inline std::vector<float> qsgd_gamma_values() {
  std::vector<float> v(40, 0.0f);
  v[2] = 1.0f;
  v[9] = 3.0f;
  v[29] = -3.5f;
  return v;
}

// An isgq payload: the block's fields (batch, n_in, n_out, layout, variant, levels, bucket, stream,
// key, step), then each factor's parameters and codes.
inline std::vector<std::byte> isgq_payload(const gradcomp::detail::isgq_block& b, const std::vector<float>& px,
                                           const std::vector<float>& pd, const std::vector<std::uint8_t>& cx,
                                           const std::vector<std::uint8_t>& cd) {
  std::vector<std::byte> p(b.payload_bytes());
  gradcomp::detail::isgq_write_payload(b, px.data(), pd.data(), cx.data(), cd.data(), p.data());
  return p;
}

// The minimum-MSE form (variant 1): a 3-input, 2-output layer over a batch of 2 in the out_in
// layout, 2 levels per factor. X^ = [[-1, 0, 0.5], [0.5, -1, 0]] (levels -1 and 0.5, codes 0 2 1 /
// 1 0 2, code 2 an exact zero); Delta^ = [[2, -0.25], [0, 2]] (levels -0.25 and 2, codes 1 0 / 2 1).
inline std::vector<std::byte> isgq_levels_payload() {
  const gradcomp::detail::isgq_block b{2, 3, 2, 1, gradcomp::detail::isgq_variant::levels, 2, 0, 0, 0, 0};
  return isgq_payload(b, {-1.0f, 0.5f}, {-0.25f, 2.0f}, {0, 2, 1, 1, 0, 2}, {1, 0, 2, 1});
}

// The dithered form (variant 0), as isgq_compressor writes it for X = [0.5, -1] and
// Delta = [0.25, 0] (a batch of 1, a 2 x 2 layer, in_out), s = 1, buckets of 4, stream 1, key
// 0x0123456789abcdef, step 5: scales 1 and 0.25, codes 2 1 (levels 0, -1) and 3 0 (level 1, an
// exact zero).
inline std::vector<std::byte> isgq_dithered_payload() {
  const gradcomp::detail::isgq_block b{1, 2, 2, 0, gradcomp::detail::isgq_variant::dithered, 1, 4, 1,
                                       0x0123456789abcdefull, 5};
  return isgq_payload(b, {1.0f}, {0.25f}, {2, 1}, {3, 0});
}

inline std::vector<golden_message> golden_messages() {
  using gradcomp::wire::index_coding;
  using gradcomp::wire::value_coding;
  return {
      {"raw_u32_fp32.gcwf", golden_options(index_coding::raw_u32, value_coding::fp32, false),
       {{7, 40, false, {3, 7, 8, 31}, {0.5f, -1.25f, 2.0f, -0.125f}}}},
      {"delta_varint_fp16.gcwf",
       golden_options(index_coding::delta_varint, value_coding::fp16, false),
       {{0, 1000, false, {5, 6, 200, 999}, {1.0f, -0.333251953125f, 65504.0f, 6.103515625e-05f}}}},
      {"rice_bf16.gcwf", golden_options(index_coding::rice, value_coding::bf16, false),
       {{2, 256, false, {10, 40, 41, 100, 250}, {3.0f, -0.0078125f, 1.5f, -256.0f, 0.25f}}}},
      {"bitmap_fp64.gcwf", golden_options(index_coding::bitmap, value_coding::fp64, false),
       {{1, 20, false, {0, 9, 19}, {0.1f, -2.5f, 1e-3f}}}},
      {"dense_fp32_crc.gcwf", golden_options(index_coding::automatic, value_coding::fp32, true),
       {{4, 3, true, {}, {1.0f, -2.0f, 0.5f}}}},
      {"model_step_crc.gcwf", golden_options(index_coding::automatic, value_coding::fp32, true),
       {{0, 4096, false, {17, 1000, 1001, 2048, 4095}, {0.25f, -0.75f, 0.125f, 3.5f, -1.0f}},
        {1, 4, true, {}, {0.01f, 0.02f, -0.03f, 0.04f}},
        {2, 100, false, {}, {}}}},
      {"scaled_sign_crc.gcwf", golden_options(index_coding::raw_u32, value_coding::scaled_sign, true),
       {{0, 10, true, {}, {0.25f, -0.25f, -0.25f, 0.25f, 0.25f, 0.25f, -0.25f, 0.25f, -0.25f, -0.25f}},
        {3, 100, false, {5, 17, 99}, {-1.5f, 1.5f, -1.5f}}}},
      {"ternary_crc.gcwf", golden_options(index_coding::delta_varint, value_coding::ternary, true),
       {{0, 7, true, {}, {0.5f, 0.0f, -0.5f, 0.0f, -0.0f, 0.5f, -0.5f}},
        {2, 50, false, {4, 9, 30, 49}, {-2.0f, 2.0f, 2.0f, -2.0f}}}},
      {"one_bit_crc.gcwf", golden_options(index_coding::raw_u32, value_coding::one_bit, true),
       {{0, 6, true, {}, {-1.0f, 2.0f, 0.5f, 2.0f, -1.0f, -0.75f}, 2},
        {1, 30, false, {2, 11, 12, 29}, {0.25f, -3.0f, 0.25f, -3.0f}, 1}}},
      // Section 0 in the fixed-width form (every level non-zero), section 1 in the Elias-gamma
      // form (3 non-zero levels of 40); buckets of 4 with 3 levels, and of 16 with 7.
      {"qsgd_crc.gcwf", golden_options(index_coding::raw_u32, value_coding::qsgd, true),
       {{0, 6, true, {}, {0.5f, -1.0f, 1.5f, -0.5f, 2.0f, -1.0f}, 1, 4, 3, {1.5f, 3.0f}},
        {1, 40, true, {}, qsgd_gamma_values(), 1, 16, 7, {7.0f, 3.5f, 0.0f}}}},
      // The values each payload decodes to: section 0 exactly (small dyadic levels), section 1
      // through the dithers u = -0.40922..., 0.13734... of X's elements and -0.49719... of Delta's
      // first (the sums rounded to binary32).
      {"isgq_crc.gcwf", golden_options(index_coding::automatic, value_coding::fp32, true),
       {{0, 6, true, {}, {-2.0f, 0.0f, 1.0f, 1.25f, -2.0f, -0.125f}, 1, 0, 0, {}, isgq_levels_payload()},
        {1, 4, true, {}, {0x1.39b162p-3f, 0.0f, -0x1.b3ec96p-2f, 0.0f}, 1, 0, 0, {}, isgq_dithered_payload()}}},
      // PowerSGD's first round of a model of a 3-element bias (sent dense) and a 3 x 4 weight at
      // rank 1: the bias's values, then the weight's P (3 x 1).
      {"first_round_crc.gcwf", golden_options(index_coding::automatic, value_coding::fp32, true),
       {{0, 3, true, {}, {0.5f, -1.0f, 0.25f}}, {1, 3, true, {}, {2.0f, -0.75f, 4.0f}}},
       gradcomp::wire::message_kind::first_round},
  };
}

// The golden's sections as tensor messages (views into `g`).
inline std::vector<gradcomp::tensor_message<float>> as_messages(const golden_message& g) {
  std::vector<gradcomp::tensor_message<float>> out;
  for (const auto& s : g.sections) {
    gradcomp::tensor_message<float> m;
    m.tensor = s.tensor;
    m.numel = s.numel;
    m.dense = s.dense;
    m.indices = gradcomp::span<const std::uint32_t>(s.indices.data(), s.indices.size());
    m.values = gradcomp::span<const float>(s.values.data(), s.values.size());
    m.parameters.columns = s.columns;
    m.parameters.bucket = s.bucket;
    m.parameters.levels = s.levels;
    m.parameters.scales = s.scales.empty() ? nullptr : s.scales.data();
    if (!s.payload.empty()) {  // the producer's payload; `values` is what it decodes to
      m.values = {};
      m.payload = gradcomp::span<const std::byte>(s.payload.data(), s.payload.size());
      m.coding = gradcomp::wire::value_coding::isgq;
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gradcomp_test
