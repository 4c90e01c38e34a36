"""gradcomp in a PyTorch DDP job: the CNN of examples/pytorch/fashion_cnn.py trained on Fashion-MNIST
by 2 processes (gloo on 127.0.0.1), each step's gradients averaged by gradcomp's DGC through the
DDP communication hook.

    PYTHONPATH=build/examples/pytorch:examples/pytorch /usr/bin/python3 examples/pytorch/ddp_example.py [steps]
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import fashion_cnn
import gradcomp_torch


def train(rank, world, steps, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    images, labels = fashion_cnn.load(True, limit=steps * 32 * world)
    torch.manual_seed(1)
    model = fashion_cnn.FashionCNN()
    ddp = DDP(model)
    # DGC carries the momentum itself: the optimizer must not apply it again.
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    state = gradcomp_torch.State("dgc", optimizer=opt, model=ddp, density=0.01, warmup_steps=40)
    ddp.register_comm_hook(state, gradcomp_torch.hook)
    for step in range(steps):
        at = (step * world + rank) * 32
        opt.zero_grad()
        F.cross_entropy(ddp(images[at : at + 32]), labels[at : at + 32]).backward()
        opt.step()
    if rank == 0:
        test_images, test_labels = fashion_cnn.load(False, limit=2000)
        print(f"dgc: {steps} steps, test accuracy {fashion_cnn.accuracy(model, test_images, test_labels):.3f}")
    dist.barrier()  # no process leaves the group while another still works
    dist.destroy_process_group()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(2, steps, port), nprocs=2)
