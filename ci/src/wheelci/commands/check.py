"""`wheelci check`: its options and what it prints; the work is wheelci.check's."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.check import check_wheel, render
from wheelci.errors import Finding
from wheelci.util.sizes import parse_limit


def main(args: argparse.Namespace) -> int:
    parse_limit(args.limit)  # a bad limit is bad input before any wheel is read
    unpacked_limit = parse_limit(args.unpacked_limit)
    results = [check_wheel(w, args.limit, unpacked_limit) for w in args.wheels]
    if args.json:
        cli.emit_json([r.to_json() for r in results])
    else:
        for r in results:
            print(render(r))
    over = [r for r in results if not r.ok]
    if over:
        what = "over the limit" if any(r.problems for r in over) else f"refused by {args.limit}"
        raise Finding(f"{len(over)} of {len(results)} wheel(s) {what}: " + ", ".join(Path(r.wheel).name for r in over))
    return 0


def build_parser() -> cli.Parser:
    p = cli.parser("check", "Check wheel sizes against a publishing limit, reading only "
                   "central directories; over a limit, list the 10 largest members and exit 1.")
    p.add_argument("wheels", metavar="WHEEL", nargs="+", type=Path)
    p.add_argument("--limit", default="pypi", metavar="pypi|github|SIZE",
                   help="largest allowed file size: pypi (100 MiB, default; no local version label either), github "
                        "(2 GiB) or a size like 3GB")
    p.add_argument("--unpacked-limit", metavar="SIZE", help="largest allowed unpacked (installed) size")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
