// Smoke test for a project that consumes gradcomp: compiles against the
// public umbrella header, runs a small top-k selection and checks the
// version. Exits non-zero on any mismatch.
#include <gradcomp/gradcomp.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#ifndef GRADCOMP_EXPECTED_VERSION
#error "the consumer project must define GRADCOMP_EXPECTED_VERSION"
#endif

int main() {
  int failures = 0;

  // Version: run-time value, macros and the version CMake found must agree.
  const auto v = gradcomp::version();
  if (v.major != GRADCOMP_VERSION_MAJOR || v.minor != GRADCOMP_VERSION_MINOR ||
      v.patch != GRADCOMP_VERSION_PATCH) {
    std::fprintf(stderr, "gradcomp::version() %d.%d.%d does not match the GRADCOMP_VERSION_* macros\n",
                 v.major, v.minor, v.patch);
    ++failures;
  }
  const std::string found = std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
                            std::to_string(v.patch);
  if (found != GRADCOMP_EXPECTED_VERSION) {
    std::fprintf(stderr, "gradcomp::version() is %s, CMake package version is %s\n",
                 found.c_str(), GRADCOMP_EXPECTED_VERSION);
    ++failures;
  }

  // Top-2 by magnitude: |-3| at index 1, then the tie between 2 (index 3)
  // and -2 (index 4) goes to the lower index.
  const std::vector<float> grad = {0.5f, -3.0f, 0.25f, 2.0f, -2.0f, 0.0f, 1.0f, -0.125f};
  const std::size_t k = 2;
  const std::vector<std::uint32_t> expected = {1, 3};
  std::vector<std::uint32_t> idx(k, 0xFFFFFFFFu);

  auto r = gradcomp::exact_topk(gradcomp::cpu_backend{},
                                gradcomp::span<const float>(grad.data(), grad.size()), k,
                                gradcomp::span<std::uint32_t>(idx.data(), idx.size()));
  if (!r) {
    std::fprintf(stderr, "gradcomp::exact_topk returned an error\n");
    return 1;
  }
  if (*r != k) {
    std::fprintf(stderr, "gradcomp::exact_topk selected %zu indices, expected %zu\n",
                 static_cast<std::size_t>(*r), k);
    ++failures;
  }
  if (idx != expected) {
    std::fprintf(stderr, "gradcomp::exact_topk indices:");
    for (auto i : idx) std::fprintf(stderr, " %u", static_cast<unsigned>(i));
    std::fprintf(stderr, " (expected 1 3)\n");
    ++failures;
  }

  if (failures == 0) std::printf("gradcomp %s consumer: OK\n", found.c_str());
  return failures == 0 ? 0 : 1;
}
