"""`wheelci build`: its options and what it prints; the work is wheelci.build's."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from wheelci import cli
from wheelci.build import PROJECT_DIR, run_build
from wheelci.config import options
from wheelci.errors import CiError


def build_parser() -> cli.Parser:
    p = cli.parser("build", "Build, repair, check, verify and report a PyTorch extension's wheels. Each option "
                   "may also be set by its WHEELCI_* variable or its [tool.wheelci] key (flags > variables > "
                   "table > defaults).")
    p.add_argument("project", nargs="?", type=Path, help="a project directory or an sdist (.tar.gz); default: the "
                                                         "current directory")
    options.add_arguments(p, "build")
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)
    return p


def main(args: argparse.Namespace) -> int:
    given = vars(args)
    if not options.kind_given(given, os.environ):
        raise CiError("one of the arguments --cuda --cpu is required (or WHEELCI_CUDA: a CUDA version, or cpu)")
    return run_build(given, args.project, args.project_dir)


if __name__ == "__main__":
    cli.run(build_parser(), main)
