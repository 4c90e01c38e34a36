"""The DGC step as a trainer writes it with torch operations, tensor by tensor (the way the DGC
authors' code and GRACE run it), over the ResNet-50 tensor list of bench_cuda_dgc's
BM_cuda_dgc_model (bench/data/resnet50.txt): the baseline gradcomp's whole-model step is compared
with. Per step: the gradients clipped to a global L2 norm (5, spread over 8 workers as gradcomp's
local threshold 5 / sqrt(8)); then for every tensor of rank 2 or more (the others are sent whole)
momentum correction u = m u + g, accumulation v += u, the threshold from the top k of a 1% uniform
sample of |v|, the mask |v| >= threshold and its `nonzero`, the exact top k among the selected
where more than k passed, the values gathered, and momentum factor masking (u and v zeroed at the
selected positions). Timed with CUDA events per whole step (every tensor), median of the steps.

    python3 bench/cuda/torch_dgc_baseline.py [--device cuda|cpu] [--steps N] [--density D]

Prints one JSON object per density. On a machine without a GPU, --device cpu checks the script."""
import argparse
import json
import math
import os
import statistics
import time

import torch


def resnet50_shapes(path):
    shapes = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            shapes.append((fields[0], [int(d) for d in fields[1:]]))
    return shapes


class TorchDgc:
    """One worker's DGC state and step over a model's tensors, with torch operations."""

    def __init__(self, shapes, device, density, momentum=0.9, clip_norm=5.0, workers=8, sample_ratio=0.01):
        self.density = density
        self.momentum = momentum
        self.clip = clip_norm / math.sqrt(workers)
        self.sample_ratio = sample_ratio
        self.compressed = [len(s) >= 2 for _, s in shapes]
        self.u = [torch.zeros(s, device=device) if c else None for (_, s), c in zip(shapes, self.compressed)]
        self.v = [torch.zeros(s, device=device) if c else None for (_, s), c in zip(shapes, self.compressed)]
        self.generator = torch.Generator(device=device).manual_seed(7)

    def step(self, grads):
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        coef = torch.clamp(self.clip / (norm + 1e-6), max=1.0)
        sent, kept = [], 0
        for i, g in enumerate(grads):
            g = g * coef
            if not self.compressed[i]:
                sent.append((None, g))
                continue
            u, v = self.u[i].view(-1), self.v[i].view(-1)
            u.mul_(self.momentum).add_(g.view(-1))
            v.add_(u)
            n = v.numel()
            k = max(1, math.ceil(n * self.density))
            importance = v.abs()
            samples = max(1, math.ceil(n * self.sample_ratio))
            sample = importance[torch.randint(0, n, (samples,), device=v.device, generator=self.generator)]
            top = max(1, math.ceil(samples * self.density))
            threshold = torch.min(torch.topk(sample, top, sorted=False)[0])
            indices = torch.nonzero(importance >= threshold).view(-1)
            if indices.numel() > k:
                indices = indices[torch.topk(importance[indices], k, sorted=False)[1]]
            values = v[indices]
            u.index_fill_(0, indices, 0)
            v.index_fill_(0, indices, 0)
            kept += indices.numel()
            sent.append((indices, values))
        return sent, kept


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--density", type=float, action="append")
    parser.add_argument("--model", default=os.path.join(here, "..", "data", "resnet50.txt"))
    args = parser.parse_args()
    device = torch.device(args.device)
    shapes = resnet50_shapes(args.model)
    gen = torch.Generator(device=device).manual_seed(11)
    grads = [torch.randn(s, device=device, generator=gen) for _, s in shapes]
    cuda = device.type == "cuda"
    for density in args.density or [0.001]:
        dgc = TorchDgc(shapes, device, density)
        times, kept = [], 0
        for step in range(args.steps + 3):
            if cuda:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _, kept = dgc.step(grads)
                stop.record()
                stop.synchronize()
                seconds = start.elapsed_time(stop) * 1e-3
            else:
                t0 = time.perf_counter()
                _, kept = dgc.step(grads)
                seconds = time.perf_counter() - t0
            if step >= 3:  # the first steps warm the allocator and the kernels up
                times.append(seconds)
        print(json.dumps({
            "name": "torch_dgc_resnet50",
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch": torch.__version__,
            "tensors": len(shapes),
            "elements": sum(math.prod(s) for _, s in shapes),
            "density": density,
            "steps": len(times),
            "ms_per_step_median": 1e3 * statistics.median(times),
            "ms_per_step_min": 1e3 * min(times),
            "kept_last_step": kept,
        }))


if __name__ == "__main__":
    main()
