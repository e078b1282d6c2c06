#!/usr/bin/env python3
"""Instructions of a callgrind run by shared object (self cost), divided by a count.

    callgrind-objects.py CALLGRIND_OUT NOTIFICATIONS [LABEL]

Prints "callgrind LABEL total=… libcurl=… libc=… …", instructions per notification, for
comparing the daemon's drain with DispatcherBench on the same requests (drain.sh with
PUSHD_BENCH_WRAP). Start-up (TLS handshakes, migrations) is counted too: runs of tens of
thousands of notifications keep it to a few percent.
"""
import re
import sys
from collections import defaultdict

path, count = sys.argv[1], int(sys.argv[2])
label = sys.argv[3] if len(sys.argv) > 3 else path
names = {}
costs = defaultdict(int)
current = "?"
skip_next = False
position_fields = 1
with open(path, errors="replace") as f:
    for line in f:
        if line.startswith("positions:"):
            position_fields = len(line.split()) - 1
            continue
        if line.startswith("ob="):
            match = re.match(r"ob=\((\d+)\)(?: (.*))?", line.strip())
            if match:
                if match.group(2):
                    names[match.group(1)] = match.group(2)
                current = names.get(match.group(1), "?")
            else:
                current = line[3:].strip()
            continue
        if line.startswith("cob="):
            match = re.match(r"cob=\((\d+)\) (.*)", line.strip())
            if match:
                names[match.group(1)] = match.group(2)
            continue
        if line.startswith("calls="):
            skip_next = True
            continue
        if not line or not (line[0].isdigit() or line[0] in "+-*"):
            continue
        if skip_next:
            skip_next = False
            continue
        parts = line.split()
        if len(parts) > position_fields:
            costs[current] += int(parts[position_fields])

def short(name):
    base = name.rsplit("/", 1)[-1]
    for key in ("libcurl", "libc.so", "libnghttp2", "libssl", "libcrypto", "libswiftCore", "ld-linux", "libpq"):
        if base.startswith(key):
            return key.replace(".so", "")
    return base

grouped = defaultdict(int)
for name, value in costs.items():
    grouped[short(name)] += value
total = sum(grouped.values())
parts = " ".join(f"{k}={v / count:.0f}" for k, v in sorted(grouped.items(), key=lambda kv: -kv[1]) if v / count >= 50)
print(f"callgrind {label} total={total / count:.0f} {parts}")
