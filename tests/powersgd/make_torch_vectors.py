#!/usr/bin/env python3
"""Test vectors from PyTorch's own PowerSGD communication hook.

Runs `torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook` under DistributedDataParallel on
the CPU (gloo) with WORKERS processes, on fixed gradients: each parameter's gradient at each step
is a seeded Gaussian tensor of the worker and the step (the loss is sum(p * G), so backward gives
exactly G). The hook runs plain all-reduce for the first `start_iter` steps and PowerSGD after.

Writes one text file per configuration (see FORMAT below), with everything a reimplementation
needs to reproduce every step: the configuration, each tensor as the hook sees it (its matrix
shape, its rank, whether it is compressed), the initial Q of every compressed tensor (before the
hook orthogonalises it: the hook draws it from torch's generator, which another library cannot
reproduce; with warm start it draws them once, at its first PowerSGD step, otherwise at every
step), every worker's gradient at every step, and the averaged gradient the hook leaves on every
worker. Before writing, it checks the hook's outputs against a plain single-process
implementation of the same algorithm from the same inputs (so the initial Qs recorded are the
ones the hook used), and that every worker holds the same output.

Usage: /usr/bin/python3 tests/powersgd/make_torch_vectors.py OUT_DIR

FORMAT (one record a line, values as float32 in %.9g, which reads back exactly):
  torch <version>
  config rank R start_iter S min_compression_rate C error_feedback 0|1 warm_start 0|1 workers N steps K
         batch_tensors_with_same_shape 0|1
  tensor <name> <n> <m> <rank> <compressed 0|1>          in the hook's (bucket) order
  q <step> <name> <m * rank values, row-major m x rank> each draw: compressed tensors, the hook's
                                                        drawing order
  grad <step> <worker> <name> <n * m values>
  out <step> <name> <n * m values>                      the averaged gradient after the hook
"""
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

WORKERS = 2
STEPS = 6
SEED = 0

# name -> shape: convolution kernels, fully connected weights, biases, and a layer too small to
# be worth compressing at every rank below.
SHAPES = [
    ("conv1.weight", (8, 3, 3, 3)),
    ("conv1.bias", (8,)),
    ("fc1.weight", (12, 40)),
    ("fc1.bias", (12,)),
    ("fc2.weight", (5, 4)),
    ("fc3.weight", (16, 24)),
    ("fc4.weight", (12, 40)),  # fc1.weight's shape: one batch with it where the hook batches
]

CONFIGS = [
    # (file stem, rank, start_iter, min_compression_rate, error_feedback, warm_start,
    #  batch_tensors_with_same_shape)
    ("rank1", 1, 2, 2.0, True, True, False),
    ("rank2", 2, 2, 2.0, True, True, False),
    ("rank4", 4, 2, 2.0, True, True, False),
    ("rank2_no_feedback_cold", 2, 2, 2.0, False, False, False),
    ("rank2_batched", 2, 2, 2.0, True, True, True),
]


class Fixed(torch.nn.Module):
    """Parameters whose gradient is whatever tensor `forward` is given for each."""

    def __init__(self):
        super().__init__()
        for name, shape in SHAPES:
            self.register_parameter(name.replace(".", "_"), torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, grads):
        return sum((p * g).sum() for p, g in zip(self.parameters(), grads))


def gradient(step, worker, index, shape):
    gen = torch.Generator().manual_seed(1000003 * step + 7919 * worker + index)
    return torch.randn(shape, generator=gen, dtype=torch.float32)


