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


# --- the kept build tree -------------------------------------------------------------------------

SOURCES = ".wheelci-sources.json"  # in a work directory: the project's files as last seen, with their digests
COPIED = ".wheelci-copied.json"  # beside a synced copy: the files the copy holds from the project

# Plan fields that do not reach the compile: a build differing only in these keeps the same build tree.
AFTER_COMPILE = ("notes", "label", "variants", "limit", "test_command", "test_requires", "upload",
                 "source_date_epoch", "excludes", "allow_no_device_code")


def tree_key(project_dir: Path, plan) -> str:
    """The kept build tree of a project and a Plan: its directory, and what of the plan the compile sees."""
    import dataclasses
    import hashlib
    import json

    fields = {k: v for k, v in dataclasses.asdict(plan).items() if k not in AFTER_COMPILE}
    doc = json.dumps({"project": str(project_dir.resolve()), "plan": fields}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:20]


def _safe_rel(rel: object) -> bool:
    """A recorded path that may be joined to a directory this tool owns: relative, and never climbing."""
    return isinstance(rel, str) and bool(rel) and not Path(rel).is_absolute() and ".." not in Path(rel).parts


def _read_json(path: Path) -> dict:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def snapshot_sources(project_dir: Path, work: Path) -> tuple[dict[str, str], str]:
    """The project's files (as project_files lists them) with their sha256, and one digest of them all and
    the git revision. A file whose size and mtime match the last snapshot keeps its digest, as git's index
    does, so an unchanged tree is read by stat alone."""
    import hashlib
    import json

    from wheelci.util.atomic import write_text
    from wheelci.util.digest import sha256_file

    last = _read_json(work / SOURCES)
    seen, files = {}, {}
    memo: dict[Path, bool] = {}
    for rel in project_files(project_dir):
        if in_work_dir(project_dir, rel, memo):
            continue
        st = (project_dir / rel).stat()
        key = [st.st_size, st.st_mtime_ns]
        old = last.get(str(rel))
        sha = old[2] if isinstance(old, list) and len(old) == 3 and old[:2] == key else sha256_file(project_dir / rel)
        seen[str(rel)], files[str(rel)] = [*key, sha], sha
    r = proc.run(["git", "rev-parse", "HEAD"], what="reading the project's revision", check=False, cwd=project_dir,
                 capture_output=True, text=True) if (project_dir / ".git").exists() else None
    revision = r.stdout.strip() if r is not None and r.returncode == 0 else None
    write_text(work / SOURCES, json.dumps(seen, sort_keys=True))
    digest = hashlib.sha256(json.dumps([files, revision], sort_keys=True).encode()).hexdigest()
    return files, digest


def sync_project(project_dir: Path, dest: Path, files: dict[str, str]) -> Path:
    """Make dest hold the project's files, keeping what the build wrote there (setuptools' build/ tree):
    a file the project deleted is removed, a changed one is copied with a new mtime (so ninja and make
    rebuild it and what includes it), an unchanged one is left as it is (and is not rebuilt)."""
    import json

    from wheelci.util.atomic import write_text

    record = dest.parent / COPIED
    copied = _read_json(record) if dest.is_dir() else {}
    for rel in copied.keys() - files.keys():
        if _safe_rel(rel):
            (dest / rel).unlink(missing_ok=True)
    for rel, sha in files.items():
        target = dest / rel
        if copied.get(rel) != sha or not target.is_file() or target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            shutil.copyfile(project_dir / rel, target)
            shutil.copymode(project_dir / rel, target)
    write_text(record, json.dumps(files, sort_keys=True))
    return dest


def clear_work_dir(work: Path) -> None:
    """--fresh: everything in an owned work directory but its mark and its lock file."""
    from wheelci.util.lock import DIR_LOCK_FALLBACK

    for entry in work.iterdir():
        if entry.name in (WORK_MARK, DIR_LOCK_FALLBACK):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


TREE = ".wheelci-tree.json"  # in a kept build tree: the project it builds


def kept_tree(root: Path, project_dir: Path, plan) -> Path:
    """The build tree a build of this project and Plan keeps between runs (made and marked if new). Trees
    whose project directory is gone are removed first, unless a build holds them."""
    import json

    from wheelci.util.atomic import write_text

    prune_trees(root)
    tree = root / tree_key(project_dir, plan)
    own_work_dir(tree)
    write_text(tree / TREE, json.dumps({"project": str(project_dir.resolve())}))
    return tree


def prune_trees(root: Path) -> None:
    from wheelci.util.lock import unless_locked

    for tree in sorted(root.iterdir()) if root.is_dir() else []:
        project = _read_json(tree / TREE).get("project")
        if not (tree / WORK_MARK).is_file() or not isinstance(project, str) or Path(project).is_dir():
            continue  # not a tree of ours, or its project is still there
        with unless_locked(tree) as free:
            if free:
                shutil.rmtree(tree, ignore_errors=True)
