"""`wheelci build`: its options and what it prints; the work is wheelci.build's."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from pathlib import Path

from wheelci import cli
from wheelci.config import options
from wheelci.errors import CiError
from wheelci.util.output import emit_json

PROJECT_DIR = Path(".")  # the directory the command runs in: a checkout of the project


def build_parser() -> cli.Parser:
    p = cli.parser("build", "Build, repair, check, verify and report a PyTorch extension's wheels. Each option "
                   "may also be set by its WHEELCI_* variable or its [tool.wheelci] key (flags > variables > "
                   "table > defaults).")
    p.add_argument("project", nargs="?", type=cli.project_argument, help=cli.PROJECT_HELP)
    options.add_arguments(p, "build")
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)
    return p


def main(args: argparse.Namespace) -> int:
    """The arguments resolved into Options over the project's table, the library's build, and what it
    prints: the plan (a dry run) or the report, as text or JSON."""
    from wheelci import build  # the library, once the arguments are read: `build --help` never loads it
    from wheelci.plan import for_the_log, format_plan

    given = vars(args)
    if not options.kind_given(given, os.environ):
        raise CiError("one of the arguments --cuda --cpu is required (or WHEELCI_CUDA: a CUDA version, or cpu)")
    with build.opened(args.project or args.project_dir) as project:
        o = options.resolve("build", given, os.environ, project.settings.table)
        result = build.build(o, project, sdist=project.fetched.path if project.fetched else
                             args.project if isinstance(args.project, Path) and args.project.is_file() else None)
        if result.report is None:  # a dry run; the host build environment's state read while the project is
            if o.json:
                emit_json(result.plan.to_json())
            else:
                env = None if result.plan.engine.container else build.host_env_state(result.plan)
                print(for_the_log(format_plan(result.plan, build_env=env)))
        elif o.json:
            emit_json(asdict(result.report))
    return 0


if __name__ == "__main__":
    cli.run(build_parser(), main)
