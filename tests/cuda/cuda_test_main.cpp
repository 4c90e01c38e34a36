// main() of the CUDA test executables: runs the doctest cases when a CUDA device is present, and
// otherwise exits with code 77, which ctest reports as skipped (SKIP_RETURN_CODE), so the tests
// build everywhere nvcc does and run wherever a GPU is.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no CUDA device (%s): the CUDA tests are skipped\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("CUDA device 0: %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
  doctest::Context context(argc, argv);
  return context.run();
}
