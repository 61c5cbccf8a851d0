"""One lock for shared state: an index directory, a cache entry, a build environment.

Runs that share one of these (two CI jobs on one machine, a developer's second terminal) each do a
read-modify-write: read what is there, decide, write. Two of them interleaved lose each other's
writes (a project missing from an index's root page, an environment half rebuilt under a running
build). Every writer of shared state holds an exclusive `fcntl.flock` around the whole of it; the
second run waits, and says so on a progress line, so a pause is never a mystery.

flock, not a lock file that exists or not: the kernel drops the lock when its holder exits, however
it exits (SIGKILL, a crash), so a killed run never leaves a lock behind that blocks the next.
A directory is locked through the directory itself (no file left in a user's directory); a cache
entry, which is replaced whole, through a lock file beside it that is never deleted (deleting it
would let a third run lock a new file while the second still holds the old one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import Iterator

from wheelci.errors import CiError
from wheelci.util import log

# flock on a directory fails on some network filesystems: a lock file inside it is the fallback.
DIR_LOCK_FALLBACK = ".ci-lock"


def _flock(fd: int, path: Path, what: str, mode: int = fcntl.LOCK_EX) -> None:
    """Take the lock, waiting (with a progress line) while another run holds it."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    log.info(f"waiting for another run that is using {what} ({path})")
    fcntl.flock(fd, mode)


@contextlib.contextmanager
def locked_file(path: Path | str, what: str, *, shared: bool = False) -> Iterator[int]:
    """Hold the lock file `path` (created where missing, never removed) exclusively, or shared with other
    readers (a writer waits for all of them, and they for it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise CiError(f"cannot lock {what}: {path}: {e.strerror}") from None
    try:
        _flock(fd, path, what, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def locked_dir(path: Path | str, what: str) -> Iterator[int]:
    """Hold the existing directory `path` exclusively, through the directory itself.

    Checked after the wait: a directory removed (and perhaps made again) by the run it waited for is
    not the one locked, so it is opened and locked again."""
    path = Path(path)
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise CiError(f"cannot lock {what}: {path}: {e.strerror}") from None
        try:
            if not _flock_dir(fd, path, what):
                break  # this filesystem cannot lock a directory: the fallback below
            if _still(fd, path):
                yield fd  # a child given it (pass_fds) holds the lock as long as it runs
                return
        finally:
            os.close(fd)
    with locked_file(path / DIR_LOCK_FALLBACK, what) as fd:
        yield fd


def _flock_dir(fd: int, path: Path, what: str) -> bool:
    """Lock a directory's descriptor; False where the filesystem cannot (some network ones)."""
    try:
        _flock(fd, path, what)
    except OSError as e:
        if e.errno in (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
            return False
        raise CiError(f"cannot lock {what}: {path}: {e.strerror}") from None
    return True


def _still(fd: int, path: Path) -> bool:
    """The descriptor is still the directory at path (not one removed while this run waited)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def locked_dirs(paths: list[Path], what: str) -> Iterator[None]:
    """Hold several existing directories, each once, in one order every run uses (by device and
    inode): two runs locking the same pair never wait on each other crosswise."""
    unique: dict[tuple[int, int], Path] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            raise CiError(f"cannot lock {what}: {p}: {e.strerror}") from None
        unique.setdefault((st.st_dev, st.st_ino), p)
    with contextlib.ExitStack() as stack:
        for key in sorted(unique):
            stack.enter_context(locked_dir(unique[key], what))
        yield


@contextlib.contextmanager
def unless_locked(path: Path | str) -> Iterator[bool]:
    """Hold `path` (a directory, or an existing lock file) exclusively if no run holds it now (yields True),
    without waiting; False otherwise (held, gone, or not lockable here): for clean-ups that must never take
    what a running build uses. A lock file is never created here: its holders make it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


_HELD: list[int] = []  # descriptors held_for_process keeps open: the process's shared holds


def held_for_process(path: Path | str, what: str) -> bool:
    """Hold the directory `path` shared for the rest of this process (the kernel drops it at exit, however
    the process ends): what unless_locked then cannot take. Waits while a clean-up holds it; False where the
    directory is gone, or another was put at its path, by the time the hold is taken."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        _flock(fd, path, what, fcntl.LOCK_SH)
    except OSError:  # a filesystem that cannot lock a directory: nothing to hold it with
        os.close(fd)
        return True
    if not _still(fd, path):
        os.close(fd)
        return False
    _HELD.append(fd)
    return True
