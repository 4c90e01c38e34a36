#!/usr/bin/env python3
"""The Fashion-MNIST demo's tables in README.md, docs/fashion_mnist.md and docs/compressors.md,
written from the committed results in docs/results/demo/ and nothing else:

  scripts/demo_tables.py --measure BUILD_DIR   runs every result's command (the demo built in
                                               BUILD_DIR) and writes the results' files
  scripts/demo_tables.py --write               rewrites the tables between their markers
  scripts/demo_tables.py --check               exits 1 if a page's table is not what the results
                                               give (ctest docs.demo_tables)
  scripts/demo_tables.py --printed OUT --summary JSON
                                               exits 1 unless the results table the demo printed
                                               (its standard output OUT) is the one this script
                                               renders from its summary JSON (ctest
                                               demo.table_format)
  scripts/demo_tables.py --list                every result and the command that makes it

The demo's table is a function of its run's numerics only, which are the same on every x86-64
machine (fmnist::pin_eigen_blocking), so a fresh `scripts/run_demo.sh` prints the README's table
line for line. The times the demo prints after it are this machine's and are not in the tables.
"""
import argparse
import json
import os
import subprocess
import sys

import compressors_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("docs", "results", "demo")

# Every committed result: its file under RESULTS and the demo's arguments that write it
# (--summary-json and --csv are added). The first two are the README's commands.
RUNS = {
    "summary_4_workers": [],
    "summary_8_workers": ["--full"],
    "dgc_dense_biases": ["--modes", "dgc", "--dense-biases"],
    "dgc_no_clip": ["--modes", "dgc", "--clip", "0"],
    "seed_2": ["--seed", "2", "--modes", "dense,dgc"],
    "seed_2_dgc_no_clip": ["--seed", "2", "--modes", "dgc", "--clip", "0"],
}

# The ablation table of docs/fashion_mnist.md: label, result, mode.
ABLATIONS = [
    ("`dense`, seed 1 (the 4-worker table)", "summary_4_workers", "dense"),
    ("`dgc`, seed 1 (the 4-worker table)", "summary_4_workers", "dgc"),
    ("`dgc --dense-biases` (biases sent whole)", "dgc_dense_biases", "dgc"),
    ("`dgc --clip 0` (no clipping)", "dgc_no_clip", "dgc"),
    ("`dense --seed 2`", "seed_2", "dense"),
    ("`dgc --seed 2`", "seed_2", "dgc"),
    ("`dgc --seed 2 --clip 0`", "seed_2_dgc_no_clip", "dgc"),
]


def load(name):
    with open(os.path.join(ROOT, RESULTS, name + ".json")) as f:
        return json.load(f)


def demo_table(runs):
    """The results table exactly as train_fashion_mnist prints it (print_table)."""
    dense = next((r for r in runs if r["mode"] == "dense"), None)
    lines = ["%-14s %9s %9s %8s %10s %14s %10s %10s" % (
        "mode", "final acc", "best acc", "vs dense", "sparsity", "bytes/step", "ratio", "ratio run")]
    for r in runs:
        delta = "%+.2f pp" % (100.0 * (r["test_accuracy"] - dense["test_accuracy"])) if dense else "-"
        lines.append("%-14s %8.2f%% %8.2f%% %8s %9.2f%% %14.0f %9.1fx %9.1fx" % (
            r["mode"], 100.0 * r["test_accuracy"], 100.0 * r["best_test_accuracy"], delta,
            100.0 * r["final_sparsity"], r["wire_bytes_per_step"], r["compression_ratio"],
            r["compression_ratio_run"]))
    return "\n".join(lines)


def ablation_table():
    lines = ["| run (4 workers, 5 epochs) | final test accuracy | bytes/step | ratio | worker steps clipped |",
             "|---|---:|---:|---:|---:|"]
    for label, name, mode in ABLATIONS:
        r = next(r for r in load(name) if r["mode"] == mode)
        clipped = "-" if mode == "dense" else "%.0f%%" % (100.0 * r["clipped_fraction"])
        lines.append("| %s | %.2f%% | %s | %.1fx | %s |" % (
            label, 100.0 * r["test_accuracy"], f"{r['wire_bytes_per_step']:,.0f}", r["compression_ratio"], clipped))
    return "\n".join(lines)


