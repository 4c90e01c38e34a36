#!/usr/bin/env bash
# Rewrites the committed fingerprints of the trainers' short runs (tests/fingerprints/*.txt) from
# a build's trainers (default: build/, as scripts/run_tests.sh leaves it), and says which tables to
# re-measure in the same change. Run it when a change to the training numerics is intended:
#   scripts/update_fingerprints.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$root/build}"
GRADCOMP_UPDATE_FINGERPRINTS=1 ctest --test-dir "$build_dir" -R '^(demo\.reference_run|libtorch\.fingerprints)$' -V |
  grep -E "fingerprints (rewritten|unchanged)|changed:|re-measure:|tests? (passed|failed)" || true
cd "$root"
if git diff --quiet -- tests/fingerprints; then
  echo "the fingerprints did not change: no table to re-measure"
else
  git diff --stat -- tests/fingerprints
  echo "re-measure the tables of every trainer whose fingerprints changed (README 'Testing' names the commands)"
fi
