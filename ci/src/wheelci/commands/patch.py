"""`wheelci patch`: its options and what it prints; the work is wheelci.patch's."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.errors import CiError
from wheelci.patch import patch_wheel


def _patch_files(args: argparse.Namespace) -> list[Path]:
    if args.patch_dir:
        d = Path(args.patch_dir)
        if not d.is_dir():
            raise CiError(f"not a directory: {d}")
        found = sorted(p for p in d.iterdir() if p.suffix in (".patch", ".diff") and p.is_file())
        if not found:
            raise CiError(f"no *.patch or *.diff files in {d}")
        return found
    return [Path(p) for p in args.patch or []]


def main(args: argparse.Namespace) -> int:
    result = patch_wheel(Path(args.wheel), Path(args.wheel_dir), _patch_files(args), label=args.local_version,
                         remove_requires=args.remove_requires or [], add_requires=args.add_requires or [],
                         preload_from=[Path(d) for d in args.preload_from or []], package=args.package,
                         verify=not args.no_verify)
    if args.json:
        cli.emit_json({"wheel": str(result.wheel), "version": result.version, "changed": result.changed,
                       "added": result.added, "removed": result.removed})
    else:
        print(result.wheel)
    return 0


def build_parser() -> cli.Parser:
    p = cli.parser("patch", "Apply unified diffs, a local version and Requires-Dist edits to a "
                   "wheel without recompressing what does not change.")
    p.add_argument("wheel", metavar="WHEEL", type=Path)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--patch-dir", metavar="DIR", type=Path, help="apply every *.patch/*.diff in DIR, in name order")
    src.add_argument("--patch", metavar="FILE", type=Path, action="append", help="a unified diff (-p1); repeatable")
    p.add_argument("--local-version", metavar="LABEL", help="append a local version label (+LABEL or .LABEL)")
    p.add_argument("--remove-requires", metavar="NAME", action="append", help="drop Requires-Dist NAME")
    p.add_argument("--add-requires", metavar="SPEC", action="append", help="add Requires-Dist SPEC")
    p.add_argument("--preload-from", metavar="WHEEL_OR_DIR", nargs="+", type=Path,
                   help="inject a preload of what the wheel's libraries need from these (e.g. nvidia-* wheels)")
    p.add_argument("--package", help="with --preload-from: the package to inject into (default: the top one)")
    p.add_argument("--no-verify", action="store_true",
                   help="do not re-hash untouched members against RECORD (faster; trusts the input)")
    p.add_argument("-w", "--wheel-dir", metavar="DIR", type=Path, required=True, help="output directory")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
