# shellcheck shell=bash
# Sourced by scripts/run_tests.sh and .ci/run: how gradcomp's own builds are configured and timed.
#
#   gradcomp_generator_args ARRAY BUILD_DIR   appends -G Ninja where ninja is installed and
#                                             BUILD_DIR is not already set up by another generator
#   gradcomp_launcher_args ARRAY              appends ccache as the C++ and CUDA compiler launcher
#                                             where it is installed (GRADCOMP_CCACHE=0: never)
#   timed STAGE COMMAND...                    runs COMMAND; appends "<seconds>\t<STAGE>" to the
#                                             file GRADCOMP_STAGE_TIMES names, if any, and prints it

gradcomp_generator_args() {
  local -n _args=$1
  local cache="$2/CMakeCache.txt"
  if [[ -f "$cache" ]]; then
    return 0  # keep the generator the build tree was made with
  fi
  if command -v ninja >/dev/null 2>&1; then
    _args+=(-G Ninja)
  fi
}

gradcomp_launcher_args() {
  local -n _args=$1
  if [[ "${GRADCOMP_CCACHE:-1}" != "0" ]] && command -v ccache >/dev/null 2>&1; then
    _args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    # Depend mode: ccache hashes the compiler's own dependency file (-MD) instead of running the
    # preprocessor a second time on a cache miss. The base directory lets clones
    # in other folders share entries (paths under it are hashed as relative ones).
    export CCACHE_DEPEND="${CCACHE_DEPEND:-true}"
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
  fi
}

# Microseconds since the epoch (bash 5's EPOCHREALTIME; no external tool).
_gradcomp_now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$((10#$t))"; }

timed() {
  local stage=$1 t0 status=0 us
  shift
  t0=$(_gradcomp_now_us)
  "$@" || status=$?
  us=$(($(_gradcomp_now_us) - t0))
  printf -- '-- %s: %d.%d s\n' "$stage" $((us / 1000000)) $((us / 100000 % 10))
  if [[ -n "${GRADCOMP_STAGE_TIMES:-}" ]]; then
    printf '%d.%d\t%s\n' $((us / 1000000)) $((us / 100000 % 10)) "$stage" >>"$GRADCOMP_STAGE_TIMES"
  fi
  return "$status"
}
