"""Runs a function on a world of processes on this machine (gloo on 127.0.0.1): what the DDP hook's
tests and its comparison use to start their workers."""

import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world, port, args, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        value = fn(rank, world, *args)
        dist.barrier()
        results.put((rank, value, None))
    except BaseException:  # reported to the parent, which raises it
        results.put((rank, None, traceback.format_exc()))


def run(fn, world, *args, timeout=240):
    """fn(rank, world, *args) on `world` processes, each in a process group of them all; their
    results by rank. A worker that fails raises its traceback here; one that does not finish
    within `timeout` seconds raises TimeoutError (a hang)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, args, results)) for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(world):
            try:
                rank, value, error = results.get(timeout=timeout)
            except Exception as e:
                raise TimeoutError(f"a worker did not finish within {timeout} s") from e
            if error is not None:
                raise RuntimeError(f"rank {rank} failed:\n{error}")
            out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world)]
