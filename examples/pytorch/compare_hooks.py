"""gradcomp's DDP hook against PyTorch's own hooks, in one run: the same CNN (fashion_cnn.py), data,
seeds and steps on 4 processes (gloo, 127.0.0.1), each configuration trained for one epoch of
Fashion-MNIST and tested on the 10,000 test images.

    PYTHONPATH=build/examples/pytorch:examples/pytorch /usr/bin/python3 examples/pytorch/compare_hooks.py \\
        --out docs/results/pytorch_hooks          # runs every configuration, writes runs.jsonl
    ... compare_hooks.py --table docs/results/pytorch_hooks/runs.jsonl [--plot FILE] [--docs README.md ...]
        # the table, printed and written between the pages' <!-- pytorch-hooks-table --> markers

Per configuration: test accuracy (mean and standard deviation over the seeds), the bytes each
worker hands to torch.distributed's collectives per step (counted by wrapping all_reduce and
all_gather: the payloads, before any algorithm's own traffic), and the time per step split into
compute (forward and backward without communication, measured on no_sync steps), compress
(gradcomp's C++ code: compressing, encoding, decoding, adding) and exchange (the rest of the step).
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import fashion_cnn
import spawn_world

WORKERS, BATCH, LR, MOMENTUM = 4, 32, 0.05, 0.9
STEPS = 60000 // (WORKERS * BATCH)  # one epoch
SEEDS = (1, 2, 3)

# (name, hook family, method, options); "start" is replaced by the dense steps before PowerSGD
# compresses and DGC's warm-up, 10% of the run. DGC clips each worker's gradient as its paper does
# (a global norm of 5, 5 / sqrt(4) per worker), as the libtorch trainer's dgc mode does.
CONFIGS = [
    ("torch allreduce_hook", "torch", "allreduce", {}),
    ("torch fp16_compress_hook", "torch", "fp16", {}),
    ("torch powerSGD_hook r1", "torch", "powersgd", {"rank": 1}),
    ("torch powerSGD_hook r2", "torch", "powersgd", {"rank": 2}),
    ("gradcomp dense", "gradcomp", "dense", {}),
    ("gradcomp dgc", "gradcomp", "dgc", {"density": 0.001, "warmup_steps": "start", "clip_norm": 5.0}),
    ("gradcomp powersgd r2", "gradcomp", "powersgd", {"rank": 2, "start_iter": "start"}),
    ("gradcomp qsgd", "gradcomp", "qsgd", {}),
]


class _counting:
    """torch.distributed's all_reduce and all_gather, counting the bytes each call hands over."""

    def __init__(self):
        self.bytes = 0
        self._reduce, self._gather = dist.all_reduce, dist.all_gather

        def all_reduce(tensor, *args, **kwargs):
            self.bytes += tensor.numel() * tensor.element_size()
            return self._reduce(tensor, *args, **kwargs)

        def all_gather(out, tensor, *args, **kwargs):
            self.bytes += tensor.numel() * tensor.element_size()
            return self._gather(out, tensor, *args, **kwargs)

        dist.all_reduce, dist.all_gather = all_reduce, all_gather


def _run(rank, world, config, seed, steps):
    import gradcomp_torch  # the built package (the table needs none)

    name, family, method, options = config
    start = max(2, steps // 10)
    options = {k: start if v == "start" else v for k, v in options.items()}
    images, labels = fashion_cnn.load(True)
    torch.manual_seed(seed)
    order = torch.randperm(len(images))
    model = fashion_cnn.FashionCNN()
    ddp = DDP(model)
    carries = family == "gradcomp" and gradcomp_torch._core.methods()[method][1]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0 if carries else MOMENTUM)
    state = None
    if family == "torch":
        if method == "allreduce":
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        elif method == "fp16":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        else:
            ps = torch_powersgd.PowerSGDState(None, matrix_approximation_rank=options["rank"], start_powerSGD_iter=start)
            ddp.register_comm_hook(ps, torch_powersgd.powerSGD_hook)
    else:
        state = gradcomp_torch.State(method, optimizer=opt, model=ddp, **options)
        ddp.register_comm_hook(state, gradcomp_torch.hook)

    def batch(step):
        at = order[(step * world + rank) * BATCH % len(images) :][:BATCH]
        return images[at], labels[at]

    # Compute alone: forward and backward without communication (DDP's no_sync), then discarded.
    compute = 0.0
    for step in range(20):
        x, y = batch(step)
        begin = time.perf_counter()
        with ddp.no_sync():
            F.cross_entropy(ddp(x), y).backward()
        compute += time.perf_counter() - begin
        opt.zero_grad()
    compute /= 20

    counter = _counting()
    dist.barrier()
    begin = time.perf_counter()
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    elapsed = (time.perf_counter() - begin) / steps
    sent = counter.bytes / steps
    test_images, test_labels = fashion_cnn.load(False)
    row = {
        "config": name,
        "seed": seed,
        "workers": world,
        "steps": steps,
        "accuracy": fashion_cnn.accuracy(model, test_images, test_labels),
        "bytes_per_step": sent,
        "step_ms": 1e3 * elapsed,
        "compute_ms": 1e3 * compute,
    }
    if state is not None:
        row["compress_ms"] = 1e3 * state.timings["compress"] / steps
        row["hook_overhead_ms"] = (
            1e3 * (state.timings["hook"] - state.timings["compress"] - state.timings["exchange"]) / steps)
    return row


