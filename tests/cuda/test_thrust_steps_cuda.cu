// The Thrust backend's tests (tests/thrust/) on Thrust's CUDA system, the other half (see
// test_thrust_backend_cuda.cu):
// - a method outside the library (random-k, tests/extension/) on the GPU against the CPU backend;
// - SAEF's loop on the GPU against the CPU backend, bitwise;
// - PowerSGD's steps and snapshots on the GPU against the CPU backend, bitwise;
// - the exact top-k's indices and threshold against the CPU's;
// - wire::device_accumulator: messages decoded and added on the GPU against the host decoder,
//   damaged ones included;
// - wire::device_encoder: messages encoded on the GPU against the host encoder's bytes.
#define GRADCOMP_TEST_CUDA_SYSTEM 1
#include "thrust/test_thrust_powersgd.cpp"
#include "thrust/test_thrust_randk.cpp"
#include "thrust/test_thrust_saef.cpp"
#include "thrust/test_thrust_select.cpp"
#include "thrust/test_thrust_wire_decode.cpp"
#include "thrust/test_thrust_wire_encode.cpp"
