#!/usr/bin/env python3
"""Side by side: every figure bench/compare_builds.sh wrote for builds A and B.

    python3 bench/compare_builds.py OUT_DIR

Reads OUT_DIR/<round>-<A|B>-<bench>.json, flattens each file's numbers to
dotted keys and prints, per figure, A's values, B's values (one per round)
and the ratio of their medians, B over A; numbers equal in every run (the
settings, the counts) are left out. Whether a ratio above one is
better depends on the figure (ops/s against seconds); the reader judges.
"""

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def flatten(value, prefix, into):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        into[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), into)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            # Lists of records named by an "engine", "name" or "op" field read
            # better under that name than under an index.
            tag = None
            if isinstance(v, dict):
                tag = next((v[k] for k in ("engine", "name", "op", "workload") if k in v), None)
            flatten(v, f"{prefix}[{tag if tag is not None else i}]", into)


def joined(values):
    return " / ".join(f"{x:.4g}" for x in values)


def main():
    out = Path(sys.argv[1])
    # figures[bench][key][label] -> values over the rounds
    figures = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in sorted(out.glob("*.json")):
        m = re.fullmatch(r"(\d+)-([AB])-(.+)\.json", path.name)
        if not m:
            continue
        flat = {}
        flatten(json.loads(path.read_text()), "", flat)
        for key, v in flat.items():
            figures[m.group(3)][key][m.group(2)].append(v)
    for bench, keys in figures.items():
        print(f"\n## {bench}\n")
        print("| figure | A | B | B/A |")
        print("|---|---:|---:|---:|")
        for key, by in keys.items():
            a, b = by.get("A", []), by.get("B", [])
            if not a or not b or len(set(a + b)) == 1:
                continue  # a setting or a count, the same in every run
            ma, mb = statistics.median(a), statistics.median(b)
            ratio = f"{mb / ma:.3f}" if ma else "-"
            print(f"| {key} | {joined(a)} | {joined(b)} | {ratio} |")


if __name__ == "__main__":
    main()
