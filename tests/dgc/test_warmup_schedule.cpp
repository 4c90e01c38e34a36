#include <gradcomp/dgc/warmup_schedule.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using gradcomp::schedule_unit;
using gradcomp::warmup_schedule;

TEST_CASE("the paper schedule: 75%, 93.75%, 98.4375%, 99.6%, then 99.9% sparsity") {
  const warmup_schedule s = warmup_schedule::paper();
  const std::vector<double> expected = {0.25, 0.0625, 0.015625, 0.00390625, 0.001};
  REQUIRE(s.stages().size() == expected.size());
  for (std::size_t e = 0; e < expected.size(); ++e) {
    CAPTURE(e);
    CHECK(s.density(e, 0) == expected[e]);
  }
  CHECK(s.density(5, 0) == 0.001);
  CHECK(s.density(1000, 123456) == 0.001);
  CHECK(s.final_density() == 0.001);
  CHECK(s.max_density() == 0.25);
  // The default-constructed schedule is the paper's.
  CHECK(warmup_schedule().stages() == s.stages());
  // Clamped at the final density: 0.25^4 = 0.0039 < 0.01.
  CHECK(warmup_schedule::paper(0.01, 4).stages() ==
        std::vector<double>{0.25, 0.0625, 0.015625, 0.01, 0.01});
}

TEST_CASE("the coefficient schedule of the authors' code") {
  const warmup_schedule s = warmup_schedule::coefficient(0.001, 5);
  const std::vector<double> expected = {0.316228, 0.1, 0.0316228, 0.01, 0.00316228, 0.001};
  REQUIRE(s.stages().size() == expected.size());
  for (std::size_t e = 0; e < expected.size(); ++e) {
    CAPTURE(e);
    CHECK(s.density(e, 0) == doctest::Approx(expected[e]).epsilon(1e-5));
  }
  CHECK(s.final_density() == 0.001);
}

TEST_CASE("explicit lists, constant schedules and per-step stages") {
  const warmup_schedule list = warmup_schedule::from_list({0.5, 0.1, 0.02});
  CHECK(list.density(0, 0) == 0.5);
  CHECK(list.density(1, 0) == 0.1);
  CHECK(list.density(2, 0) == 0.02);
  CHECK(list.density(9, 0) == 0.02);

  const warmup_schedule per_step = warmup_schedule::paper(0.001, 4, schedule_unit::step, 100);
  CHECK(per_step.unit() == schedule_unit::step);
  CHECK(per_step.density(7, 0) == 0.25);  // the epoch does not matter
  CHECK(per_step.density(0, 99) == 0.25);
  CHECK(per_step.density(0, 100) == 0.0625);
  CHECK(per_step.density(0, 399) == 0.00390625);
  CHECK(per_step.density(0, 400) == 0.001);
  CHECK(per_step.stage(0, 250) == 2);

  CHECK(warmup_schedule::constant(0.01).density(0, 0) == 0.01);
}

TEST_CASE("invalid schedules throw") {
  CHECK_THROWS_AS(warmup_schedule::from_list({}), gradcomp::error);
  CHECK_THROWS_AS(warmup_schedule::from_list({0.5, 0.0}), gradcomp::error);
  CHECK_THROWS_AS(warmup_schedule::from_list({1.5}), gradcomp::error);
  CHECK_THROWS_AS(warmup_schedule::constant(std::nan("")), gradcomp::error);
  CHECK_THROWS_AS(warmup_schedule::paper(0.001, 4, schedule_unit::step, 0), gradcomp::error);
  CHECK_THROWS_AS(warmup_schedule::exponential(1.5, 0.001, 3), gradcomp::error);
}

TEST_CASE("kept_count is ceil(n * density) without rounding exact products up") {
  CHECK(gradcomp::kept_count(1000, 0.001) == 1);
  CHECK(gradcomp::kept_count(1000000, 0.001) == 1000);
  CHECK(gradcomp::kept_count(1001, 0.001) == 2);
  CHECK(gradcomp::kept_count(3, 0.5) == 2);
  CHECK(gradcomp::kept_count(10, 1.0) == 10);
  CHECK(gradcomp::kept_count(0, 0.5) == 0);
  CHECK(gradcomp::kept_count(7, 1e-9) == 1);
  for (std::size_t n = 1; n < 20000; n += 37) {
    for (double d : {0.001, 0.01, 0.25, 0.0625, 0.015625}) {
      const std::size_t k = gradcomp::kept_count(n, d);
      CAPTURE(n);
      CAPTURE(d);
      CHECK(static_cast<double>(k) >= static_cast<double>(n) * d - 1e-6);
      CHECK(static_cast<double>(k) < static_cast<double>(n) * d + 1.0);
    }
  }
}
