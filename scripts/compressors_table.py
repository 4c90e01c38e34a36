#!/usr/bin/env python3
"""Writes the comparison table of docs/compressors.md and its plot from measured results.

Inputs: the Fashion-MNIST demo's --summary-json output with 4 and with 8 workers, and
bench_compressors' JSON output (--benchmark_format=json, repetitions with aggregates). The table
replaces the lines between the markers <!-- table: begin --> and <!-- table: end --> of the
Markdown file; the plot is test accuracy against bytes per step, one point per mode and worker
count. scripts/compare_compressors.sh runs everything; this script only reads and writes files:

  scripts/compressors_table.py --summary4 s4.json --summary8 s8.json --bench bench.json \\
      --markdown docs/compressors.md --plot docs/images/compressors.png
"""
import argparse
import json
import re
import sys

BEGIN = "<!-- table: begin -->"
END = "<!-- table: end -->"


def load_summary(path):
    with open(path) as f:
        runs = json.load(f)
    return {r["mode"]: r for r in runs}, [r["mode"] for r in runs]


def load_bench(path):
    """Median items per second of each BM_compressor_<what>/<mode>, in millions."""
    with open(path) as f:
        data = json.load(f)
    rates = {}
    for b in data["benchmarks"]:
        name = b.get("run_name", b["name"])
        m = re.match(r"BM_compressor_(step|encode|decode)/([a-z0-9_]+)", name)
        if not m:
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        rates[(m.group(2), m.group(1))] = b["items_per_second"] / 1e6
    return rates


def accuracy_cell(runs, mode):
    r = runs.get(mode)
    if r is None:
        return "-"
    dense = runs.get("dense")
    acc = 100.0 * r["test_accuracy"]
    if dense is None or mode == "dense":
        return f"{acc:.2f}%"
    return f"{acc:.2f}% ({acc - 100.0 * dense['test_accuracy']:+.2f})"


def table(s4, order, s8, rates):
    head = ("| mode | bits per element | ratio | accuracy, 4 workers (vs dense) | accuracy, 8 workers (vs dense) "
            "| step, M elements/s | encode | decode |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in order:
        r = s4[mode]
        bits = 8.0 * r["wire_bytes_per_step"] / r["parameters"]

        def rate(what):
            v = rates.get((mode, what))
            return "-" if v is None else f"{v:,.0f}"

        lines.append(f"| `{mode}` | {bits:.3f} | {r['compression_ratio']:.1f}x | {accuracy_cell(s4, mode)} | "
                     f"{accuracy_cell(s8, mode)} | {rate('step')} | {rate('encode')} | {rate('decode')} |")
    return "\n".join(lines)


def write_markdown(path, text):
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{path}: the markers {BEGIN} and {END} are missing")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + text + "\n" + END + tail)


def plot(path, s4, s8, order):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for runs, marker, label in ((s4, "o", "4 workers"), (s8, "s", "8 workers")):
        xs = [runs[m]["wire_bytes_per_step"] for m in order if m in runs]
        ys = [100.0 * runs[m]["test_accuracy"] for m in order if m in runs]
        ax.scatter(xs, ys, marker=marker, label=label)
        if runs is s8:
            # Labels take turns at three heights: modes of equal traffic stack up.
            for i, (m, x, y) in enumerate(zip([m for m in order if m in runs], xs, ys)):
                ax.annotate(m, (x, y), textcoords="offset points", xytext=(6, (4, -11, 14)[i % 3]), fontsize=8)
    ax.set_xscale("log")
    ax.margins(x=0.12, y=0.08)
    ax.set_xlabel("bytes per worker per step (log scale)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("Fashion-MNIST MLP: accuracy against traffic, every mode of the demo")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary4", required=True)
    p.add_argument("--summary8", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--markdown", required=True)
    p.add_argument("--plot", required=True)
    a = p.parse_args()
    s4, order = load_summary(a.summary4)
    s8, _ = load_summary(a.summary8)
    rates = load_bench(a.bench)
    write_markdown(a.markdown, table(s4, order, s8, rates))
    plot(a.plot, s4, s8, order)
    print(f"wrote {a.markdown} (table) and {a.plot}")


if __name__ == "__main__":
    main()
