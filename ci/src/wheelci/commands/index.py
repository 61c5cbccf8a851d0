"""`wheelci index`: its options and what it prints; the work is wheelci.index's."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from wheelci import cli
from wheelci.index import build_index


def main(args: argparse.Namespace) -> int:
    result = build_index(args.dir, args.out, args.base_url, args.jobs, args.legacy_metadata_keys)
    if args.json:
        cli.emit_json(asdict(result))
    else:
        print(f"indexed {result.files} files in {result.projects} projects into {result.out} "
              f"({result.hashed} read, {result.cached} cached, {len(result.written)} written, "
              f"{len(result.removed)} removed, {len(result.skipped)} skipped)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("index", "Write a static PEP 503/658/691 simple index for the wheels and sdists "
                        "in DIR (incremental; pip, uv and rules_python read it).")
    p.add_argument("dir", metavar="DIR", type=Path, help="directory holding the distributions (searched recursively)")
    p.add_argument("--out", metavar="DIR", type=Path, help="where the pages go (default: DIR/simple)")
    p.add_argument("--base-url", metavar="URL",
                   help="absolute URL where DIR is served; default: links relative to the pages")
    p.add_argument("-j", "--jobs", type=int, default=None, help="hashing threads (default: cores, max 8)")
    p.add_argument("--legacy-metadata-keys", action="store_true",
                   help="also announce metadata with the pre-PEP 714 keys (data-dist-info-metadata); "
                        "pip 22.3-23.1 mishandle them, so only for a client that needs them")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
