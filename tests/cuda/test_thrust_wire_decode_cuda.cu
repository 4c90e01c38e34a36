// wire::device_accumulator (thrust/test_thrust_wire_decode.cpp) on Thrust's CUDA system: messages
// decoded and added on the GPU against the host decoder, damaged ones included.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_wire_decode.cpp"
