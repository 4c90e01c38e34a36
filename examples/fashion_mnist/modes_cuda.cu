// The demo's mode registry (modes.cpp) compiled by nvcc, for the demo's nvcc build
// (train_fashion_mnist_cuda.cu): its Thrust backend is then Thrust's CUDA system.
#include "modes.cpp"
