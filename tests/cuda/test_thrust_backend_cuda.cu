// The Thrust backend's operations and conformance tests (thrust/test_thrust_backend.cpp) on
// Thrust's CUDA system: the GPU's results against the CPU backend's, bitwise.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_backend.cpp"
