#!/usr/bin/env python3
"""Every compressor compared on the libtorch CNN: runs train_libtorch for each worker count (every
mode, every seed), then writes the table (Markdown), the summary (JSON) and the plot.

    examples/libtorch/compare.py --binary build/examples/libtorch/train_libtorch --out docs/results
    examples/libtorch/compare.py --summarize docs/results/libtorch_runs.jsonl --out docs/results

With --docs FILE..., the table also replaces the lines between the markers
<!-- libtorch-table: begin --> and <!-- libtorch-table: end --> of each file.

Accuracy is the final test accuracy over the 10,000 test images: mean and sample standard
deviation over the seeds. Bytes per step are one worker's message at the final density (the
steady state after the warm-up of the top-k modes); the ratio is the dense fp32 gradient over
that. Times are per step (every worker of the step, all in one process): compute (forward and
backward), compress (compress and encode) and exchange (decode, sum and average on the replica;
no network: one process).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = ["dense", "dgc", "topk_ef", "ef_signsgd", "terngrad", "onebit_sgd", "qsgd", "adacomp",
         "saef_topk", "saef_sign", "powersgd_r1", "powersgd_r2", "powersgd_r4", "isgq"]


CHANCE = 10.0  # test accuracy % of a model that predicts one of the 10 classes


def run(args, runs_path):
    if os.path.exists(runs_path):
        os.remove(runs_path)
    for workers in args.workers:
        cmd = [args.binary, "--workers", str(workers), "--seeds", ",".join(map(str, args.seeds)),
               "--epochs", str(args.epochs), "--modes", ",".join(args.modes), "--json", runs_path]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.lr:
            cmd += ["--lr", str(args.lr)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


def label(run):
    """The run's variant where it names one (scripts/measure_converged.sh), else the mode, and the
    small-tensor rule where the run set one: dgc_floor8, topk_ef_dense16."""
    if run.get("variant"):
        return run["variant"]
    kept = run.get("min_kept", 0)
    return f"{run['mode']}_{run['small_tensors']}{kept}" if kept else run["mode"]


def order(name):
    """Rows in MODES order, a mode's small-tensor variants after it."""
    base = max((m for m in MODES if name == m or name.startswith(m + "_")), key=len, default=None)
    return (MODES.index(base), name != base, name) if base else (len(MODES), False, name)


def summarize(runs_paths):
    runs = [json.loads(line) for path in runs_paths for line in open(path) if line.strip()]
    groups = {}
    for r in runs:
        groups.setdefault((r["workers"], label(r)), []).append(r)
    rows = []
    for (workers, mode), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], order(kv[0][1]))):
        acc = [100.0 * r["final_accuracy"] for r in rs]
        mean = lambda key: statistics.fmean(r[key] for r in rs)
        rows.append({
            "workers": workers, "mode": mode, "seeds": len(rs), "epochs": rs[0]["epochs"],
            "steps": rs[0]["steps"], "accuracy_mean": statistics.fmean(acc),
            "accuracy_std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "accuracy_min": min(acc), "accuracy_max": max(acc),
            "bytes_per_step": mean("bytes_per_step_final"), "ratio": mean("ratio_final"),
            "bytes_per_step_run": mean("bytes_per_step"), "ratio_run": mean("ratio"),
            "compute_ms": mean("compute_ms"), "compress_ms": mean("compress_ms"),
            "exchange_ms": mean("exchange_ms"), "step_ms": mean("step_ms")})
    return rows


def write_table(rows, path, times=True):
    dense = {r["workers"]: r["accuracy_mean"] for r in rows if r["mode"] == "dense"}
    with open(path, "w") as f:
        f.write("| workers | mode | seeds | test accuracy % (mean ± sd, min–max) | vs dense | bytes/step | ratio |"
                + (" compute ms | compress ms | exchange ms |" if times else "") + "\n")
        f.write("|---:|---|---:|---|---:|---:|---:|" + ("---:|---:|---:|" if times else "") + "\n")
        for r in rows:
            gap = (f"{r['accuracy_mean'] - dense[r['workers']]:+.2f}"
                   if r["workers"] in dense and r["mode"] != "dense" else "")
            f.write(f"| {r['workers']} | {r['mode']} | {r['seeds']} | {r['accuracy_mean']:.2f} ± {r['accuracy_std']:.2f} "
                    f"({r['accuracy_min']:.2f}–{r['accuracy_max']:.2f}) | {gap} | {r['bytes_per_step']:,.0f} | "
                    f"{r['ratio']:,.1f}x |")
            if times:
                f.write(f" {r['compute_ms']:.1f} | {r['compress_ms']:.2f} | {r['exchange_ms']:.2f} |")
            f.write("\n")


def update_docs(table, paths, marker):
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    for path in paths:
        text = open(path).read()
        if begin not in text or end not in text:
            sys.exit(f"{path}: no {begin} ... {end} markers")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        open(path, "w").write(head + begin + "\n" + table + end + tail)


