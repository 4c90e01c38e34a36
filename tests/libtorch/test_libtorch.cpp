// The libtorch example (examples/libtorch): gradcomp inside a torch training loop.
//   - dense mode through gradcomp reproduces torch::optim::SGD (momentum, weight decay) on the
//     workers' averaged gradients bit for bit, over 300 steps of 4 workers;
//   - no copy between torch and gradcomp: the compressors read .grad()'s own memory;
//   - bad tensors are refused with a clear error.
// The real-data cases need the Debian package dataset-fashion-mnist (skipped, exit 77, without).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cnn.hpp"
#include "torch_data.hpp"
#include "trainer.hpp"

// libtorch's headers bring glog's CHECK macros, which doctest's replace here.
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>

namespace {

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.nbytes())) == 0;
}

// The real training set (its first n images) and test set, normalised as the example does.
struct real_data {
  fmnist::dataset train, test;
};
real_data load(std::size_t n) {
  const std::string cache = (std::filesystem::temp_directory_path() / "gradcomp-libtorch-test-idx").string();
  torch_demo::prepare_idx_dir(fmnist::default_data_dir(), cache);
  real_data d{fmnist::head(torch_demo::load_split(cache, true), n), torch_demo::load_split(cache, false)};
  double mean = 0.0, stddev = 1.0;
  fmnist::pixel_stats(d.train, mean, stddev);
  fmnist::normalise(d.train, mean, stddev);
  fmnist::normalise(d.test, mean, stddev);
  return d;
}

}  // namespace

TEST_CASE("views are the tensors' own memory; other tensors are refused") {
  torch::Tensor t = torch::arange(12, torch::kFloat32).reshape({3, 4});
  const auto v = gctorch::view(t);
  CHECK(v.data() == t.data_ptr<float>());
  CHECK(v.size() == 12);
  CHECK(gctorch::shape(t) == std::vector<std::size_t>{3, 4});
  const torch::Tensor over = gctorch::tensor_over(gctorch::const_view(t), {4, 3});
  CHECK(over.data_ptr<float>() == t.data_ptr<float>());
  torch::Tensor transposed = t.t();
  CHECK_THROWS_WITH_AS(gctorch::view(transposed, "w"), "w: not contiguous", std::invalid_argument);
  torch::Tensor d = torch::zeros({4}, torch::kFloat64);
  CHECK_THROWS_WITH_AS(gctorch::view(d, "w"), "w: not float32", std::invalid_argument);
  CHECK_THROWS_WITH_AS(gctorch::const_view(torch::Tensor(), "w"), "w: undefined tensor", std::invalid_argument);
  CHECK_THROWS_AS(gctorch::tensor_over(gctorch::const_view(t), {5, 3}), std::invalid_argument);
}

TEST_CASE("the compressors read .grad() itself: autograd writes the worker's gradient tensors in place") {
  torch_demo::cnn model(3);
  auto set = model.make_gradients();
  const auto views = torch_demo::cnn::views(set);
  const auto tensors = model.tensors();
  std::vector<float> x(8 * 784);
  std::vector<std::uint8_t> y(8);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::uint8_t>(i % 10);
  for (int pass = 0; pass < 2; ++pass) {
    (void)model.gradient(x.data(), y.data(), 8, set);
    std::size_t t = 0;
    for (auto& p : model.module()->named_parameters()) {
      INFO(p.key());
      CHECK(p.value().grad().data_ptr<float>() == views[t].data());  // the same memory, no copy
      CHECK(p.value().data_ptr<float>() == tensors[t].weights.data());
      CHECK(p.value().grad().abs().sum().item<double>() > 0.0);
      ++t;
    }
  }
}

