#!/usr/bin/env python3
"""Lists the functions of gradcomp's code that contain a fused multiply-add instruction.

    scripts/find_fused.py [--objdump OBJDUMP] BINARY...

The library promises that every product it adds is rounded first, whatever the compiler's
contraction setting (docs/algorithms.md, "Arithmetic"; detail/rounded.hpp). Built for a target
with fused multiply-adds (x86-64 with -march=x86-64-v3 -ffp-contract=fast, or aarch64) the
library's functions must then contain none: this script disassembles the binaries and prints each
function that does, and exits 1 if there is one.

A function counts as the library's when it is in namespace gradcomp (its own symbol, a lambda or
local class inside one) or when it is another namespace's template instantiated with the library's
types, which is where a functor's inlined body lands (std::transform, a Thrust algorithm); the tests'
own code (namespace gradcomp_test, doctest's anonymous test functions) is not counted.
"""
import argparse
import re
import shutil
import subprocess
import sys

# x86: vfmadd/vfmsub/vfnmadd/vfnmsub (132, 213, 231; ss, sd, ps, pd), vfmaddsub, vfmsubadd, and
# FMA4's vfmaddss and the like; aarch64: fmadd, fmsub, fnmadd, fnmsub, fmla, fmls.
FUSED = re.compile(r"\s(v?fn?m(add|sub)(132|213|231)?[sp][sd]|vfm(addsub|subadd)(132|213|231)?p[sd]"
                   r"|fn?m(add|sub)|fml[as])\s")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
LIBRARY = re.compile(r"^_ZZ?N[KVRO]*8gradcomp")
TESTS = re.compile(r"^_ZZ?N[KVRO]*(13gradcomp_test|12_GLOBAL__N_1)")


def is_library(symbol):
    base = symbol.split(".", 1)[0]  # .constprop.0, .isra.0, .part.0 clones
    if TESTS.match(base):
        return False
    return bool(LIBRARY.match(base)) or (base.startswith("_Z") and "8gradcomp" in base)


def fused_functions(objdump, path):
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], check=True, capture_output=True,
                         text=True).stdout
    found, current = {}, None
    for line in out.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = m.group(1)
            continue
        if current is not None and FUSED.search(line) and is_library(current):
            found[current] = found.get(current, 0) + 1
    return found


def demangle(symbols):
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not symbols:
        return list(symbols)
    res = subprocess.run([cxxfilt], input="\n".join(symbols), capture_output=True, text=True, check=True)
    return res.stdout.splitlines()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objdump", default="objdump", help="the disassembler (the cross one for aarch64)")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    total = 0
    for path in args.binaries:
        found = fused_functions(args.objdump, path)
        names = sorted(found)
        for name, readable in zip(names, demangle(names)):
            print(f"{path}: {found[name]} fused in {readable}")
        total += len(found)
    if total:
        print(f"find_fused: {total} function(s) of the library contain fused multiply-adds", file=sys.stderr)
        return 1
    print(f"find_fused: no fused multiply-add in the library's functions ({len(args.binaries)} binaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
