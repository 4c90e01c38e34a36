#!/usr/bin/env python3
"""The layering rule of include/gradcomp/ (docs/design.md, "Layers"), checked on every header.

    tests/layering/check_layering.py [--root REPO] [--known FILE] [--list]

Each header belongs to the first layer whose patterns match its path (relative to
include/gradcomp/); a layer may include itself and the layers it names, nothing else. The method
layer is one folder per method: a method may include every layer below it, never another
method. A header no layer matches is an error too, so a new folder is one line in LAYERS.
Forwarding headers (old include paths kept for one release: a `// gradcomp: forwarding header`
line and one include) are exempt. Headers whose name ends in .hpp include no CUDA header, but
for the files in CUDA_HPP.

--known names the include arrows that still break the rule while the layout moves towards it,
one "FROM -> TO" per line; every other broken arrow fails, and so does a listed arrow that no
longer exists (the list only shrinks). --list prints every broken arrow in that form.
Exit status: 0 when the tree keeps the rule (but for the known arrows), 1 otherwise.
"""

import argparse
import fnmatch
import os
import re
import sys

# (layer, path patterns, the layers it may include besides itself). "*" is every layer.
LAYERS = [
    ("umbrella", ["gradcomp.hpp", "thrust.hpp", "separate_kernels.hpp"], ["*"]),
    ("core", ["error.hpp", "config.hpp", "version.hpp", "span.hpp", "backend.hpp",
              "backend_memory.hpp", "layout.hpp", "momentum_kind.hpp", "selection_types.hpp"], []),
    ("detail", ["detail/*"], ["core"]),
    ("wire", ["wire/*", "tensor_message.hpp"], ["core", "detail"]),
    ("cpu", ["cpu/*"], ["core", "detail"]),
    ("thrust", ["thrust/*"], ["core", "detail", "cpu", "wire"]),
    ("select", ["select/*"], ["core", "detail", "cpu"]),
    ("common", ["common/*", "compressor.hpp", "aggregator.hpp", "snapshot.hpp"], ["core", "detail", "wire", "cpu", "select"]),
    ("separate", ["separate_backend.hpp", "separate/*"], ["core", "detail", "cpu", "thrust"]),
    ("comm", ["comm/*"], ["core", "detail", "wire", "cpu", "thrust", "common"]),
    ("method", ["dgc/*", "topk/*", "ef_signsgd/*", "terngrad/*", "onebit/*", "qsgd/*", "adacomp/*",
                "isgq/*", "saef/*", "powersgd/*", "isgq.hpp", "saef.hpp"],
     ["core", "detail", "wire", "cpu", "thrust", "select", "common", "separate"]),
]

# .hpp headers that may include CUDA's own headers (the others are plain C++; .cuh files are
# nvcc's alone).
CUDA_HPP = ["comm/nccl.hpp"]
CUDA_HEADERS = re.compile(r"^(cuda[_a-z]*\.h|cuda/.*|nccl\.h|cub/.*|thrust/system/cuda/.*|curand.*\.h)$")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
FORWARDING = "// gradcomp: forwarding header"


def layer_of(path):
    for name, patterns, _ in LAYERS:
        if any(fnmatch.fnmatchcase(path, p) for p in patterns):
            return name
    return None


def method_of(path):
    """The method a header of the method layer belongs to: its folder, or a top-level file's stem."""
    return path.split("/")[0] if "/" in path else os.path.splitext(path)[0]


def headers(include_dir):
    for folder, _, files in os.walk(include_dir):
        for f in sorted(files):
            if f.endswith((".hpp", ".cuh", ".h")):
                full = os.path.join(folder, f)
                yield os.path.relpath(full, include_dir).replace(os.sep, "/"), full


def includes(path, full):
    """(target, is_library_header) of every include line; library targets relative to include/gradcomp."""
    out = []
    with open(full, encoding="utf-8") as f:
        for line in f:
            m = INCLUDE.match(line)
            if not m:
                continue
            bracket, target = m.groups()
            if bracket == '"':
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), target)).replace(os.sep, "/")
                out.append((resolved, True))
            elif target.startswith("gradcomp/"):
                out.append((target[len("gradcomp/"):], True))
            else:
                out.append((target, False))
    return out


def is_forwarding(full, incs):
    with open(full, encoding="utf-8") as f:
        text = f.read()
    return FORWARDING in text and len([t for t, lib in incs if lib]) == 1


def check(root):
    include_dir = os.path.join(root, "include", "gradcomp")
    allowed = {name: set(may) | {name} for name, _, may in LAYERS}
    broken, errors = [], []
    for path, full in headers(include_dir):
        src = layer_of(path)
        if src is None:
            errors.append(f"{path}: in no layer (add its folder to LAYERS in {os.path.relpath(__file__, root)})")
            continue
        incs = includes(path, full)
        if is_forwarding(full, incs):
            continue
        for target, lib in incs:
            if not lib:
                if path.endswith(".hpp") and path not in CUDA_HPP and CUDA_HEADERS.match(target):
                    broken.append((path, target, f"a .hpp header includes the CUDA header <{target}>"))
                continue
            dst = layer_of(target)
            if dst is None:
                errors.append(f"{path}: includes {target}, in no layer")
                continue
            if "*" not in allowed[src] and dst not in allowed[src]:
                broken.append((path, target, f"{src} may not include {dst}"))
            elif src == "method" and dst == "method" and method_of(path) != method_of(target):
                broken.append((path, target, f"method {method_of(path)} includes method {method_of(target)}"))
    return broken, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")))
    parser.add_argument("--known", help="file of the arrows that still break the rule")
    parser.add_argument("--list", action="store_true", help="print every broken arrow as FROM -> TO")
    args = parser.parse_args()

    broken, errors = check(args.root)
    if args.list:
        for src, dst, _ in broken:
            print(f"{src} -> {dst}")
        return 0
    known = set()
    if args.known:
        with open(args.known, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    known.add(tuple(s.strip() for s in line.split("->")))
    status = 0
    for e in errors:
        print(f"check_layering: {e}")
        status = 1
    found = set()
    for src, dst, why in broken:
        found.add((src, dst))
        if (src, dst) not in known:
            print(f"check_layering: include/gradcomp/{src} includes {dst}: {why}")
            status = 1
    for src, dst in sorted(known - found):
        print(f"check_layering: {src} -> {dst} is listed in {args.known} but no longer exists: remove it")
        status = 1
    total = len(broken)
    print(f"check_layering: {total} arrow(s) break the rule, {len(known & found)} of them known"
          + ("" if status else "; no other"))
    return status


if __name__ == "__main__":
    sys.exit(main())
