"""The one way a test runs a process: every run has a timeout, and a run past it fails the test with
the test's name and the command, instead of spending the whole CI budget in silence."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Sequence

import pytest

TIMEOUT = 900.0  # seconds: above any one command of the suite (a real project compiling on a busy 2-core machine)


def current_test() -> str:
    """The running test's node id, as pytest publishes it to the environment."""
    return os.environ.get("PYTEST_CURRENT_TEST", "(no test)").rsplit(" ", 1)[0]


def describe(cmd: Sequence[str | Path] | str) -> str:
    text = cmd if isinstance(cmd, str) else shlex.join(map(str, cmd))
    return text if len(text) <= 300 else text[:297] + "..."


def timed_out(cmd: Sequence[str | Path] | str, timeout: float) -> None:
    pytest.fail(f"{current_test()}: command ran past its {timeout:g} s timeout: {describe(cmd)}", pytrace=False)


def run(cmd: Sequence[str | Path] | str, *, timeout: float | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run with a timeout that is never absent (None: the default)."""
    limit = TIMEOUT if timeout is None else timeout
    try:
        return subprocess.run(cmd, timeout=limit, **kwargs)
    except subprocess.TimeoutExpired:
        timed_out(cmd, limit)
        raise  # unreachable: pytest.fail raises

