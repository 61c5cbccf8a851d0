"""The work directory a build owns, and the copy of the project it compiles.

A build replaces parts of its --work-dir, so it owns only a new, empty or marked one; it compiles a copy
of the project's source files (git's view of them), never the project itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from wheelci.config.sdist import extract_sdist
from wheelci.errors import CiError
from wheelci.util import layout, proc
from wheelci.util.atomic import atomic_path, write_text
from wheelci.util.cache import read_stamp
from wheelci.util.digest import sha256_file
from wheelci.util.layout import BUILT, CHECKED, COMPILED_WITH, CONFIGURED, COPIED, SEARCHED, SOURCES, TREE, WORK_MARK
from wheelci.util.lock import unless_locked
from wheelci.util.owned import drop_links
from wheelci.util.secret import redact
from wheelci.util.sizes import format_size

if TYPE_CHECKING:
    from wheelci.plan import Plan


def own_work_dir(path: Path) -> None:
    """A --work-dir the build may replace what it writes in (WORK_ENTRIES: src/, build/, dist/, ...): a new or
    empty directory, which gets the mark, or one an earlier build marked. Anything else is the user's and
    is refused untouched."""
    if path.exists() and not path.is_dir():
        raise CiError(f"--work-dir {path}: not a directory")
    entries = sorted(p.name for p in path.iterdir()) if path.exists() else []
    if entries and WORK_MARK not in entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise CiError(f"--work-dir {path} holds files wheelci did not make ({shown}): a build replaces parts of "
                      "its work directory, so give a new or empty one")
    mark = path / WORK_MARK
    if mark.is_symlink() or (mark.exists() and not mark.is_file()):
        raise CiError(f"--work-dir {path}: its {WORK_MARK} is not a file this tool wrote (a link or a directory)")
    path.mkdir(parents=True, exist_ok=True)
    if not mark.is_file():
        mark.write_text("made by `wheelci build --work-dir`: the next build replaces what is here\n")


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
            elif path.is_dir() and path.is_symlink():  # a tracked link to a directory: pip's copy follows it
                files += [f / sub for sub in linked_files(path)]
            elif path.is_dir() and (path / ".git").exists():  # a submodule (git lists it as one entry)
                files += [f / sub for sub in project_files(path)]
        return files
    skip = {".git", ".venv", "build", "dist", "wheelhouse", "__pycache__"}
    return [p for p in linked_files(project_dir) if not skip & set(p.parts)]


def linked_files(top: Path) -> list[Path]:
    """The files below top, relative to it, through links to directories as pip wheel's copy of a project
    follows them (setuptools ships what lies behind them); a link back to a directory above it is not
    walked again."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        here = Path(dirpath)
        above = {os.path.realpath(p) for p in (here, *here.parents)}
        dirnames[:] = sorted(d for d in dirnames if os.path.realpath(here / d) not in above)
        found += [(here / name).relative_to(top) for name in sorted(filenames) if (here / name).is_file()]
    return found


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


def stage_project(project_dir: Path, dest: Path, files: dict[str, str] | None = None) -> Path:
    """Copy the project's files into dest, cleared first: a reused --work-dir must not keep sources
    the project has since deleted (they would still be compiled). With `files` (a snapshot), exactly
    those, each checked against it: what is built is what the build's record says."""
    if dest.exists():
        shutil.rmtree(dest)
    if files is not None:
        for name, digest in files.items():
            _copy_checked(project_dir, name, dest / name, digest)
        return dest
    seen: dict[Path, bool] = {}
    rels = [f for f in project_files(project_dir) if not in_work_dir(project_dir, f, seen)]
    check_sizes(project_dir, {str(rel): (project_dir / rel).stat().st_size for rel in rels})
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project_dir / rel, dest / rel)
    return dest


class SourcesChanged(CiError):
    """A project file differs from the build's snapshot of it: it changed during the build."""


# What a build reads of a project (it hashes and copies every file project_files lists): a file or a project
# larger than this is data, not source, and is refused by its size before a byte of it is read (a sparse
# file of 64 GiB takes no disk and would otherwise be read whole).
MAX_SOURCE_FILE = 4 * 2**30
MAX_SOURCES = 16 * 2**30


