# Sourced by the scripts that run gradcomp's programs under mpirun (run_demo_mpi.sh,
# run_scaling.sh): installs what is missing, configures $build_dir (Release, MPI on, plus the
# CMake options given) and builds the target given, then lets Open MPI run more processes than
# cores, and as root (a container's usual user).
#   mpi_build TARGET [CMAKE_OPTION...]      (needs script_dir, root, build_dir and jobs set)
mpi_build() {
  local target="$1"
  shift
  "$script_dir/install_deps.sh" >&2
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_ENABLE_MPI=ON "$@" >&2
  cmake --build "$build_dir" --target "$target" -j"$jobs" >&2
  export OMPI_MCA_rmaps_base_oversubscribe=1
  if [[ $(id -u) -eq 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}