def compressors_block():
    s4 = {r["mode"]: r for r in load("summary_4_workers")}
    s8 = {r["mode"]: r for r in load("summary_8_workers")}
    order = [r["mode"] for r in load("summary_4_workers")]
    rates = compressors_table.load_bench(os.path.join(ROOT, RESULTS, "bench_compressors.json"))
    return compressors_table.table(s4, order, s8, rates)


def fenced(text):
    return "```\n" + text + "\n```"


# Each page's blocks: (begin marker, end marker, the block's text).
def blocks():
    four = fenced(demo_table(load("summary_4_workers")))
    eight = fenced(demo_table(load("summary_8_workers")))
    marks = lambda name: (f"<!-- {name}: begin -->", f"<!-- {name}: end -->")
    return {
        "README.md": [(*marks("demo-4-workers"), four), (*marks("demo-8-workers"), eight)],
        "docs/fashion_mnist.md": [(*marks("demo-4-workers"), four), (*marks("demo-8-workers"), eight),
                                  (*marks("demo-ablations"), ablation_table())],
        "docs/compressors.md": [(compressors_table.BEGIN, compressors_table.END, compressors_block())],
    }


def replace_block(doc, begin, end, text, page):
    if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
        sys.exit(f"{page}: expected one {begin} before one {end}")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + text + "\n" + end + tail


def pages():
    """Every page as committed and as the results write it."""
    out = []
    for page, page_blocks in blocks().items():
        with open(os.path.join(ROOT, page)) as f:
            doc = f.read()
        new = doc
        for begin, end, text in page_blocks:
            new = replace_block(new, begin, end, text, page)
        out.append((page, doc, new))
    return out


def printed_table(output):
    """The results table in the demo's standard output: its header line and one line per mode."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("mode ") and "final acc" in line:
            table = [line]
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                table.append(row)
            return "\n".join(table)
    sys.exit("no results table in the demo's output")


def measure(build_dir):
    demo = os.path.abspath(os.path.join(build_dir, "examples", "train_fashion_mnist"))
    results = os.path.join(ROOT, RESULTS)
    os.makedirs(results, exist_ok=True)
    for name, args in RUNS.items():
        # Run in the results' folder with relative names: the printed output names no machine's paths.
        cmd = [demo, *args, "--summary-json", name + ".json", "--csv", name + ".csv"]
        print("+ train_fashion_mnist", " ".join(cmd[1:]), flush=True)
        with open(os.path.join(results, name + ".txt"), "w") as log:
            subprocess.run(cmd, check=True, stdout=log, cwd=results)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--measure", metavar="BUILD_DIR")
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    g.add_argument("--printed", metavar="OUT")
    g.add_argument("--list", action="store_true")
    p.add_argument("--summary", metavar="JSON")
    a = p.parse_args()
    if a.measure:
        measure(a.measure)
    elif a.list:
        for name, args in RUNS.items():
            print(f"{RESULTS}/{name}.json: train_fashion_mnist {' '.join(args)}".rstrip())
    elif a.printed:
        if not a.summary:
            sys.exit("--printed needs --summary")
        with open(a.printed) as f:
            printed = printed_table(f.read())
        with open(a.summary) as f:
            rendered = demo_table(json.load(f))
        if printed != rendered:
            sys.exit(f"the demo printed\n{printed}\nbut its summary renders as\n{rendered}")
        print(f"the demo's table is its summary's ({len(printed.splitlines()) - 1} modes)")
    else:
        stale = []
        for page, doc, new in pages():
            if doc == new:
                continue
            if a.write:
                with open(os.path.join(ROOT, page), "w") as f:
                    f.write(new)
                print(f"wrote {page}")
            else:
                stale.append(page)
        if stale:
            sys.exit(f"{', '.join(stale)}: a table differs from what {RESULTS}/ gives "
                     "(scripts/demo_tables.py --write rewrites it; a table is never edited by hand)")
        if a.check:
            print(f"README.md, docs/fashion_mnist.md and docs/compressors.md: the tables of {RESULTS}/")


if __name__ == "__main__":
    main()
