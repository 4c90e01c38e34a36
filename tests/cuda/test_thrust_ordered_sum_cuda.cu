// The ordered sum's test on the Thrust backend (thrust/test_thrust_ordered_sum.cpp) on Thrust's
// CUDA system: the GPU's levels of launches against the definition, bitwise.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_ordered_sum.cpp"
