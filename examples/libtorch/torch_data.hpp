// Fashion-MNIST through torch's own MNIST reader (torch::data::datasets::MNIST), which reads the
// four IDX files uncompressed from one directory: the Debian package's gzipped files are inflated
// into a cache directory once. Part of the example, not the library.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "dataset.hpp"  // fmnist::dataset, load_error, normalise, read_file (inflates .gz)

namespace torch_demo {

/// Makes `cache` hold the four uncompressed IDX files of `data_dir` (which has them gzipped, as
/// the Debian package installs them, or plain). Throws fmnist::load_error, naming the file and
/// the package to install, when one is missing or damaged.
///
/// Safe when several processes fill the same cache at once (MPI ranks on one machine, runs
/// started together): each writes its own partial file (the name has a random part) and renames
/// it into place, which replaces atomically; so a file under its final name is always complete,
/// and a process that finds one reuses it.
inline void prepare_idx_dir(const std::string& data_dir, const std::string& cache) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(cache, ec);  // another process may create it at the same moment
  if (!fs::is_directory(cache)) throw fmnist::load_error("cannot create the cache directory " + cache);
  std::random_device entropy;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    const fs::path out = fs::path(cache) / name;
    if (fs::exists(out)) continue;
    const std::string plain = (fs::path(data_dir) / name).string();
    const std::string source = fs::exists(plain) ? plain : plain + ".gz";
    const auto bytes = fmnist::detail::read_file(source);  // inflates a gzip stream
    char tag[32];
    std::snprintf(tag, sizeof tag, ".partial.%08x%08x", entropy(), entropy());
    const fs::path partial = out.string() + tag;
    std::ofstream f(partial, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      fs::remove(partial, ec);
      throw fmnist::load_error("cannot write " + partial.string());
    }
    fs::rename(partial, out, ec);
    if (ec) {
      fs::remove(partial, ec);
      throw fmnist::load_error("cannot rename " + partial.string() + " to " + out.string());
    }
  }
}

/// One split read by torch's MNIST reader (images scaled to [0, 1]), as the trainer's data set.
inline fmnist::dataset load_split(const std::string& idx_dir, bool train) {
  using torch::data::datasets::MNIST;
  MNIST split(idx_dir, train ? MNIST::Mode::kTrain : MNIST::Mode::kTest);
  const torch::Tensor images = split.images().contiguous();
  const torch::Tensor labels = split.targets().to(torch::kUInt8).contiguous();
  fmnist::dataset d;
  d.count = static_cast<std::size_t>(images.size(0));
  d.rows = static_cast<std::size_t>(images.size(2));
  d.cols = static_cast<std::size_t>(images.size(3));
  d.pixels.assign(images.data_ptr<float>(), images.data_ptr<float>() + images.numel());
  d.labels.assign(labels.data_ptr<std::uint8_t>(), labels.data_ptr<std::uint8_t>() + labels.numel());
  return d;
}

}  // namespace torch_demo
