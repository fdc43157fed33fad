#!/usr/bin/env python3
"""Sum the per-test CPU lines of tests/cpu_usage.py by test file, costliest first.
Usage: GPUFLEET_TEST_CPU=/tmp/cpu make test; scripts/test-cpu.py /tmp/cpu [top]"""

import collections
import glob
import sys

prefix, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
wall: collections.Counter[str] = collections.Counter()
own: collections.Counter[str] = collections.Counter()
kids: collections.Counter[str] = collections.Counter()
for path in glob.glob(prefix + ".gw*") or glob.glob(prefix + ".main"):  # xdist: workers only
    with open(path, encoding="utf-8") as lines:
        rows = [line.rstrip("\n").split("\t") for line in lines]
    for nodeid, w, o, k in rows:
        name = nodeid.split("::")[0]
        wall[name] += float(w)
        own[name] += float(o)
        kids[name] += float(k)
cpu = {name: own[name] + kids[name] for name in wall}
tiers: collections.Counter[str] = collections.Counter()
for name, value in cpu.items():
    tiers[name.split("/")[1]] += value
print(
    f"total CPU {sum(cpu.values()):.0f} s, "
    f"wall (summed over test processes) {sum(wall.values()):.0f} s"
)
for tier, value in tiers.most_common():
    print(f"  {tier:10s} {value:7.0f} CPU-s")
print(f"{'CPU-s':>7} {'own':>6} {'kids':>6} {'wall':>6}  file")
for name, value in sorted(cpu.items(), key=lambda kv: -kv[1])[:top]:
    print(f"{value:7.1f} {own[name]:6.1f} {kids[name]:6.1f} {wall[name]:6.1f}  {name}")
