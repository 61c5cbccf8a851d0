"""The cause of a failure, read from what the failed command printed: one line a person can act on.

A failed import, compile or test run ends in what is least telling: the last frame of a C++ backtrace
(`frame #37: _start + 0x21`), `ninja: build stopped: subcommand failed.`, a build backend's
`CalledProcessError`, pytest's `1 failed in 3.2s`. The cause is further up: the exception's message
(c10::Error's `what():`, the line a Python traceback ends with), the compiler's first error, the test that
failed. `cause` picks it by the conventions these tools print with, most telling first; the whole output
goes to a log file the report names, so nothing is lost by showing one line.
"""

from __future__ import annotations

import re

from wheelci.util import secret

LIMIT = 300  # characters of the line shown

# pytest's short summary: `FAILED tests/test_x.py::test_a - AssertionError: ...`, `ERROR tests/...`
_PYTEST_SUMMARY = re.compile(r"^(?:FAILED|ERROR) \S+(?: - .*)?$")
# an uncaught C++ exception (std::terminate) and c10::Error's own text
_WHAT = re.compile(r"^\s*what\(\):\s*(.+)$")
# GCC/Clang `file.cpp:11:17: error: ...`, nvcc `file.cu(12): error: ...`, nvcc's own `nvcc fatal   : ...`
_COMPILER = re.compile(r"^\S+?:\d+(?::\d+)?: (?:fatal )?error: |^\S+?\(\d+\): (?:catastrophic )?error: "
                       r"|^nvcc (?:fatal|error)\s*: |^(?:gcc|g\+\+|c\+\+|cc1plus|clang\+*): (?:fatal )?error: ")
# the linker's own lines, before collect2's `ld returned 1 exit status`
_LINKER = re.compile(r"undefined reference to |^/?\S*\bld(?:\.\w+)?: (?:cannot find|error:)|multiple definition of ")
# where a Python traceback ends: `Module.Error: message` or a bare exception name, not indented
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)(?::.*)?$")
# lines that never are the cause: backtrace frames, a build tool's sign-off, pip's boxed notes
_NOISE = re.compile(r"^\s*(?:frame #\d+:|Exception raised from |ninja: build stopped|collect2: error: ld returned"
                    r"|error: subprocess-exited-with-error|error: command '.*' failed with exit code|note: |hint: "
                    r"|[│╰─>×]|={3,}|-{3,}|\[end of output\]|Traceback \(most recent)")


def cause(output: str, limit: int = LIMIT) -> str:
    """The first meaningful line of a failed command's output ('' for an output with no line at all)."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    found = (_summary_line(lines) or _first(lines, _WHAT, group=1) or _first(lines, _COMPILER)
             or _first(lines, _LINKER) or _exception_line(lines) or _last_meaningful(lines))
    found = secret.redact(found.strip())  # before the cut: half a secret is no longer one redact finds
    return found if len(found) <= limit else found[:limit] + "..."


def _first(lines: list[str], pattern: re.Pattern[str], group: int = 0) -> str | None:
    for line in lines:
        if m := pattern.search(line):
            return m[group] if group else line
    return None


def _summary_line(lines: list[str]) -> str | None:
    """The first test pytest's short summary names as failed, with its message."""
    if not any("short test summary info" in ln for ln in lines):
        return None
    start = next(i for i, ln in enumerate(lines) if "short test summary info" in ln)
    return _first(lines[start + 1:], _PYTEST_SUMMARY)


def _exception_line(lines: list[str]) -> str | None:
    """The exception a Python traceback ends with (the last traceback's: the one that was raised), its
    message's first line; a message's own continuation lines are indented or follow on."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    end = len(lines)  # each traceback is read up to the next one's start: one pass, whatever the output
    for start in reversed(starts):
        for i in range(start + 1, end):
            if not lines[i].startswith((" ", "\t")) and _EXCEPTION.match(lines[i]):
                return lines[i]
        end = start
    return _first(lines, _EXCEPTION) if not starts else None


# a Python warning (`file.py:368: UserWarning: ...`) and the source line it quotes, indented below it: on
# stderr it can land after the failing command's last stdout line, and it is never why the command failed
_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")


def _last_meaningful(lines: list[str]) -> str:
    """No convention matched: the last line that is not noise (a backtrace frame, a tool's sign-off, a
    Python warning and the source line it quotes)."""
    warned = {i + 1 for i, ln in enumerate(lines) if _WARNING.match(ln)}
    meaningful = [ln for i, ln in enumerate(lines)
                  if not _NOISE.match(ln) and not _WARNING.match(ln) and not (i in warned and ln[:1].isspace())]
    return (meaningful or lines or [""])[-1]
