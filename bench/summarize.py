#!/usr/bin/env python3
"""Turns the JSON output of bench_select and bench_dgc into bench/results/summary.md and charts.

    summarize.py bench_select.json bench_dgc.json -o bench/results [--cpu MODEL] [--command CMD]

Every ratio in the summary comes from counters that the benchmarks computed in the same run
(speedup_vs_nth_element, speedup_vs_exact_topk, ratio_to_stream, ratio_to_checked_stream,
speedup_move_in_pass, kept_over_k).
"""
import argparse
import json
import os
import re
import sys

NAME = re.compile(r"^BM_(?P<component>\w+)/(?P<type>\w+)/(?P<backend>\w+)/(?P<n>\d+)"
                  r"(?:/density:(?P<density>[\d.]+))?(?:/(?P<dist>\w+))?(?:/iterations:\d+)?"
                  r"(?:/threads:(?P<threads>\d+))?"
                  r"(?:/real_time)?$")


def load(paths):
    """Returns (context of the first file, list of benchmark rows with parsed names)."""
    rows, context = [], None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate" or b.get("error_occurred"):
                continue
            m = NAME.match(b["name"])
            if not m:
                continue
            row = dict(b)
            row.update(component=m["component"], backend=m["backend"], n=int(m["n"]),
                       density=float(m["density"]) if m["density"] else None,
                       dist=m["dist"] or "", threads=int(m["threads"] or 1))
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
            row["ms"] = b["real_time"] * scale
            rows.append(row)
    return context or {}, rows


def find(rows, component, n, density=None, dist=None):
    for r in rows:
        if r["component"] == component and r["n"] == n and \
                (density is None or r["density"] == density) and (dist is None or r["dist"] == dist):
            return r
    return None


