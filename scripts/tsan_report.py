#!/usr/bin/env python3
"""Fails when a ThreadSanitizer log reports a race in kv0's own code.

The Rust side (Lance, Tokio) is not instrumented, so TSan cannot see how it
synchronises: it reports hand-overs between Rust threads, and between memory
Rust allocated and kv0 code reading it after a hand-over. tests/cpp/tsan.supp
hides most of them. This check reads whatever reports remain and counts a race
as kv0's only when both racing accesses are made by kv0's own C++ code.
"""

import re
import sys

OWN_FRAME = re.compile(r"kv0::|/src/(kv|wal|util|lance|tracking)/|/tests/cpp/")
ACCESS = re.compile(r"^  (Previous )?(Read|Write|Atomic)", re.IGNORECASE)


def accessing_frames(block: str) -> list[str]:
    """The frame that made each racing access: the first one that is not
    TSan's own interceptor (malloc, free, memcpy, ...)."""
    frames, in_access = [], False
    for line in block.splitlines():
        if ACCESS.match(line):
            in_access, found = True, False
            continue
        if in_access and line.strip().startswith("#"):
            if "libsanitizer" not in line and not found:
                frames.append(line)
                found = True
        elif in_access and not line.strip():
            in_access = False
    return frames


def own_races(log: str) -> list[str]:
    found = []
    for block in log.split("WARNING: ThreadSanitizer:")[1:]:
        frames = accessing_frames(block)
        if len(frames) >= 2 and all(OWN_FRAME.search(f) for f in frames):
            found.append(block.split("SUMMARY:")[0])
    return found


def main() -> int:
    log = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    races = own_races(log)
    for race in races:
        print("ThreadSanitizer report in kv0 code:" + race)
    total = log.count("WARNING: ThreadSanitizer:")
    print(f"tsan: {len(races)} report(s) in kv0 code, {total - len(races)} inside Rust only")
    return 1 if races else 0


if __name__ == "__main__":
    sys.exit(main())
