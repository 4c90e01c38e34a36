// make_sample_message: writes a small wire format message for trying out gradcomp-inspect.
//
//   make_sample_message OUT [TRUNCATED [BITFLIPPED]]
//
// OUT gets a gradient message of two tensors with a CRC-32C trailer: tensor 0 sparse (4096
// elements, 41 kept, Golomb-Rice indices, fp32 values) and tensor 1 dense (64 fp16 values).
// TRUNCATED gets the same message cut inside its second section; BITFLIPPED gets it with one bit
// of a value in the first section flipped, which only the checksum detects.
#include <gradcomp/error.hpp>
#include <gradcomp/span.hpp>
#include <gradcomp/wire/tensor_message.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>
#include <gradcomp/wire/format.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

namespace wire = gradcomp::wire;

bool write_file(const char* path, const std::vector<std::byte>& bytes) {
  std::FILE* f = std::fopen(path, "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "make_sample_message: cannot open %s for writing\n", path);
    return false;
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) std::fprintf(stderr, "make_sample_message: cannot write %s\n", path);
  return ok && closed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: make_sample_message OUT [TRUNCATED [BITFLIPPED]]\n");
    return 2;
  }

  // Tensor 0: every 100th position, shifted a little, with smooth values.
  const std::uint32_t numel0 = 4096;
  std::vector<std::uint32_t> indices;
  std::vector<float> values;
  for (std::uint32_t i = 7; i < numel0; i += 100) {
    indices.push_back(i + (i / 100) % 5);
    values.push_back(0.01f * std::sin(0.37f * static_cast<float>(indices.size())));
  }
  // Tensor 1: a small dense tensor, such as a bias, sent whole.
  std::vector<float> bias(64);
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.001f * static_cast<float>(i) - 0.03f;

  gradcomp::tensor_message<float> sections[2];
  sections[0].tensor = 0;
  sections[0].numel = numel0;
  sections[0].indices = gradcomp::as_const_span(indices);
  sections[0].values = gradcomp::as_const_span(values);
  sections[1].tensor = 1;
  sections[1].numel = bias.size();
  sections[1].dense = true;
  sections[1].values = gradcomp::as_const_span(bias);

  wire::encode_options opt;
  opt.indices = wire::index_coding::rice;
  opt.values = wire::value_coding::fp32;
  opt.dense_values = wire::value_coding::fp16;
  opt.checksum = true;
  const gradcomp::span<const gradcomp::tensor_message<float>> view(sections, 2);
  std::vector<std::byte> msg;
  try {
    msg = wire::encode(view, opt);
  } catch (const gradcomp::error& e) {
    std::fprintf(stderr, "make_sample_message: %s\n", e.what());
    return 1;
  }
  const gradcomp::span<const std::byte> bytes(msg.data(), msg.size());
  if (const auto h = wire::validate(bytes); !h) {
    std::fprintf(stderr, "make_sample_message: the message does not validate: %s\n",
                 gradcomp::to_string(h.error()));
    return 1;
  }
  if (!write_file(argv[1], msg)) return 1;

  if (argc >= 3) {
    // Cut 20 bytes before the end: inside the second section's fp16 values.
    std::vector<std::byte> cut(msg.begin(), msg.end() - 20);
    if (!write_file(argv[2], cut)) return 1;
  }
  if (argc >= 4) {
    // Flip the lowest mantissa bit of the first fp32 value of section 0: still a finite value,
    // so only the CRC-32C can tell.
    std::uint64_t first_value = 0;
    (void)wire::for_each_section(bytes, [&](const wire::section_header& s) {
      if (first_value == 0 && s.kept > 0 && s.values == wire::value_coding::fp32)
        first_value = s.offset + wire::section_header_bytes + s.index_bytes;
    });
    if (first_value == 0) {
      std::fprintf(stderr, "make_sample_message: no fp32 value to flip\n");
      return 1;
    }
    std::vector<std::byte> flipped = msg;
    flipped[static_cast<std::size_t>(first_value)] ^= std::byte{0x01};
    if (!write_file(argv[3], flipped)) return 1;
  }
  return 0;
}
