"""`wheelci split`: its options and what it prints; the work is wheelci.split's."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.split import split_wheel
from wheelci.util.sizes import format_size


def main(args: argparse.Namespace) -> int:
    outputs = split_wheel(Path(args.wheel), args.limit, Path(args.wheel_dir), verify=not args.no_verify,
                          preload_deps=[Path(p) for p in args.preload_deps or []])
    if args.json:
        cli.emit_json({"wheels": [{"path": str(p), "size": p.stat().st_size} for p in outputs]})
    else:
        for p in outputs:
            print(f"{p}\t{format_size(p.stat().st_size)}")
    return 0


def build_parser() -> cli.Parser:
    p = cli.parser("split", "Move a wheel's largest shared libraries into companion wheels so "
                   "every output is under a size limit; RPATHs and an import-time preload keep it loading.")
    p.add_argument("wheel", metavar="WHEEL", type=Path)
    p.add_argument("--limit", required=True, metavar="pypi|github|SIZE", help="largest allowed wheel size")
    p.add_argument("-w", "--wheel-dir", metavar="DIR", type=Path, required=True, help="output directory")
    p.add_argument("--preload-deps", nargs="+", metavar="WHEEL_OR_DIR", type=Path,
                   help="wheels or install dirs providing libraries the moved ones need (e.g. nvidia-*): "
                        "preloaded first as well")
    p.add_argument("--no-verify", action="store_true",
                   help="do not re-hash members against RECORD before splitting (faster; trusts the input)")
    p.add_argument("--json", action="store_true", help="print the outputs as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
