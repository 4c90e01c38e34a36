"""The libtorch example's CNN (examples/libtorch/cnn.hpp) in Python, and Fashion-MNIST from the
Debian package dataset-fashion-mnist: what the DDP hook's tests and its comparison train.

conv 5x5 (1 -> 8) - ReLU - max-pool 2, conv 5x5 (8 -> 16) - ReLU - max-pool 2, fully connected
784 -> 64 - ReLU, fully connected 64 -> 10 (54 k parameters).
"""

import gzip
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2).flatten(1)
        return self.fc2(F.relu(self.fc1(h)))


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).reshape(count, rows, cols)
    if magic == 2049:
        return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).reshape(count)
    raise ValueError(f"{path}: not an IDX file of images or labels")


def load(train, data_dir=DATA_DIR, limit=0):
    """Images (n x 1 x 28 x 28, float32, normalised with the training set's mean and deviation)
    and labels (int64) of the training or the test split; the first `limit` (0: all)."""
    prefix = "train" if train else "t10k"
    images_path = os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")
    if not os.path.exists(images_path):
        raise FileNotFoundError(f"{images_path} is missing: apt-get install dataset-fashion-mnist")
    images = _read_idx(images_path)
    labels = _read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).long()
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = images.float().div_(255.0).unsqueeze(1)
    mean, std = 0.2860, 0.3530  # the training images' pixel mean and deviation
    return x.sub_(mean).div_(std), labels


def accuracy(model, images, labels, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            correct += (model(images[i : i + batch]).argmax(1) == labels[i : i + batch]).sum().item()
    model.train()
    return correct / len(images)
