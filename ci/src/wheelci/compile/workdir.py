"""The work directory a build owns, and the copy of the project it compiles.

A build replaces parts of its --work-dir, so it owns only a new, empty or marked one; it compiles a copy
of the project's source files (git's view of them), never the project itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from wheelci.errors import CiError
from wheelci.util import proc


WORK_MARK = ".wheelci-work"  # in a --work-dir this tool made: the next build may replace what is in it


def own_work_dir(path: Path) -> None:
    """A --work-dir the build may clear parts of (its src/, build/, dist/): a new or empty directory, which
    gets the mark, or one an earlier build marked. Anything else is the user's and is refused untouched."""
    if path.exists() and not path.is_dir():
        raise CiError(f"--work-dir {path}: not a directory")
    entries = sorted(p.name for p in path.iterdir()) if path.exists() else []
    if entries and WORK_MARK not in entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise CiError(f"--work-dir {path} holds files wheelci did not make ({shown}): a build replaces parts of "
                      "its work directory, so give a new or empty one")
    path.mkdir(parents=True, exist_ok=True)
    (path / WORK_MARK).write_text("made by `wheelci build --work-dir`: the next build replaces what is here\n")


def project_files(project_dir: Path) -> list[Path]:
    """What goes into the build: git's tracked and unignored files (not .venv, build trees, wheels),
    and those of its checked-out submodules (a vendored cutlass is source too).

    cibuildwheel copies its whole working directory into the container, so it runs from a copy of these."""
    try:
        r = proc.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                     what="listing the project's files", check=False, cwd=project_dir, capture_output=True)
    except CiError:  # no git on this machine (slim images): the fallback below
        r = None
    if r is not None and r.returncode == 0:
        files = []
        for f in (Path(f) for f in r.stdout.decode().split("\0") if f):
            path = project_dir / f
            if path.is_file():
                files.append(f)
            elif path.is_dir() and (path / ".git").exists():  # a submodule (git lists it as one entry)
                files += [f / sub for sub in project_files(path)]
        return files
    skip = {".git", ".venv", "build", "dist", "wheelhouse", "__pycache__"}
    return [p.relative_to(project_dir) for p in project_dir.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(project_dir).parts)]


def in_work_dir(project_dir: Path, rel: Path, seen: dict[Path, bool]) -> bool:
    """Whether rel lies in a build's --work-dir (marked) inside the project: a work directory is never
    source, and copying it into its own src/ would nest a copy deeper at every build."""
    for parent in rel.parents:
        if parent == Path("."):
            return False
        if parent not in seen:
            seen[parent] = (project_dir / parent / WORK_MARK).is_file()
        if seen[parent]:
            return True
    return False


def stage_project(project_dir: Path, dest: Path) -> Path:
    """Copy the project's files into dest, cleared first: a reused --work-dir must not keep sources
    the project has since deleted (they would still be compiled)."""
    if dest.exists():
        shutil.rmtree(dest)
    seen: dict[Path, bool] = {}
    for rel in (f for f in project_files(project_dir) if not in_work_dir(project_dir, f, seen)):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project_dir / rel, dest / rel)
    return dest
