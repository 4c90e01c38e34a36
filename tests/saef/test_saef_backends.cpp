// Step-Ahead Error Feedback on a backend whose memory the host cannot touch (strict_backend): the
// worker's momentum, update and step-ahead point and the server's update and apply run as the
// backend's kernels, and the loop is bitwise the CPU backend's, with top-k and with scaled signs.
#include "backend/strict_backend.hpp"
#include "saef/saef_parity.hpp"

TEST_CASE("SAEF on a device-like backend is bitwise the CPU's loop, with top-k and with scaled signs") {
  const gradcomp_test::strict_backend b{};
  SUBCASE("top-k") {
    gradcomp_test::saef_parity::check_against_cpu(b, [](const auto& on) { return gradcomp_test::saef_parity::topk(on); });
  }
  SUBCASE("scaled sign") {
    gradcomp_test::saef_parity::check_against_cpu(
        b, [](const auto& on) { return gradcomp_test::saef_parity::scaled_sign(on); });
  }
}
