#!/usr/bin/env bash
# The README's main command: installs what is missing, builds and runs the Fashion-MNIST demo
# (data-parallel training with and without DGC; quick comparison of four modes with 4 workers).
# Arguments go to the demo, e.g.
#   scripts/run_demo.sh --full                 # 8 workers, longer run
#   scripts/run_demo.sh --modes dense,dgc      # see --help for all options
# The demo writes its files (per-epoch CSV, plot) into $BUILD_DIR/demo.
#
# Environment:
#   DEMO_TARGET  example to build and run instead (e.g. compress_synthetic_model)
#   BUILD_DIR    build directory (default: build, next to this script's parent)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
demo_target="${DEMO_TARGET:-train_fashion_mnist}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh" >&2

# shellcheck source=scripts/build_env.sh
source "$script_dir/build_env.sh"
configure_args=()
gradcomp_generator_args configure_args "$build_dir"
gradcomp_launcher_args configure_args
cmake -S "$root" -B "$build_dir" "${configure_args[@]}" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_EXAMPLES=ON >&2
cmake --build "$build_dir" --target "$demo_target" -j"$jobs" >&2

out_dir="$build_dir/demo"
mkdir -p "$out_dir"
cd "$out_dir"
status=0
"$build_dir/examples/$demo_target" "$@" || status=$?
if [[ $status -ne 0 || "$demo_target" != train_fashion_mnist || ! -f train_fashion_mnist.csv ]]; then
  exit "$status"
fi
for arg in "$@"; do
  [[ "$arg" == --help || "$arg" == -h || "$arg" == --csv ]] && exit 0
done

# The plot of the run: test accuracy and bytes per step by epoch (needs python3-matplotlib).
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' >/dev/null 2>&1; then
    "$py" "$root/examples/fashion_mnist/plot_training.py" train_fashion_mnist.csv \
      -o "$out_dir/fashion_mnist.png"
    break
  fi
done
echo "files: $out_dir/train_fashion_mnist.csv $out_dir/fashion_mnist.png"
