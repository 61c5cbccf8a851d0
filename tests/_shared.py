"""What tests share across processes: the cached heavy inputs, made by one process at a time, and the
session builds, made once per run however many pytest-xdist workers need them.

The heavy tier runs on two workers. A cached input (a downloaded release, an unpacked wheel, a venv of
tools) is checked and made under its lock, so the second worker waits and finds it made instead of
downloading into the same directory. A session build is made by the first worker that needs it into
the run's shared temporary root; the others wait for it and read the same result.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from wheelci.util.cache import cache_dir
from wheelci.util.lock import locked_file


@contextlib.contextmanager
def held(name: str) -> Iterator[None]:
    """Hold the cached input `name` exclusively: check it, and make it where missing, inside."""
    with locked_file(cache_dir("test-locks") / f"{name}.lock", f"the test input {name}"):
        yield


def store_once(root: Path, *others: Path) -> None:
    """Files under root identical to ones at the same relative path under others become hard links to
    them (wheelci.util.share): a release's wheels and the wheelhouse, an unpacked wheel and the build
    environments' site-packages hold many of the same GB. Cheap once linked (same inode: no compare)."""
    from wheelci.util.share import link_identical

    link_identical(root, [o for o in others if o.is_dir()])


def env_sites() -> list[Path]:
    """The site-packages of the cached build environments."""
    return sorted(cache_dir("envs").glob("*/lib/python3*/site-packages"))


def run_root(factory: pytest.TempPathFactory) -> Path:
    """The temporary root every process of this run shares: the controller's, under xdist."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """make(out) -> a JSON-able result, run by one process of this run; every other process waiting for
    it gets the same directory and result. A failed make is recorded as such: every other process of the
    run fails at once with its error, rather than making it again (and again, past its time limit)."""
    root = run_root(factory)
    out, done = root / f"once-{name}", root / f"once-{name}.json"
    with locked_file(root / f"once-{name}.lock", f"the session's {name}"):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            try:
                result = {"made": make(out)}
            except BaseException as e:  # the others fail at once with it, rather than make it again
                done.write_text(json.dumps({"error": f"{type(e).__name__}: {str(e)[-2000:]}"}))
                raise
            done.write_text(json.dumps(result))
    found = json.loads(done.read_text())
    if "error" in found:
        pytest.fail(f"the session's {name} failed in another worker of this run: {found['error']}", pytrace=False)
    return out, found["made"]
