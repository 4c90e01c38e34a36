"""torch.topk on the GPU for the sizes of bench_cuda_select (the magnitudes' top k, unsorted, as a
trainer calls it for top-k sparsification), timed with CUDA events next to a device-to-device copy
of the same input in the same iteration. Prints one JSON object per size."""
import json
import statistics

import torch


def event_seconds(f):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    f()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3


def main():
    gen = torch.Generator(device="cuda").manual_seed(42)
    for n in (1 << 16, 1 << 20, 1 << 24, 1 << 26, 10**8):
        for per_million in (1000, 10000):
            k = max(1, n * per_million // 1000000)
            x = torch.randn(n, device="cuda", generator=gen)
            y = torch.empty_like(x)

            def topk():
                return torch.topk(x.abs(), k, sorted=False)

            def copy():
                y.copy_(x)

            for _ in range(3):
                topk()
                copy()
            times, ratios = [], []
            for _ in range(50):
                c = event_seconds(copy)
                t = event_seconds(topk)
                times.append(t)
                ratios.append(c / t)
            print(json.dumps({"name": f"torch_topk/{n}/{per_million}", "n": n, "k": k,
                              "median_us": statistics.median(times) * 1e6,
                              "ratio_to_copy": statistics.median(ratios),
                              "torch": torch.__version__, "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
