#!/usr/bin/env bash
# What the small-tensor rule (docs/algorithms.md, "Tensors too small to sparsify") costs in bytes:
# DGC and top-k with error feedback, 4 workers, one epoch of 100 steps (12,800 images, a quarter
# of it warm-up) on the libtorch CNN and on the demo's MLP, for each setting of --min-kept and
# --small-tensors, two runs at a time. Writes the raw results to docs/results/small_tensors/ and
# prints the table of docs/algorithms.md from them (about 10 minutes on 2 cores).
#   scripts/measure_small_tensors.sh [BUILD_DIR]     (default build/, as scripts/run_tests.sh leaves it)
#   scripts/measure_small_tensors.sh --table         the table from the committed results only
#   scripts/measure_small_tensors.sh --long [BUILD_DIR]
#       the longer probe instead: the CNN, 8 workers, 10 epochs, lr 0.05, one epoch of warm-up,
#       seed 1: dense, DGC, and DGC with floors of 4 and 8, two runs at a time (about 10 minutes),
#       into docs/results/small_tensors/long_8_workers.jsonl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/docs/results/small_tensors"
if [[ "${1:-}" == "--long" ]]; then
  build="${2:-$root/build}"
  cache="$(mktemp -d)"
  trap 'rm -rf "$cache"' EXIT
  long=(--workers 8 --epochs 10 --lr 0.05 --warmup-epochs 1 --seeds 1 --threads 1 --cache "$cache/idx")
  rm -f "$out/long_8_workers.jsonl"
  "$build/examples/libtorch/train_libtorch" --modes dense "${long[@]}" --json "$out/long_8_workers.jsonl" &
  "$build/examples/libtorch/train_libtorch" --modes dgc "${long[@]}" --json "$out/long_8_workers.jsonl"
  wait
  "$build/examples/libtorch/train_libtorch" --modes dgc --min-kept 4 "${long[@]}" --json "$out/long_8_workers.jsonl" &
  "$build/examples/libtorch/train_libtorch" --modes dgc --min-kept 8 "${long[@]}" --json "$out/long_8_workers.jsonl"
  wait
  exit 0
fi
settings=("0 floor" "4 floor" "8 floor" "16 floor" "32 floor" "8 dense" "16 dense")
if [[ "${1:-}" != "--table" ]]; then
  build="${1:-$root/build}"
  mkdir -p "$out"
  rm -f "$out"/cnn.jsonl "$out"/mlp_*.json
  cache="$(mktemp -d)"
  trap 'rm -rf "$cache"' EXIT
  for setting in "${settings[@]}"; do
    read -r min_kept action <<<"$setting"
    common=(--modes dgc,topk_ef --workers 4 --epochs 1 --train-limit 12800 --test-limit 1000 --warmup-epochs 0.25
            --min-kept "$min_kept" --small-tensors "$action")
    "$build/examples/libtorch/train_libtorch" "${common[@]}" --threads 1 --cache "$cache/idx" \
      --json "$out/cnn.jsonl" >/dev/null &
    "$build/examples/train_fashion_mnist" "${common[@]}" --jobs 1 --csv '' \
      --summary-json "$out/mlp_${min_kept}_${action}.json" >/dev/null
    wait
  done
fi
python=python3
[[ -x /usr/bin/python3 ]] && python=/usr/bin/python3
"$python" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
cnn = {}
for line in open(os.path.join(out, "cnn.jsonl")):
    r = json.loads(line)
    cnn[(r["mode"], r["min_kept"], r["small_tensors"])] = r
print("| rule | CNN DGC bytes/step | ratio | test acc. | CNN top-k EF bytes/step | MLP DGC bytes/step | ratio |"
      " test acc. | MLP top-k EF bytes/step |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for setting in ["0 floor", "4 floor", "8 floor", "16 floor", "32 floor", "8 dense", "16 dense"]:
    k, action = setting.split()
    mlp = {r["mode"]: r for r in json.load(open(os.path.join(out, f"mlp_{k}_{action}.json")))}
    c, t = cnn[("dgc", int(k), action)], cnn[("topk_ef", int(k), action)]
    rule = "none" if k == "0" else f"{action} {k}"
    print(f"| {rule} | {c['bytes_per_step_final']:,.0f} | {c['ratio_final']:.0f}x | {100 * c['final_accuracy']:.1f}% "
          f"| {t['bytes_per_step_final']:,.0f} | {mlp['dgc']['wire_bytes_per_step']:,.0f} "
          f"| {mlp['dgc']['compression_ratio']:.0f}x | {100 * mlp['dgc']['test_accuracy']:.1f}% "
          f"| {mlp['topk_ef']['wire_bytes_per_step']:,.0f} |")
PY
