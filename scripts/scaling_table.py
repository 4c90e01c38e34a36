#!/usr/bin/env python3
"""Writes the tables of docs/scaling.md: the model of one step's exchange against the worker count
(dense ring allreduce against the allgather of compressed messages, for ResNet-50) and the
figures bench_exchange measured with 2, 4 and 8 MPI ranks on this machine.

  scripts/scaling_table.py --results bench/results/scaling --markdown docs/scaling.md

It replaces the lines between the markers <!-- model: begin --> and <!-- model: end -->, and
likewise those of `scale`, `measured`, `paths`, `powersgd` and `powersgd model` (PowerSGD's
runs: powersgd_<N>.json). scripts/run_scaling.sh runs the benchmark
and then this script.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

PARAMS = 25557032          # ResNet-50 (bench/data/resnet50.txt)
DENSE = 4.0 * PARAMS       # fp32 gradient bytes
# Bits per element of a whole message (docs/compressors.md, the Fashion-MNIST measurements), for
# the quantisers, whose size does not depend on the gradients.
QUANTISERS = [("EF-SignSGD", 1.004), ("TernGrad", 2.004), ("QSGD (Elias-gamma)", 1.374)]
LINKS = [("1 Gb/s", 125e6), ("100 Gb/s", 12.5e9)]
WORKERS = [8, 64, 256, 1024]
K = PARAMS // 1000         # DGC's 0.1%: entries per worker
COO = 8                    # bytes of one (index, value) entry in the sparse allreduces' accounting
GPUS_PER_NODE = 8


def replace_block(text, name, body):
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        sys.exit(f"scaling_table.py: markers {begin} ... {end} not found")
    return pattern.sub(lambda _: begin + "\n" + body + end, text)


def mb(x):
    return f"{x / 1e6:,.2f} MB"


def seconds(x):
    return f"{x * 1e3:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def load_runs(directory, prefix):
    """{ranks: {benchmark name: (ms, bytes_per_rank, bytes_received, payload_bytes or 0)}} from
    <prefix>_<N>.json."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, prefix + "_*.json"))):
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            ranks = int(b["ranks"])
            name = re.sub(r"/iterations:\d+/manual_time$", "", b["name"])
            runs.setdefault(ranks, {})[name] = (b["real_time"], b["bytes_per_rank"], b["bytes_received"],
                                                b.get("payload_bytes", 0.0))
    return runs


def model(dgc_bytes):
    lines = ["| workers | dense allreduce, per worker | DGC 0.1% allgather, per worker |"
             + "".join(f" dense, {l} | DGC, {l} |" for l, _ in LINKS),
             "|---:|---:|---:|" + "---:|---:|" * len(LINKS)]
    for n in WORKERS:
        dense = 2.0 * (n - 1) / n * DENSE
        sparse = (n - 1) * dgc_bytes
        row = f"| {n} | {mb(dense)} | {mb(sparse)} |"
        for _, bw in LINKS:
            row += f" {seconds(dense / bw)} | {seconds(sparse / bw)} |"
        lines.append(row)
    lines.append("")
    lines.append("| message | bytes per worker | break-even workers (allgather = allreduce) |")
    lines.append("|---|---:|---:|")
    for name, size in [("DGC 0.1%", dgc_bytes)] + [(q, DENSE * bits / 32) for q, bits in QUANTISERS]:
        lines.append(f"| {name} | {mb(size)} | {2 * DENSE / size:,.0f} |")
    return "\n".join(lines) + "\n"


