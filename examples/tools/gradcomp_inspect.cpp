// gradcomp-inspect: prints the headers of wire format messages and checks them.
//
//   gradcomp-inspect FILE...
//
// For each file: the message header (version, kind, sections, length, checksum), each section
// (tensor, role, numel, kept, density, codings, payload sizes, bits per kept element, whether the
// rules of the message's kind allow it; for a snapshot's state section, its words by name), then
// the verdict of `wire::validate` as a line `FILE: ok` or `FILE: <error name>`. A damaged file
// still shows what can be read of it before the error: the raw header fields, the sections that
// lie inside the buffer, the first section that breaks a rule of its kind (`section_not_allowed`,
// `duplicate_tensor`), the stored and computed checksums.
//
// Exit status: 0 when every file is a valid message, 1 when any is not (or cannot be read),
// 2 for a usage error.
#include <gradcomp/error.hpp>
#include <gradcomp/span.hpp>
#include <gradcomp/wire/crc32c.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/format.hpp>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace wire = gradcomp::wire;

// Larger files are refused rather than read: a message of a billion fp32 values is 4 GiB.
constexpr std::uint64_t kMaxFileBytes = std::uint64_t(4) << 30;

std::uint64_t load_le(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

const char* kind_name(std::uint32_t kind) {
  return kind <= wire::last_message_kind ? wire::to_string(static_cast<wire::message_kind>(kind)) : "unknown";
}

// Reads a whole file; on failure returns false with a reason in `why`.
bool read_file(const char* path, std::vector<std::byte>& out, std::string& why) {
  std::FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    why = std::strerror(errno);
    return false;
  }
  out.clear();
  std::byte chunk[1 << 16];
  bool ok = true;
  for (;;) {
    const std::size_t got = std::fread(chunk, 1, sizeof chunk, f);
    if (got > 0) {
      if (out.size() + got > kMaxFileBytes) {
        why = "larger than " + std::to_string(kMaxFileBytes >> 30) + " GiB";
        ok = false;
        break;
      }
      out.insert(out.end(), chunk, chunk + got);
    }
    if (got < sizeof chunk) {
      if (std::ferror(f)) {
        why = std::strerror(errno);
        ok = false;
      }
      break;
    }
  }
  std::fclose(f);
  return ok;
}

double per_kept_bits(std::uint64_t bytes, std::uint32_t kept) {
  return kept == 0 ? 0.0 : 8.0 * static_cast<double>(bytes) / static_cast<double>(kept);
}

void print_section(gradcomp::span<const std::byte> msg, std::uint32_t i, const wire::section_header& s) {
  std::printf("  section %" PRIu32 " at offset %" PRIu64 ", %" PRIu64 " bytes\n", i, s.offset,
              s.bytes);
  std::printf("    tensor %" PRIu32 ", role %s\n", s.tensor, wire::to_string(s.role));
  const double density =
      s.numel == 0 ? 0.0 : 100.0 * static_cast<double>(s.kept) / static_cast<double>(s.numel);
  std::printf("    numel %" PRIu32 ", kept %" PRIu32 ", density %.4f%%\n", s.numel, s.kept,
              density);
  if (s.indices == wire::index_coding::rice)
    std::printf("    indices rice (r = %u), %" PRIu64 " bytes", static_cast<unsigned>(s.index_parameter),
                s.index_bytes);
  else
    std::printf("    indices %s, %" PRIu64 " bytes", wire::to_string(s.indices), s.index_bytes);
  if (s.kept > 0) std::printf(", %.3f bits per kept element", per_kept_bits(s.index_bytes, s.kept));
  std::printf("\n");
  std::printf("    values %s, %" PRIu64 " bytes", wire::to_string(s.values), s.value_bytes);
  if (s.values == wire::value_coding::one_bit)
    std::printf(", %" PRIu32 " column%s", s.parameters.columns, s.parameters.columns == 1 ? "" : "s");
  if (s.values == wire::value_coding::qsgd || s.values == wire::value_coding::qsgd_gamma)
    std::printf(", buckets of %" PRIu32 ", %" PRIu32 " level%s", s.parameters.bucket, s.parameters.levels,
                s.parameters.levels == 1 ? "" : "s");
  if (s.values == wire::value_coding::isgq) {  // the block of a payload read_section_header sized
    const auto b = gradcomp::detail::isgq_block::read(msg.data() + s.offset + wire::section_header_bytes + s.index_bytes);
    std::printf(", factors %" PRIu32 " x %" PRIu32 " and %" PRIu32 " x %" PRIu32 " (%s), ", b.batch, b.n_in, b.batch,
                b.n_out, b.layout == 0 ? "in_out" : "out_in");
    if (b.dithered())
      std::printf("dithered, s = %u, buckets of %" PRIu32, static_cast<unsigned>(b.levels), b.bucket);
    else
      std::printf("%u levels", static_cast<unsigned>(b.levels));
  }
  std::printf("\n");
  if (s.kept > 0)
    std::printf("    section %.3f bits per kept element\n", per_kept_bits(s.bytes, s.kept));
}

