"""SOURCE_DATE_EPOCH, read in one place: the time every file a build writes carries.

A build fixes it once (the variable, else the project's last commit, else an sdist's newest member: two
builds of one commit, or of one sdist, write the same bytes) and hands it to what it runs in this process through `fixed`, instead of writing it into
os.environ for everything started later; a stage run alone reads the variable.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
import subprocess
from pathlib import Path
from typing import Iterator, Mapping

from wheelci.errors import CiError

_FIXED: contextvars.ContextVar[int | None] = contextvars.ContextVar("source_date_epoch", default=None)


def from_environ(environ: Mapping[str, str]) -> int | None:
    """The variable's value, None where it is unset or empty; anything but an integer is bad input."""
    value = environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise CiError(f"SOURCE_DATE_EPOCH is not an integer: {value!r}") from None


def last_commit(project_dir: Path) -> int | None:
    """The time of the last commit touching the project directory, None outside a git checkout."""
    try:
        r = subprocess.run(["git", "-C", str(project_dir), "log", "-1", "--format=%ct", "--", "."],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else None


def newest_member(project_dir: Path, cap: int = 100_000) -> int | None:
    """An unpacked sdist's time: the newest modification time among its regular files, as its tar members
    carry them (the extraction keeps them), None where the directory is no sdist (no PKG-INFO at its top). The
    same sdist gives the same time on any machine and on every rebuild."""
    if not (project_dir / "PKG-INFO").is_file():
        return None
    newest = None
    for count, path in enumerate(project_dir.rglob("*")):
        if count >= cap:
            break
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):  # a directory the extraction made has no member's time
            newest = max(newest or 0, int(st.st_mtime))
    return newest


def for_build(environ: Mapping[str, str], project_dir: Path) -> int | None:
    """A build's timestamp: the variable, else the project's last commit, else an sdist's newest member,
    else None (now)."""
    given = from_environ(environ)
    if given is not None:
        return given
    commit = last_commit(project_dir)
    return commit if commit is not None else newest_member(project_dir)


@contextlib.contextmanager
def fixed(epoch: int | None) -> Iterator[None]:
    """Within the block, `current` answers epoch (None: the variable's value, as outside)."""
    token = _FIXED.set(epoch)
    try:
        yield
    finally:
        _FIXED.reset(token)


def current() -> int | None:
    """What the wheel writers stamp: the build's fixed time, else SOURCE_DATE_EPOCH, else None."""
    fixed_now = _FIXED.get()
    return fixed_now if fixed_now is not None else from_environ(os.environ)
