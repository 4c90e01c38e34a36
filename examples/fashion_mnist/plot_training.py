#!/usr/bin/env python3
"""Plots the per-epoch CSV of train_fashion_mnist: test accuracy and wire bytes per step.

    plot_training.py train_fashion_mnist.csv [-o fashion_mnist.png] [--title TEXT]

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import csv
import sys
from collections import OrderedDict

REQUIRED = ("mode", "workers", "epoch", "test_accuracy", "wire_bytes_per_step")


def read_runs(path):
    """Returns {mode: [(epoch, accuracy, bytes), ...]} in file order, and the worker count."""
    runs = OrderedDict()
    workers = set()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        for row in reader:
            runs.setdefault(row["mode"], []).append(
                (int(row["epoch"]), 100.0 * float(row["test_accuracy"]),
                 float(row["wire_bytes_per_step"])))
            workers.add(row["workers"])
    if not runs:
        raise ValueError(f"{path}: no rows")
    return runs, ", ".join(sorted(workers))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="per-epoch CSV written by train_fashion_mnist")
    parser.add_argument("-o", "--output", default="fashion_mnist.png", help="PNG to write")
    parser.add_argument("--title", default=None, help="figure title")
    args = parser.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        sys.exit("plot_training.py: matplotlib is missing (apt-get install python3-matplotlib)")

    try:
        runs, workers = read_runs(args.csv)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_training.py: {e}")

    fig, (acc_ax, bytes_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    # One colour and marker per mode (the default cycle repeats after ten modes).
    colours = plt.get_cmap("tab20").colors
    markers = "osD^v<>ph*"
    for k, (mode, rows) in enumerate(runs.items()):
        epochs = [r[0] for r in rows]
        style = dict(marker=markers[k % len(markers)], color=colours[(2 * k) % 20 + (k // 10) % 2], label=mode)
        acc_ax.plot(epochs, [r[1] for r in rows], **style)
        bytes_ax.plot(epochs, [r[2] for r in rows], **style)
    for ax in (acc_ax, bytes_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    acc_ax.set_xlabel("epoch")
    acc_ax.set_ylabel("test accuracy (%)")
    acc_ax.set_title("Test accuracy")
    acc_ax.grid(True, alpha=0.3)
    acc_ax.legend()
    bytes_ax.set_yscale("log")
    bytes_ax.set_xlabel("epoch")
    bytes_ax.set_ylabel("bytes per worker per step (mean)")
    bytes_ax.set_title("Wire bytes per worker per step")
    bytes_ax.grid(True, which="both", alpha=0.3)
    bytes_ax.legend()
    fig.suptitle(args.title or f"Fashion-MNIST MLP, {workers} workers")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
