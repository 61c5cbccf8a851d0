"""`wheelci abi`: its options and what it prints; the work is wheelci.abi's."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.abi import check_abi, torch_include
from wheelci.errors import CiError, Finding
from wheelci.native.stable_abi import version_text


def build_parser() -> cli.Parser:
    p = cli.parser("abi", "check which LibTorch ABI (stable or classic) each library of a wheel "
                          "uses against what the wheel requires of torch")
    p.add_argument("wheel", type=Path)
    p.add_argument("--torch-site", type=Path, help="site-packages whose torch headers date the shim functions "
                                                   "(default: the torch this Python imports)")
    p.add_argument("--json", action="store_true")
    return p


def main(args: argparse.Namespace) -> int:
    if not args.wheel.is_file():
        raise CiError(f"{args.wheel}: no such file")
    report = check_abi(args.wheel, torch_include(args.torch_site))
    if args.json:
        cli.emit_json(report.to_json())
    else:
        for lib in report.libraries:
            needs = f", needs torch >= {version_text(lib.needs)}" if lib.needs else ""
            print(f"{cli.shown(lib.path)}: {lib.kind} ({len(lib.shims)} shim functions, {len(lib.cxx)} C++ symbols{needs})")
    if report.problems:
        raise Finding(f"{args.wheel.name}: " + "; ".join(report.problems))
    return 0


if __name__ == "__main__":
    cli.run(build_parser(), main)
