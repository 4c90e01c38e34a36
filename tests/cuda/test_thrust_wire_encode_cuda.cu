// wire::device_encoder (thrust/test_thrust_wire_encode.cpp) on Thrust's CUDA system: messages
// encoded on the GPU against the host encoder's bytes.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_wire_encode.cpp"
