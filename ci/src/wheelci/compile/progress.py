"""A compile's progress as a person plans by it: `3 of 12 files, about 9 min left`.

The build tool's own counter is read from its output lines (`read`, pure): ninja's `[N/M]` (torch's
cpp_extension, CMake's Ninja generator), CMake's Makefile `[ NN%]`, and, where setuptools compiles file
by file with no total, each compiler run it prints. `estimate` projects the time left at the pace since
the first count (what ran before it, a configure or the build environment, is not the compile's pace).
A Tracker holds the counts seen and says the status at any moment; util.log.Ticker shows it: one line
redrawn on a terminal, a plain line every WHEELCI_HEARTBEAT seconds in logs and CI.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

from wheelci.util.log import duration

_NINJA = re.compile(rb"^\s*\[(\d{1,9})/(\d{1,9})\] ")  # ninja's [12/40]; a longer number is no count
_MAKE = re.compile(rb"^\s*\[\s*(\d{1,3})%\] ")  # make's [ 42%] (CMake's Makefile generator)
# a compiler run on one source, as setuptools prints it (gcc, g++, c++, clang, nvcc; a path, a version suffix)
# read word by word (a pattern with `.*\s-c\s+(?:\S+\s+)*?` backtracks quadratically on a line of `-c`s)
_COMPILER = re.compile(rb"\S*(?:gcc|g\+\+|c\+\+|cc|clang|clang\+\+|nvcc)(?:-\d+(?:\.\d+)*)?")
_SOURCE = (b".c", b".cc", b".cpp", b".cxx", b".cu")


@dataclass(frozen=True)
class Count:
    """How far a compile is by its tool's count: `done` of `total` (None: the tool says no total)."""

    done: int
    total: int | None
    unit: str  # "files" (ninja's steps, a file each), "%" (make), "compiled" (setuptools' runs, no total)


def read(line: bytes, last: Count | None = None) -> Count | None:
    """The count one output line says, given the last one (setuptools' lines are counted); None when the
    line says none."""
    if m := _NINJA.match(line):
        return Count(int(m[1]), int(m[2]), "files")
    if m := _MAKE.match(line):
        return Count(int(m[1]), 100, "%")
    if len(line) < 8192 and _compiles(line):
        return Count((last.done if last and last.unit == "compiled" else 0) + 1, None, "compiled")
    return None


def _compiles(line: bytes) -> bool:
    """A compiler run on a source: the compiler first, then (past its first option) `-c`, then a source."""
    words = line.split()
    if not words or line[:1].isspace() or not _COMPILER.fullmatch(words[0]) or b"-c" not in words[2:]:
        return False
    after = words[words.index(b"-c", 2) + 1:]
    return any(len(w) > len(ext) and w.endswith(ext) for w in after for ext in _SOURCE)


def estimate(first: tuple[float, Count], last: tuple[float, Count]) -> float | None:
    """Seconds left after `last` ((time, count)), at the pace since `first`; None where there is no total
    or no pace yet (one count, or none done since the first)."""
    (t0, c0), (t1, c1) = first, last
    if c1.total is None or c1.done <= c0.done or t1 < t0 or c1.done >= c1.total:
        return None
    return (t1 - t0) / (c1.done - c0.done) * (c1.total - c1.done)


def describe(count: Count, left: float | None) -> str:
    """`3 of 12 files, about 9 min left`, `42% of the steps`, `5 files compiled`."""

    if count.unit == "%":
        text = f"{count.done}% of the steps"
    elif count.total is None:
        text = f"{count.done} file{'s' if count.done != 1 else ''} compiled"
    else:
        text = f"{count.done} of {count.total} files"
    if left is not None:
        text += f", about {duration(max(left, 1))} left" if left > 0 else ", past the estimate"
    return text


class Tracker:
    """The counts a compile's lines say, and its status at any moment (called by the Ticker's timer)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.first: tuple[float, Count] | None = None
        self.last: tuple[float, Count] | None = None

    def feed(self, line: bytes) -> bool:
        """Read one output line; True when it held a count."""
        count = read(line, self.last[1] if self.last else None)
        if count is None:
            return False
        now = self.clock()
        if self.first is None or (self.last and count.unit != self.last[1].unit) or count.done < self.first[1].done:
            self.first = (now, count)  # a new counter (a second ninja run, another tool): its own pace
        self.last = (now, count)
        return True

    def __call__(self) -> str:
        if self.last is None or self.first is None:
            return ""
        left = estimate(self.first, self.last)
        return describe(self.last[1], None if left is None else left - (self.clock() - self.last[0]))