def run_all(out_dir, steps=STEPS, seeds=SEEDS):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "runs.jsonl")
    with open(path, "w") as f:
        for seed in seeds:
            for config in CONFIGS:
                row = spawn_world.run(_run, WORKERS, config, seed, steps, timeout=3600)[0]  # rank 0's
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{row['config']:26s} seed {seed}: {row['accuracy']:.4f}, {row['bytes_per_step']:,.0f} B/step, "
                      f"{row['step_ms']:.1f} ms/step", flush=True)
    return path


def table(path):
    """The comparison table (markdown) of the runs in `path`, one row per configuration."""
    rows = [json.loads(line) for line in open(path)]
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    dense = statistics.mean(r["bytes_per_step"] for r in by["torch allreduce_hook"])
    lines = [
        "| hook | test accuracy % (3 seeds) | bytes/step/worker | ratio | ms/step | compute | compress | exchange |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, *_ in CONFIGS:
        rs = by[name]
        acc = [100 * r["accuracy"] for r in rs]
        sent = statistics.mean(r["bytes_per_step"] for r in rs)
        step = statistics.mean(r["step_ms"] for r in rs)
        compute = statistics.mean(r["compute_ms"] for r in rs)
        compress = statistics.mean(r["compress_ms"] for r in rs) if "compress_ms" in rs[0] else None
        exchange = step - compute - (compress or 0.0)
        lines.append(
            f"| {name} | {statistics.mean(acc):.2f} ± {statistics.stdev(acc) if len(acc) > 1 else 0.0:.2f} | {sent:,.0f} | "
            f"{dense / sent:.1f}x | {step:.1f} | {compute:.1f} | "
            f"{'-' if compress is None else f'{compress:.1f}'} | {exchange:.1f} |")
    overhead = [r["hook_overhead_ms"] for r in rows if "hook_overhead_ms" in r]
    lines.append("")
    lines.append(f"The gradcomp hook's own overhead (Python, tensor wrapping, padding) per step: "
                 f"{statistics.mean(overhead):.2f} ms on average, {max(overhead):.2f} ms at most "
                 f"({len(overhead)} runs, {rows[0]['workers']} workers, {rows[0]['steps']} steps each).")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- pytorch-hooks-table: begin -->", "<!-- pytorch-hooks-table: end -->"


def write_docs(text, pages):
    """Puts `text` between the markers of every page in `pages`."""
    for page in pages:
        content = open(page).read()
        if BEGIN not in content or END not in content:
            raise SystemExit(f"{page}: no {BEGIN} ... {END} markers")
        head, rest = content.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(page, "w") as f:
            f.write(head + BEGIN + "\n" + text + END + tail)


def plot(path, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in open(path)]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (name, family, *_) in enumerate(CONFIGS):
        rs = [r for r in rows if r["config"] == name]
        x = statistics.mean(r["bytes_per_step"] for r in rs)
        y = statistics.mean(100 * r["accuracy"] for r in rs)
        ax.scatter([x], [y], marker="o" if family == "gradcomp" else "s", s=40)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 6 if i % 2 else -10), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(right=2e6)
    ax.set_xlabel("bytes per step per worker (log)")
    ax.set_ylabel("test accuracy % (mean of 3 seeds)")
    ax.set_title(f"DDP hooks on the Fashion-MNIST CNN, {rows[0]['workers']} workers, one epoch")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="run every configuration, writing OUT/runs.jsonl")
    ap.add_argument("--table", help="print the table of a runs.jsonl")
    ap.add_argument("--plot", help="with --table: also draw the plot into this PNG file")
    ap.add_argument("--docs", nargs="*", default=[], help="with --table: pages whose table to rewrite")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"steps of each run (default {STEPS}: one epoch)")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 1, 2, ... (default 3)")
    a = ap.parse_args()
    if a.out:
        path = run_all(a.out, a.steps, tuple(range(1, a.seeds + 1)))
        print(table(path))
    elif a.table:
        text = table(a.table)
        print(text, end="")
        write_docs(text, a.docs)
        if a.plot:
            plot(a.table, a.plot)
    else:
        ap.error("give --out or --table")


if __name__ == "__main__":
    main()