TEST_SUITE("real_data") {
TEST_CASE("the data cache: fillers started at once all succeed and leave four complete files") {
  namespace fs = std::filesystem;
  const fs::path cache = fs::temp_directory_path() / ("gradcomp-libtorch-cache-" + std::to_string(std::random_device{}()));
  fs::remove_all(cache);
  // Eight fillers released together: each inflates every file and renames it into place at the
  // same moments as the others (a shared partial file's name made all but one fail).
  std::promise<void> go;
  const std::shared_future<void> start = go.get_future().share();
  std::atomic<int> failed{0};
  std::vector<std::string> errors(8);
  std::vector<std::thread> fillers;
  for (std::size_t i = 0; i < errors.size(); ++i)
    fillers.emplace_back([&, i] {
      start.wait();
      try {
        torch_demo::prepare_idx_dir(fmnist::default_data_dir(), cache.string());
      } catch (const std::exception& e) {
        errors[i] = e.what();
        ++failed;
      }
    });
  go.set_value();
  for (auto& t : fillers) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  CHECK(failed == 0);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(cache)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte",
                                          "train-labels-idx1-ubyte"});
  // Complete: the reader takes them (the IDX headers' counts against the files' sizes).
  CHECK(torch_demo::load_split(cache.string(), true).count == 60000);
  CHECK(torch_demo::load_split(cache.string(), false).count == 10000);
  fs::remove_all(cache);
}

TEST_CASE("dense mode through gradcomp is torch::optim::SGD on the averaged gradients, bit for bit") {
  const real_data d = load(4 * 32 * 75);  // 75 steps per epoch of 4 workers x 32 images
  fmnist::train_options o;
  o.workers = 4;
  o.batch = 32;
  o.epochs = 4;  // 300 steps
  o.lr = 0.05;
  o.momentum = 0.9;
  o.test_limit = 200;
  const double weight_decay = 5e-4;

  // gradcomp: each worker's gradient from its .grad() through the dense wire format, summed and
  // averaged by the aggregator, applied by torch's SGD (momentum and weight decay in it).
  torch_demo::cnn model(7, weight_decay);
  const auto r = fmnist::train_model(model, fmnist::make_mode("dense", o, 75), d.train, d.test, o);
  REQUIRE(r.steps == 300);
  CHECK(r.ratio_run < 1.0);  // dense: fp32 values and headers

  // torch alone: the same batches, .grad() summed over the workers in rank order and divided by
  // their number (as an all-reduce would), then torch::optim::SGD.
  torch_demo::cnn ref(7);
  auto params = ref.module()->parameters();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(weight_decay));
  fmnist::batch_plan plan(d.train.count, o.workers, o.batch, o.seed);
  std::vector<float> x(o.batch * 784);
  std::vector<std::uint8_t> y(o.batch);
  std::size_t step = 0;
  for (std::size_t epoch = 0; epoch < o.epochs; ++epoch) {
    for (std::size_t w = 0; w < o.workers; ++w) plan.shuffle(w);
    for (std::size_t s = 0; s < plan.steps_per_epoch(); ++s, ++step) {
      sgd.zero_grad();
      for (std::size_t w = 0; w < o.workers; ++w) {
        plan.fill(d.train, w, s, x.data(), y.data());
        const auto images = torch::from_blob(x.data(), {static_cast<std::int64_t>(o.batch), 1, 28, 28});
        const auto labels = torch::from_blob(y.data(), {static_cast<std::int64_t>(o.batch)}, torch::kUInt8).to(torch::kLong);
        torch::nn::functional::cross_entropy(ref.module()->forward(images), labels).backward();
      }
      {
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.mutable_grad().div_(static_cast<double>(o.workers));
      }
      static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options())
          .lr(fmnist::cosine_lr(o.lr, step, r.steps));
      sgd.step();
    }
  }

  const auto mine = model.module()->named_parameters();
  const auto theirs = ref.module()->named_parameters();
  REQUIRE(mine.size() == theirs.size());
  for (std::size_t t = 0; t < mine.size(); ++t) {
    INFO(mine[t].key());
    CHECK(same_bits(mine[t].value(), theirs[t].value()));
  }
  CHECK(r.final_accuracy > 0.6);  // it trained
}
}  // TEST_SUITE("real_data")
