"""Benchmarks against what a user would otherwise run: `python -m ci.bench {surgery,index,build} [ARGS]`.

Each benchmark lives in `ci/bench_<name>.py` with a `main(argv) -> int`; this module only dispatches.
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = ("surgery", "index", "build", "stable")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m ci.bench {{{','.join(BENCHMARKS)}}} [ARGS]", file=sys.stderr)
        return 2
    return importlib.import_module(f"wheelci.bench_{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
