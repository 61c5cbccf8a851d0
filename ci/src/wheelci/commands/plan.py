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
from wheelci.util import log


def main(args: argparse.Namespace) -> int:
    from wheelci.config.project import resolve as find_project  # the library, once the arguments are read
    from wheelci.plan import for_the_log, format_plan, plan_for

    given = vars(args)
    if args.workflow_matrix:  # on a bare Python: the table and wheel.py-api only (checking the rest takes packaging)
        return _workflow_matrix(given, args.project or args.project_dir)
    with tempfile.TemporaryDirectory(prefix="ci-project-") as tmp:
        project = find_project(args.project or args.project_dir, Path(tmp))  # the one read of pyproject.toml
        o = options.resolve("plan", given, os.environ, project.settings.table)
        if o.torch is not None and not _one_release(o.torch):  # a torch axis: the jobs, as a table
            return _jobs(given, project.root, table=True)
        if o.skip_published is not None:
            raise CiError("--skip-published drops jobs of a matrix: with --workflow-matrix, or a --torch range")
        plan = plan_for(o, project, os.environ)
    if o.json:
        cli.emit_json(plan.to_json())
    else:
        print(for_the_log(format_plan(plan)))
    return 0


def _one_release(torch: str) -> bool:
    from wheelci.config.torchaxis import RELEASE

    return bool(RELEASE.fullmatch(torch.strip())) or torch.strip().lower() == "latest"


def _workflow_matrix(given: dict[str, Any], project: Path) -> int:
    """The jobs, from the project's settings: an sdist's own (its arch list, its wheel.py-api), extracted
    as a build would read it (the standard library's tarfile, with the build's checks)."""
    from wheelci.config.project import locate  # on a bare Python: no wheelci.plan

    with tempfile.TemporaryDirectory(prefix="ci-project-") as tmp:
        return _jobs(given, locate(project, Path(tmp))[0])


def _jobs(given: dict[str, Any], project_dir: Path, table: bool = False) -> int:
    from wheelci import archs as arch, workflowmatrix
    from wheelci.config import torchaxis
    from wheelci.config.project import read_py_api, read_settings
    from wheelci.config.stable import minor_of
    from wheelci.config.switches import read_scripts
    from wheelci.native.stable_abi import FLOOR
    from wheelci.plan import split_csv

    o = options.resolve("plan", given, os.environ, read_settings(project_dir).table)
    python = None if o.python is None else split_csv(o.python) or []
    py_api = read_py_api(project_dir) if o.python is not None or o.skip_published else ""
    axis = torchaxis.parse(o.torch) if o.torch is not None else None
    notes: list[str] = []
    bound, requires_python = _project_limits(project_dir)
    # a torch axis, a release the matrix does not list, or a project that bounds its torch: planned over the
    # index's releases (packaging and the HTTP client); else from the matrix alone, on a bare Python
    if (axis is not None and not (axis.single and workflowmatrix.listed(axis.text))) or bound or o.skip_published is not None:
        _needs_dependencies(f"--torch {axis.text}" if axis and not (axis.single and workflowmatrix.listed(axis.text))
                            else "--skip-published" if o.skip_published is not None else "the project's torch bound")
    if axis is not None and not (axis.single and workflowmatrix.listed(axis.text)) or (bound and axis is None):
        from wheelci.config.releases import TorchIndex

        jobs, notes = workflowmatrix.torch_matrix(
            axis, TorchIndex.from_env(os.environ), o.stable_abi, split_csv(o.cuda), o.variant, python=python,
            py_api=py_api, archs=arch.parse(o.archs), bound=bound, requires_python=requires_python)
    else:
        if bound and axis is not None and not torchaxis.within(axis.text, bound):
            raise CiError(f"--torch {axis.text}: outside the project's own torch{bound} (its pyproject.toml's "
                          "requirements): name a release within it")
        jobs = workflowmatrix.workflow_matrix(o.stable_abi, split_csv(o.cuda), o.variant, torch=o.torch, python=python,
                                              py_api=py_api, archs=arch.parse(o.archs))
    # --engine moves every job (a runner without Docker builds CUDA on the host); a project's engine key
    # does not: the row's own choice suits the runner it names
    if o.sources.get("engine") == "flag" and o.engine != "auto":
        jobs = workflowmatrix.on_engine(jobs, o.engine)
    if o.skip_published is not None:
        from wheelci.publish import published

        project = published.identity(project_dir)
        files = published.read_files(published.index_of(o.skip_published, os.environ), project.name)
        rows, dropped = published.skipped(jobs["include"], files, project, py_api, o.local_version)
        jobs, notes = {"include": rows}, notes + dropped
        if not rows:
            notes.append("every job's wheel is already published: nothing to build")
    target = read_scripts(project_dir).stable_target if o.stable_abi is None else None
    if target and minor_of(target) >= FLOOR:
        notes.append(f"the project's scripts define TORCH_TARGET_VERSION {target} (torch's stable ABI): each job "
                     f"pins its torch; --stable-abi {target} plans one job per variant for every torch from {target}")
    if o.arch_jobs is not None:  # the fan-out's compile-only jobs instead
        if not o.arch_jobs.strip().isdigit():
            raise CiError(f"--arch-jobs {o.arch_jobs[:16]!r}: want a number of jobs, 2 to 16")
        # the list the CUDA builds compile: --arch-list, WHEELCI_ARCH_LIST or the project's, else each row's own
        jobs = workflowmatrix.warm_matrix(jobs, int(o.arch_jobs), o.stable_abi, o.arch_list or None)
    if table and o.json:  # the dry run's table as data: the jobs and why others are not among them
        cli.emit_json({"jobs": jobs["include"], "notes": notes})
        return 0
    for note in notes:  # stdout is the matrix alone; the workflow's plan job shows these in its summary
        log.info(f"note: {note}")
    if table:
        print(_table(jobs["include"]))
    else:
        print(json.dumps(jobs))
    return 0


def _needs_dependencies(what: str) -> None:
    """One line, not a traceback, on the plan job's bare Python (the tool installed without them)."""
    import importlib.util

    missing = [m for m in ("packaging", "requests") if importlib.util.find_spec(m) is None]
    if missing:
        raise CiError(f"{what} reads an index, which takes {' and '.join(missing)}: install wheelci with its "
                      "dependencies (not --no-deps)")


def _project_limits(project_dir: Path) -> tuple[str | None, str | None]:
    """The project's own torch bound and requires-python, as its pyproject.toml says (None: none; the
    bound only where one is written, read with packaging, which the bare-Python path then needs)."""
    from wheelci.config.project import load_pyproject, names_torch_bound, torch_bound

    data = load_pyproject(project_dir) or {}
    meta = data.get("project", {})
    requires_python = meta.get("requires-python") if isinstance(meta, dict) else None
    requires_python = requires_python if isinstance(requires_python, str) and requires_python.strip() else None
    if not names_torch_bound(data):
        return None, requires_python
    _needs_dependencies("the project's torch bound")
    return torch_bound(data), requires_python


def _table(rows: list[dict[str, str]]) -> str:
    """The jobs as the dry run shows them: one line each."""
    head = ("job", "torch", "python", "runner", "arguments")
    lines = [(r["name"], r["torch"], r.get("python", "-"), r.get("runner", "-"), r["args"]) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in (head, *lines)]
    return "\n".join(out + [f"{len(rows)} job(s)"])


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
