"""`wheelci engine`: its options and what it prints; the work is wheelci.engine's."""

from __future__ import annotations

import argparse

from wheelci import cli
from wheelci.engine import PROBES, matrix_rows, host_cannot_build


def main(args: argparse.Namespace) -> int:
    """`python -m ci.engine`: which engine `--engine auto` would use here, and why the others would not."""
    reasons = {name: probe() for name, probe in PROBES.items()}
    found = next((n for n, why in reasons.items() if why is None), None)
    host = {row.version: host_cannot_build(row) for row in matrix_rows()}
    if args.json:
        cli.emit_json({"engine": found, "probes": reasons, "host_cannot_build": host})
        return 0
    print(f"container engine: {found or 'none'}")
    for name, why in reasons.items():
        if why:
            print(f"  {name}: {why}")
    for cuda, why in host.items():
        print(f"host, CUDA {cuda}: {'can build' if why is None else why}")
    return 0


def build_parser() -> cli.Parser:
    p = cli.parser("engine", "Detect the container engine (`docker version`, `podman info`) and what the host "
                         "engine can build, as `--engine auto` sees them.")
    p.add_argument("--json", action="store_true", help="print the answers as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