def plot(rows, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found: no plot (apt-get install python3-matplotlib)", file=sys.stderr)
        return
    worker_counts = sorted({r["workers"] for r in rows})
    # One colour per method, the same in every panel; its variants (another density, a small-tensor
    # rule, a learning rate) in that colour with other markers. A legend, not labels at the points,
    # which overlap where methods send about the same bytes.
    markers = "osD^vPX<>*"
    names = sorted({r["mode"] for r in rows}, key=order)
    cmap = plt.get_cmap("tab20")
    colours = [cmap(i) for i in list(range(0, 20, 2)) + list(range(1, 20, 2))]  # the dark ones first
    style = {}
    for name in names:
        base = order(name)[0]
        siblings = [n for n in names if order(n)[0] == base]
        style[name] = dict(color=colours[base % 20], marker=markers[siblings.index(name) % len(markers)])
    fig, axes = plt.subplots(1, len(worker_counts), figsize=(5.2 * len(worker_counts) + 1.6, 4.8), sharey=True,
                             squeeze=False)
    # A row with a run that did not train (at chance, 10 classes) would stretch the axis over the
    # others: the axis spans the rows that trained, and such a row is an arrow at its bottom edge.
    trained = [r for r in rows if r["accuracy_min"] > CHANCE + 5]
    low = min((r["accuracy_mean"] - r["accuracy_std"] for r in trained), default=0)
    high = max((r["accuracy_mean"] + r["accuracy_std"] for r in trained), default=100)
    pad = 0.05 * (high - low)
    handles = {}
    for ax, workers in zip(axes[0], worker_counts):
        ax.set_ylim(low - pad, high + pad)
        for r in (r for r in rows if r["workers"] == workers and r not in trained):
            ax.annotate(f"{r['mode']}: {r['accuracy_mean']:.1f} ± {r['accuracy_std']:.1f}\n(min {r['accuracy_min']:.1f})",
                        xy=(r["ratio"], low - pad), xytext=(r["ratio"], low + 0.25 * (high - low)),
                        ha="center", fontsize=7, color=style[r["mode"]]["color"],
                        arrowprops=dict(arrowstyle="->", color=style[r["mode"]]["color"]))
        for r in (r for r in rows if r["workers"] == workers and r in trained):
            h = ax.errorbar(r["ratio"], r["accuracy_mean"], yerr=r["accuracy_std"], fmt=style[r["mode"]]["marker"],
                            color=style[r["mode"]]["color"], capsize=3, markersize=6, linestyle="none")
            handles.setdefault(r["mode"], h)
            if r["mode"] == "dense":
                ax.axhline(r["accuracy_mean"], color=style["dense"]["color"], linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("compression ratio at the final density\n(dense fp32 bytes / message bytes)")
        ax.set_title(f"{workers} workers")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("final test accuracy % (mean ± sd over seeds;\ndashed: dense)")
    fig.legend([handles[n] for n in names if n in handles], [n for n in names if n in handles],
               loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"{title}: accuracy against bytes sent")
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / (5.2 * len(worker_counts) + 1.6), 1))
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", help="train_libtorch to run")
    p.add_argument("--summarize", nargs="+", help="only summarize these runs files (JSON lines)")
    p.add_argument("--out", default="docs/results")
    p.add_argument("--images", default="docs/images")
    p.add_argument("--workers", type=int, nargs="+", default=[4, 8])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=MODES)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    p.add_argument("--lr", type=float, default=0.05, help="peak learning rate (default 0.05)")
    p.add_argument("--docs", nargs="*", default=[], help="files whose table markers to update")
    p.add_argument("--marker", default="libtorch-table",
                   help="the table goes between <!-- MARKER: begin --> and <!-- MARKER: end --> (default libtorch-table)")
    p.add_argument("--plot", help="the plot's path (default IMAGES/libtorch_compressors.png)")
    p.add_argument("--title", default="libtorch CNN on Fashion-MNIST", help="the plot's title")
    p.add_argument("--no-times", action="store_true",
                   help="leave the times per step out of the table (runs that shared the cores with others)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.images, exist_ok=True)
    runs_path = os.path.join(args.out, "libtorch_runs.jsonl")
    if not args.summarize:
        if not args.binary:
            p.error("--binary or --summarize")
        run(args, runs_path)
    rows = summarize(args.summarize or [runs_path])
    with open(os.path.join(args.out, "libtorch_summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    table_path = os.path.join(args.out, "libtorch_table.md")
    write_table(rows, table_path, times=not args.no_times)
    plot(rows, args.plot or os.path.join(args.images, "libtorch_compressors.png"), args.title)
    table = open(table_path).read()
    update_docs(table, args.docs, args.marker)
    print(table)


if __name__ == "__main__":
    main()
