"""Requests per commit on one dataset, from the request log of moto's server.

`bench/versions_s3.py` leaves moto's log on stderr, one line per request.
This reads it and, for each dataset whose name starts with PREFIX (`kv0-`,
`lance-` or `warm-up-` there), splits its requests at each manifest PUT (a
commit) and prints the requests per commit in the benchmark's two windows:
the 1,000 commits from version 20 and the last 1,000.

    .venv/bin/python bench/versions_s3.py build/kv0 --versions 3000 \\
        --lance-versions 1000 2> moto.log
    python3 bench/moto_requests_per_commit.py moto.log kv0-
"""

import collections
import re
import sys

REQUEST = re.compile(r'"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP')


def per_commit(log_path: str, prefix: str) -> list[collections.Counter]:
    commits, current = [], collections.Counter()
    with open(log_path, errors="replace") as log:
        for line in log:
            m = REQUEST.search(line)
            if not m or f"versions/{prefix}" not in m.group(2):
                continue
            method, path = m.groups()
            kind = "LIST" if "list-type=" in path else method
            current[kind] += 1
            if method == "PUT" and "/_versions/" in path and path.endswith(".manifest"):
                commits.append(current)
                current = collections.Counter()
    return commits


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    commits = per_commit(sys.argv[1], sys.argv[2])
    print(f"{len(commits)} commits")
    for name, window in (("early", commits[20:1020]), ("late", commits[-1000:])):
        total = collections.Counter()
        for c in window:
            total.update(c)
        kinds = ", ".join(f"{k} {v / len(window):.2f}" for k, v in sorted(total.items()))
        print(f"{name}: {sum(total.values()) / len(window):.2f} requests per commit ({kinds})")


if __name__ == "__main__":
    main()
