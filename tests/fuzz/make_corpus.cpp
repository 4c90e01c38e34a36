// Writes the seed corpus of the fuzz harnesses, under the directory given (tests/fuzz):
//   corpus/decode/     messages for fuzz_decode: a valid message for every index coding x value
//                      coding (half of them with a CRC-32C, so each coding appears with and
//                      without), multi-section, empty and snapshot messages (compressor, legacy
//                      state, aggregator), damaged variants (truncated, bad magic, wrong version,
//                      bit flips, bad padding, ...) and messages whose bytes are sound but that
//                      break a rule of their kind (named "semantic-...": a tensor carried twice,
//                      a role or coding the kind does not allow, a snapshot without its state
//                      section or with it elsewhere, unpaired momentum, a state word out of range);
//   corpus/roundtrip/  step descriptions for fuzz_roundtrip (layout: fuzz_roundtrip.cpp);
//   known_failures/    (none at present) inputs that expose a library bug not fixed yet. They are
//                      not part of the corpus, which must pass; once the bug is fixed, they move
//                      into corpus/ so that the fuzz.*.corpus tests keep it fixed.
//
// The corpus is committed; this program only documents and reproduces how the seeds were made.
// To regenerate them, from the repository root:
//   cmake -S . -B build && cmake --build build --target make_corpus
//   build/tests/fuzz/make_corpus tests/fuzz
// It overwrites its own files (named by what they hold) and leaves the others alone, such as the
// inputs a fuzzing run found (named by their SHA-1, added with `fuzz_decode -merge=1 ...`).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gradcomp/wire/codecs/qsgd.hpp>
#include <gradcomp/isgq/compressor.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include "../wire/forge.hpp"

namespace {

namespace wire = gradcomp::wire;
using gradcomp::span;
using gradcomp::tensor_message;
using wire::index_coding;
using wire::value_coding;
using bytes = std::vector<std::byte>;

std::filesystem::path out_dir;
int written = 0;

void write(const std::string& sub, const std::string& name, const bytes& b) {
  const auto dir = sub == "known_failures" ? out_dir / sub : out_dir / "corpus" / sub;
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s/%s\n", sub.c_str(), name.c_str());
    std::exit(1);
  }
  ++written;
}