def check_sizes(project_dir: Path, sizes: dict[str, int]) -> None:
    """Refuse, with one line naming the file or the total and the limit, a project over the bounds above."""

    advice = "leave it out of the project's files (.gitignore), or build from a copy without it"
    for rel, size in sizes.items():
        if size > MAX_SOURCE_FILE:
            raise CiError(f"{project_dir / rel} is {format_size(size)}, over the {format_size(MAX_SOURCE_FILE)} a "
                          f"project file may hold (a build hashes and copies every file): {advice}")
    total = sum(sizes.values())
    if total > MAX_SOURCES:
        largest = max(sizes, key=lambda rel: sizes[rel])
        raise CiError(f"the files of {project_dir} hold {format_size(total)}, over the {format_size(MAX_SOURCES)} "
                      f"a build copies (the largest: {largest}, {format_size(sizes[largest])}): {advice}")


def _digest(path: Path, mode: int) -> str:
    """A source file as the snapshot records it: its bytes (streamed, at most MAX_SOURCE_FILE of them), and
    whether it is executable."""

    return sha256_file(path, MAX_SOURCE_FILE) + ("+x" if mode & 0o111 else "")


def _copy_checked(project_dir: Path, rel: str, target: Path, digest: str) -> None:
    """Copy one project file, streamed and hashed on the way: bytes other than the snapshot's (the file
    changed since) leave no copy behind."""
    source = project_dir / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    h, copied = hashlib.sha256(), 0
    with open(source, "rb") as src, open(target, "wb") as dst:
        mode = os.fstat(src.fileno()).st_mode
        while copied <= MAX_SOURCE_FILE and (chunk := src.read(1 << 20)):
            copied += len(chunk)
            h.update(chunk)
            dst.write(chunk)
    if copied > MAX_SOURCE_FILE or h.hexdigest() + ("+x" if mode & 0o111 else "") != digest:
        target.unlink()
        raise SourcesChanged(f"{source} changed while the build was reading the project: build again")
    shutil.copymode(source, target)


# --- the kept build tree -------------------------------------------------------------------------

# What a build writes in its work directory is declared in wheelci.util.layout (WORK): --fresh removes the
# entries a build remakes, and every entry's name is stripped of a planted link before a build writes.
WORK_ENTRIES = layout.names(layout.WORK, fresh=True)

# Plan fields that do not reach the compile: a build differing only in these reuses its compile.
AFTER_COMPILE = ("notes", "script", "label", "variants", "limit", "test_command", "test_requires", "upload", "excludes",
                 "allow_no_device_code", "compile_cache")  # a cache hit never changes the bytes
# ... and those a build tree does not depend on either: the tree (its object files) is the same, the
# backend rebuilds what they change; and never a variable's value (a job token would name a new tree per job)
NOT_IN_TREE_KEY = (*AFTER_COMPILE, "source_date_epoch", "inherited", "build_env", "environment", "public_env",
                   "fetched")  # where an sdist was fetched from (a signed link's query) is not what it is


TOOLCHAIN_VARIABLES = ("CC", "CXX", "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDAFLAGS", "CMAKE_ARGS",
                       "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


# What a configure (CMake's, meson's) searches besides the project: the directories these variables and
# flags name, each with what lies below it. A header or library appearing there changes what a search
# finds although no variable changed.
SEARCH_VARIABLES = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "PKG_CONFIG_PATH",
                    "PKG_CONFIG_LIBDIR", "CMAKE_PREFIX_PATH", "CMAKE_INCLUDE_PATH", "CMAKE_LIBRARY_PATH",
                    "CMAKE_PROGRAM_PATH", "CMAKE_FRAMEWORK_PATH")
SEARCH_FLAGS = ("CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CMAKE_ARGS", "CUDAFLAGS")
SEARCH_DEPTH, SEARCH_ENTRIES = 5, 2000  # how far below each directory is listed, at most
HASHED_SIZE = 1 << 20  # a searched file up to this size counts by its bytes, a larger one by its mtime
TOOL_ROOTS = ("PYENV_ROOT", "CONDA_ROOT", "RBENV_ROOT", "CUDA_ROOT")  # *_ROOT variables no find_package reads


