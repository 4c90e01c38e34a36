#!/usr/bin/env python3
"""Where CI's time goes: the stages' wall times, the slowest translation units and tests.

    scripts/ci_times.py --stages FILE [--budget SECONDS] [--top N] BUILD_DIR...

--stages names a file of lines "<seconds>\t<stage>" (.ci/run writes it as each stage ends).
Each BUILD_DIR is a CMake build tree: its translation units come from Ninja's own log
(.ninja_log, the last build of each object file) and its tests from ctest's log of the last run
(Testing/Temporary/LastTest.log). A build tree without either is skipped. Prints three Markdown
tables and, when the stages together exceed --budget, says so (the exit status stays 0: the
budget is a warning, CI's hard limit is its own).
"""

import argparse
import os
import re
import sys

OBJECT_SUFFIXES = (".o", ".obj")


def stage_times(path):
    """[(stage, seconds)] in the order the stages ran."""
    stages = []
    if not path or not os.path.exists(path):
        return stages
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            seconds, _, name = line.partition("\t")
            stages.append((name, float(seconds)))
    return stages


def translation_units(build_dir):
    """[(seconds, object file)] of the build's last compile of each object, from .ninja_log."""
    log = os.path.join(build_dir, ".ninja_log")
    if not os.path.exists(log):
        return []
    latest = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                continue
            start_ms, end_ms, output = int(fields[0]), int(fields[1]), fields[3]
            if output.endswith(OBJECT_SUFFIXES):
                latest[output] = (end_ms - start_ms) / 1000.0
    return [(seconds, output) for output, seconds in latest.items()]


TEST_START = re.compile(r"^\d+/\d+ Test: (\S+)")
TEST_TIME = re.compile(r"^Test time =\s*([0-9.]+) sec")


def test_times(build_dir):
    """[(seconds, test name)] of ctest's last run in build_dir (LastTest.log), each test once."""
    folder = os.path.join(build_dir, "Testing", "Temporary")
    logs = [p for p in [os.path.join(folder, "LastTest.log")] if os.path.exists(p)]
    times = {}
    for log in logs:
        current = None
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                started = TEST_START.match(line)
                if started:
                    current = started.group(1)
                    continue
                took = TEST_TIME.match(line)
                if took and current is not None:
                    times[current] = float(took.group(1))
                    current = None
    return [(seconds, name) for name, seconds in times.items()]


def minutes(seconds):
    return f"{int(seconds) // 60}:{int(round(seconds)) % 60:02d}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", help="file of '<seconds>\\t<stage>' lines")
    parser.add_argument("--budget", type=float, default=1800.0, help="budget in seconds (default 1800)")
    parser.add_argument("--top", type=int, default=15, help="rows of the slowest lists (default 15)")
    parser.add_argument("build_dirs", nargs="*")
    args = parser.parse_args()

    stages = stage_times(args.stages)
    total = sum(seconds for _, seconds in stages)
    print("| stage | seconds | m:ss |")
    print("|---|---:|---:|")
    for name, seconds in stages:
        print(f"| {name} | {seconds:.0f} | {minutes(seconds)} |")
    print(f"| **total** | **{total:.0f}** | **{minutes(total)}** |")
    print()

    units, tests = [], []
    for build_dir in args.build_dirs:
        label = os.path.basename(os.path.normpath(build_dir))
        units += [(s, f"{label}/{o}") for s, o in translation_units(build_dir)]
        tests += [(s, f"{label}: {t}") for s, t in test_times(build_dir)]

    for title, rows in ((f"{args.top} slowest translation units", units),
                        (f"{args.top} slowest tests", tests)):
        rows.sort(key=lambda row: -row[0])
        print(f"| {title} | seconds |")
        print("|---|---:|")
        for seconds, name in rows[:args.top]:
            print(f"| `{name}` | {seconds:.1f} |")
        print(f"| (all {len(rows)}) | {sum(s for s, _ in rows):.0f} |")
        print()

    if stages and total > args.budget:
        print(f"ci_times: the stages took {total:.0f} s, over the budget of {args.budget:.0f} s",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
