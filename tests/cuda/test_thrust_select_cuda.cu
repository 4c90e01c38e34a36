// The Thrust exact top-k's tests (thrust/test_thrust_select.cpp) on Thrust's CUDA system: the
// GPU's indices and threshold against the CPU's, bitwise.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_select.cpp"