def search_dirs(environ: Mapping[str, str]) -> list[Path]:
    """The directories a configure may search, as the environment names them: path lists, <Pkg>_ROOT
    hints, and -I/-isystem/-L flags; a pkg-config directory stands for its prefix (its .pc files name
    the headers and libraries there)."""
    named = [d for var in SEARCH_VARIABLES for d in environ.get(var, "").split(":")]
    named += [v for k, v in environ.items() if k.endswith("_ROOT") and k not in TOOL_ROOTS]
    for var in SEARCH_FLAGS:
        try:
            words = shlex.split(environ.get(var, ""))
        except ValueError:
            continue
        for word, after in zip(words, [*words[1:], ""]):
            flag = next((f for f in ("-isystem", "-idirafter", "-iquote", "-I", "-L") if word.startswith(f)), None)
            if flag is not None:
                named.append(word[len(flag):] or after)
    dirs = []
    for d in (Path(n) for n in named if n.startswith("/")):
        if d.name == "pkgconfig" and d.parent.name.startswith(("lib", "share")):
            d = d.parent.parent
        if d.is_dir() and d not in dirs:
            dirs.append(d)
    return dirs


def listing(top: Path) -> list[list[str | int | None]]:
    """What lies below top, as a search sees it: each entry's path, a link's target, its size, and a regular
    file up to HASHED_SIZE by its digest (a header written again with the same bytes, as a fresh work tree's
    staged ones are, is the same entry), anything else by its mtime; SEARCH_DEPTH deep and SEARCH_ENTRIES
    long at most (a system prefix is not walked whole)."""
    seen: list[list[str | int | None]] = []
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        depth = len(here.relative_to(top).parts)
        if depth >= SEARCH_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")  # written by whoever imports
        for name in sorted([*filenames, *(d for d in dirnames if (here / d).is_symlink())]):
            path = here / name
            try:
                st = path.lstat()
                target = os.readlink(path) if path.is_symlink() else None
            except OSError:
                continue
            seen.append([str(path.relative_to(top)), target, st.st_size, _content(path, st)])
            if len(seen) >= SEARCH_ENTRIES:
                return seen
    return seen


def _content(path: Path, st: os.stat_result) -> str | int:
    """A small regular file's digest (opened without following a link or waiting on a FIFO swapped in),
    else the mtime."""
    if not (stat.S_ISREG(st.st_mode) and st.st_size <= HASHED_SIZE):
        return st.st_mtime_ns
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return st.st_mtime_ns
    try:
        now = os.fstat(fd)
        if stat.S_ISREG(now.st_mode) and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):  # the entry listed
            return sha256_file(os.dup(fd), limit=HASHED_SIZE)  # the descriptor read and closed
    except (OSError, CiError):  # unreadable, or grown past the limit while read
        pass
    finally:
        os.close(fd)
    return st.st_mtime_ns


