// Step-Ahead Error Feedback on the Thrust backend: the worker's momentum, update and step-ahead
// point and the server's update and apply as the backend's kernels, the loop bitwise the CPU
// backend's, with top-k and with scaled signs.
#include "saef/saef_parity.hpp"
#include "thrust/systems.hpp"

TEST_CASE_TEMPLATE("thrust: SAEF's loop is bitwise the CPU backend's, with top-k and with scaled signs", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  const Backend b{};
  SUBCASE("top-k") {
    gradcomp_test::saef_parity::check_against_cpu(b, [](const auto& on) { return gradcomp_test::saef_parity::topk(on); });
  }
  SUBCASE("scaled sign") {
    gradcomp_test::saef_parity::check_against_cpu(
        b, [](const auto& on) { return gradcomp_test::saef_parity::scaled_sign(on); });
  }
}
