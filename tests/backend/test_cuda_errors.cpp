// cuda_errc: the CUDA runtime's error codes as errc, the errors that lose the CUDA context told
// apart from those after which the device stays usable. A host header: tested without CUDA.
#include <cstring>
#include <string>

#include <doctest/doctest.h>

#include <gradcomp/thrust/cuda_errors.hpp>

TEST_CASE("cuda_errc: success is ok, a lost context is a device fault, anything else a device error") {
  using gradcomp::cuda_errc;
  using gradcomp::errc;
  CHECK(cuda_errc(0) == errc::ok);
  // Every code after which each later CUDA call fails (cudaErrorIllegalAddress, LaunchFailure,
  // Assert, ECCUncorrectable, ...), by the CUDA runtime's numbers.
  for (int sticky : {214, 220, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 721, 911}) {
    CAPTURE(sticky);
    CHECK(cuda_errc(sticky) == errc::device_fault);
  }
  // Out of memory, an old driver, no device, too many resources for a launch, an invalid value,
  // stream capture refusals, unknown codes: the device (or the host's use of it) stays usable.
  for (int recoverable : {1, 2, 35, 100, 701, 720, 900, 901, 999, -1, 12345}) {
    CAPTURE(recoverable);
    CHECK(cuda_errc(recoverable) == errc::device_error);
  }
  CHECK(std::strcmp(gradcomp::to_string(errc::device_error), "device_error") == 0);
  CHECK(std::strcmp(gradcomp::to_string(errc::device_fault), "device_fault") == 0);
  const gradcomp::error e(errc::device_fault, "an illegal memory access was encountered");
  CHECK(e.code() == errc::device_fault);
  CHECK(std::string(e.what()) == "gradcomp: device_fault: an illegal memory access was encountered");
}
