"""The one way a test runs a process: every run has a timeout, and a run past it fails the test with
the test's name and the command, instead of spending the whole CI budget in silence.

Each process starts in a session of its own, so a timeout stops everything it started (a build's compile,
a server it spawned), not only the process itself: SIGTERM first, which the stages answer by stopping
their own children and removing what they half-wrote, then SIGKILL for what is left.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any, AnyStr, Sequence

import pytest

TIMEOUT = 900.0  # seconds: above any one command of the suite (a real project compiling on a busy 2-core machine)
MARGIN = 15.0  # a command's default ends this long before its test's own limit, so the command is named
GRACE = 5.0  # seconds between SIGTERM and SIGKILL
LIMIT: float | None = None  # the running test's own limit (set per test by tests/conftest.py)


def current_test() -> str:
    """The running test's node id, as pytest publishes it to the environment."""
    running = os.environ.get("PYTEST_CURRENT_TEST")
    return running.rsplit(" ", 1)[0] if running else "(no test)"


def describe(cmd: Sequence[str | Path] | str) -> str:
    text = cmd if isinstance(cmd, str) else shlex.join(map(str, cmd))
    return text if len(text) <= 300 else text[:297] + "..."


def timed_out(cmd: Sequence[str | Path] | str, timeout: float) -> None:
    pytest.fail(f"{current_test()}: command ran past its {timeout:g} s timeout: {describe(cmd)}", pytrace=False)


def default_limit() -> float:
    """TIMEOUT, or less where the test's own limit would stop the test first (then nothing names the command)."""
    return TIMEOUT if LIMIT is None else max(1.0, min(TIMEOUT, LIMIT - MARGIN))


def stop_group(proc: subprocess.Popen[AnyStr]) -> None:
    """Stop the process and everything in its session: SIGTERM, GRACE seconds, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run(cmd: Sequence[str | Path] | str, *, timeout: float | None = None, check: bool = False,
        capture_output: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run with a timeout that is never absent (None: default_limit()), the process in a
    session of its own, stopped whole when its time is up."""
    limit = default_limit() if timeout is None else timeout
    given = kwargs.pop("input", None)
    if given is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    kwargs.setdefault("start_new_session", True)
    with subprocess.Popen(cmd, **kwargs) as proc:
        try:
            out, err = proc.communicate(given, timeout=limit)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            try:  # what it printed, unless a process of another session still holds the pipes
                proc.communicate(timeout=GRACE)
            except subprocess.TimeoutExpired:
                pass
            timed_out(cmd, limit)
            raise  # unreachable: pytest.fail raises
        except BaseException:  # Ctrl-C, or the test's own limit: the group goes with the test
            stop_group(proc)
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
