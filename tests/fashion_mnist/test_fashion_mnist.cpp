// Tests of the Fashion-MNIST demo (examples/fashion_mnist): the IDX/gzip loader on good and
// damaged files, the MLP's gradient against finite differences, DGC with one worker and k = n
// against dense training, and (test suite "real_data") a short run on the real data set.
#include <doctest/doctest.h>

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "mlp.hpp"
#include "trainer.hpp"

namespace {

using bytes = std::vector<std::uint8_t>;

namespace fs = std::filesystem;

// A scratch directory of this test binary, under the system's temporary directory.
std::string temp_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("gradcomp_fmnist_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

void put_be32(bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

bytes idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  bytes b;
  put_be32(b, 0x0803);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  std::mt19937 rng(seed);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i) b.push_back(static_cast<std::uint8_t>(rng()));
  return b;
}

bytes idx_labels(std::uint32_t count) {
  bytes b;
  put_be32(b, 0x0801);
  put_be32(b, count);
  for (std::uint32_t i = 0; i < count; ++i) b.push_back(static_cast<std::uint8_t>((i * 7) % 10));
  return b;
}

bytes gzip(const bytes& raw) {
  const std::string path = temp_dir() + "/tmp.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, raw.data(), static_cast<unsigned>(raw.size())) == static_cast<int>(raw.size()));
  REQUIRE(gzclose(f) == Z_OK);
  std::ifstream in(path, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write(const std::string& path, const bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

// A fresh directory holding the "train" split given as (images, labels) files, gzipped or raw.
std::string make_split(const std::string& name, const bytes& images, const bytes& labels, bool gz = true) {
  const std::string dir = temp_dir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string suffix = gz ? ".gz" : "";
  write(dir + "/train-images-idx3-ubyte" + suffix, gz ? gzip(images) : images);
  write(dir + "/train-labels-idx1-ubyte" + suffix, gz ? gzip(labels) : labels);
  return dir;
}

// The message of the load_error that loading `dir` throws ("" if it loads). Every message of a
// damaged file says how to get an intact one.
std::string load_message(const std::string& dir) {
  try {
    (void)fmnist::load_split(dir, "train");
  } catch (const fmnist::load_error& e) {
    const std::string msg = e.what();
    if (msg.find("cannot open") == std::string::npos)
      CHECK(msg.find("reinstall dataset-fashion-mnist") != std::string::npos);
    return msg;
  }
  return "";
}

}  // namespace

TEST_CASE("fashion-mnist loader: valid files, gzipped or not") {
  const bytes images = idx_images(20, 28, 28, 1), labels = idx_labels(20);
  for (bool gz : {true, false}) {
    const std::string dir = make_split(gz ? "valid_gz" : "valid_raw", images, labels, gz);
    const fmnist::dataset d = fmnist::load_split(dir, "train");
    CHECK(d.count == 20);
    CHECK(d.rows == 28);
    CHECK(d.cols == 28);
    REQUIRE(d.pixels.size() == 20 * 784);
    for (std::size_t i = 0; i < d.pixels.size(); ++i)
      REQUIRE(d.pixels[i] == static_cast<float>(images[16 + i]) / 255.0f);
    for (std::size_t i = 0; i < 20; ++i) CHECK(d.labels[i] == labels[8 + i]);
  }
}

TEST_CASE("fashion-mnist loader: missing files name the Debian package") {
  const std::string msg = load_message(temp_dir() + "/does_not_exist");
  CHECK(msg.find("cannot open") != std::string::npos);
  CHECK(msg.find("damaged") == std::string::npos);
  CHECK(msg.find("train-images-idx3-ubyte.gz") != std::string::npos);
  CHECK(msg.find("apt-get install dataset-fashion-mnist") != std::string::npos);
}

TEST_CASE("fashion-mnist loader: damaged gzip streams are refused") {
  const bytes images = idx_images(50, 28, 28, 2), labels = idx_labels(50);
  const bytes gz = gzip(images);
  SUBCASE("truncated in the middle of the stream") {
    const bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
    const std::string dir = make_split("gz_truncated", images, labels);
    write(dir + "/train-images-idx3-ubyte.gz", cut);
    const std::string msg = load_message(dir);
    CHECK(msg.find("corrupt or truncated gzip") != std::string::npos);
    CHECK(msg.find("train-images-idx3-ubyte.gz") != std::string::npos);
  }
  SUBCASE("trailer cut off (CRC and length missing)") {
    const bytes cut(gz.begin(), gz.end() - 6);
    const std::string dir = make_split("gz_no_trailer", images, labels);
    write(dir + "/train-images-idx3-ubyte.gz", cut);
    CHECK(load_message(dir).find("corrupt or truncated gzip") != std::string::npos);
  }
  SUBCASE("a flipped byte in the compressed data") {
    bytes bad = gz;
    bad[bad.size() / 2] ^= 0x5a;
    const std::string dir = make_split("gz_flipped", images, labels);
    write(dir + "/train-images-idx3-ubyte.gz", bad);
    CHECK(load_message(dir).find("corrupt or truncated gzip") != std::string::npos);
  }
}

TEST_CASE("fashion-mnist loader: inconsistent IDX contents are refused") {
  const bytes images = idx_images(30, 28, 28, 3), labels = idx_labels(30);
  SUBCASE("image data shorter than the header says") {
    const bytes cut(images.begin(), images.end() - 100);
    CHECK(load_message(make_split("idx_short", cut, labels)).find("(truncated)") != std::string::npos);
  }
  SUBCASE("trailing bytes") {
    bytes longer = images;
    longer.push_back(0);
    CHECK(load_message(make_split("idx_long", longer, labels)).find("(trailing bytes)") != std::string::npos);
  }
  SUBCASE("labels file given as images (wrong magic)") {
    CHECK(load_message(make_split("idx_magic", labels, labels)).find("not an IDX file") != std::string::npos);
  }
  SUBCASE("shorter than a header") {
    const bytes tiny(images.begin(), images.begin() + 10);
    CHECK(load_message(make_split("idx_tiny", tiny, labels)).find("too short") != std::string::npos);
  }
  SUBCASE("counts disagree") {
    CHECK(load_message(make_split("idx_counts", images, idx_labels(29))).find("29 labels") != std::string::npos);
  }
  SUBCASE("a label outside 0..9") {
    bytes bad = labels;
    bad[8 + 17] = 10;
    CHECK(load_message(make_split("idx_label", images, bad)).find("label 10 of item 17") != std::string::npos);
  }
}

namespace {

// Straightforward double-precision forward and backward pass of the same network, element by
// element, as the reference for mlp::gradient.
std::vector<std::vector<double>> reference_gradient(const std::vector<fmnist::parameter>& params,
                                                    const std::vector<std::size_t>& sizes,
                                                    const std::vector<float>& x,
                                                    const std::vector<std::uint8_t>& y, double& loss) {
  const std::size_t L = sizes.size() - 1, batch = y.size();
  std::vector<std::vector<double>> grads;
  for (const auto& p : params) grads.emplace_back(p.values.size(), 0.0);
  loss = 0.0;
  for (std::size_t j = 0; j < batch; ++j) {
    std::vector<std::vector<double>> a(L + 1);
    a[0].assign(x.begin() + static_cast<std::ptrdiff_t>(j * sizes[0]),
                x.begin() + static_cast<std::ptrdiff_t>((j + 1) * sizes[0]));
    for (std::size_t l = 0; l < L; ++l) {
      const auto& w = params[2 * l].values;
      const auto& b = params[2 * l + 1].values;
      a[l + 1].assign(sizes[l + 1], 0.0);
      for (std::size_t o = 0; o < sizes[l + 1]; ++o) {
        double z = b[o];
        for (std::size_t i = 0; i < sizes[l]; ++i) z += double(w[o * sizes[l] + i]) * a[l][i];
        a[l + 1][o] = (l + 1 < L) ? std::max(z, 0.0) : z;
      }
    }
    std::vector<double> d(a[L]);
    const double mx = *std::max_element(d.begin(), d.end());
    double sum = 0.0;
    for (double& v : d) sum += (v = std::exp(v - mx));
    for (double& v : d) v /= sum;
    loss -= std::log(d[y[j]]) / double(batch);
    d[y[j]] -= 1.0;
    for (double& v : d) v /= double(batch);
    for (std::size_t l = L; l-- > 0;) {
      const auto& w = params[2 * l].values;
      for (std::size_t o = 0; o < sizes[l + 1]; ++o) {
        grads[2 * l + 1][o] += d[o];
        for (std::size_t i = 0; i < sizes[l]; ++i) grads[2 * l][o * sizes[l] + i] += d[o] * a[l][i];
      }
      if (l == 0) break;
      std::vector<double> back(sizes[l], 0.0);
      for (std::size_t i = 0; i < sizes[l]; ++i) {
        for (std::size_t o = 0; o < sizes[l + 1]; ++o) back[i] += double(w[o * sizes[l] + i]) * d[o];
        if (!(a[l][i] > 0.0)) back[i] = 0.0;  // ReLU
      }
      d = back;
    }
  }
  return grads;
}

}  // namespace

TEST_CASE("mlp: backpropagation matches a plain double-precision reference") {
  const std::vector<std::size_t> sizes = {12, 9, 7, 5};
  fmnist::mlp net(sizes, 11);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& p : net.parameters())
    for (auto& v : p.values) v = 0.5f * normal(rng);  // non-zero biases too
  const std::size_t batch = 6;
  std::vector<float> x(batch * sizes[0]);
  for (auto& v : x) v = normal(rng);
  const std::vector<std::uint8_t> y = {0, 4, 1, 2, 4, 3};
  auto grads = net.make_gradients();
  const fmnist::eval_result r = net.gradient(x.data(), y.data(), batch, grads);

  double ref_loss = 0.0;
  const auto ref = reference_gradient(net.parameters(), sizes, x, y, ref_loss);
  CHECK(r.loss == doctest::Approx(ref_loss).epsilon(1e-5));
  std::size_t dead = 0;
  for (std::size_t t = 0; t < ref.size(); ++t)
    for (std::size_t i = 0; i < ref[t].size(); ++i) {
      INFO("tensor ", net.parameters()[t].name, " element ", i);
      REQUIRE(grads[t][i] == doctest::Approx(ref[t][i]).epsilon(1e-4).scale(1e-3));
      dead += ref[t][i] == 0.0;
    }
  CHECK(dead > 0);         // some ReLUs are off: the mask is exercised
  CHECK(dead < ref[0].size() / 2);
  CHECK(net.evaluate(x.data(), y.data(), batch).loss == doctest::Approx(r.loss).epsilon(1e-6));
}

// The demo's model (784-512-256-10, a worker's batch of 32): one gradient, as the bits of every
// tensor, under the cache sizes Eigen has at the time.
std::vector<std::vector<float>> demo_gradient() {
  const std::vector<std::size_t> sizes = {784, 512, 256, 10};
  fmnist::mlp net(sizes, 3);
  const std::size_t batch = 32;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> pixel(-0.8f, 2.0f);
  std::vector<float> x(batch * sizes[0]);
  for (auto& v : x) v = pixel(rng);
  std::vector<std::uint8_t> y(batch);
  for (std::size_t i = 0; i < batch; ++i) y[i] = static_cast<std::uint8_t>(i % 10);
  auto grads = net.make_gradients();
  net.gradient(x.data(), y.data(), batch, grads);
  return grads;
}

bool same_gradient(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  for (std::size_t t = 0; t < a.size(); ++t)
    if (a[t].size() != b[t].size() || std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0)
      return false;
  return a.size() == b.size();
}

TEST_CASE("mlp: the products give the same bits whatever caches the machine has, once pinned") {
  // Two machines as Eigen sees them: 64 KiB L1 and 2 MiB L2, and 16 KiB L1 and 512 KiB L2.
  const auto machine = [](int which) {
    if (which == 0) Eigen::setCpuCacheSizes(64 * 1024, 2 * 1024 * 1024, 32 * 1024 * 1024);
    else Eigen::setCpuCacheSizes(16 * 1024, 512 * 1024, 512 * 1024);
  };
  // Unpinned, the blocking follows the caches, and so do the gradient's bits: what the pin is for.
  machine(0);
  const auto a = demo_gradient();
  machine(1);
  const auto b = demo_gradient();
  CHECK_FALSE(same_gradient(a, b));
  // Pinned (the demo's start-up), the two machines compute the same bits.
  machine(0);
  fmnist::pin_eigen_blocking();
  const auto c = demo_gradient();
  machine(1);
  fmnist::pin_eigen_blocking();
  const auto d = demo_gradient();
  CHECK(same_gradient(c, d));
  CHECK(Eigen::l1CacheSize() == fmnist::eigen_l1_bytes);
  CHECK(Eigen::l2CacheSize() == fmnist::eigen_l2_bytes);
  CHECK(Eigen::l3CacheSize() == fmnist::eigen_l3_bytes);
}

TEST_CASE("mode names and settings") {
  fmnist::train_options o;
  o.workers = 3;
  const auto dense = fmnist::make_mode("dense", o, 100);
  CHECK(dense.dense);
  const auto dgc = fmnist::make_mode("dgc", o, 100);
  CHECK(dgc.config.momentum_correction);
  CHECK(dgc.config.momentum_masking);
  CHECK(dgc.config.clip_norm == o.clip_norm);
  CHECK(dgc.config.num_workers == 3);
  CHECK(dgc.config.schedule.final_density() == o.final_density);
  CHECK(dgc.config.schedule.density(0, 0) == 0.25);
  CHECK(dgc.config.schedule.density(0, 99) == 0.25 * 0.25 * 0.25 * 0.25);  // one epoch of warm-up
  CHECK(dgc.config.schedule.density(1, 100) == o.final_density);
  const auto ef = fmnist::make_mode("topk_ef", o, 100);
  CHECK_FALSE(ef.config.momentum_correction);
  CHECK(ef.config.selection == gradcomp::selection_method::exact_topk);
  const auto now = fmnist::make_mode("dgc_no_warmup", o, 100);
  CHECK(now.config.schedule.density(0, 0) == o.final_density);
  CHECK_THROWS_AS(fmnist::make_mode("dcg", o, 100), std::invalid_argument);
}

namespace {

// A small synthetic split: class-dependent means plus noise, so that training can make progress.
fmnist::dataset synthetic(std::size_t count, std::size_t features, std::uint32_t seed) {
  fmnist::dataset d;
  d.count = count;
  d.rows = 1;
  d.cols = features;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t i = 0; i < count; ++i) {
    const auto label = static_cast<std::uint8_t>(rng() % 10);
    d.labels.push_back(label);
    for (std::size_t f = 0; f < features; ++f)
      d.pixels.push_back(normal(rng) + ((f % 10) == label ? 1.5f : 0.0f));
  }
  return d;
}

bool same_bits(const fmnist::parameter& a, const fmnist::parameter& b) {
  return a.values.size() == b.values.size() &&
         std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("one worker with k = n and no masking trains exactly like dense momentum SGD") {
  const fmnist::dataset train = synthetic(640, 40, 1), test = synthetic(100, 40, 2);
  fmnist::train_options o;
  o.workers = 1;
  o.epochs = 2;
  o.batch = 16;
  o.layers = {40, 32, 16, 10};
  o.lr = 0.05;

  std::vector<fmnist::parameter> dense_params, sparse_params;
  const auto dense = fmnist::train(fmnist::make_mode("dense", o, 40), train, test, o, {}, &dense_params);

  // DGC's sender with every entry kept, momentum correction on and masking off: the receiver gets
  // the momentum velocity itself, as in dense momentum SGD.
  auto spec = fmnist::make_mode("dgc", o, 40);
  spec.config.schedule = gradcomp::warmup_schedule::constant(1.0);
  spec.config.momentum_masking = false;
  spec.config.clip_norm = 0.0;
  const auto sparse = fmnist::train(spec, train, test, o, {}, &sparse_params);

  REQUIRE(dense.steps == 80);
  REQUIRE(sparse.steps == 80);
  REQUIRE(sparse.compressed_tensors == 6);  // every tensor went through selection
  REQUIRE(dense_params.size() == sparse_params.size());
  for (std::size_t t = 0; t < dense_params.size(); ++t) {
    INFO("tensor ", dense_params[t].name);
    CHECK(same_bits(dense_params[t], sparse_params[t]));
  }
  for (std::size_t e = 0; e < dense.epochs.size(); ++e) {
    CHECK(dense.epochs[e].train_loss == sparse.epochs[e].train_loss);
    CHECK(dense.epochs[e].test_accuracy == sparse.epochs[e].test_accuracy);
  }
  // The test must be able to fail: with masking on the runs differ.
  spec.config.momentum_masking = true;
  std::vector<fmnist::parameter> masked;
  (void)fmnist::train(spec, train, test, o, {}, &masked);
  CHECK_FALSE(same_bits(dense_params[0], masked[0]));
}

TEST_CASE("every mode of the registry trains: the loss falls and the messages have the mode's size") {
  const fmnist::dataset train = synthetic(960, 40, 5), test = synthetic(200, 40, 6);
  fmnist::train_options o;
  o.workers = 2;
  o.epochs = 3;
  o.batch = 16;
  o.layers = {40, 32, 10};
  o.lr = 0.05;
  o.final_density = 0.05;
  o.warmup_epochs = 0.5;
  REQUIRE(fmnist::mode_names().size() == fmnist::modes().size());
  for (const auto& mode : fmnist::mode_names()) {
    INFO("mode ", mode);
    const auto r = fmnist::train(fmnist::make_mode(mode, o, 30), train, test, o);
    REQUIRE(r.steps == 90);
    CHECK(r.epochs.back().train_loss < 0.8 * r.first_loss);
    // 10% is chance; EF-SignSGD has no momentum, so at one learning rate it moves about 10x
    // less per step than the momentum modes.
    CHECK(r.final_accuracy > (mode == "ef_signsgd" ? 0.3 : 0.5));
    if (mode == "ef_signsgd" || mode == "saef_sign") {
      // One bit per element plus a scale and a header per tensor, a header and a checksum (SAEF's
      // workers send scaled signs too).
      const double expected = static_cast<double>(gradcomp::wire::message_header_bytes + gradcomp::wire::checksum_bytes +
                                                  4 * (gradcomp::wire::section_header_bytes + 4) + (1280 + 7) / 8 +
                                                  (32 + 7) / 8 + (320 + 7) / 8 + (10 + 7) / 8);
      CHECK(r.bytes_per_step_run == expected);
      CHECK(r.ratio_run == r.dense_bytes / expected);  // about 17x here: headers weigh on a model this small
    }
    if (mode == "terngrad") {
      // Two bits per element plus a scale and a header per tensor, a header and a checksum.
      const double expected = static_cast<double>(gradcomp::wire::message_header_bytes + gradcomp::wire::checksum_bytes +
                                                  4 * (gradcomp::wire::section_header_bytes + 4) + (1280 + 3) / 4 +
                                                  (32 + 3) / 4 + (320 + 3) / 4 + (10 + 3) / 4);
      CHECK(r.bytes_per_step_run == expected);
    }
    if (mode == "onebit_sgd") {
      // One bit per element, a column count and a header per tensor, two values per column (40
      // and 32 for the weights, one for each bias), a header and a checksum.
      const double expected = static_cast<double>(gradcomp::wire::message_header_bytes + gradcomp::wire::checksum_bytes +
                                                  4 * (gradcomp::wire::section_header_bytes + 4) + 8 * (40 + 1 + 32 + 1) +
                                                  (1280 + 7) / 8 + (32 + 7) / 8 + (320 + 7) / 8 + (10 + 7) / 8);
      CHECK(r.bytes_per_step_run == expected);
    }
    if (mode == "adacomp") {
      // Sparse: a few positions per bin of 500 (of 1,280, 32, 320 and 10 elements here) with a sign
      // bit each, far below the dense message.
      CHECK(r.sent_fraction > 0.0);
      CHECK(r.sent_fraction < 0.3);
      CHECK(r.bytes_per_step_run < 0.25 * r.dense_bytes);
    }
    if (mode == "isgq") {
      // Each weight matrix as its factors over the batch of 16, 3 bits per element (X 16 x 40 and
      // Delta 16 x 32, then X 16 x 32 and Delta 16 x 10), a 40-byte block and a scale per bucket of
      // 512 of each factor; the biases in fp32; a header and a checksum.
      const std::size_t h = gradcomp::wire::section_header_bytes;
      const double expected = static_cast<double>(gradcomp::wire::message_header_bytes + gradcomp::wire::checksum_bytes +
                                                  (h + 40 + 4 * (2 + 1) + 16 * (40 + 32) * 3 / 8) + (h + 4 * 32) +
                                                  (h + 40 + 4 * (1 + 1) + 16 * (32 + 10) * 3 / 8) + (h + 4 * 10));
      CHECK(r.bytes_per_step_run == expected);
    }
    if (mode == "qsgd") {
      // At most the fixed-width form: a 12-byte block, a norm per bucket of 512 and a 5-bit code
      // per element per tensor (the Elias-gamma form where it is shorter), a header and a checksum.
      const double bound = static_cast<double>(gradcomp::wire::message_header_bytes + gradcomp::wire::checksum_bytes +
                                               4 * (gradcomp::wire::section_header_bytes + 12) + 4 * (3 + 1 + 1 + 1) +
                                               (1280 * 5 + 7) / 8 + (32 * 5 + 7) / 8 + (320 * 5 + 7) / 8 +
                                               (10 * 5 + 7) / 8);
      CHECK(r.bytes_per_step_run <= bound);
      CHECK(r.bytes_per_step_run > 0.3 * bound);
    }
  }
}

TEST_CASE("terngrad workers share their scales through the exchange: every message has the largest") {
  fmnist::train_options o;
  o.workers = 3;
  const auto spec = fmnist::make_mode("terngrad", o, 10);
  const std::vector<std::vector<std::size_t>> shapes = {{20, 30}, {20}};
  fmnist::in_process_exchange net(o.workers);
  std::vector<std::unique_ptr<fmnist::worker_compressor>> workers;
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<std::vector<float>> local;
  for (std::size_t r = 0; r < o.workers; ++r) {
    workers.push_back(fmnist::make_worker(spec, o, r));
    CHECK(workers.back()->shares_scales());
    std::mt19937_64 rng(r + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f + static_cast<float>(r));  // each worker its own scale
    grads.emplace_back();
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      std::string name = "t";
      name += std::to_string(t);
      workers.back()->add_tensor(name, shapes[t], gradcomp::tensor_mode::automatic);
      std::vector<float> g(t == 0 ? 600 : 20);
      for (auto& x : g) x = normal(rng);
      grads.back().push_back(std::move(g));
    }
  }
  std::vector<std::vector<gradcomp::span<const float>>> views(o.workers);
  for (std::size_t r = 0; r < o.workers; ++r) {
    for (const auto& g : grads[r]) views[r].emplace_back(g.data(), g.size());
    const auto scales = workers[r]->local_scales(views[r]);
    REQUIRE(scales);
    local.push_back(*scales);
    net.contribute_max(r, gradcomp::span<const float>(scales->data(), scales->size()));
  }
  const auto shared = net.maximum();
  REQUIRE(shared.size() == shapes.size());
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    CHECK(shared[t] == std::max({local[0][t], local[1][t], local[2][t]}));
    CHECK(shared[t] > local[0][t]);  // worker 0's gradients are the smallest
  }
  for (std::size_t r = 0; r < o.workers; ++r) {
    REQUIRE(workers[r]->compress_shared(views[r], shared));
    REQUIRE(workers[r]->stats());
    std::vector<std::byte> msg(workers[r]->max_message_bytes({}));
    const auto n = workers[r]->encode_message({}, gradcomp::span<std::byte>(msg.data(), msg.size()));
    REQUIRE(n);
    const auto sections = gradcomp::wire::decode<float>(gradcomp::span<const std::byte>(msg.data(), *n));
    for (std::size_t t = 0; t < shapes.size(); ++t)
      for (const float v : sections[t].values) CHECK((v == 0.0f || std::fabs(v) == shared[t]));
  }
}

TEST_CASE("the same seed gives bitwise the same run") {
  const fmnist::dataset train = synthetic(960, 40, 3), test = synthetic(100, 40, 4);
  fmnist::train_options o;
  o.workers = 3;
  o.epochs = 1;
  o.batch = 8;
  o.layers = {40, 24, 10};
  o.final_density = 0.05;
  o.warmup_epochs = 0.2;
  const auto spec = fmnist::make_mode("dgc", o, 40);
  std::vector<fmnist::parameter> a, b;
  const auto ra = fmnist::train(spec, train, test, o, {}, &a);
  const auto rb = fmnist::train(spec, train, test, o, {}, &b);
  REQUIRE(ra.steps == 40);
  CHECK(ra.bytes_per_step_run == rb.bytes_per_step_run);
  for (std::size_t t = 0; t < a.size(); ++t)
    CHECK(same_bits(a[t], b[t]));
}

// ---------------------------------------------------------------------------------------------
// Real data (ctest runs this suite with --needs-real-data: skipped when the package is missing).
// ---------------------------------------------------------------------------------------------
TEST_SUITE("real_data") {
  TEST_CASE("short run on Fashion-MNIST: the loss falls and DGC's messages stay within the bound") {
    fmnist::dataset train = fmnist::head(fmnist::load_split(fmnist::default_data_dir(), "train"), 4096);
    fmnist::dataset test = fmnist::head(fmnist::load_split(fmnist::default_data_dir(), "t10k"), 2000);
    REQUIRE(train.count == 4096);
    REQUIRE(train.features() == 784);
    double mean = 0.0, stddev = 1.0;
    fmnist::pixel_stats(train, mean, stddev);
    fmnist::normalise(train, mean, stddev);
    fmnist::normalise(test, mean, stddev);

    fmnist::train_options o;
    o.workers = 2;
    o.epochs = 2;  // 64 steps per epoch
    o.warmup_epochs = 0.5;
    for (const std::string mode : {"dense", "dgc"}) {
      INFO("mode ", mode);
      const auto spec = fmnist::make_mode(mode, o, 64);
      const auto r = fmnist::train(spec, train, test, o);
      REQUIRE(r.steps == 128);
      CHECK(r.epochs.back().train_loss < 0.6 * r.first_loss);
      CHECK(r.epochs.back().train_loss < r.epochs.front().train_loss);
      CHECK(r.final_accuracy > 0.72);  // 10% is chance

      // Bound on a worker's message at the final density: the wire format's worst case for
      // k = ceil(density * n) entries of every tensor (raw u32 indices, fp32 values).
      gradcomp::dgc_compressor<float> layout(spec.config);
      fmnist::mlp net(o.layers, 1);
      for (const auto& p : net.parameters())
        layout.add_tensor(p.name, p.shape, spec.dense ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
      std::uint64_t bound = gradcomp::wire::message_overhead_bytes(o.wire);
      for (std::size_t t = 0; t < layout.num_tensors(); ++t) {
        const auto& info = layout.info(t);
        const std::size_t k = info.compressed ? gradcomp::kept_count(info.numel, r.final_density) : info.numel;
        bound += gradcomp::wire::max_section_bytes(info.numel, k, !info.compressed, o.wire).value();
      }
      CHECK(r.bytes_per_step_final > 0.0);
      CHECK(r.bytes_per_step_final <= static_cast<double>(bound));
      if (mode == "dgc") {
        CHECK(r.ratio_final >= 500.0);  // the compact index coding keeps it above 500x
        CHECK(r.sent_fraction < 0.0012);
      } else {
        CHECK(r.ratio_final < 1.0);  // dense: the whole gradient plus headers
      }
    }
  }
}
