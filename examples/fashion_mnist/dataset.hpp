// Fashion-MNIST loader for the training demo: reads the IDX files (gzip-compressed or not) of the
// Debian package dataset-fashion-mnist and checks them completely. Part of the example, not of
// the library; needs zlib.
//
// Every problem (missing file, truncated or corrupt gzip stream, wrong IDX header, sizes that do
// not match, labels outside 0..9) throws `fmnist::load_error` with a message that names the file
// and, for missing files, the package to install.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fmnist {

/// Where the Debian package dataset-fashion-mnist installs the files.
inline const char* default_data_dir() { return "/usr/share/datasets/fashion-mnist"; }

/// A data-set file could not be used.
class load_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Images as floats (one row of rows*cols pixels per image) and labels 0..9.
struct dataset {
  std::size_t count = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<float> pixels;          ///< count * rows * cols values, normalised by `normalise`
  std::vector<std::uint8_t> labels;   ///< count labels

  std::size_t features() const noexcept { return rows * cols; }
  const float* image(std::size_t i) const noexcept { return pixels.data() + i * features(); }
};

namespace detail {

inline std::string hint() {
  return "The demo reads the real Fashion-MNIST files; on Debian or Ubuntu install them with "
         "`apt-get install dataset-fashion-mnist` (they land in " +
         std::string(default_data_dir()) + "), or pass --data DIR.";
}

// A damaged file: says what is wrong and how to get an intact copy.
[[noreturn]] inline void corrupt(const std::string& what) {
  throw load_error(what + ". The file is damaged; reinstall the package dataset-fashion-mnist "
                          "(apt-get install --reinstall dataset-fashion-mnist).");
}

// Reads a whole file; gzip streams are inflated (zlib reads other files as they are).
inline std::vector<std::uint8_t> read_file(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno;
    throw load_error("cannot open " + path + ": " +
                     (e != 0 ? std::strerror(e) : "out of memory") + ". " + hint());
  }
  std::vector<std::uint8_t> out;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      const std::string what = gzerror(f, &code);
      gzclose(f);
      corrupt(path + ": corrupt or truncated gzip data (" + what + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  // A stream cut short is reported by gzclose (Z_BUF_ERROR) on some zlib versions, not gzread.
  const int rc = gzclose(f);
  if (rc != Z_OK)
    corrupt(path + ": corrupt or truncated gzip data (zlib error " + std::to_string(rc) + ")");
  return out;
}

inline std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// Checks an IDX header of unsigned bytes with `dims` dimensions; returns the dimensions.
inline std::vector<std::size_t> parse_idx(const std::vector<std::uint8_t>& bytes, unsigned dims,
                                          const std::string& path) {
  const std::size_t header = 4 + 4 * std::size_t(dims);
  if (bytes.size() < header)
    corrupt(path + ": too short for an IDX header (" + std::to_string(bytes.size()) +
                     " bytes)");
  const std::uint32_t magic = be32(bytes.data());
  if (magic != (0x0800u | dims))
    corrupt(path + ": not an IDX file of " + std::to_string(dims) +
                     "-dimensional unsigned bytes (magic 0x" +
                     [&] {
                       char buf[16];
                       std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(magic));
                       return std::string(buf);
                     }() +
                     ")");
  std::vector<std::size_t> shape;
  std::size_t total = 1;
  for (unsigned d = 0; d < dims; ++d) {
    const std::size_t n = be32(bytes.data() + 4 + 4 * d);
    if (n != 0 && total > (std::numeric_limits<std::size_t>::max() >> 1) / n)
      corrupt(path + ": IDX dimensions overflow");
    total *= n;
    shape.push_back(n);
  }
  if (bytes.size() - header != total)
    corrupt(path + ": IDX header announces " + std::to_string(total) +
                     " bytes of data, the file holds " + std::to_string(bytes.size() - header) +
                     (bytes.size() - header < total ? " (truncated)" : " (trailing bytes)"));
  return shape;
}

}  // namespace detail

/**
 * Loads one split: `prefix` is "train" or "t10k"; the files are
 * `<dir>/<prefix>-images-idx3-ubyte[.gz]` and `<dir>/<prefix>-labels-idx1-ubyte[.gz]`
 * (the compressed name is tried first). Pixels are scaled to [0, 1].
 */
inline dataset load_split(const std::string& dir, const std::string& prefix) {
  auto pick = [&](const std::string& stem) {
    const std::string gz = dir + "/" + stem + ".gz";
    if (gzFile f = gzopen(gz.c_str(), "rb")) {
      gzclose(f);
      return gz;
    }
    const std::string raw = dir + "/" + stem;
    if (gzFile f = gzopen(raw.c_str(), "rb")) {
      gzclose(f);
      return raw;
    }
    return gz;  // neither exists: report the name the package installs
  };
  const std::string image_path = pick(prefix + "-images-idx3-ubyte");
  const std::string label_path = pick(prefix + "-labels-idx1-ubyte");

  const std::vector<std::uint8_t> images = detail::read_file(image_path);
  const std::vector<std::uint8_t> labels = detail::read_file(label_path);
  const auto ishape = detail::parse_idx(images, 3, image_path);
  const auto lshape = detail::parse_idx(labels, 1, label_path);
  if (ishape[0] != lshape[0])
    detail::corrupt(image_path + " holds " + std::to_string(ishape[0]) + " images but " +
                     label_path + " holds " + std::to_string(lshape[0]) + " labels");
  if (ishape[0] == 0 || ishape[1] == 0 || ishape[2] == 0)
    detail::corrupt(image_path + ": no images");

  dataset d;
  d.count = ishape[0];
  d.rows = ishape[1];
  d.cols = ishape[2];
  d.labels.assign(labels.begin() + 8, labels.end());
  for (std::size_t i = 0; i < d.count; ++i)
    if (d.labels[i] > 9)
      detail::corrupt(label_path + ": label " + std::to_string(d.labels[i]) + " of item " +
                       std::to_string(i) + " is not a class 0..9");
  d.pixels.resize(d.count * d.features());
  const std::uint8_t* px = images.data() + 16;
  for (std::size_t i = 0; i < d.pixels.size(); ++i) d.pixels[i] = static_cast<float>(px[i]) / 255.0f;
  return d;
}

/// Mean and standard deviation of all pixels of `d`.
inline void pixel_stats(const dataset& d, double& mean, double& stddev) {
  double s = 0.0, s2 = 0.0;
  for (float p : d.pixels) {
    s += p;
    s2 += double(p) * p;
  }
  const double n = static_cast<double>(d.pixels.size());
  mean = s / n;
  stddev = std::sqrt(std::max(s2 / n - mean * mean, 1e-12));
}

/// Standardises the pixels of `d` with the given statistics (those of the training split).
inline void normalise(dataset& d, double mean, double stddev) {
  const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / stddev);
  for (float& p : d.pixels) p = (p - m) * inv;
}

/// The first `n` items of `d` (all of them when n is 0 or larger than the split).
inline dataset head(const dataset& d, std::size_t n) {
  if (n == 0 || n >= d.count) return d;
  dataset h;
  h.count = n;
  h.rows = d.rows;
  h.cols = d.cols;
  h.pixels.assign(d.pixels.begin(), d.pixels.begin() + static_cast<std::ptrdiff_t>(n * d.features()));
  h.labels.assign(d.labels.begin(), d.labels.begin() + static_cast<std::ptrdiff_t>(n));
  return h;
}

}  // namespace fmnist
