// A model's parameter tensors from a list file (bench/data/resnet50.txt: one tensor per line,
// its name then its dimensions; '#' starts a comment line), for the whole-model benchmarks.
#pragma once

#include <cstddef>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gradcomp_bench {

struct tensor_spec {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t numel = 1;
};

// Throws std::runtime_error when the file cannot be read.
inline std::vector<tensor_spec> load_model(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<tensor_spec> model;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    tensor_spec t;
    fields >> t.name;
    for (std::size_t d; fields >> d;) {
      t.shape.push_back(d);
      t.numel *= d;
    }
    model.push_back(t);
  }
  return model;
}

inline std::size_t model_numel(const std::vector<tensor_spec>& model) {
  std::size_t n = 0;
  for (const auto& t : model) n += t.numel;
  return n;
}

}  // namespace gradcomp_bench