def searched(environ: Mapping[str, str], base: Path | None = None) -> str:
    """One digest of what the directories the environment names hold (search_dirs, listing). A directory
    below `base` is named relative to it, as ccache names every path below its base directory: the staged
    headers of two work trees (their compat/) are one input where they hold the same files."""
    doc = {_named(d, base): listing(d) for d in search_dirs(environ)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _named(directory: Path, base: Path | None) -> str:
    if base is not None:
        for d, b in ((directory, base), (directory.resolve(), base.resolve())):
            if d == b or b in d.parents:
                return str(Path("<base>") / d.relative_to(b))
    return str(directory)


def configure_inputs(environ: Mapping[str, str]) -> str:
    """One digest of what a configure reads besides the project: every variable (a CMakeLists may read any
    $ENV{...}, find_package reads <Pkg>_ROOT) and what the directories they name hold. A changed digest
    reconfigures the kept tree (reconfigure_if_changed); values are only ever hashed."""
    doc = {"environ": dict(sorted(environ.items())), "searched": searched(environ)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def note_searched(path: Path, environ: Mapping[str, str]) -> Path:
    """The searched directories' digest in a file, for ccache to hash with every compile
    (CCACHE_EXTRAFILES): its direct mode checks the headers a compile read last time, so a header that
    appears in a directory searched before theirs would be a stale hit, in a fresh tree too. `path` lies in
    the work directory, ccache's base: what lies below it is named relative to it, so a tree at another path
    (another clone, another test) hits what this one compiled."""

    write_text(path, searched(environ, base=path.parent) + "\n")
    return path


def read_record(record: Path) -> str | None:
    """A record the build keeps in its work directory (a digest), or None: missing, or a link planted
    there, which is never read through."""
    return record.read_text() if record.is_file() and not record.is_symlink() else None


def reconfigure_if_changed(build_dir: Path, record: Path, inputs: str, *, meson: bool) -> bool:
    """Drop a kept tree's configure results when what the configure read changed since it ran: CMake
    answers find_path/find_package from CMakeCache.txt and reads CC, CFLAGS and LDFLAGS at its first
    configure only, meson keeps its first environment and found dependencies in its build directory.
    The object files stay (CMake's; ninja rebuilds what the new configure changes); meson's tree is made
    anew. True when something was dropped."""

    kept = read_record(record)
    dropped = False
    if kept != inputs:
        if meson and build_dir.is_dir():
            _remove(build_dir)
            dropped = True
        elif (build_dir / "CMakeCache.txt").is_file():
            (build_dir / "CMakeCache.txt").unlink()
            dropped = True
    write_text(record, inputs)
    return dropped


def recompile_if_changed(trees: list[Path], record: Path, inputs: str) -> bool:
    """A setuptools tree (torch's cpp_extension compiles with ninja) has no configure, and ninja rebuilds by
    mtimes only: when what the compile searches changed since the tree's last compile (a variable such as
    CPATH, what a searched directory holds), ninja's logs go, so every object is compiled again (ccache,
    keyed by the searched directories too, answers what did not change). True when a log was dropped."""

    kept = read_record(record)
    dropped = False
    if kept != inputs:
        for tree in trees:
            for name in (".ninja_log", ".ninja_deps"):
                log = tree / name
                if log.is_file() and not log.is_symlink():
                    log.unlink()
                    dropped = True
    write_text(record, inputs)
    return dropped


def forget_unseen_changes(project_dir: Path, build_dir: Path, record: Path, files: dict[str, str]) -> bool:
    """A project compiled in place (CMake, meson: no copy) can change where ninja's mtime check does not
    look: a link retargeted to an older file, a file replaced by an older one (cp -p, tar x). When a file
    differs from the tree's last compile and is not newer than that compile's start, ninja's log is
    dropped, so every object is compiled again (ccache answers the unchanged ones). Records this compile.
    True when the log was dropped."""

    last = _read_json(record)
    started, built = last.get("started_ns"), last.get("files")
    changed = [rel for rel, digest in files.items() if not isinstance(built, dict) or built.get(rel) != digest]

    def older(rel: str, since: int) -> bool:
        try:
            return (project_dir / rel).stat().st_mtime_ns <= since
        except OSError:  # gone since the snapshot: the compile fails or the next snapshot sees it
            return True

    unseen = isinstance(started, int) and any(older(rel, started) for rel in changed)
    log = build_dir / ".ninja_log"
    if unseen and log.is_file():
        log.unlink()
    write_text(record, json.dumps({"started_ns": time.time_ns(), "files": files}, sort_keys=True))
    return unseen


def compile_view(plan: Plan) -> dict[str, Any]:
    """What of a Plan the compile reads."""
    return {k: v for k, v in plan.flat().items() if k not in AFTER_COMPILE}


def tree_key(project_dir: Path, plan: Plan, sdist: str | None = None) -> str:
    """The kept build tree of a project and a Plan: its directory (an sdist: its digest, not the directory
    it was read in), and what of the plan shapes the tree."""
    fields = {k: v for k, v in plan.flat().items() if k not in NOT_IN_TREE_KEY and not (sdist and k == "project_dir")}
    fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items()}  # an index URL's job token
    # CMake and meson read the compiler and its flags at the first configure only: another one, another tree
    given = {**plan.inherited, **plan.run.build_env}
    fields["toolchain"] = {k: given[k] for k in sorted(given) if k in TOOLCHAIN_VARIABLES}
    doc = json.dumps({"project": f"sdist {sdist}" if sdist else str(project_dir.resolve()), "plan": fields},
                     sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:20]


def _safe_rel(rel: object) -> bool:
    """A recorded path that may be joined to a directory this tool owns: relative, and never climbing."""
    return isinstance(rel, str) and bool(rel) and not Path(rel).is_absolute() and ".." not in Path(rel).parts


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_stamp(path, 64 << 20))  # never a link's target, never a FIFO's wait
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _kept_digest(old: object, key: list[int], taken: int) -> str | None:
    """The digest the last snapshot recorded (`old`: its stat `key` and digest) while it still holds: the
    same stat, and not modified within a second of being seen."""
    if (isinstance(old, list) and len(old) == 6 and old[:5] == key and max(key[1:3]) < taken - 10**9
            and isinstance(old[5], str) and re.fullmatch(r"[0-9a-f]{64}(\+x)?", old[5])):
        return old[5]
    return None