def worker_main(rank, init_file, config, queue):
    _, r, start_iter, rate, feedback, warm, batch = config
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORKERS)
    model = DDP(Fixed())
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=r, start_powerSGD_iter=start_iter,
                               min_compression_rate=rate, use_error_feedback=feedback, warm_start=warm,
                               random_seed=SEED, batch_tensors_with_same_shape=batch)
    orders = []  # the hook's tensor order at each step, by parameter name
    names = {id(p): n for n, p in model.module.named_parameters()}

    def hook(s, bucket):
        orders.append([names[id(p)] for p in bucket.parameters()])
        return psgd.powerSGD_hook(s, bucket)

    model.register_comm_hook(state, hook)
    outs = []
    for step in range(STEPS):
        grads = [gradient(step, rank, i, shape) for i, (_, shape) in enumerate(SHAPES)]
        model.zero_grad()
        model(grads).backward()
        # As NumPy arrays: a queue would pass torch tensors through shared memory that ends with
        # this process.
        outs.append({n: p.grad.detach().numpy().copy() for n, p in model.module.named_parameters()})
    if len(orders) != STEPS or any(o != orders[-1] for o in orders[start_iter:]):
        raise SystemExit("expected one bucket, the same from the first PowerSGD step on")
    queue.put((rank, orders[-1], outs))
    queue.close()
    queue.join_thread()
    dist.barrier()
    # Leave without tearing the process group down: gloo's teardown can abort the process once
    # the hook's futures are done (std::system_error, "Resource deadlock avoided").
    os._exit(0)


def orthogonalize(matrix):
    """The hook's own orthogonalisation (its default epsilon, 0), in place."""
    psgd._orthogonalize(matrix.unsqueeze(0), 0)


def matrix_shape(shape, r):
    rows = shape[0]
    cols = int(np.prod(shape)) // rows
    return rows, cols, min(rows, cols, r)


def compressed_groups(config, order):
    """The compressed tensors grouped by matrix shape, the groups in the order their first tensor
    comes: the hook's order of its Qs (and of its batches, where it batches)."""
    _, r, _, rate = config[:4]
    shapes = {n.replace(".", "_"): s for n, s in SHAPES}
    groups = {}
    for n in order:
        rows, cols, rank = matrix_shape(shapes[n], r)
        if (rows + cols) * rank * rate < rows * cols:
            groups.setdefault((rows, cols), []).append(n)
    return list(groups.values())


def compressed_in_draw_order(config, order):
    """The compressed tensors as the hook draws their Qs."""
    return [n for group in compressed_groups(config, order) for n in group]


def draws(config, order):
    """The Qs the hook draws, step by step: at each step that draws (the first PowerSGD step with
    warm start, every PowerSGD step without), one seed from its NumPy generator, then torch.randn
    for each compressed tensor in drawing order, or, where the hook batches tensors of the same
    shape, one torch.randn for each group of them."""
    _, r, start_iter, _, _, warm, batch = config
    shapes = {n.replace(".", "_"): s for n, s in SHAPES}
    rng = np.random.RandomState(SEED)
    out = {}
    for step in range(start_iter, STEPS):
        if warm and step > start_iter:
            break
        seed = rng.randint(1_000_000_000)
        out[step] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for group in compressed_groups(config, order):
                for part in ([group] if batch else [[n] for n in group]):
                    _, cols, rank = matrix_shape(shapes[part[0]], r)
                    drawn = torch.randn(len(part), cols, rank, dtype=torch.float32)
                    for i, n in enumerate(part):
                        out[step][n] = drawn[i].clone()
    return out


def reference(config, order, drawn):
    """The algorithm in one process: every worker's matrices, the sums as all-reduce forms them."""
    _, r, start_iter, rate, feedback = config[:5]
    shapes = {n.replace(".", "_"): s for n, s in SHAPES}
    index = {n.replace(".", "_"): i for i, (n, _) in enumerate(SHAPES)}
    errors = [{n: torch.zeros(shapes[n]) for n in order} for _ in range(WORKERS)]
    qs = {}
    outs = []
    for step in range(STEPS):
        grads = [{n: gradient(step, w, index[n], shapes[n]) for n in order} for w in range(WORKERS)]
        if step < start_iter:
            outs.append({n: sum(grads[w][n] for w in range(WORKERS)) / WORKERS for n in order})
            continue
        inputs = [{n: grads[w][n] + errors[w][n] if feedback else grads[w][n].clone() for n in order}
                  for w in range(WORKERS)]
        out = {}
        compressed = []
        for n in order:
            mat = inputs[0][n].view(shapes[n][0], -1)
            rows, cols = mat.shape
            rank = min(rows, cols, r)
            if (rows + cols) * rank * rate < rows * cols:
                compressed.append((n, rows, cols, rank))
            else:
                out[n] = sum(inputs[w][n] for w in range(WORKERS)) / WORKERS
        for n, rows, cols, rank in compressed:
            q = drawn[step][n].clone() if step in drawn else qs[n].clone()
            orthogonalize(q)
            p = sum(inputs[w][n].view(rows, cols) @ q for w in range(WORKERS))
            orthogonalize(p)
            qsum = sum(inputs[w][n].view(rows, cols).t() @ p for w in range(WORKERS)) / WORKERS
            qs[n] = qsum
            out[n] = (p @ qsum.t()).view(shapes[n])
        if feedback:
            for w in range(WORKERS):
                for n in order:
                    errors[w][n] = inputs[w][n] - out[n]
        outs.append(out)
    return outs


