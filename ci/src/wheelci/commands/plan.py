"""`wheelci plan`: its options and what it prints; the work is wheelci.plan's."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from wheelci import cli
from wheelci.config import options
from wheelci.errors import CiError


def main(args: argparse.Namespace) -> int:
    from wheelci.config.project import resolve as find_project  # the library, once the arguments are read
    from wheelci.plan import for_the_log, format_plan, plan_for

    given = vars(args)
    if args.workflow_matrix:  # on a bare Python: the table and wheel.py-api only (checking the rest takes packaging)
        return _workflow_matrix(given, args.project or args.project_dir)
    with tempfile.TemporaryDirectory(prefix="ci-project-") as tmp:
        project = find_project(args.project or args.project_dir, Path(tmp))  # the one read of pyproject.toml
        o = options.resolve("plan", given, os.environ, project.settings.table)
        plan = plan_for(o, project, os.environ)
    if o.json:
        cli.emit_json(plan.to_json())
    else:
        print(for_the_log(format_plan(plan)))
    return 0


def _workflow_matrix(given: dict[str, Any], project: Path) -> int:
    """The jobs, from the project's settings: an sdist's own (its arch list, its wheel.py-api), extracted
    as a build would read it (the standard library's tarfile, with the build's checks)."""
    from wheelci.config.project import locate  # on a bare Python: no wheelci.plan

    with tempfile.TemporaryDirectory(prefix="ci-project-") as tmp:
        return _jobs(given, locate(project, Path(tmp))[0])


def _jobs(given: dict[str, Any], project_dir: Path) -> int:
    from wheelci import archs as arch, workflowmatrix
    from wheelci.config.project import read_py_api, read_settings
    from wheelci.plan import split_csv

    o = options.resolve("plan", given, os.environ, read_settings(project_dir).table)
    jobs = workflowmatrix.workflow_matrix(
        o.stable_abi, split_csv(o.cuda), o.variant, torch=o.torch,
        python=None if o.python is None else split_csv(o.python) or [],
        py_api=read_py_api(project_dir) if o.python is not None else "", archs=arch.parse(o.archs))
    # --engine moves every job (a runner without Docker builds CUDA on the host); a project's engine key
    # does not: the row's own choice suits the runner it names
    if o.sources.get("engine") == "flag" and o.engine != "auto":
        jobs = workflowmatrix.on_engine(jobs, o.engine)
    if o.arch_jobs is not None:  # the fan-out's compile-only jobs instead
        if not o.arch_jobs.strip().isdigit():
            raise CiError(f"--arch-jobs {o.arch_jobs[:16]!r}: want a number of jobs, 2 to 16")
        # the list the CUDA builds compile: --arch-list, WHEELCI_ARCH_LIST or the project's, else each row's own
        jobs = workflowmatrix.warm_matrix(jobs, int(o.arch_jobs), o.stable_abi, o.arch_list or None)
    print(json.dumps(jobs))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("plan", "Print the build plan (image, torch, arch list, CIBW_* environment) without running "
                       f"anything; {cli.command('build')} --dry-run prints the same, from the same options.")
    p.add_argument("project", nargs="?", type=cli.project_argument,
                   help=cli.PROJECT_HELP.replace("default:", "default: --project-dir, else"))
    p.add_argument("--project-dir", type=Path, default=Path("."), help="where pyproject.toml is (as PROJECT)")
    options.add_arguments(p, "plan")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
