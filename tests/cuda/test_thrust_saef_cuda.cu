// SAEF's tests on the Thrust backend (thrust/test_thrust_saef.cpp) on Thrust's CUDA system: the
// loop on the GPU against the CPU backend, bitwise.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_saef.cpp"