def at_scale(dgc_bytes):
    """Bytes one worker sends per step, and the time at each link speed, for the exchanges a large
    job can use (ResNet-50, DGC at 0.1%)."""
    def schemes(n):
        return [
            ("dense ring allreduce", 2.0 * (n - 1) / n * DENSE),
            ("allgather of DGC messages (this library)", (n - 1) * dgc_bytes),
            (f"hierarchical: dense in a node of {GPUS_PER_NODE}, allgather across nodes",
             (n // GPUS_PER_NODE - 1) * dgc_bytes),
            ("gTop-k (2 k log2 N entries)", 2.0 * K * math.log2(n) * COO),
            ("Ok-Topk (bound: 6 k (N - 1) / N entries)", 6.0 * K * (n - 1) / n * COO),
        ]
    lines = ["| workers | exchange | bytes per worker |" + "".join(f" {l} |" for l, _ in LINKS),
             "|---:|---|---:|" + "---:|" * len(LINKS)]
    for n in (64, 256, 1024):
        for name, size in schemes(n):
            lines.append(f"| {n} | {name} | {mb(size)} |" + "".join(f" {seconds(size / bw)} |" for _, bw in LINKS))
    return "\n".join(lines) + "\n"


def per_ranks(runs, header, keys, row):
    """A table with one row per rank count: `row` formats the results of `keys` for it."""
    lines = list(header)
    for ranks in sorted(runs):
        found = [runs[ranks].get(k) for k in keys]
        if not all(found):
            sys.exit(f"scaling_table.py: missing benchmarks for {ranks} ranks")
        lines.append(f"| {ranks} | {row(*found)} |")
    return "\n".join(lines) + "\n"


def measured(runs):
    return per_ranks(
        runs,
        ["| ranks | DGC 0.1%: sent, received | allgather | + aggregation | DGC 1%: allgather "
         "| dense allreduce (ring: sent = received) | allreduce |",
         "|---:|---:|---:|---:|---:|---:|---:|"],
        ("BM_dgc_allgather/1000", "BM_dgc_aggregate/1000", "BM_dgc_allgather/10000", "BM_dense_allreduce"),
        lambda g1, a1, g10, d: f"{mb(g1[1])}, {mb(g1[2])} | {g1[0]:,.1f} ms | {a1[0]:,.1f} ms | "
                               f"{g10[0]:,.1f} ms | {mb(d[1])} | {d[0]:,.1f} ms")


def paths(runs):
    """The whole step on each path of mpi_exchange::reduce, and the dense sum in rank order against
    MPI_Allreduce."""
    return per_ranks(
        runs,
        ["| ranks | DGC 0.1% step, allgather path | dense path | received per rank: allgather, dense "
         "| fp32 sum: MPI_Allreduce | rank order (`allreduce_sum`) |",
         "|---:|---:|---:|---:|---:|---:|"],
        ("BM_dgc_reduce/1000/0", "BM_dgc_reduce/1000/1", "BM_dense_allreduce", "BM_dense_rank_order"),
        lambda g, d, lib, ordered: f"{g[0]:,.1f} ms | {d[0]:,.1f} ms | {mb(g[2])}, {mb(d[2])} | "
                                   f"{lib[0]:,.1f} ms | {ordered[0]:,.1f} ms")


def powersgd(runs, exchange):
    """PowerSGD's step (its two rounds) with reduce's own path against the forced allgather, next
    to DGC's allgather, per rank count."""
    merged = {n: {**exchange.get(n, {}), **runs[n]} for n in runs}
    return per_ranks(
        merged,
        ["| ranks | PowerSGD r = 1: sent, received per rank | step | r = 4: sent, received | step "
         "| r = 4, allgather forced: received | step | DGC 0.1% allgather: received |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|"],
        ("BM_powersgd_step/1/2", "BM_powersgd_step/4/2", "BM_powersgd_step/4/0", "BM_dgc_allgather/1000"),
        lambda r1, r4, g4, dgc: f"{mb(r1[1])}, {mb(r1[2])} | {seconds(r1[0] / 1e3)} | {mb(r4[1])}, {mb(r4[2])} | "
                                f"{seconds(r4[0] / 1e3)} | {mb(g4[2])} | {seconds(g4[0] / 1e3)} | {mb(dgc[2])}")


def powersgd_model(runs, dgc_bytes):
    """Bytes per worker at larger N: PowerSGD's rounds as dense allreduces of its payload (measured),
    against the allgather of DGC's messages and the dense gradient's ring allreduce."""
    any_ranks = min(runs)
    r1 = runs[any_ranks]["BM_powersgd_step/1/2"][3]
    r4 = runs[any_ranks]["BM_powersgd_step/4/2"][3]
    lines = ["| workers | dense ring allreduce | PowerSGD r = 1 | PowerSGD r = 4 | DGC 0.1% allgather |",
             "|---:|---:|---:|---:|---:|"]
    for n in WORKERS:
        ring = 2.0 * (n - 1) / n
        lines.append(f"| {n} | {mb(ring * DENSE)} | {mb(ring * r1)} | {mb(ring * r4)} | {mb((n - 1) * dgc_bytes)} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", required=True, help="directory of exchange_<N>.json and powersgd_<N>.json")
    p.add_argument("--markdown", required=True, help="docs/scaling.md")
    a = p.parse_args()
    runs = load_runs(a.results, "exchange")
    if not runs:
        sys.exit(f"scaling_table.py: no exchange_*.json in {a.results}")
    rounds = load_runs(a.results, "powersgd")
    if not rounds:
        sys.exit(f"scaling_table.py: no powersgd_*.json in {a.results}")
    dgc_bytes = runs[min(runs)]["BM_dgc_allgather/1000"][1]
    with open(a.markdown) as f:
        text = f.read()
    text = replace_block(text, "model", model(dgc_bytes))
    text = replace_block(text, "scale", at_scale(dgc_bytes))
    text = replace_block(text, "measured", measured(runs))
    text = replace_block(text, "paths", paths(runs))
    text = replace_block(text, "powersgd", powersgd(rounds, runs))
    text = replace_block(text, "powersgd model", powersgd_model(rounds, dgc_bytes))
    with open(a.markdown, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