def snapshot_sources(project_dir: Path, work: Path, leave_out: tuple[Path, ...] = ()) -> tuple[dict[str, str], str]:
    """The project's files (as project_files lists them, less work directories and leave_out) with their
    sha256, and one digest of them all and the git revision.

    A file keeps its last digest only while its size, mtime, ctime and inode are those seen then, and it
    was not modified within a second of being seen (git's racy-clean rule): a copy that keeps mtimes
    (rsync -a, tar x) still changes the ctime, and an edit right after a snapshot is read again."""

    last = _read_json(work / SOURCES)
    taken_ns, known_files = last.get("taken_ns"), last.get("files")
    taken = taken_ns if isinstance(taken_ns, int) else 0
    known = known_files if isinstance(known_files, dict) else {}
    root = project_dir.resolve()
    # only what lies inside the project: a -w above it (the workspace) must not leave the project out
    skip = [q for q in (p.resolve() for p in leave_out) if q != root and q.is_relative_to(root)]
    seen: dict[str, list[int | str]] = {}
    files: dict[str, str] = {}
    memo: dict[Path, bool] = {}
    now = time.time_ns()
    stats = {str(rel): (project_dir / rel).stat() for rel in project_files(project_dir)
             if not (in_work_dir(project_dir, rel, memo)
                     or any((project_dir / rel).resolve().is_relative_to(s) for s in skip))}
    check_sizes(project_dir, {rel: st.st_size for rel, st in stats.items()})
    for rel, st in stats.items():
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]
        sha = _kept_digest(known.get(rel), key, taken) or _digest(project_dir / rel, st.st_mode)
        seen[rel], files[rel] = [*key, sha], sha
    r = proc.run(["git", "rev-parse", "HEAD"], what="reading the project's revision", check=False, cwd=project_dir,
                 capture_output=True, text=True) if (project_dir / ".git").exists() else None
    revision = r.stdout.strip() if r is not None and r.returncode == 0 else None
    write_text(work / SOURCES, json.dumps({"taken_ns": now, "files": seen}, sort_keys=True))
    digest = hashlib.sha256(json.dumps([files, revision], sort_keys=True).encode()).hexdigest()
    return files, digest


def _ours(dest: Path, rel: str, checked: set[Path]) -> Path:
    """dest/rel with no link on the way: a link this tool did not make (a planted one) is removed, so
    nothing is ever written or deleted through it outside dest."""
    target = dest
    for part in Path(rel).parts[:-1]:
        target = target / part
        if target not in checked:
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                target.unlink()
            checked.add(target)
    return target / Path(rel).name


def stage_files(source: Path, work_dir: Path, name: str) -> Path:
    """The files below `source` copied to work_dir/name, no link on the way followed (a planted one goes), a
    copy already current left as it is (its mtime too: ninja would compile everything again), and what
    `source` no longer holds removed."""

    checked: set[Path] = set()
    wanted = {str(Path(name) / p.relative_to(source)) for p in source.rglob("*") if p.is_file()}
    for rel in sorted(wanted):
        copy, original = _ours(work_dir, rel, checked), source / Path(rel).relative_to(name)
        if copy.is_symlink() or not copy.is_file() or copy.read_bytes() != original.read_bytes():
            copy.parent.mkdir(parents=True, exist_ok=True)
            if copy.is_dir() and not copy.is_symlink():
                shutil.rmtree(copy)
            copy.unlink(missing_ok=True)  # a planted link goes; nothing is written through it
            with atomic_path(copy) as tmp:
                shutil.copyfile(original, tmp)
    staged = work_dir / name
    for stale in [p for p in staged.rglob("*") if p.is_file() and str(p.relative_to(work_dir)) not in wanted]:
        stale.unlink()
    return staged


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def sync_project(project_dir: Path, dest: Path, files: dict[str, str]) -> Path:
    """Make dest hold the project's files as the snapshot `files` saw them, keeping what the build wrote
    there (setuptools' build/ tree): a file the project deleted is removed (and the directories it
    leaves empty), a changed one is copied with a new mtime (so ninja and make rebuild it and what
    includes it), an unchanged one is left as it is. A file whose bytes differ from the snapshot changed
    during the build: one error line, build again.

    The record of what the copy holds (COPIED: each file's digest and the copy's size and mtime) is
    written before anything is copied, with what is about to change marked unknown, so an interrupted
    sync is finished by the next; a copy the build or a user changed is copied again; a copy with no
    readable record is made anew."""

    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        dest.unlink()
    record = dest.parent / COPIED
    copied = _read_json(record) if dest.is_dir() else {}
    if dest.is_dir() and not copied:
        shutil.rmtree(dest)  # made by an earlier release, or its record lost: nothing in it is known
    checked: set[Path] = set()
    for rel in sorted(copied.keys() - files.keys()):
        if _safe_rel(rel):
            gone = _ours(dest, rel, checked)
            if gone.is_symlink() or gone.is_file():
                gone.unlink()
            for parent in gone.parents:  # directories it leaves empty
                if parent == dest or not parent.is_dir() or any(parent.iterdir()):
                    break
                parent.rmdir()
    dest.mkdir(parents=True, exist_ok=True)

    def same(rel: str, digest: str) -> bool:
        target, was = _ours(dest, rel, checked), copied.get(rel)
        if not (isinstance(was, list) and len(was) == 3 and was[0] == digest and target.is_file()
                and not target.is_symlink()):
            return False
        st = target.stat()
        return [st.st_size, st.st_mtime_ns] == was[1:]

    stale = {rel for rel, digest in files.items() if not same(rel, digest)}
    write_text(record, json.dumps({rel: copied.get(rel) if rel not in stale else None
                                   for rel in copied.keys() | files.keys()}, sort_keys=True))
    for rel in sorted(stale):
        target = _ours(dest, rel, checked)
        if target.exists() or target.is_symlink():
            _remove(target)
        _copy_checked(project_dir, rel, target, files[rel])
        st = target.stat()
        copied[rel] = [files[rel], st.st_size, st.st_mtime_ns]
    write_text(record, json.dumps({rel: copied[rel] for rel in files}, sort_keys=True))
    return dest