def pow2(n):
    e = n.bit_length() - 1
    return f"2^{e}" if n == 1 << e else f"{n:,}"


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def selection_tables(rows, out):
    sizes = sorted({r["n"] for r in rows if r["component"] == "exact_topk"})
    out.append("| n | density | input | stream read | nth_element | partial_sort | sort | exact_topk | "
               "sampled | exact vs nth_element | sampled vs exact | exact / stream | sampled kept/k |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        for d in (0.001, 0.01):
            for dist in ("gaussian", "heavy"):
                get = lambda c: find(rows, c, n, d, dist)
                ex, sa = get("exact_topk"), get("sampled_threshold")
                if ex is None:
                    continue
                ms = lambda r: fmt(r["ms"] if r else None, ".3g")
                out.append(
                    f"| {pow2(n)} | {d:g} | {dist} | {ms(get('stream_read'))} | {ms(get('nth_element'))} | "
                    f"{ms(get('partial_sort'))} | {ms(get('sort'))} | {ms(ex)} | {ms(sa)} | "
                    f"{fmt(ex.get('speedup_vs_nth_element'), '.1f')}x | "
                    f"{fmt(sa.get('speedup_vs_exact_topk') if sa else None)}x | "
                    f"{fmt(ex.get('ratio_to_stream'))} | {fmt(sa.get('kept_over_k') if sa else None, '.3f')} |")


def step_table(rows, out):
    out.append("| n | density | DGC step | DGC ratio_to_stream | its ratio_to_checked_stream | "
               "DGC, check_finite off | its ratio_to_stream | EF step | EF ratio_to_stream | "
               "its ratio_to_checked_stream | DGC kept/k |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sorted({r["n"] for r in rows if r["component"] == "dgc_step"}):
        for d in (0.001, 0.01):
            dg, ef = find(rows, "dgc_step", n, d, ""), find(rows, "ef_step", n, d, "")
            un = find(rows, "dgc_step", n, d, "unchecked")
            if dg is None:
                continue
            ms = lambda r: f"{fmt(r['ms'], '.3g')} ms" if r else "-"
            ratio = lambda r, key="ratio_to_stream": fmt(r.get(key) if r else None)
            out.append(f"| {pow2(n)} | {d:g} | {ms(dg)} | {ratio(dg)} | {ratio(dg, 'ratio_to_checked_stream')} | "
                       f"{ms(un)} | {ratio(un)} | {ms(ef)} | {ratio(ef)} | "
                       f"{ratio(ef, 'ratio_to_checked_stream')} | {fmt(dg.get('kept_over_k'), '.3f')} |")


def charts(rows, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, dist in zip(axes, ("gaussian", "heavy")):
        for comp, label in (("nth_element", "std::nth_element"), ("partial_sort", "std::partial_sort"),
                            ("sort", "std::sort"), ("exact_topk", "gradcomp exact_topk"),
                            ("sampled_threshold", "gradcomp sampled"), ("stream_read", "one read pass")):
            pts = sorted((r["n"], r["ms"]) for r in rows
                         if r["component"] == comp and r["density"] == 0.001 and r["dist"] == dist)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label,
                        linestyle="--" if comp == "stream_read" else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (elements)")
        ax.set_ylabel("time per call (ms)")
        ax.set_title(f"Top 0.1% of n, {dist} input")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "selection.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for comp, variant, key, label in (
            ("dgc_step", "unchecked", "ratio_to_stream", "DGC step, check_finite off / stream"),
            ("dgc_step", "", "ratio_to_checked_stream", "DGC step / checked stream"),
            ("ef_step", "", "ratio_to_checked_stream", "error-feedback step / checked stream")):
        for d in (0.001, 0.01):
            pts = sorted((r["n"], r.get(key)) for r in rows
                         if r["component"] == comp and r["dist"] == variant and r["density"] == d
                         and r.get(key))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{label}, density {d:g}")
    ax.axhline(0.6, color="gray", linestyle=":", label="target 0.6")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("n (elements)")
    ax.set_ylabel("streaming reference time / step time")
    ax.set_title("Compression step against touching its bytes once")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "dgc_step.png"), dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("-o", "--outdir", default=".")
    ap.add_argument("--cpu", default="")
    ap.add_argument("--command", default="bench/run.sh")
    args = ap.parse_args()
    try:
        context, rows = load(args.json)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"summarize.py: {e}")

    out = ["# CPU benchmark results", ""]
    caches = ", ".join(f"L{c['level']} {c['type'].lower()} {c['size'] // 1024} KiB"
                       for c in context.get("caches", []))
    out.append(f"Measured with `{args.command}` on {context.get('date', '?')}: "
               f"{args.cpu or 'unknown CPU'}, {context.get('num_cpus', '?')} CPUs at "
               f"{context.get('mhz_per_cpu', '?')} MHz{f' ({caches})' if caches else ''}; one thread "
               "unless a row says otherwise; float32. "
               "Every ratio comes from the same run; absolute times on this shared machine vary from "
               "run to run by 10-30%.")
    out.append("")
    out.append("## Targets")
    out.append("")
    out.append("| target | measured | |")
    out.append("|---|---|---|")
    n24 = 1 << 24
    for dist in ("gaussian", "heavy"):
        ex = find(rows, "exact_topk", n24, 0.001, dist)
        if ex:
            s = ex.get("speedup_vs_nth_element")
            out.append(f"| exact top-k >= 10x std::nth_element (2^24, 0.1%, {dist}) | {fmt(s, '.1f')}x | "
                       f"{'met' if s and s >= 10 else 'not met'} |")
    sampled = [r for r in rows if r["component"] == "sampled_threshold" and r["n"] >= 1 << 20]
    if sampled:
        lo = min(r.get("speedup_vs_exact_topk", 0) for r in sampled)
        hi = max(r.get("speedup_vs_exact_topk", 0) for r in sampled)
        kmin = min(r.get("kept_over_k", 0) for r in sampled)
        kmax = max(r.get("kept_over_k", 0) for r in sampled)
        out.append(f"| sampled >= 3x exact top-k, kept/k in [0.9, 1] (n >= 2^20) | {lo:.2f}x to {hi:.2f}x, "
                   f"kept/k {kmin:.3f} to {kmax:.3f} | speed not met: see below |")
    # The step as the algorithm defines it moves 20 bytes per element; with the gradient check
    # on (the default) it must read the gradient once more before its first write, and its
    # reference is the stream preceded by that read.
    for n in (1 << 20, 1 << 24, 1 << 26):
        for d in (0.001, 0.01):
            un = find(rows, "dgc_step", n, d, "unchecked")
            if un and un.get("ratio_to_stream"):
                v = un["ratio_to_stream"]
                out.append(f"| fused DGC step >= 0.6 of the streaming reference, 20 B/element ({pow2(n)}, {d:g}) | "
                           f"{v:.2f} | {'met' if v >= 0.6 else 'not met'} |")
            r = find(rows, "dgc_step", n, d, "")
            if r and r.get("ratio_to_checked_stream"):
                v = r["ratio_to_checked_stream"]
                out.append(f"| the same with check_finite, against the checked stream, 24 B/element ({pow2(n)}, {d:g}) | "
                           f"{v:.2f} (against the 20-byte stream {fmt(r.get('ratio_to_stream'))}) | "
                           f"{'met' if v >= 0.6 else 'not met'} |")
    model = [r for r in rows if r["component"] == "dgc_model"]
    for r in model:
        out.append(f"| ResNet-50, 161 tensors, 99.9% (one compress call, {r['threads']} thread"
                   f"{'s' if r['threads'] > 1 else ''}) | {r['ms']:.1f} ms, "
                   f"ratio_to_stream {fmt(r.get('ratio_to_stream'))}, ratio_to_checked_stream "
                   f"{fmt(r.get('ratio_to_checked_stream'))}, wire {fmt(r.get('message_bytes'), '.0f')} B, "
                   f"compression {fmt(r.get('compression_ratio'), '.0f')}x | |")
    out.append("")
    out.append("## Selection")
    out.append("")
    out.append("Times in ms per call. `stream read` is one vectorised pass that reads every value: no "
               "selection that looks at every element can be faster.")
    out.append("")
    selection_tables(rows, out)
    out.append("")
    out.append("![selection](selection.png)")
    out.append("")
    big = [r for r in rows if r["component"] in ("exact_topk", "sampled_threshold") and r["n"] >= 1 << 20
           and r.get("ratio_to_stream")]
    if big:
        ex = [r["ratio_to_stream"] for r in big if r["component"] == "exact_topk"]
        sa = [r["ratio_to_stream"] for r in big if r["component"] == "sampled_threshold"]
        out.append("**Why the sampled selection cannot be 3x faster than the exact one.** Both read "
                   "every element once: the exact top-k takes its cut from a sample of 8,192 and filters "
                   "once; the sampled selection takes its threshold from a 1% sample and filters once "
                   "(twice when too few pass). Against one plain read pass of the same input "
                   f"(`stream read`), the exact top-k runs at {min(ex):.2f} to {max(ex):.2f} of its speed "
                   f"and the sampled selection at {min(sa):.2f} to {max(sa):.2f} (n >= 2^20): neither "
                   "can go below one pass, so a 3x gap between them would need the exact one to make "
                   "three passes, as a radix select does. What the sampled selection offers is DGC's "
                   "rule (about k entries, never more, thresholds as in the authors' code), not "
                   "speed over an exact top-k that reads its input once.")
        out.append("")
    out.append("## Compression steps")
    out.append("")
    out.append("`ratio_to_stream`: time of a loop that reads and writes exactly the bytes of the step "
               "(20 per element for DGC, 12 for error feedback), run before every iteration, over the "
               "step's time; the median over the iterations. `ratio_to_checked_stream`: the same "
               "against that loop preceded by a read of the gradient that checks it for NaN and "
               "infinity (24 and 16 bytes per element), the bytes a step that checks its gradient "
               "must move. Before each step the gradient's signs are drawn anew (untimed), so the "
               "accumulator evolves as with real, noisy gradients.")
    out.append("")
    step_table(rows, out)
    out.append("")
    out.append("![steps](dgc_step.png)")
    out.append("")
    out.append("**What separates the step from the streaming loop.** By default `compress` reads "
               "every gradient once before it changes any state (the clipping norm, or without "
               "clipping a check of the magnitude bits), so that NaN and infinity are refused with "
               "the residuals intact. That read has to end before the first write, and a gradient "
               "larger than the caches is read from memory twice: 4 more bytes per element than "
               "the 20-byte loop moves, which the checked stream moves too. A trainer that checks "
               "its gradients itself and does not clip can turn the read off "
               "(`dgc_config::check_finite`). The loops are the compiler's vectorisation, not the "
               "machine's peak: where the step's own pass runs closer to it, a ratio can pass 1. "
               "The update, the threshold test, the collection of candidates and the sample are one "
               "pass; the cut below the predicted threshold adapts per tensor. What remains beyond "
               "the streaming loop grows with the number of candidates, a little more than k: at "
               "1% density more than 1 element in 100 is appended, filtered, ranked by the top-k "
               "over the candidates and moved out of the accumulator and the momentum at scattered "
               "positions, work the streaming loop does not have; at 0.1% ten times less. With "
               "`dgc_config::threads` the tensors of a model run in parallel (ResNet-50 rows above). "
               "At 2^16 the step's three arrays (768 KiB) sit in the caches and the streaming loop "
               "runs at cache speed: there the step's instructions (key tests, appends, the "
               "threshold from the sample, the per-call setup) set its time rather than memory.")
    out.append("")
    passes = [r for r in rows if r["component"] == "dgc_pass"]
    if passes:
        out.append("## Moving candidates out during the pass")
        out.append("")
        out.append("The step's fused pass alone (`BM_dgc_pass`): moving each candidate out of the "
                   "accumulator while its block is in the L1 cache, against moving the selection out "
                   "after the pass (scattered accesses). `speedup_move_in_pass` is the second's time "
                   "over the first's, the median over iterations (> 1: moving in the pass wins); both "
                   "give bitwise the same state. The default (`cpu::candidate_move::by_size_and_density`) "
                   "moves in the pass from 16 MiB of accumulator and momentum at density <= 1/256.")
        out.append("")
        out.append("| n | density | pass, moving in it | speedup_move_in_pass | moves by default |")
        out.append("|---|---|---|---|---|")
        for r in sorted(passes, key=lambda r: (r["n"], r["density"])):
            out.append(f"| {pow2(r['n'])} | {r['density']:g} | {fmt(r['ms'], '.3g')} ms | "
                       f"{fmt(r.get('speedup_move_in_pass'))} | "
                       f"{'yes' if r.get('moves_by_default') else 'no'} |")
        out.append("")
    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "summary.md"), "w") as f:
        f.write("\n".join(out))
    try:
        charts(rows, args.outdir)
    except ImportError:
        sys.exit("summarize.py: matplotlib is missing (apt-get install python3-matplotlib)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
