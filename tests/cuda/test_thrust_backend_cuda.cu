// The Thrust backend's tests (tests/thrust/) on Thrust's CUDA system, the GPU's results against the
// CPU backend's, bitwise; half of them here, the other half in test_thrust_steps_cuda.cu (two
// translation units, so that nvcc compiles the Thrust and CUB code they share twice, not eight
// times):
// - the backend's operations and conformance tests, on the GPU against the CPU backend;
// - the public building blocks (threshold selection, momentum correction, masking, norms);
// - ISGQ's dithered quantiser's kernel;
// - the ordered sum's levels of launches against the definition.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_backend.cpp"
#include "thrust/test_thrust_public_api.cpp"
#include "thrust/test_thrust_isgq.cpp"
#include "thrust/test_thrust_ordered_sum.cpp"
