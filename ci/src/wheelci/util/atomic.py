"""Atomic output: write to a temp file beside the destination, rename on success.

A crash or an error leaves no half-written wheel in the output directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_path(dest: Path | str) -> Iterator[Path]:
    """Yield a temp path in dest's directory; on clean exit rename it over dest, else delete it."""
    dest = Path(dest)
    made = make_dirs(dest.parent)
    tmp: Path | None = None
    done = False
    try:  # armed before the file exists: SIGTERM raises at any bytecode (ci.cli), even right after the open
        for _ in range(100):
            tmp = dest.parent / f".{dest.name}.{os.urandom(5).hex()}.part"
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
                break
            except FileExistsError:  # someone else's: never ours to delete
                tmp = None
        else:
            raise FileExistsError(f"no free temporary name beside {dest}")
        yield tmp
        # the file is 0600 so far; give it the mode a plain open() would (readable by a web server).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
        done = True
    finally:
        if tmp is not None and not done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if not done:
            remove_empty(made)


def make_dirs(path: Path) -> list[Path]:
    """mkdir -p, returning the directories it created (outermost first): a refused run removes them."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    made = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:  # made meanwhile by someone else: theirs
            continue
        made.append(d)
    return made


def remove_empty(dirs: list[Path]) -> None:
    """Remove these directories, innermost first, where they are still empty (never their content)."""
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            d.rmdir()


def _umask() -> int:
    """The process umask, read without changing it where /proc tells (set+restore races other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(dest: Path | str, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)


def fresh_file(path: Path, mode: int = 0o644) -> BinaryIO:
    """A new file at `path` for writing, whatever was there: a planted link, a hard link to someone's file,
    a FIFO or an earlier file of ours is unlinked first, never written through, truncated or blocked on
    (a log a build writes as it goes, where a rename at the end would lose it on a crash)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode & ~_umask())
    return os.fdopen(fd, "wb")


def fresh_text(path: Path, text: str, mode: int = 0o644) -> None:
    """fresh_file's, written whole with `text` (a launcher script: 0o755)."""
    with fresh_file(path, mode) as f:
        f.write(text.encode())
    os.chmod(path, mode)