def values(t):
    return " ".join("%.9g" % v for v in t.reshape(-1).tolist())


def run(config, out_dir):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = [ctx.Process(target=worker_main, args=(w, init_file, config, queue)) for w in range(WORKERS)]
        for p in procs:
            p.start()
        results = dict((rank, (order, outs)) for rank, order, outs in (queue.get(timeout=600) for _ in procs))
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SystemExit("a worker failed")
    results = {w: (order, [{n: torch.from_numpy(v) for n, v in out.items()} for out in outs])
               for w, (order, outs) in results.items()}
    order, outs = results[0]
    for w in range(1, WORKERS):
        for step in range(STEPS):
            for n in order:
                if not torch.equal(outs[step][n], results[w][1][step][n]):
                    raise SystemExit("workers disagree at step %d, %s" % (step, n))
    drawn = draws(config, order)
    ref = reference(config, order, drawn)
    worst = 0.0
    for step in range(STEPS):
        for n in order:
            d = (outs[step][n] - ref[step][n]).abs().max().item()
            scale = max(1.0, ref[step][n].abs().max().item())
            worst = max(worst, d / scale)
    if worst > 1e-4:
        raise SystemExit("%s: the hook and the reference differ by %g (relative)" % (config[0], worst))
    # The hook compressed: from its first PowerSGD step on, each compressed tensor's output is not
    # the workers' mean (a rank-limited approximation of it).
    index = {n.replace(".", "_"): i for i, (n, _) in enumerate(SHAPES)}
    shapes = {n.replace(".", "_"): s for n, s in SHAPES}
    for n in compressed_in_draw_order(config, order):
        mean = sum(gradient(config[2], w, index[n], shapes[n]) for w in range(WORKERS)) / WORKERS
        if (outs[config[2]][n] - mean).abs().max().item() < 1e-3:
            raise SystemExit("%s: %s was not compressed" % (config[0], n))
    stem, r, start_iter, rate, feedback, warm, batch = config
    path = os.path.join(out_dir, "torch_powersgd_%s.txt" % stem)
    with open(path, "w") as f:
        f.write("torch %s\n" % torch.__version__)
        f.write("config rank %d start_iter %d min_compression_rate %g error_feedback %d warm_start %d workers %d "
                "steps %d batch_tensors_with_same_shape %d\n" % (r, start_iter, rate, int(feedback), int(warm), WORKERS,
                                                                STEPS, int(batch)))
        compressed = set(compressed_in_draw_order(config, order))
        for n in order:
            rows, cols, rank = matrix_shape(shapes[n], r)
            f.write("tensor %s %d %d %d %d\n" % (n, rows, cols, rank, int(n in compressed)))
        for step in sorted(drawn):
            for n in compressed_in_draw_order(config, order):
                f.write("q %d %s %s\n" % (step, n, values(drawn[step][n])))
        for step in range(STEPS):
            for w in range(WORKERS):
                for n in order:
                    f.write("grad %d %d %s %s\n" % (step, w, n, values(gradient(step, w, index[n], shapes[n]))))
            for n in order:
                f.write("out %d %s %s\n" % (step, n, values(outs[step][n])))
    print("%s: hook against the reference %.3g (relative, largest)" % (path, worst))


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_torch_vectors.py OUT_DIR")
    torch.set_num_threads(1)
    for config in CONFIGS:
        run(config, sys.argv[1])


if __name__ == "__main__":
    main()