def clear_outputs(src: Path, files: dict[str, str]) -> None:
    """What setuptools packs into a wheel from an earlier build (build/lib*, build/bdist*, *.egg-info at the
    top or under src/): cleared before each compile, so a module the project deleted, or another
    project's package built in the same work directory, never ships. build/temp* (the object files,
    ninja's tree) is kept, and so is anything holding one of the project's own files."""
    own = {Path(rel).parts[:2] for rel in files} | {Path(rel).parts[:1] for rel in files}
    build = src / "build"
    if build.is_symlink():
        build.unlink()  # planted: never followed
    entries = [*(build.iterdir() if build.is_dir() else []), *src.glob("*.egg-info"), *src.glob("src/*.egg-info")]
    for entry in entries:
        rel = entry.relative_to(src).parts
        if not entry.name.startswith("temp") and rel not in own:
            _remove(entry)


def clear_work_dir(work: Path) -> None:
    """--fresh: what a build writes in its work directory (WORK_ENTRIES); anything else there stays."""
    for name in WORK_ENTRIES:
        entry = work / name
        if entry.exists() or entry.is_symlink():
            _remove(entry)


def kept_tree(root: Path, project_dir: Path, plan: Plan, sdist: str | None = None) -> Path:
    """The build tree a build of this project and Plan keeps between runs (made and marked if new): a
    directory's by its path, an sdist's by its digest (`sdist`: wherever it was unpacked to be read). Trees
    whose project directory is gone are removed first, unless a build holds them; an sdist's stay, within
    the cache cap."""
    prune_trees(root)
    tree = root / tree_key(project_dir, plan, sdist)
    drop_links(root, [tree.name])  # a link planted as the tree: made anew, never written through
    own_work_dir(tree)
    write_text(tree / TREE, json.dumps({"sdist": sdist} if sdist else {"project": str(project_dir.resolve())}))
    return tree


def unpack_into(sdist: Path, work: Path) -> Path:
    """The sdist unpacked afresh into the work directory's `sdist` entry, where every build of it finds its
    source at one path (the compile cache's keys, CMake's cache and the prefix maps name it)."""
    dest = work / "sdist"
    if dest.exists() or dest.is_symlink():
        shutil.rmtree(dest) if dest.is_dir() and not dest.is_symlink() else dest.unlink()
    return extract_sdist(sdist, dest)


def prune_trees(root: Path) -> None:
    for tree in sorted(root.iterdir()) if root.is_dir() else []:
        project = _read_json(tree / TREE).get("project")
        if not (tree / WORK_MARK).is_file() or not isinstance(project, str) or Path(project).is_dir():
            continue  # not a tree of ours, or its project is still there
        with unless_locked(tree) as free:
            if free:
                shutil.rmtree(tree, ignore_errors=True)
