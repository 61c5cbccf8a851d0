"""`wheelci repair`: its options and what it prints; the work is wheelci.repair's."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.repair import repair


def build_parser() -> cli.Parser:
    p = cli.parser("repair", "auditwheel repair with torch/CUDA excluded and declared as dependencies")
    p.add_argument("wheel", type=Path)
    p.add_argument("-w", "--wheel-dir", type=Path, required=True, help="output directory")
    p.add_argument("--torch", dest="torch_version", help="torch version built against (default: the installed one)")
    p.add_argument("--torch-requires", action="append", help="torch's Requires-Dist lines (default: the installed torch's)")
    p.add_argument("--plat", help="manylinux policy tag (default: the highest that fits)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="a further library (glob) auditwheel must not graft; repeatable")
    p.add_argument("--stable-abi", metavar="X.Y", help="a stable-ABI build: require torch>=X.Y, not ==")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    result = repair(args.wheel, args.wheel_dir, torch_version=args.torch_version,
                    torch_requires=args.torch_requires, plat=args.plat, excludes=args.exclude,
                    stable_abi=args.stable_abi)
    if args.json:
        cli.emit_json(result.to_json())
    else:
        print(f"repaired {result.wheel.name}: excluded {', '.join(result.excluded) or 'nothing'}; "
              f"requires added: {', '.join(result.requires_added) or 'none'}"
              + (f" (replacing the project's {', '.join(result.requires_replaced)})" if result.requires_replaced else ""))
    return 0


if __name__ == "__main__":
    cli.run(build_parser(), main)
