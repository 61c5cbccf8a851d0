"""Benchmarks against what a user would otherwise run: `python -m ci.bench {surgery,index,build,stable,pipeline,env,compile-cache} [ARGS]`.

Each benchmark lives in `bench/<name>.py` (a `-` in its name is `_` there) with a `main(argv) -> int`; this
module only dispatches.
"""

from __future__ import annotations
from wheelci.util.invocation import invoked_as

import importlib
import sys

BENCHMARKS = ("surgery", "index", "build", "stable", "pipeline", "env", "compile-cache")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = f"usage: {invoked_as('bench')} {{{','.join(BENCHMARKS)}}} [ARGS]"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in BENCHMARKS:
        print(usage, file=sys.stderr)
        return 2
    return importlib.import_module(f"wheelci.bench.{argv[0].replace('-', '_')}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
