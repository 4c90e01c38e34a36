// A method outside the library (random-k with error feedback, tests/extension/) on the Thrust
// backend through its own kernels: messages and error buffers bitwise the CPU backend's, the same
// refusal, and snapshots that restore across the backends and continue bitwise.
#include <doctest/doctest.h>

#include "backend/conformance.hpp"
#include "extension/randk_thrust_ops.hpp"
#include "thrust/systems.hpp"

TEST_CASE_TEMPLATE("thrust: a method outside the library (random-k) is bitwise the CPU backend's, snapshots too",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  auto make = [](auto backend) {
    gradcomp_test::randk_config cfg;
    cfg.density = 0.03;
    return gradcomp_test::randk_compressor<float, decltype(backend)>(cfg, backend);
  };
  gradcomp_test::check_quantiser_against_cpu(Backend{}, make, nullptr);
  auto make_model = [&](auto backend) {
    auto c = make(backend);
    for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
    return c;
  };
  auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
  gradcomp_test::check_snapshots_across_backends(Backend{}, make_model, step);
}
