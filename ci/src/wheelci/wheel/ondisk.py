"""Files of an unpacked or installed wheel, read from disk: regular files only, with a size bound.

A directory given to a stage (a site-packages, a `--target` dir, an unpacked wheel) is input like a wheel
is: its METADATA or RECORD may be a FIFO (an open for reading waits for a writer forever) or a link to
/dev/zero (a read never ends). So the type is checked before the open and again on the open file, the
open never waits (O_NONBLOCK), and at most one byte past the bound is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from wheelci.errors import CiError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: Path | str, cap: int) -> bytes:
    """The bytes of `path` (links followed), refused with one line unless it is a regular file of at most
    `cap` bytes. A missing file raises FileNotFoundError, for callers to whom that is news, not bad input."""
    path = Path(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise CiError(f"{path} is {_kind(st.st_mode)}, not a regular file: refused")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CiError(f"cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)  # what was opened, should the path have been swapped since the stat
        if not stat.S_ISREG(st.st_mode):
            raise CiError(f"{path} is {_kind(st.st_mode)}, not a regular file: refused")
        if st.st_size > cap:
            raise CiError(f"{path} is {st.st_size} bytes, over the {cap >> 20} MiB this tool reads for it")
        chunks, total = [], 0
        while total <= cap and (chunk := os.read(fd, min(1 << 20, cap + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise CiError(f"cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if total > cap:  # it grew while read
        raise CiError(f"{path} is over the {cap >> 20} MiB this tool reads for it")
    return b"".join(chunks)


def read_regular_text(path: Path | str, cap: int) -> str:
    """read_regular, as UTF-8 (what the wheel spec requires of METADATA and RECORD)."""
    data = read_regular(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CiError(f"{path} is not valid UTF-8 (byte {e.start})") from None
