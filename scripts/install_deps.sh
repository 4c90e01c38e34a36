#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages needed to build, test and document
# gradcomp and to run its Fashion-MNIST demo. Idempotent: packages already
# installed are left alone, and apt-get runs (after an index update) only
# when something is missing.
#
# Environment:
#   GRADCOMP_SKIP_DEPS=1   do nothing (dependencies are managed elsewhere)
set -euo pipefail

if [[ "${GRADCOMP_SKIP_DEPS:-0}" == "1" ]]; then
  echo "install_deps: GRADCOMP_SKIP_DEPS=1, skipping"
  exit 0
fi

packages=(
  cmake
  # The builds' generator and compiler cache (scripts/run_tests.sh, .ci/run use them when present).
  ninja-build
  ccache
  g++
  clang
  # Clang's sanitizer and libFuzzer runtimes (libclang-rt-14-dev on Debian 12), which clang
  # only recommends: the sanitizer and fuzzing steps of .ci/run link against them.
  libclang-rt-dev
  # OpenMP for Clang (g++ brings its own): the Thrust backend's tests run on Thrust's OpenMP
  # system, in the sanitizer build too.
  libomp-dev
  make
  doctest-dev
  doxygen
  libbenchmark-dev
  zlib1g-dev
  # MPI for the exchange's tests under mpirun (gradcomp/comm/mpi.hpp, optional in the library).
  libopenmpi-dev
  openmpi-bin
  # The Fashion-MNIST demo (README's main command): Eigen for its model, the real data set, and
  # matplotlib for its plots. The library itself needs none of them.
  libeigen3-dev
  dataset-fashion-mnist
  python3-matplotlib
  # The libtorch example (examples/libtorch): libtorch's headers, libraries and CMake package.
  libtorch-dev
  # The PyTorch DDP hook (examples/pytorch): torch for Python with gloo, pybind11 and Python's
  # headers for its extension module, pytest for its tests.
  python3-torch
  python3-dev
  pybind11-dev
  python3-pytest
  # The arith.aarch64 test (tests/arith): the bitwise tests cross-compiled for aarch64 (the cross
  # compiler, its C library and binutils) and run under qemu-user.
  g++-aarch64-linux-gnu
  libc6-dev-arm64-cross
  qemu-user
  ca-certificates
  git
)

if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps: not a Debian-based system; please install the equivalents of:" >&2
  echo "  ${packages[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg -s "$pkg" 2>/dev/null || true)"
  if ! grep -q '^Status: install ok installed' <<<"$status"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all packages present"
  exit 0
fi

sudo_cmd=()
if [[ "$(id -u)" -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install_deps: missing packages (${missing[*]}) and not root, and sudo is unavailable" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi

echo "install_deps: installing ${missing[*]}"
${sudo_cmd[@]+"${sudo_cmd[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${sudo_cmd[@]+"${sudo_cmd[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
