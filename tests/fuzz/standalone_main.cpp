// Driver that replays fuzz inputs without libFuzzer, so that any compiler (GCC included), any
// sanitizer and any build type runs the corpus as a regression test:
//
//   fuzz_decode_corpus tests/fuzz/corpus/decode [more files or directories...]
//
// Every regular file of each directory (recursively, in sorted order) and every file named on
// the command line is passed once to LLVMFuzzerTestOneInput. A violated property aborts the
// process; the name of the input being run is printed first, so the failure names its input.
// Exits with 1 when an argument cannot be read or when no input was run at all.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

bool read_file(const std::filesystem::path& path, std::vector<std::uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  bool ok = true;
  for (int a = 1; a < argc; ++a) {
    const fs::path arg(argv[a]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> found;
      for (fs::recursive_directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec)) found.push_back(it->path());
      if (ec) {
        std::fprintf(stderr, "error: cannot list %s: %s\n", argv[a], ec.message().c_str());
        ok = false;
      }
      std::sort(found.begin(), found.end());
      inputs.insert(inputs.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "error: %s is neither a file nor a directory\n", argv[a]);
      ok = false;
    }
  }

  std::size_t ran = 0;
  std::vector<std::uint8_t> data;
  for (const auto& path : inputs) {
    if (!read_file(path, data)) {
      std::fprintf(stderr, "error: cannot read %s\n", path.string().c_str());
      ok = false;
      continue;
    }
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.string().c_str(), data.size());
    // A copy of exactly the input's size, so that AddressSanitizer catches any read past it.
    std::vector<std::uint8_t> copy(data);
    (void)LLVMFuzzerTestOneInput(copy.data(), copy.size());
    ++ran;
  }

  std::printf("%zu inputs run\n", ran);
  if (ran == 0) {
    std::fprintf(stderr, "error: no inputs (usage: %s <corpus dir or file>...)\n",
                 argc > 0 ? argv[0] : "driver");
    return 1;
  }
  return ok ? 0 : 1;
}
