#!/usr/bin/env python3
"""Where a process's resident memory is, from a copy of /proc/PID/smaps.

    Benchmarks/DaemonBench/smaps-breakdown.py SMAPS_FILE [EXECUTABLE_NAME]

drain.sh (PUSHD_BENCH_SMAPS=1) keeps the smaps of pushd at its highest RSS of the drain
and prints this. Anonymous mappings carry no name, so they are told apart by their shape:
a glibc malloc arena is a 64 MiB reservation aligned to 64 MiB whose used front is
read-write and whose rest is PROT_NONE; a thread stack is read-write right above a
PROT_NONE guard of at most 64 KiB. What is neither is malloc's mmapped blocks (above the
mmap threshold) and memory the Swift runtime and libraries map themselves.
"""
import os
import sys

ARENA = 64 << 20


def mappings(path):
    current = None
    with open(path) as file:
        for line in file:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and not fields[0].endswith(":"):
                if current:
                    yield current
                start, end = (int(x, 16) for x in fields[0].split("-"))
                current = {"start": start, "end": end, "perms": fields[1],
                           "name": " ".join(fields[5:]) if len(fields) > 5 else "", "rss": 0}
            elif fields[0] == "Rss:" and current:
                current["rss"] = int(fields[1])
    if current:
        yield current


def swift_library(name):
    base = os.path.basename(name)
    if base.startswith("libFoundation.so"):
        return "Foundation"
    if base.startswith("lib_FoundationICU"):
        return "ICU (_FoundationICU)"
    if base.startswith("libFoundationInternationalization"):
        return "FoundationInternationalization"
    if base.startswith("libFoundationEssentials"):
        return "FoundationEssentials"
    if base.startswith("libswiftCore"):
        return "swiftCore"
    if "/swift/" in name or base.startswith(("libswift", "lib_swift", "libdispatch", "libBlocksRuntime")):
        return "other Swift runtime (Concurrency, Dispatch, …)"
    return None


def main():
    path = sys.argv[1]
    executable = sys.argv[2] if len(sys.argv) > 2 else "pushd"
    maps = list(mappings(path))
    totals = {}
    libraries = {}
    stacks = 0

    def add(category, kb):
        totals[category] = totals.get(category, 0) + kb

    for index, m in enumerate(maps):
        name, kb = m["name"], m["rss"]
        if name == "[heap]":
            add("anonymous: main malloc arena ([heap])", kb)
        elif name == "[stack]":
            add("anonymous: main thread stack", kb)
        elif name.startswith("["):
            add("kernel ([vdso], [vvar], …)", kb)
        elif name.startswith("/"):
            library = swift_library(name)
            if os.path.basename(name) == executable:
                add("the executable (" + executable + ")", kb)
            elif library:
                add("Swift runtime and Foundation", kb)
                libraries["swift: " + library] = libraries.get("swift: " + library, 0) + kb
            else:
                add("system C libraries", kb)
                base = os.path.basename(name).split(".so")[0]
                libraries["C: " + base] = libraries.get("C: " + base, 0) + kb
        elif m["perms"].startswith("rw"):
            after = maps[index + 1] if index + 1 < len(maps) else None
            before = maps[index - 1] if index > 0 else None
            is_arena = (m["start"] % ARENA == 0 and after is not None and after["start"] == m["end"]
                        and after["perms"].startswith("---") and after["end"] == m["start"] + ARENA) \
                or (m["start"] % ARENA == 0 and m["end"] - m["start"] == ARENA)
            is_stack = (before is not None and before["end"] == m["start"] and before["perms"].startswith("---")
                        and before["end"] - before["start"] <= 64 << 10 and not before["name"])
            if is_arena:
                add("anonymous: thread malloc arenas", kb)
            elif is_stack:
                add("anonymous: thread stacks", kb)
                stacks += 1
            else:
                add("anonymous: other (mmapped blocks, runtime)", kb)
        else:
            add("anonymous: other (mmapped blocks, runtime)", kb)

    total = sum(totals.values())
    print(f"  RSS {total / 1024:.1f} MB in {len(maps)} mappings ({stacks} thread stacks)")
    for category, kb in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"    {kb / 1024:6.1f} MB  {category}")
    print("  largest libraries:")
    for library, kb in sorted(libraries.items(), key=lambda item: -item[1])[:14]:
        print(f"    {kb / 1024:6.1f} MB  {library}")


main()