void put_le(bytes& b, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// Recomputes the CRC-32C trailer after an edit, so that the damage is seen past the checksum.
void fix_crc(bytes& b) {
  const std::size_t body = b.size() - wire::checksum_bytes;
  put_le(b, body, gradcomp::crc32c(span<const std::byte>(b.data(), body)), 4);
}

// ---- decode seeds ----

const std::vector<std::uint32_t> sparse_idx = {3, 7, 8, 20, 41, 42, 43, 77, 98, 99};
const std::vector<float> sparse_val = {0.5f, -1.25f, 3.0e-5f, 65504.0f, -0.0f,
                                       1.0e-7f, 2.5f, -7.0f, 100.125f, 0.1f};
const std::vector<float> dense_val = {1.0f, -2.0f, 0.0f, 0.25f, -0.5f, 3.0f,
                                      1.0e-3f, -6.0e4f, 7.0f, -8.0f, 9.5f, 1.0e-6f};

tensor_message<float> sparse_msg(std::size_t tensor = 0) {
  tensor_message<float> m;
  m.tensor = tensor;
  m.numel = 100;
  m.indices = span<const std::uint32_t>(sparse_idx.data(), sparse_idx.size());
  m.values = span<const float>(sparse_val.data(), sparse_val.size());
  return m;
}

tensor_message<float> dense_msg(std::size_t tensor = 0) {
  tensor_message<float> m;
  m.tensor = tensor;
  m.numel = dense_val.size();
  m.dense = true;
  m.values = span<const float>(dense_val.data(), dense_val.size());
  return m;
}

bytes encode(const std::vector<tensor_message<float>>& ms, const wire::encode_options& opt) {
  return wire::encode(span<const tensor_message<float>>(ms.data(), ms.size()), opt);
}

wire::encode_options raw_options() {
  wire::encode_options opt;
  opt.indices = index_coding::raw_u32;
  return opt;
}

void decode_seeds() {
  const index_coding codings[] = {index_coding::raw_u32, index_coding::delta_varint,
                                  index_coding::rice, index_coding::bitmap, index_coding::dense};
  const value_coding values[] = {value_coding::fp32, value_coding::fp64, value_coding::fp16,
                                 value_coding::bf16};
  for (int i = 0; i < 5; ++i) {
    for (int v = 0; v < 4; ++v) {
      wire::encode_options opt;
      const bool dense = codings[i] == index_coding::dense;
      opt.indices = dense ? index_coding::automatic : codings[i];
      opt.values = values[v];
      opt.dense_values = values[v];
      opt.checksum = ((i + v) & 1) != 0;
      const bytes b = encode({dense ? dense_msg() : sparse_msg()}, opt);
      write("decode", std::string("valid-") + wire::to_string(codings[i]) + "-" +
                          wire::to_string(values[v]) + (opt.checksum ? "-crc" : "") + ".bin",
            b);
    }
  }

  // The packed codings (scaled_sign, ternary) with every index coding: the same positions, values
  // of one magnitude (and zeros, for ternary); then a scale that is negative, one that is
  // infinite, a padding bit set, and for ternary the reserved code and a code under a zero scale.
  for (const value_coding packed : {value_coding::scaled_sign, value_coding::ternary}) {
    const bool ternary = packed == value_coding::ternary;
    std::vector<float> signs(sparse_val.size()), dense_signs(dense_val.size());
    for (std::size_t j = 0; j < signs.size(); ++j)
      signs[j] = ternary && j % 3 == 1 ? 0.0f : (std::signbit(sparse_val[j]) ? -0.75f : 0.75f);
    for (std::size_t j = 0; j < dense_signs.size(); ++j)
      dense_signs[j] = ternary && j % 3 == 1 ? 0.0f : (std::signbit(dense_val[j]) ? -2.0f : 2.0f);
    const std::string name = wire::to_string(packed);
    for (int i = 0; i < 5; ++i) {
      wire::encode_options opt;
      const bool dense = codings[i] == index_coding::dense;
      opt.indices = dense ? index_coding::automatic : codings[i];
      opt.values = opt.dense_values = packed;
      opt.checksum = (i & 1) != 0;
      tensor_message<float> m = dense ? dense_msg() : sparse_msg();
      m.values = dense ? span<const float>(dense_signs.data(), dense_signs.size())
                       : span<const float>(signs.data(), signs.size());
      const bytes b = encode({m}, opt);
      write("decode", std::string("valid-") + wire::to_string(codings[i]) + "-" + name +
                          (opt.checksum ? "-crc" : "") + ".bin",
            b);
      if (i != 0) continue;
      // raw_u32 without checksum: the value payload starts after 4 bytes per position.
      const std::size_t v0 = wire::message_header_bytes + wire::section_header_bytes + 4 * sparse_idx.size();
      const std::size_t per_byte = ternary ? 4 : 8;  // 10 values: the last byte's top bits are padding
      bytes negative = b, infinite = b, padding = b;
      negative[v0 + 3] |= std::byte{0x80};
      put_le(infinite, v0, 0x7f800000u, 4);
      padding[v0 + 4 + sparse_idx.size() / per_byte] |= std::byte{0x80};
      write("decode", std::string("damaged-") + name + "-negative-scale.bin", negative);
      write("decode", std::string("damaged-") + name + "-infinite-scale.bin", infinite);
      write("decode", std::string("damaged-") + name + "-padding.bin", padding);
      if (!ternary) continue;
      bytes reserved = b, zero_scale = b;
      reserved[v0 + 4] = (reserved[v0 + 4] & std::byte{0xfc}) | std::byte{0x02};  // value 0: code 2
      put_le(zero_scale, v0, 0u, 4);
      write("decode", "damaged-ternary-reserved-code.bin", reserved);
      write("decode", "damaged-ternary-zero-scale.bin", zero_scale);
    }
  }

  // one_bit with every index coding: each column holds one negative and one non-negative value
  // (12 dense values as 3 columns, 10 sparse ones as 2); then a column count of 0, one that does
  // not divide the values, a first member without its sign bit, an infinite member, and a
  // padding bit set.
  {
    std::vector<float> sparse_bits(sparse_val.size()), dense_bits(dense_val.size());
    for (std::size_t j = 0; j < sparse_bits.size(); ++j)
      sparse_bits[j] =
          std::signbit(sparse_val[j]) ? -1.5f - static_cast<float>(j % 2) : 0.25f * static_cast<float>(j % 2);
    for (std::size_t j = 0; j < dense_bits.size(); ++j)
      dense_bits[j] =
          std::signbit(dense_val[j]) ? -0.5f * static_cast<float>(1 + j % 3) : 4.0f + static_cast<float>(j % 3);
    for (int i = 0; i < 5; ++i) {
      wire::encode_options opt;
      const bool dense = codings[i] == index_coding::dense;
      opt.indices = dense ? index_coding::automatic : codings[i];
      opt.values = opt.dense_values = value_coding::one_bit;
      opt.checksum = (i & 1) != 0;
      tensor_message<float> m = dense ? dense_msg() : sparse_msg();
      m.values = dense ? span<const float>(dense_bits.data(), dense_bits.size())
                       : span<const float>(sparse_bits.data(), sparse_bits.size());
      m.parameters.columns = dense ? 3 : 2;
      const bytes b = encode({m}, opt);
      write("decode", std::string("valid-") + wire::to_string(codings[i]) + "-one_bit" + (opt.checksum ? "-crc" : "") +
                          ".bin",
            b);
      if (i != 0) continue;
      const std::size_t v0 = wire::message_header_bytes + wire::section_header_bytes + 4 * sparse_idx.size();
      bytes no_columns = b, three = b, unsigned_first = b, infinite = b, padding = b;
      put_le(no_columns, v0, 0u, 4);
      put_le(three, v0, 3u, 4);
      unsigned_first[v0 + 4 + 3] &= std::byte{0x7f};
      put_le(infinite, v0 + 8, 0x7f800000u, 4);
      padding[v0 + 4 + 16 + sparse_idx.size() / 8] |= std::byte{0x80};
      write("decode", "damaged-one_bit-no-columns.bin", no_columns);
      write("decode", "damaged-one_bit-columns-not-dividing.bin", three);
      write("decode", "damaged-one_bit-unsigned-negative.bin", unsigned_first);
      write("decode", "damaged-one_bit-infinite-value.bin", infinite);
      write("decode", "damaged-one_bit-padding.bin", padding);
    }
  }

  // qsgd with every index coding, in both forms: levels of 5 in buckets of 4 under the norms 2,
  // 4, 6, ... (every value non-zero, 12 dense or 10 sparse of 100: the fixed form; one in eight of
  // 200, dense or sparse of 400: the Elias-gamma form); then an infinite and a negative norm, the
  // last bit set, for the fixed form a level above 5 and a sign on level 0, for the Elias-gamma
  // form a count of entries beyond the stream, a stream length that is not the payload's and a
  // first gap whose code runs on.
  for (const bool gamma : {false, true}) {
    const std::size_t n_dense = gamma ? 200 : dense_val.size(), n_sparse = gamma ? 200 : sparse_idx.size();
    std::vector<std::uint32_t> idx(n_sparse);
    for (std::size_t j = 0; j < n_sparse; ++j) idx[j] = gamma ? static_cast<std::uint32_t>(2 * j) : sparse_idx[j];
    auto levels_of = [&](std::size_t n, std::vector<float>& norms) {
      std::vector<float> v(n);
      norms.resize((n + 3) / 4);
      for (std::size_t b = 0; b < norms.size(); ++b) norms[b] = 2.0f * static_cast<float>(b + 1);
      for (std::size_t j = 0; j < n; ++j) {
        const auto level = gamma && j % 8 != 1 ? 0u : static_cast<std::uint32_t>(1 + j % 5);
        v[j] = gradcomp::detail::qsgd_value<float>(norms[j / 4], level, 5, j % 3 == 0);
      }
      return v;
    };
    std::vector<float> dense_norms, sparse_norms;
    const std::vector<float> dense_q = levels_of(n_dense, dense_norms), sparse_q = levels_of(n_sparse, sparse_norms);
    const std::string form = gamma ? "-qsgd_gamma" : "-qsgd";
    for (int i = 0; i < 5; ++i) {
      wire::encode_options opt;
      const bool dense = codings[i] == index_coding::dense;
      opt.indices = dense ? index_coding::automatic : codings[i];
      opt.values = opt.dense_values = value_coding::qsgd;
      opt.checksum = (i & 1) != 0;
      tensor_message<float> m;
      m.dense = dense;
      m.numel = dense ? n_dense : (gamma ? 400 : 100);
      if (!dense) m.indices = span<const std::uint32_t>(idx.data(), idx.size());
      m.values = dense ? span<const float>(dense_q.data(), dense_q.size())
                       : span<const float>(sparse_q.data(), sparse_q.size());
      m.parameters.bucket = 4;
      m.parameters.levels = 5;
      m.parameters.scales = dense ? dense_norms.data() : sparse_norms.data();
      const bytes b = encode({m}, opt);
      const auto written = static_cast<value_coding>(b[wire::message_header_bytes + 21]);
      if (written != (gamma ? value_coding::qsgd_gamma : value_coding::qsgd))
        throw std::logic_error("a qsgd seed is not in the form it is meant to show");
      const std::string name = std::string("valid-") + wire::to_string(codings[i]) + form;
      write("decode", name + (opt.checksum ? "-crc" : "") + ".bin", b);
      if (i != 0) continue;
      const std::size_t v0 = wire::message_header_bytes + wire::section_header_bytes + 4 * n_sparse;
      const std::size_t head = gamma ? 20 : 12, body = v0 + head + 4 * sparse_norms.size();
      bytes infinite = b, negative = b, padding = b;
      put_le(infinite, v0 + head, 0x7f800000u, 4);
      put_le(negative, v0 + head + 4, 0xc0000000u, 4);
      padding[b.size() - 1] |= std::byte{0x80};
      write("decode", "damaged" + form + "-infinite-norm.bin", infinite);
      write("decode", "damaged" + form + "-negative-norm.bin", negative);
      write("decode", "damaged" + form + "-last-bit.bin", padding);
      if (!gamma) {
        bytes high = b, signed_zero = b;  // value 0's 4-bit code: level 6, then level 0 with the sign
        high[body] = (high[body] & std::byte{0xf0}) | std::byte{0x06};
        signed_zero[body] = (signed_zero[body] & std::byte{0xf0}) | std::byte{0x08};
        write("decode", "damaged-qsgd-level-above.bin", high);
        write("decode", "damaged-qsgd-signed-zero.bin", signed_zero);
      } else {
        bytes entries = b, length = b, gap = b;
        put_le(entries, v0 + 12, 1000u, 4);
        put_le(length, v0 + 16, 1u, 4);
        gap[body] = std::byte{0x00};
        write("decode", "damaged-qsgd_gamma-entries.bin", entries);
        write("decode", "damaged-qsgd_gamma-stream-length.bin", length);
        write("decode", "damaged-qsgd_gamma-gap.bin", gap);
      }
    }
  }

  // isgq: a dithered (s = 1, buckets of 8) and a minimum-MSE (4 levels) section of a 7 x 5 layer
  // over a batch of 3, with and without a checksum, next to a dense fp32 section; then, for the
  // dithered form, a negative scale, a zero scale under non-zero codes, a sparse index coding and a
  // layer of another element count; for the level form a code above the top one.
  for (const bool levels : {false, true}) {
    const std::size_t batch = 3, n_in = 7, n_out = 5;
    std::vector<float> x(batch * n_in), d(batch * n_out);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 4 == 0 ? 0.0f : 0.25f * static_cast<float>(i % 9) - 1.0f;
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = 0.125f * static_cast<float>(i % 7) - 0.375f;
    gradcomp::isgq_config cfg;
    cfg.method = levels ? gradcomp::isgq_method::min_mse : gradcomp::isgq_method::dithered;
    cfg.levels = levels ? 4 : 1;
    cfg.bucket = 8;
    gradcomp::isgq_compressor<float> c(cfg);
    c.add_layer("fc", n_in, n_out);
    const tensor_message<float> m = c.compress(0, span<const float>(x.data(), x.size()),
                                               span<const float>(d.data(), d.size()), batch).value();
    const std::vector<float> bias = {0.5f, -0.25f};
    tensor_message<float> b;
    b.tensor = 1;
    b.numel = 2;
    b.dense = true;
    b.values = span<const float>(bias.data(), bias.size());
    const std::string form = levels ? "-isgq-levels" : "-isgq-dithered";
    for (const bool crc : {false, true}) {
      wire::encode_options opt;
      opt.checksum = crc;
      write("decode", "valid" + form + (crc ? "-crc" : "") + ".bin", encode({m, b}, opt));
    }
    const bytes good = encode({m, b}, wire::encode_options{});
    const std::size_t v0 = wire::message_header_bytes + wire::section_header_bytes;
    if (levels) {
      bytes above = good;  // the first code 7, above L = 4 (codes of 3 bits)
      above[v0 + 40 + 2 * 4 * 4] |= std::byte{0x07};
      write("decode", "damaged-isgq-code-above.bin", above);
      continue;
    }
    bytes negative = good, zero_scale = good, sparse = good, other_size = good;
    put_le(negative, v0 + 40, 0xbf800000u, 4);
    put_le(zero_scale, v0 + 40, 0u, 4);
    sparse[wire::message_header_bytes + 20] = static_cast<std::byte>(index_coding::bitmap);
    put_le(other_size, v0 + 4, 6u, 4);
    write("decode", "damaged-isgq-negative-scale.bin", negative);
    write("decode", "damaged-isgq-zero-scale.bin", zero_scale);
    write("decode", "damaged-isgq-sparse.bin", sparse);
    write("decode", "damaged-isgq-other-size.bin", other_size);
  }

  // Several sections: automatic codings, a dense one, two tensors sharing nothing.
  std::vector<std::uint32_t> many(40);
  std::vector<float> many_val(40);
  for (std::uint32_t j = 0; j < 40; ++j) {
    many[j] = 2 * j + (j & 1);
    many_val[j] = static_cast<float>(j) - 19.5f;
  }
  tensor_message<float> wide;
  wide.tensor = 2;
  wide.numel = 90;
  wide.indices = span<const std::uint32_t>(many.data(), many.size());
  wide.values = span<const float>(many_val.data(), many_val.size());
  {
    wire::encode_options opt;
    opt.values = value_coding::fp16;
    opt.dense_values = value_coding::bf16;
    opt.checksum = true;
    write("decode", "valid-three-sections-crc.bin", encode({sparse_msg(0), dense_msg(1), wide}, opt));
    write("decode", "valid-empty.bin", encode({}, wire::encode_options{}));
  }

  // Longer Rice and delta_varint payloads (clusters and a long gap), so that mutations reach
  // the word-at-a-time paths of the decoders.
  {
    std::vector<std::uint32_t> clustered;
    std::vector<float> clustered_val;
    std::uint32_t p = 3;
    for (std::uint32_t j = 0; j < 48; ++j) {
      clustered.push_back(p);
      clustered_val.push_back(0.125f * static_cast<float>(j) - 2.0f);
      p += 1 + (j * 7) % 13 + (j == 20 ? 5000 : 0);
    }
    tensor_message<float> m;
    m.numel = 40000;
    m.indices = span<const std::uint32_t>(clustered.data(), clustered.size());
    m.values = span<const float>(clustered_val.data(), clustered_val.size());
    for (const index_coding c : {index_coding::rice, index_coding::delta_varint}) {
      wire::encode_options opt;
      opt.indices = c;
      opt.values = value_coding::bf16;
      write("decode", std::string("valid-") + wire::to_string(c) + "-clusters.bin", encode({m}, opt));
    }
  }

  // Snapshots (kind 1, dense sections, non-gradient roles): valid, but not for
  // decode_accumulate. Written byte by byte (tests/wire/forge.hpp).
  using gradcomp_test::dense_section;
  using gradcomp_test::forge;
  using gradcomp_test::state_section;
  using wire::message_kind;
  using wire::section_role;
  const auto res = [](std::uint32_t t, value_coding c = value_coding::fp32) {
    return dense_section(section_role::residual, t, {0.5, -0.25, 3.0, 0.0}, c);
  };
  const auto mom = [](std::uint32_t t, value_coding c = value_coding::fp32) {
    return dense_section(section_role::momentum, t, {1.0, 2.0, -1.5, 0.125}, c);
  };
  const auto recv = [](std::uint32_t t, value_coding c = value_coding::fp32) {
    return dense_section(section_role::receiver_momentum, t, {0.75, -8.0}, c);
  };
  const auto fac = [](std::uint32_t t, value_coding c = value_coding::fp32) {
    return dense_section(section_role::factor, t, {0.5, -2.0, 0.25}, c);
  };
  const auto words = gradcomp_test::state_words();
  write("decode", "valid-snapshot-compressor-crc.bin",
        forge(message_kind::snapshot, {state_section(words), res(0), mom(0), res(2), mom(2)}, true));
  write("decode", "valid-snapshot-legacy-state.bin",
        forge(message_kind::snapshot,
              {state_section(gradcomp_test::legacy_state_words()), res(1, value_coding::fp64),
               res(3, value_coding::fp64)}));
  {
    // An EF-SignSGD snapshot: method 2, residual sections (the errors) without momentum.
    const std::vector<double> ef = {5, 0, 0, 0, 0, 0, 0, 0, 2};
    write("decode", "valid-snapshot-ef-signsgd-crc.bin",
          forge(message_kind::snapshot, {state_section(ef), res(0), res(2)}, true));
  }
  {
    // PowerSGD snapshots: method 7, each compressed tensor's error then its Q, or the Qs alone.
    const std::vector<double> ps = {3, 0, 0, 0, 11, 0, 0, 0, 7};
    write("decode", "valid-snapshot-powersgd-crc.bin",
          forge(message_kind::snapshot, {state_section(ps), res(0), fac(0), res(3), fac(3)}, true));
    write("decode", "valid-snapshot-powersgd-factors.bin",
          forge(message_kind::snapshot, {state_section(ps), fac(1, value_coding::fp64), fac(2, value_coding::fp64)}));
    write("decode", "semantic-factor-before-residual.bin",
          forge(message_kind::snapshot, {state_section(ps), fac(0), res(0)}));
    write("decode", "semantic-factor-missing.bin",
          forge(message_kind::snapshot, {state_section(ps), res(0), fac(0), res(1), res(2)}));
    write("decode", "semantic-factor-in-aggregator.bin", forge(message_kind::snapshot, {recv(0), fac(1)}));
  }
  write("decode", "valid-snapshot-aggregator.bin",
        forge(message_kind::snapshot, {recv(0), recv(1), recv(5)}));

  // Sound bytes, broken rules of the kind.
  {
    wire::encode_options opt;
    opt.checksum = true;
    bytes b = encode({sparse_msg(0), dense_msg(1)}, opt);
    std::size_t second = wire::message_header_bytes;
    for (int i = 0; i < 8; ++i)
      second += static_cast<std::size_t>(b[wire::message_header_bytes + i]) << (8 * i);
    put_le(b, second + 8, 0, 4);  // the second section names tensor 0 too
    fix_crc(b);
    write("decode", "semantic-duplicate-tensor-crc.bin", b);
  }
  {
    const auto g = [](std::uint32_t t) {
      return dense_section(section_role::gradient, t, {1.0, -1.0, 0.5});
    };
    write("decode", "semantic-duplicate-tensor-unordered.bin",
          forge(message_kind::gradients, {g(5), g(2), g(9), g(5)}));
    // The rounds of a multi-round method (PowerSGD): dense sections only, each vector once.
    write("decode", "valid-first-round-crc.bin", forge(message_kind::first_round, {g(0), g(1)}, true));
    write("decode", "valid-second-round.bin", forge(message_kind::second_round, {g(0)}));
    write("decode", "semantic-round-sparse-section.bin",
          forge(message_kind::first_round,
                {g(0), gradcomp_test::raw_section(section_role::gradient, 1, 8, {2, 5}, {1.0, -2.0})}));
    write("decode", "semantic-round-duplicate-vector.bin", forge(message_kind::second_round, {g(1), g(1)}));
  }
  {
    bytes b = encode({sparse_msg(0), dense_msg(1)}, raw_options());
    b[wire::message_header_bytes + 23] = static_cast<std::byte>(section_role::residual);
    write("decode", "semantic-residual-in-gradient.bin", b);
  }
  {
    auto g = res(1);
    g.role = section_role::gradient;
    write("decode", "semantic-gradient-in-snapshot.bin",
          forge(message_kind::snapshot, {state_section(words), res(0), g}));
  }
  write("decode", "semantic-fp16-residual-snapshot.bin",
        forge(message_kind::snapshot,
              {state_section(words), res(0, value_coding::fp16), mom(0, value_coding::fp16)}));
  write("decode", "semantic-snapshot-without-state-crc.bin",
        forge(message_kind::snapshot, {res(0), mom(0), res(1), mom(1)}, true));
  write("decode", "semantic-state-not-first.bin",
        forge(message_kind::snapshot, {res(0), state_section(words), mom(0)}));
  write("decode", "semantic-momentum-unpaired.bin",
        forge(message_kind::snapshot, {state_section(words), res(0), mom(0), res(4)}));
  write("decode", "semantic-sparse-snapshot.bin",
        forge(message_kind::snapshot,
              {state_section(words),
               gradcomp_test::raw_section(section_role::residual, 0, 100, {3, 50}, {1.0, 2.0})}));
  {
    auto bad = words;
    bad[wire::state_word::nesterov] = 2.0;
    write("decode", "semantic-state-word-range.bin",
          forge(message_kind::snapshot, {state_section(bad), res(0), mom(0)}));
  }
  {
    auto bad = words;
    bad[wire::state_word::selection] = 8.0;  // no such method
    write("decode", "semantic-state-method-range.bin", forge(message_kind::snapshot, {state_section(bad), res(0)}));
  }
  write("decode", "semantic-receiver-momentum-order.bin",
        forge(message_kind::snapshot, {recv(3), recv(1)}));

  // An fp64 value beyond the range of float: valid, refused by decode_section<float>.
  {
    wire::encode_options opt;
    opt.indices = index_coding::raw_u32;
    opt.values = value_coding::fp64;
    bytes b = encode({sparse_msg()}, opt);
    const std::size_t v0 = wire::message_header_bytes + wire::section_header_bytes + 4 * sparse_idx.size();
    std::uint64_t big;
    const double d = 1.0e300;
    std::memcpy(&big, &d, 8);
    put_le(b, v0 + 8 * 3, big, 8);
    write("decode", "valid-fp64-beyond-float.bin", b);
  }

  // A Rice stream (r = 0) laid out so that a buffered bit reader holds exactly 64 bits when a
  // run of 63 one-bits and its terminating zero come up: gaps 13, 1, 15, 63, 7 in a payload of
  // 13 bytes, so positions 13, 15, 31, 95, 103 of 200. Written by hand, not by the encoder.
  // (The first buffered Rice reader shifted by 64 here and refused the message.)
  {
    const std::uint8_t idx[] = {0xff, 0x5f, 0xff, 0x7f, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0x7f, 0x7f};
    const float vals[] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    bytes b(wire::message_header_bytes + wire::section_header_bytes + sizeof idx + sizeof vals);
    for (int i = 0; i < 4; ++i) b[i] = static_cast<std::byte>(wire::magic[i]);
    put_le(b, 4, wire::format_version, 2);
    put_le(b, 12, 1, 4);  // one section
    put_le(b, 16, b.size(), 8);
    const std::size_t s = wire::message_header_bytes;
    put_le(b, s, b.size() - s, 8);  // section_bytes
    put_le(b, s + 12, 200, 4);      // numel
    put_le(b, s + 16, 5, 4);        // kept
    b[s + 20] = static_cast<std::byte>(index_coding::rice);
    b[s + 21] = static_cast<std::byte>(value_coding::fp32);
    put_le(b, s + 24, sizeof idx, 8);
    for (std::size_t i = 0; i < sizeof idx; ++i) b[s + 32 + i] = static_cast<std::byte>(idx[i]);
    std::memcpy(b.data() + s + 32 + sizeof idx, vals, sizeof vals);
    write("decode", "valid-rice-long-run.bin", b);
  }

  // A Rice payload starting with 64 one-bits (r = 0, one gap of 70 in 1000): a buffered reader
  // sees a word of all ones. Valid; position 70. (The buffered Rice reader once passed 0 to
  // count-trailing-zeros here.)
  {
    const std::uint8_t idx[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f};
    bytes b(wire::message_header_bytes + wire::section_header_bytes + sizeof idx + 4);
    for (int i = 0; i < 4; ++i) b[i] = static_cast<std::byte>(wire::magic[i]);
    put_le(b, 4, wire::format_version, 2);
    put_le(b, 12, 1, 4);
    put_le(b, 16, b.size(), 8);
    const std::size_t s = wire::message_header_bytes;
    put_le(b, s, b.size() - s, 8);
    put_le(b, s + 12, 1000, 4);
    put_le(b, s + 16, 1, 4);
    b[s + 20] = static_cast<std::byte>(index_coding::rice);
    b[s + 21] = static_cast<std::byte>(value_coding::fp32);
    put_le(b, s + 24, sizeof idx, 8);
    for (std::size_t i = 0; i < sizeof idx; ++i) b[s + 32 + i] = static_cast<std::byte>(idx[i]);
    put_le(b, s + 32 + sizeof idx, 0x3fc00000u, 4);  // 1.5f
    write("decode", "valid-rice-ones-word.bin", b);
  }

  // Damaged messages.
  wire::encode_options raw_opt;
  raw_opt.indices = index_coding::raw_u32;
  const bytes raw = encode({sparse_msg()}, raw_opt);
  const std::size_t idx0 = wire::message_header_bytes + wire::section_header_bytes;
  const std::size_t val0 = idx0 + 4 * sparse_idx.size();
  wire::encode_options crc_opt = raw_opt;
  crc_opt.checksum = true;
  const bytes crc = encode({sparse_msg()}, crc_opt);
  {
    bytes b = raw;
    b.pop_back();
    write("decode", "damaged-truncated.bin", b);
    write("decode", "damaged-truncated-header.bin", bytes(raw.begin(), raw.begin() + 20));
  }
  {
    bytes b = raw;
    b[0] = std::byte{'g'};
    write("decode", "damaged-bad-magic.bin", b);
  }
  {
    bytes b = raw;
    put_le(b, 4, 2, 2);
    write("decode", "damaged-version-2.bin", b);
    put_le(b, 4, 0, 2);
    write("decode", "damaged-version-0.bin", b);
  }
  {
    bytes b = raw;
    put_le(b, 6, 0x0002, 2);
    write("decode", "damaged-unknown-flag.bin", b);
  }
  {
    bytes b = crc;
    b[val0 + 1] ^= std::byte{0x10};
    write("decode", "damaged-bitflip-under-crc.bin", b);
  }
  {
    bytes b = raw;
    b[idx0 + 4 * 5] ^= std::byte{0x01};      // 41 -> 40: still increasing
    b[idx0 + 4 * 6 + 2] ^= std::byte{0x80};  // 42 -> 42 + 2^23: out of range
    write("decode", "damaged-index-out-of-range.bin", b);
  }
  {
    bytes b = raw;
    put_le(b, idx0 + 4 * 2, 7, 4);  // 8 -> 7, equal to its predecessor
    write("decode", "damaged-index-repeats.bin", b);
  }
  {
    bytes b = raw;
    put_le(b, val0 + 4 * 4, 0x7fc00000u, 4);  // NaN
    write("decode", "damaged-nan-value.bin", b);
  }
  {
    bytes b = raw;
    b.push_back(std::byte{0});
    write("decode", "damaged-trailing-byte.bin", b);
  }
  {
    bytes b = raw;
    put_le(b, wire::message_header_bytes + 16, 101, 4);  // kept 101 > numel 100
    write("decode", "damaged-kept-above-numel.bin", b);
  }
  {
    wire::encode_options opt;
    opt.indices = index_coding::rice;
    opt.checksum = true;
    bytes b = encode({sparse_msg()}, opt);
    // index_bytes (section offset 24) is below 256 here.
    const auto index_bytes = static_cast<std::size_t>(b[wire::message_header_bytes + 24]);
    // Set the highest bit of the last index byte: padding if the last byte is partly used,
    // else a stray one-bit that starts an unterminated quotient.
    b[idx0 + index_bytes - 1] |= std::byte{0x80};
    fix_crc(b);
    write("decode", "damaged-rice-padding-crc.bin", b);
  }
  {
    wire::encode_options opt;
    opt.indices = index_coding::bitmap;
    bytes b = encode({sparse_msg()}, opt);
    // numel 100: 13 bytes, the last holds 4 elements and 4 padding bits.
    b[idx0 + 12] |= std::byte{0x80};
    write("decode", "damaged-bitmap-padding.bin", b);
  }
  {
    wire::encode_options opt;
    opt.indices = index_coding::delta_varint;
    bytes b = encode({sparse_msg()}, opt);
    b[idx0] |= std::byte{0x80};  // the first gap now runs into the second
    write("decode", "damaged-varint-continuation.bin", b);
  }
}

// ---- roundtrip seeds (layout documented in fuzz_roundtrip.cpp) ----

struct rt {
  std::vector<std::uint8_t> b;
  rt(std::uint8_t b0, std::uint8_t b1, std::uint8_t b2) : b{b0, b1, b2} {}
  rt& u8(std::uint64_t v) { return n(v, 1); }
  rt& u16(std::uint64_t v) { return n(v, 2); }
  rt& u32(std::uint64_t v) { return n(v, 4); }
  rt& u64(std::uint64_t v) { return n(v, 8); }
  rt& n(std::uint64_t v, int count) {
    for (int i = 0; i < count; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  rt& f32(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u32(u);
  }
  rt& f64(double d) {
    std::uint64_t u;
    std::memcpy(&u, &d, 8);
    return u8(0).u64(u);  // selector byte (even: a double follows)
  }
  bytes get() const {
    bytes out(b.size());
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
};

// byte 0
constexpr std::uint8_t t_double = 1, crc = 2;
constexpr std::uint8_t automatic = 0 << 2, raw = 2 << 2, varint = 3 << 2, rice = 4 << 2,
                       bitmap = 5 << 2, bad_index = 7 << 2;
// byte 1: value coding | dense value coding << 4 (pick_value_coding)
constexpr std::uint8_t fp32 = 0, fp64 = 1, fp16 = 2, bf16 = 3, qsgd = 9, not_a_coding = 11, scaled_sign = 12,
                       ternary = 13, one_bit = 14, reserved_coding = 15;
// byte 2: section count | defect << 3 (defect 8 and above: none)
constexpr std::uint8_t sections(int count, int defect = 8) {
  return static_cast<std::uint8_t>(count | (defect << 3));
}
// section flags
constexpr std::uint8_t dense = 1;
constexpr std::uint8_t numel_u8 = 0 << 1, numel_u16 = 1 << 1, numel_64k = 2 << 1, numel_u32 = 3 << 1;
constexpr std::uint8_t idx_density = 0 << 3, idx_gaps = 1 << 3, idx_pattern = 2 << 3, idx_sparse = 3 << 3;
constexpr std::uint8_t val_smooth = 0 << 5, val_bits = 1 << 5, val_boundary = 2 << 5,
                       val_ints = 3 << 5, val_mixed = 0x80;

void roundtrip_seeds() {
  const std::uint8_t codings[] = {raw, varint, rice, bitmap};
  const char* names[] = {"raw_u32", "delta_varint", "rice", "bitmap"};
  const std::uint8_t vcs[] = {fp32, fp64, fp16, bf16};
  const char* vnames[] = {"fp32", "fp64", "fp16", "bf16"};
  // Every forced index coding, with two value codings each, float and double, with and
  // without checksum; one medium section at density 40/256.
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int v = (i + 2 * k) % 4;
      const std::uint8_t b0 = static_cast<std::uint8_t>(codings[i] | (k ? t_double : 0) | (i & 1 ? crc : 0));
      rt r(b0, vcs[v], sections(1));
      r.u8(numel_u16 | idx_density | (k ? val_smooth : val_ints)).u8(i).u16(3000 + 100 * i).u8(40).u64(0x1234 + i);
      write("roundtrip", std::string("coding-") + names[i] + "-" + vnames[v] + (k ? "-double" : "-float") + ".bin",
            r.get());
    }
  }
  // scaled_sign for sparse and dense sections, float and double.
  for (int k = 0; k < 2; ++k) {
    rt r(static_cast<std::uint8_t>(automatic | (k ? t_double | crc : 0)), scaled_sign | (scaled_sign << 4), sections(2));
    r.u8(numel_u16 | idx_density | val_smooth).u8(0).u16(2000).u8(60).u64(77 + k);
    r.u8(dense | numel_u16 | val_ints).u8(1).u16(300).u8(0).u64(5 + k);
    write("roundtrip", std::string("scaled_sign-") + (k ? "double" : "float") + ".bin", r.get());
  }
  // ternary likewise, with a sparse section in another coding than its dense one in one seed.
  for (int k = 0; k < 2; ++k) {
    rt r(static_cast<std::uint8_t>(automatic | (k ? t_double | crc : 0)),
         static_cast<std::uint8_t>(ternary | ((k ? ternary : fp16) << 4)), sections(2));
    r.u8(numel_u16 | idx_density | val_smooth).u8(0).u16(2000).u8(60).u64(91 + k);
    r.u8(dense | numel_u16 | val_ints).u8(1).u16(300).u8(0).u64(15 + k);
    write("roundtrip", std::string("ternary-") + (k ? "double" : "float") + ".bin", r.get());
  }
  // one_bit likewise (the column counts come from the sections' draws).
  for (int k = 0; k < 2; ++k) {
    rt r(static_cast<std::uint8_t>(automatic | (k ? t_double | crc : 0)), one_bit | (one_bit << 4), sections(2));
    r.u8(numel_u16 | idx_density | val_smooth).u8(0).u16(2000).u8(60).u64(101 + k);
    r.u8(dense | numel_u16 | val_ints).u8(1).u16(300).u8(0).u64(25 + k);
    write("roundtrip", std::string("one_bit-") + (k ? "double" : "float") + ".bin", r.get());
  }
  // qsgd likewise (buckets, levels, norms and levels come from the sections' draws), and with
  // four sections for more of the draws' cases.
  for (int k = 0; k < 3; ++k) {
    rt r(static_cast<std::uint8_t>(automatic | (k == 1 ? t_double | crc : 0)), qsgd | (qsgd << 4),
         sections(k == 2 ? 4 : 2));
    r.u8(numel_u16 | idx_density | val_smooth).u8(0).u16(2000).u8(60).u64(111 + k);
    r.u8(dense | numel_u16 | val_ints).u8(1).u16(300).u8(0).u64(35 + k);
    if (k == 2) {
      r.u8(dense | numel_u8 | val_smooth).u8(2).u8(200).u8(0).u64(7);
      r.u8(numel_u16 | idx_sparse | val_mixed).u8(3).u16(9000).u8(90).u64(8);
    }
    write("roundtrip", std::string("qsgd-") + (k == 1 ? "double" : "float") + (k == 2 ? "-four" : "") + ".bin",
          r.get());
  }
  // Automatic coding, four sections: sparse, dense, very sparse, last few elements.
  {
    rt r(automatic | crc, fp16 | (bf16 << 4), sections(4));
    r.u8(numel_u16 | idx_density | val_smooth).u8(0).u16(5000).u8(200).u64(1);
    r.u8(dense | numel_u8 | val_ints).u8(1).u8(77).u8(9).u64(2);
    r.u8(numel_u16 | idx_sparse | val_mixed).u8(2).u16(60000).u8(90).u64(3);
    r.u8(numel_u8 | idx_pattern | val_smooth).u8(3).u8(250).u8(30 | 2).u64(4);
    write("roundtrip", "automatic-four-sections-crc.bin", r.get());
  }
  // A dense section of 2^16 - 1 elements.
  {
    rt r(automatic, fp32 | (fp16 << 4), sections(1));
    r.u8(dense | numel_64k | val_smooth).u8(5).u8(1).u8(12).u64(5);
    write("roundtrip", "dense-64k-fp16.bin", r.get());
  }
  // Huge tensors (numel near 2^32): the last few indices, rice and delta_varint.
  {
    rt r(rice | t_double, fp32, sections(1));
    r.u8(numel_u32 | idx_pattern | val_ints).u8(7).u32(0xfffffff0u).u8(20 | 2).u64(6);
    write("roundtrip", "huge-numel-rice.bin", r.get());
    rt v(varint, bf16, sections(1));
    v.u8(numel_u32 | idx_gaps | val_ints).u8(7).u32(0xffffffffu).u8(0).u64(7);
    v.u8(0).u8(255).u32(0x7fffffffu).u8(255).u32(0x7ffffffdu).u8(255).u32(0xffffffffu);
    write("roundtrip", "huge-numel-varint-gaps.bin", v.get());
  }
  // Rounding and range boundaries, float and double, fp16 and bf16.
  {
    rt a(automatic, fp16, sections(1));
    a.u8(numel_u16 | idx_pattern | val_boundary).u8(0).u16(400).u8(1).u64(8);
    write("roundtrip", "boundaries-fp16-float.bin", a.get());
    rt b(automatic | t_double, bf16, sections(1));
    b.u8(numel_u16 | idx_pattern | val_boundary).u8(0).u16(400).u8(1).u64(9);
    write("roundtrip", "boundaries-bf16-double.bin", b.get());
  }
  // Values from the input: ties, subnormals, the largest half, and a value that overflows fp16.
  {
    rt r(raw, fp16, sections(1));
    r.u8(numel_u8 | idx_pattern | val_bits).u8(0).u8(8).u8(1).u64(0);
    r.f32(1.00048828125f).f32(5.9604644775390625e-08f).f32(2.98023223876953125e-08f).f32(-65504.0f)
        .f32(-0.0f).f32(65519.99609375f).f32(1.00146484375f).f32(6.0975551605224609e-05f);
    write("roundtrip", "values-fp16-ties.bin", r.get());
    rt o(raw, fp16, sections(1));
    o.u8(numel_u8 | idx_pattern | val_bits).u8(0).u8(2).u8(1).u64(0).f32(1.0f).f32(65520.0f);
    write("roundtrip", "values-fp16-overflow.bin", o.get());
  }
  // Double inputs to fp16 and bf16 just above a tie. The format rounds binary64 to binary32
  // first, which lands on the tie and then goes to even (down); 65520 - 2^-20 becomes 65520 in
  // binary32, which is out of range for fp16.
  {
    rt r(raw | t_double, fp16, sections(1));
    r.u8(numel_u8 | idx_pattern | val_bits).u8(0).u8(2).u8(1).u64(0)
        .f64(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).f64(65520.0 - std::ldexp(1.0, -20));
    write("roundtrip", "double-rounding-fp16.bin", r.get());
    rt b(raw | t_double, bf16, sections(1));
    b.u8(numel_u8 | idx_pattern | val_bits).u8(0).u8(1).u8(1).u64(0)
        .f64(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
    write("roundtrip", "double-rounding-bf16.bin", b.get());
  }
  // Every other defect, in a step of two sections (the others are one bit away).
  const char* defects[] = {"swap", "duplicate", "index-too-large", "values-size",
                           "kept-above-numel", "sparse-marked-dense", "tensor-id-too-large",
                           "non-finite"};
  for (int d = 0; d < 8; d += 2) {
    rt r(static_cast<std::uint8_t>((d & 1 ? t_double : 0) | (d & 2 ? crc : 0) | codings[d % 4]),
         vcs[d % 4], sections(2, d));
    r.u8(numel_u8 | idx_density | val_ints).u8(0).u8(200).u8(50).u64(10 + d);
    r.u8(numel_u16 | idx_density | val_smooth).u8(1).u16(900).u8(30).u64(20 + d);
    write("roundtrip", std::string("defect-") + defects[d] + ".bin", r.get());
  }
  // Encoder output the first buffered Rice reader decoded wrongly: 36 positions in 138878 with a
  // last gap of 130382 (r = 11, quotient 63 at a 64-bit buffer boundary).
  {
    const std::uint32_t positions[] = {6,    19,   29,   34,   45,   60,   61,   8262, 8266,
                                       8270, 8278, 8282, 8296, 8311, 8320, 8325, 8330, 8334,
                                       8341, 8351, 8362, 8364, 8374, 8379, 8392, 8400, 8409,
                                       8412, 8424, 8437, 8445, 8451, 8466, 8477, 8483, 138866};
    rt r(rice, fp32, sections(1));
    r.u8(numel_u32 | idx_gaps | val_ints).u8(0).u32(138878).u8(0).u64(40);
    std::uint32_t next = 0;
    for (const std::uint32_t p : positions) {
      const std::uint32_t gap = p - next;
      if (gap < 255) r.u8(gap);
      else r.u8(255).u32(gap);
      next = p + 1;
    }
    r.u8(255).u32(0xffffffffu);  // ends the list
    write("roundtrip", "rice-long-run.bin", r.get());
  }
  // The last 198 of 14335 elements with forced rice: the first gap's quotient is a run of far
  // more than 64 one-bits, so a full 64-bit buffer of ones comes up (it once made the buffered
  // Rice reader pass 0 to count-trailing-zeros and decode wrong positions).
  {
    rt r(rice, fp32, sections(1));
    r.u8(numel_u16 | idx_pattern | val_smooth).u8(0).u16(14335).u8(198).u64(0);
    write("roundtrip", "rice-ones-word.bin", r.get());
  }
  // Invalid options: `dense` as the index coding of a sparse section, an unknown value coding.
  {
    rt r(bad_index | 0x20, fp32, sections(1));
    r.u8(numel_u8 | idx_density).u8(0).u8(100).u8(60).u64(30);
    write("roundtrip", "invalid-index-coding-dense.bin", r.get());
    rt v(automatic, not_a_coding, sections(1));
    v.u8(numel_u8 | idx_density).u8(0).u8(100).u8(60).u64(31);
    write("roundtrip", "invalid-value-coding.bin", v.get());
    rt w(automatic, reserved_coding, sections(1));
    w.u8(numel_u8 | idx_density).u8(0).u8(100).u8(60).u64(32);
    write("roundtrip", "reserved-value-coding.bin", w.get());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <fuzz dir, e.g. tests/fuzz>\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  decode_seeds();
  roundtrip_seeds();
  std::printf("%d files written under %s\n", written, argv[1]);
  return 0;
}