// Prints the words of a state section by name (fp64 values, already checked to be finite), then
// what they mean if every word is in its range, else the error `validate` reports for them.
void print_state_words(gradcomp::span<const std::byte> msg, const wire::section_header& s,
                       const std::vector<double>& w) {
  auto line = [](const char* name, double x) {
    if (x >= 0.0 && x < 18446744073709551616.0 && std::floor(x) == x)
      std::printf("      %-20s %" PRIu64 "\n", name, static_cast<std::uint64_t>(x));
    else
      std::printf("      %-20s %.17g\n", name, x);
  };
  // The method of word 8 (docs/wire_format.md, "Snapshots"); check_state_words bounds it.
  auto method_name = [](double m) {
    const char* names[wire::snapshot_selection_count] = {"sampled_threshold", "exact_topk", "scaled_sign",
                                                         "ternary", "one_bit", "qsgd", "adacomp", "powersgd"};
    return names[static_cast<std::size_t>(m)];
  };
  const gradcomp::errc range = wire::detail::check_state_words(msg, s);
  if (w.size() == wire::snapshot_state_words) {
    namespace sw = wire::state_word;
    const char* names[wire::snapshot_state_words] = {
        "step_low", "step_high", "epoch_low", "epoch_high", "seed_low",
        "seed_high", "momentum_correction", "nesterov", "selection"};
    std::printf("    state words (current layout):\n");
    for (std::size_t j = 0; j < w.size(); ++j) line(names[j], w[j]);
    if (range == gradcomp::errc::ok) {
      auto joined = [&](std::size_t lo, std::size_t hi) {
        return static_cast<std::uint64_t>(w[lo]) | (static_cast<std::uint64_t>(w[hi]) << 32);
      };
      std::printf("      = step %" PRIu64 ", epoch %" PRIu64 ", seed %" PRIu64
                  ", momentum correction %s, nesterov %s, selection %s\n",
                  joined(sw::step_low, sw::step_high), joined(sw::epoch_low, sw::epoch_high),
                  joined(sw::seed_low, sw::seed_high),
                  w[sw::momentum_correction] == 1.0 ? "on" : "off",
                  w[sw::nesterov] == 1.0 ? "on" : "off",
                  method_name(w[sw::selection]));
    }
  } else if (w.size() == wire::snapshot_legacy_state_words) {
    namespace lw = wire::legacy_state_word;
    std::printf("    state words (legacy layout):\n");
    line("step", w[lw::step]);
    line("epoch", w[lw::epoch]);
    line("seed_low", w[lw::seed_low]);
    line("seed_high", w[lw::seed_high]);
    if (range == gradcomp::errc::ok)
      std::printf("      = step %" PRIu64 ", epoch %" PRIu64 ", seed %" PRIu64 "\n",
                  static_cast<std::uint64_t>(w[lw::step]), static_cast<std::uint64_t>(w[lw::epoch]),
                  static_cast<std::uint64_t>(w[lw::seed_low]) |
                      (static_cast<std::uint64_t>(w[lw::seed_high]) << 32));
  } else {
    return;  // not a state section's word count: the rules report it
  }
  if (range != gradcomp::errc::ok)
    std::printf("    state words: %s (a word is not an integer in its range)\n",
                gradcomp::to_string(range));
}

