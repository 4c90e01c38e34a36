// The Fashion-MNIST demo built by nvcc: the same program, whose --backend cuda runs every
// worker's compression and the replica's sums with the portable Thrust backend on Thrust's CUDA
// system (the model's own arithmetic stays on the CPU). Eigen is compiled without its CUDA
// annotations (EIGEN_NO_CUDA): only gradcomp runs on the GPU.
#include "train_fashion_mnist.cpp"
