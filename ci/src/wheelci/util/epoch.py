"""SOURCE_DATE_EPOCH, read in one place: the time every file a build writes carries.

A build fixes it once (the variable, else the project's last commit: two builds of one commit write the
same bytes) and hands it to what it runs in this process through `fixed`, instead of writing it into
os.environ for everything started later; a stage run alone reads the variable.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
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


def for_build(environ: Mapping[str, str], project_dir: Path) -> int | None:
    """A build's timestamp: the variable, else the project's last commit, else None (now)."""
    given = from_environ(environ)
    return given if given is not None else last_commit(project_dir)


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
