"""`wheelci image`: its options and what it prints; the work is wheelci.image's."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from wheelci import archs, cli
from wheelci.config import matrix as mx
from wheelci.errors import CiError
from wheelci.image import build, spec


def main(args: argparse.Namespace) -> int:
    if args.command == "list":
        specs = [spec(r.version, i.manylinux) for r in mx.load().rows for i in r.images if i.origin == "ours"]
        if args.json:
            cli.emit_json([asdict(s) for s in specs])
        else:
            for s in specs:
                print(f"{s.cuda:<5} {s.tag}  " + " ".join(f"{k}={v}" for k, v in s.buildargs.items()))
        return 0
    (arch, *more) = archs.parse(args.archs)
    if more:
        raise CiError("--archs: one architecture per image build")
    if args.dry_run:
        result = spec(args.cuda, args.manylinux, registry=args.push, arch=arch)
    else:
        result = build(args.cuda, args.manylinux, push=args.push, engine=args.engine, arch=arch)
    if args.json:
        cli.emit_json(asdict(result))
    else:
        print(result.tag)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("image", "Build (and push) our manylinux CUDA build images from docker/, with the build "
                        "arguments of their CUDA matrix row.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image for one CUDA version")
    b.add_argument("--cuda", required=True, help=f"CUDA version ({', '.join(mx.load().versions)})")
    b.add_argument("--manylinux", help="policy, when the row has images of ours for several")
    b.add_argument("--archs", help="x86_64 (default) or aarch64 (the sbsa toolkit on the aarch64 base; "
                                   "under QEMU on an x86_64 machine)")
    b.add_argument("--push", metavar="REGISTRY", help="also tag as REGISTRY/... and push there")
    b.add_argument("--engine", choices=("auto", "docker", "podman"), default="auto",
                   help="the engine that builds it (default: the first that responds, docker then podman)")
    b.add_argument("--dry-run", action="store_true", help="print what would be built; needs no Docker")
    b.add_argument("--json", action="store_true", help="print the image spec as JSON")
    ls = sub.add_parser("list", help="list the images of ours the matrix uses")
    ls.add_argument("--json", action="store_true")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
