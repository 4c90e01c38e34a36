// Copies between the host and a backend's memory for the tests that compare a backend with the
// CPU's (tests/saef/saef_parity.hpp, tests/powersgd/powersgd_parity.hpp): each waits for its copy.
#pragma once

#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/backend_memory.hpp>

namespace gradcomp_test {

// A view in B's memory, on the host.
template <class B, class T>
std::vector<T> download(const B& b, gradcomp::backend_span<const T, B> v) {
  std::vector<T> h(v.size());
  REQUIRE(gradcomp::copy_to_host(b, v, gradcomp::span<T>(h.data(), h.size())));
  gradcomp::synchronize(b);
  return h;
}

// Host values in a new buffer of B's memory.
template <class B, class T>
gradcomp::backend_buffer<T, B> upload(const B& b, const std::vector<T>& h) {
  auto d = gradcomp::allocate_buffer<T>(b, h.size());
  REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const T>(h.data(), h.size()), d.view()));
  gradcomp::synchronize(b);
  return d;
}

}  // namespace gradcomp_test
