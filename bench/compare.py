#!/usr/bin/env python3
"""Compares two runs of bench/run.sh (their results folders: bench_select.json, bench_dgc.json).

    bench/compare.py BEFORE_DIR AFTER_DIR [--label-before A] [--label-after B] [--flag 1.10]

Prints a markdown table: for every benchmark in both runs, the time of each and after / before,
and, where the benchmark reports one, its ratio to the streaming reference of the same run
(ratio_to_stream: the reference reads the same bytes, so this ratio moves less with the
machine's speed than the time does). The streaming references themselves (BM_stream_*) run the
same code in both: how far they move is the run-to-run noise. Rows whose time ratio passes
--flag are listed again at the end.
"""
import argparse
import json
import os
import statistics


def load(folder):
    out = {}
    for name in ("bench_select.json", "bench_dgc.json"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for b in json.load(f).get("benchmarks", []):
                if b.get("run_type") == "aggregate" or b.get("error_occurred"):
                    continue
                scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
                out[b["name"]] = (b["real_time"] * scale, b.get("ratio_to_stream"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--label-before", default="before")
    ap.add_argument("--label-after", default="after")
    ap.add_argument("--flag", type=float, default=1.10)
    a = ap.parse_args()
    before, after = load(a.before), load(a.after)
    names = [n for n in before if n in after]
    print(f"| benchmark | {a.label_before} (ms) | {a.label_after} (ms) | time ratio | "
          f"ratio to stream, {a.label_before} | {a.label_after} |")
    print("|---|---:|---:|---:|---:|---:|")
    flagged, ratios, streams = [], [], []
    for n in names:
        (tb, sb), (ta, sa) = before[n], after[n]
        r = ta / tb if tb > 0 else float("nan")
        (streams if n.startswith("BM_stream") else ratios).append(r)
        fmt = lambda x: "" if x is None else f"{x:.3f}"
        print(f"| `{n}` | {tb:.3f} | {ta:.3f} | {r:.2f} | {fmt(sb)} | {fmt(sa)} |")
        if not n.startswith("BM_stream") and (r > a.flag or r < 1 / a.flag):
            flagged.append((n, r, sb, sa))
    print()
    if ratios:
        print(f"{len(ratios)} benchmarks: time ratio median {statistics.median(ratios):.2f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f}.")
    if streams:
        print(f"{len(streams)} streaming references (the same code in both runs): time ratio "
              f"min {min(streams):.2f}, max {max(streams):.2f}.")
    print(f"\nRows beyond {a.flag:.2f} either way: {len(flagged)}")
    for n, r, sb, sa in flagged:
        extra = f" (ratio to stream {sb:.3f} -> {sa:.3f})" if sb is not None and sa is not None else ""
        print(f"- `{n}`: {r:.2f}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
