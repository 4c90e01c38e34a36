// One DGC step and its message, defined with internal linkage so that each translation unit that
// includes it (one compiled by nvcc, one by the C++ compiler) has its own compiled copy.
#pragma once

#include <gradcomp/gradcomp.hpp>

#include <vector>

namespace {
std::vector<std::byte> dgc_message_of(const std::vector<float>& g) {
  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  gradcomp::dgc_compressor<float> c(cfg);
  c.add_tensor("w", {g.size()}, gradcomp::tensor_mode::compressed);
  if (!c.compress({gradcomp::span<const float>(g.data(), g.size())})) return {};
  std::vector<std::byte> out(c.max_message_bytes());
  const auto n = c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size()));
  if (!n) return {};
  out.resize(*n);
  return out;
}
}  // namespace
