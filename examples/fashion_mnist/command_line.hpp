// Command-line helpers of the demo's programs (train_fashion_mnist, train_libtorch): numbers and
// lists from option values, usage errors that exit with status 2. Part of the example, not the
// library.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace fmnist {

/// A program's name and usage text, for its usage errors.
struct command_line {
  const char* program;
  const char* usage;

  /// Prints "program: what" and the usage to stderr, exits with status 2.
  [[noreturn]] void error(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n%s", program, what.c_str(), usage);
    std::exit(2);
  }
  /// The finite number `s` of option `flag`.
  double number(const std::string& flag, const std::string& s) const {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(v)) error(flag + " needs a number, got '" + s + "'");
    return v;
  }
  /// The whole number `s` (>= 0) of option `flag`.
  std::size_t count(const std::string& flag, const std::string& s) const {
    const double v = number(flag, s);
    if (v < 0 || v != std::floor(v) || v > 1e12) error(flag + " needs a whole number >= 0, got '" + s + "'");
    return static_cast<std::size_t>(v);
  }
};

/// The non-empty items of a comma-separated list.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace fmnist
