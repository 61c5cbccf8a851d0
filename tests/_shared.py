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
from typing import Callable, Iterator

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


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], dict]) -> tuple[Path, dict]:
    """make(out) -> a JSON-able result, run by one process of this run; every other process waiting for
    it gets the same directory and result. A failed make leaves no result, so the next one fails on its
    own (each with its own error) instead of reading half a build."""
    root = run_root(factory)
    out, done = root / f"once-{name}", root / f"once-{name}.json"
    with locked_file(root / f"once-{name}.lock", f"the session's {name}"):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # a failed make's leftovers
            out.mkdir()
            result = make(out)
            done.write_text(json.dumps(result))
    return out, json.loads(done.read_text())
