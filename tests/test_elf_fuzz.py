"""Fuzzing the ELF readers the way tests/test_fuzz.py fuzzes the zip reader: bytes mutated from real
shared libraries (gcc- and g++-built, with RPATH, RUNPATH and GLIBC/GLIBCXX version needs) and a
crafted one, read by every ELF reader of the stages (ci.native.elf, ci.native.extension). Any input gives
a clean result or a CiError; never another exception, and never more than its budget: each case runs in
its own forked child under RLIMIT_AS and RLIMIT_CPU (tests/_elffuzz.py). Deterministic: case N is
derived from N alone, and a failure names its N.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests._elfbuild import (DT_NEEDED, DT_RUNPATH, DT_SONAME, build_lib, crafted_elf, elf_sym, elf_vernaux,
                             elf_verneed)
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
CASES = 2500  # about 25 s on two idle cores

VERSIONED_SOURCE = """
#include <cmath>
#include <dlfcn.h>
#include <sstream>
extern "C" double f(double x) { std::ostringstream s; s << x; return std::exp(x) + s.str().size(); }
extern "C" void *g(const char *name) { return dlsym(RTLD_DEFAULT, name); }
"""


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("elf-seeds")
    c = build_lib(d / "libC.so.1", "libC.so.1")
    b = build_lib(d / "libB.so.2", "libB.so.2", [c], rpath="$ORIGIN/../c:$ORIGIN")
    build_lib(d / "libA.so.3", "libA.so.3", [b, c], runpath="$ORIGIN")
    src = tmp_path_factory.mktemp("src") / "v.cpp"
    src.write_text(VERSIONED_SOURCE)
    _proc.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(d / "libv.so"), str(src)], check=True)
    (d / "crafted.so").write_bytes(crafted_elf(
        b"\0libfoo.so.1\0GLIBC_2.99\0sym\0libbar.so\0$ORIGIN\0",
        [(DT_NEEDED, 1), (DT_NEEDED, 28), (DT_SONAME, 28), (DT_RUNPATH, 38)],
        dynsym=elf_sym(0, 0, 0) + elf_sym(24) + elf_sym(24, 5), versym=b"\0\0\2\0\1\0",
        verneed=elf_verneed(1, 1, 16, 0) + elf_vernaux(2, 13, 0), verneed_count=1, sections={".nv_fatbin": bytes(16)}))
    return d


def fuzz(seed_dir: Path, first: int, count: int, *extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src")]))
    done = _proc.run([sys.executable, "-m", "tests._elffuzz", str(seed_dir), str(first), str(count), *extra],
                     capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_mutated_libraries_give_a_result_or_one_error_within_budget(seeds):
    result = fuzz(seeds, 0, CASES)
    assert not result["failures"], json.dumps(result["failures"][:5], indent=1)
    # the mutants reach both ends: some still read cleanly, some are refused
    assert result["outcomes"].get("clean", 0) > 0 and result["outcomes"].get("refused", 0) > 0, result["outcomes"]


def test_the_budgets_catch_what_they_are_for(seeds):
    """The harness is able to fail: a stray exception, a 4 GiB allocation and an endless loop are each
    reported as a failure of their case."""
    result = fuzz(seeds, 0, 3, "--selftest", "--cpu", "1")
    failures = {f["case"]: f["failure"] for f in result["failures"]}
    assert sorted(failures) == [0, 1, 2] and not result["outcomes"], result
    assert "TypeError: a reader's own bug" in failures[0]
    assert failures[1] == "over the memory budget"
    assert failures[2].startswith("over the time budget")
