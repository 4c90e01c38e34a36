// Test driver of the Fashion-MNIST demo tests. With --needs-real-data it exits with 77 (ctest:
// skipped) when the Debian package dataset-fashion-mnist is not installed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <zlib.h>

#include "dataset.hpp"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool needs_data = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--needs-real-data") == 0) needs_data = true;
    else args.push_back(argv[i]);
  }
  if (needs_data) {
    const std::string probe = std::string(fmnist::default_data_dir()) + "/t10k-labels-idx1-ubyte.gz";
    if (std::FILE* f = std::fopen(probe.c_str(), "rb")) {
      std::fclose(f);
    } else {
      std::printf("%s not found (package dataset-fashion-mnist): skipping\n", probe.c_str());
      return 77;
    }
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