// Prints what can be read of one message and returns validate's verdict.
gradcomp::errc inspect(gradcomp::span<const std::byte> msg) {
  std::printf("  file bytes %zu\n", msg.size());
  if (msg.size() < wire::message_header_bytes) {
    std::printf("  (shorter than the %zu-byte message header)\n", wire::message_header_bytes);
    return wire::validate(msg).error();
  }

  // Raw header fields first, so that even a header peek refuses is shown.
  const std::byte* p = msg.data();
  const bool magic_ok = std::memcmp(p, wire::magic, 4) == 0;
  const auto version = static_cast<std::uint16_t>(load_le(p + 4, 2));
  const auto flags = static_cast<std::uint16_t>(load_le(p + 6, 2));
  const auto kind = static_cast<std::uint32_t>(load_le(p + 8, 4));
  const auto count = static_cast<std::uint32_t>(load_le(p + 12, 4));
  const std::uint64_t total = load_le(p + 16, 8);
  const bool has_checksum = (flags & wire::flag_checksum) != 0;
  std::printf("  message: magic %s, version %u, kind %s (%" PRIu32 "), sections %" PRIu32
              ", bytes %" PRIu64 ", checksum %s",
              magic_ok ? "GCWF" : "bad", static_cast<unsigned>(version), kind_name(kind), kind,
              count, total, has_checksum ? "yes" : "no");
  if ((flags & ~wire::flag_checksum) != 0)
    std::printf(", unknown flags 0x%04x", static_cast<unsigned>(flags & ~wire::flag_checksum));
  std::printf("\n");

  const auto h = wire::peek(msg);
  if (!h) std::printf("  header: %s\n", gradcomp::to_string(h.error()));
  if (!magic_ok) return wire::validate(msg).error();

  // The sections that lie inside both the buffer and the declared length.
  const std::uint64_t trailer = has_checksum ? wire::checksum_bytes : 0;
  std::uint64_t end = total >= trailer ? total - trailer : 0;
  if (end > msg.size()) end = msg.size();
  std::uint64_t offset = wire::message_header_bytes;
  std::vector<std::uint32_t> scratch_indices;
  std::vector<double> scratch_values;
  // The rules of the message's kind, section by section, while the kind is known and no rule
  // was broken yet (later sections are not judged against a broken one).
  const bool known_kind = kind <= wire::last_message_kind;
  wire::message_header rules_header;
  rules_header.kind = static_cast<wire::message_kind>(known_kind ? kind : 0);
  rules_header.section_count = count;
  wire::detail::kind_rules rules(rules_header);
  bool rules_ok = known_kind;
  bool all_read = true;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto s = wire::read_section_header(msg, offset, end);
    if (!s) {
      std::printf("  section %" PRIu32 " at offset %" PRIu64 ": %s\n", i, offset,
                  gradcomp::to_string(s.error()));
      all_read = false;
      break;
    }
    print_section(msg, i, *s);
    if (rules_ok) {
      const gradcomp::errc e = rules.section(*s);
      if (e != gradcomp::errc::ok) {
        std::printf("    rules of a %s message: %s\n", kind_name(kind), gradcomp::to_string(e));
        rules_ok = false;
      }
    }
    // The payload check of `validate`, section by section (decode_section checks before it
    // writes). Buffers are bounded by the value payload, which lies inside the file.
    scratch_values.resize(s->kept);
    scratch_indices.resize(s->indices == wire::index_coding::dense ? 0 : s->kept);
    const auto d = wire::decode_section<double>(
        msg, *s, gradcomp::span<std::uint32_t>(scratch_indices.data(), scratch_indices.size()),
        gradcomp::span<double>(scratch_values.data(), scratch_values.size()));
    std::printf("    payload %s\n", d ? "ok" : gradcomp::to_string(d.error()));
    if (d && s->role == wire::section_role::state && s->values == wire::value_coding::fp64)
      print_state_words(msg, *s, scratch_values);
    offset += s->bytes;
  }
  if (rules_ok && all_read) {
    const gradcomp::errc e = rules.finish();
    if (e != gradcomp::errc::ok)
      std::printf("  rules of a %s message, after the last section: %s\n", kind_name(kind),
                  gradcomp::to_string(e));
  }
  if (offset < end && offset >= wire::message_header_bytes && h)
    std::printf("  %" PRIu64 " bytes after the last section\n", end - offset);

  if (has_checksum && total >= wire::message_header_bytes + trailer &&
      total <= msg.size()) {
    const std::uint64_t body = total - wire::checksum_bytes;
    const auto stored = static_cast<std::uint32_t>(load_le(p + body, 4));
    const std::uint32_t actual =
        gradcomp::crc32c(gradcomp::span<const std::byte>(p, static_cast<std::size_t>(body)));
    std::printf("  crc32c: stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 " (%s)\n", stored,
                actual, stored == actual ? "match" : "MISMATCH");
  }
  return wire::validate(msg).error();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: gradcomp-inspect FILE...\n"
                 "Prints and checks gradcomp wire format messages. Exit status: 0 when every\n"
                 "file is a valid message, 1 when any is not, 2 for a usage error.\n");
    return 2;
  }
  int status = 0;
  std::vector<std::byte> buf;
  for (int a = 1; a < argc; ++a) {
    const char* path = argv[a];
    std::printf("%s\n", path);
    std::string why;
    if (!read_file(path, buf, why)) {
      std::printf("%s: cannot read: %s\n", path, why.c_str());
      status = 1;
      continue;
    }
    const gradcomp::errc e = inspect(gradcomp::span<const std::byte>(buf.data(), buf.size()));
    std::printf("%s: %s\n", path, gradcomp::to_string(e));
    if (e != gradcomp::errc::ok) status = 1;
    std::fflush(stdout);
  }
  return status;
}
