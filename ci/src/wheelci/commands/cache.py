"""`wheelci cache`: its options and what it prints; the work is wheelci.cache's."""

from __future__ import annotations

import argparse
import os

from wheelci import cli
from wheelci.cache import prune, show
from wheelci.errors import CiError
from wheelci.util import cache
from wheelci.util.sizes import format_size, parse_size


def main(args: argparse.Namespace) -> int:
    root = cache.cache_dir()
    if args.command != "prune":
        return show(root, cache.max_size(os.environ), args.json)
    try:
        cap = parse_size(args.max_size) if args.max_size is not None else cache.max_size(os.environ)
    except CiError as e:
        raise CiError(f"--max-size: {e}") from None
    if cap is None:
        raise CiError(f"${cache.MAX_SIZE_VARIABLE} is none (builds never prune): give the size with --max-size")
    return prune(root, cap, args.json)


def build_parser() -> cli.Parser:
    p = cli.parser("cache", "What the cache holds (kept build trees, build environments, test layers: size, last "
                            "used, in use), and pruning it to a size, least recently used first.")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    sub = p.add_subparsers(dest="command", metavar="{show,prune}")
    shown = sub.add_parser("show", help="what the cache holds (the default)")
    shown.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")
    pruner = sub.add_parser("prune", help="remove least recently used entries until the cache is under a size")
    pruner.add_argument("--max-size", metavar="SIZE",
                        help=f"the size to prune to (100MiB, 20GB; default ${cache.MAX_SIZE_VARIABLE}, else "
                             f"{format_size(cache.DEFAULT_MAX_SIZE)})")
    pruner.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
