// The public building blocks on the Thrust backend (thrust/test_thrust_public_api.cpp) on
// Thrust's CUDA system: the GPU's results against the CPU backend's, bitwise.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_public_api.cpp"
