"""Reuse proven sound: over a corpus of changes, an incremental build's wheel equals a fresh build's.

Three tiny C extensions (tests/fixtures/reuse_corpus: setuptools, scikit-build-core, meson-python) are
built once in their kept tree; then each change is applied in turn, the project built again in that tree,
and built with --fresh in another work directory: the two wheels must have the same sha256, and where
the change changes what the build compiles, differ from the wheel before it. The changes: a source
edit, a header outside the project, each variable a build system reads when it configures, what a
search finds under the same prefix, a build requirement, links to a directory retargeted and added,
a file deleted and renamed, and a test requirement given by path (verify must run again).

The figures (each build's seconds) are printed; nothing here asserts a time."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests import _proc
from tests._wheels import run_stage

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.timeout(1200)]

CORPUS = Path(__file__).resolve().parent / "fixtures" / "reuse_corpus"
EPOCH = "1767323045"  # fixed timestamps: equal inputs give equal bytes


def header(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#define CORPUS_EXT_VALUE {value}\n")


def helper_wheel(path: Path, code: int) -> None:
    """A test requirement given by path: a wheel whose module says what the test command exits with."""
    files = {"corpus_helper.py": f"CODE = {code}\n",
             "corpus_helper-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: corpus-helper\nVersion: 0.1\n",
             "corpus_helper-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + "corpus_helper-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, "corpus_helper-0.1.dist-info/RECORD": record}.items():
            z.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), text)


@dataclass
class Corpus:
    """One project of the corpus, copied into a git checkout of its own, and the files outside it."""

    kind: str  # setuptools_c, cmake_c, meson_c
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    runs: int = 0
    figures: list[str] = field(default_factory=list)

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def ext(self) -> Path:
        return self.root / "ext"

    @property
    def package(self) -> Path:
        (pkg,) = self.project.glob("corpus_*")
        return pkg

    def search(self, prefix: str) -> dict[str, str]:
        """The variable each build system finds corpus_ext.h through: include/v2 before include/v1."""
        root = self.ext / prefix
        return {"setuptools_c": {"CPATH": f"{root}/include/v2:{root}/include/v1"},
                "cmake_c": {"CMAKE_PREFIX_PATH": str(root)},
                "meson_c": {"PKG_CONFIG_PATH": f"{root}/lib/pkgconfig"}}[self.kind]

    def build(self, *extra: str) -> tuple[subprocess.CompletedProcess, str | None, dict]:
        self.runs += 1
        out = self.root / f"out{self.runs}"
        start = time.monotonic()
        r = run_stage("ci.build", self.project, "--cpu", "--engine", "host", "-w", out, *self.args, *extra,
                      env={"SOURCE_DATE_EPOCH": EPOCH, **self.env})
        self.figures.append(f"{time.monotonic() - start:.1f}")
        wheels = sorted(out.glob("*.whl"))
        sha = hashlib.sha256(wheels[0].read_bytes()).hexdigest() if len(wheels) == 1 else None
        report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
        return r, sha, {s["name"]: s["status"] for s in report.get("steps", [])}


def make_corpus(kind: str, root: Path) -> Corpus:
    c = Corpus(kind, root)
    shutil.copytree(CORPUS / kind, c.project)
    shutil.copytree(CORPUS / "common", c.project, dirs_exist_ok=True)  # the C source every backend builds
    (c.project / "src" / "sel").symlink_to("../variants/one", target_is_directory=True)  # tracked below
    for prefix, value in (("a", 10), ("b", 20)):
        header(c.ext / prefix / "include" / "v1" / "corpus_ext.h", value)
        pc = c.ext / prefix / "lib" / "pkgconfig" / "corpus_ext.pc"
        pc.parent.mkdir(parents=True)
        pc.write_text(f"prefix={c.ext / prefix}\nincludedir=${{prefix}}/include\nName: corpus_ext\n"
                      "Description: a header outside the project\nVersion: 1.0\n"
                      "Cflags: -I${includedir}/v2 -I${includedir}/v1\n")
    wrapper = c.ext / "bin" / "corpus-cc"  # another compiler: gcc that defines CORPUS_CC
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text('#!/bin/sh\nexec gcc -DCORPUS_CC=7 "$@"\n')
    wrapper.chmod(0o755)
    c.env = {**c.search("a")}
    if kind == "setuptools_c":  # verify runs a test command whose requirement is a wheel given by path
        helper_wheel(c.ext / "corpus_helper-0.1-py3-none-any.whl", 0)
        c.args = ["--test-command", "python -c \"import corpus_helper, sys; sys.exit(corpus_helper.CODE)\"",
                  "--test-requires", str(c.ext / "corpus_helper-0.1-py3-none-any.whl")]
    _proc.run(["git", "init", "-q", str(c.project)], check=True)
    _proc.run(["git", "-C", str(c.project), "add", "-A"], check=True)
    return c


@dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[[Corpus], None]
    changes: bool = True  # the compiled wheel changes with it
    kinds: tuple[str, ...] = ("setuptools_c", "cmake_c", "meson_c")
    fails: bool = False  # the build (its verify) must fail, run again rather than reused


def _edit(path_of: Callable[[Corpus], Path], old: str, new: str) -> Callable[[Corpus], None]:
    def apply(c: Corpus) -> None:
        path = path_of(c)
        path.write_text(path.read_text().replace(old, new))
    return apply


def _set(**variables: str) -> Callable[[Corpus], None]:
    def apply(c: Corpus) -> None:
        c.env.update({k: v.format(ext=c.ext) for k, v in variables.items()})
    return apply


def _build_requires(c: Corpus) -> None:
    toml = c.project / "pyproject.toml"
    toml.write_text(toml.read_text().replace('requires = ["', 'requires = ["packaging>=20", "', 1))


def _rename(c: Corpus) -> None:
    (c.package / "extra.py").rename(c.package / "renamed.py")


CONFIGURED = ("cmake_c", "meson_c")  # the backends whose tree keeps what its first configure read
COPIED = ("setuptools_c",)  # the backend built from a copy of the project (CMake and meson read it in place)
MUTATIONS = (
    Mutation("source edit", _edit(lambda c: c.project / "src" / "corpus.h", "VALUE 1", "VALUE 2")),
    Mutation("header outside the project edited", lambda c: header(c.ext / "a" / "include" / "v1" / "corpus_ext.h", 11)),
    Mutation("search variable names another prefix", lambda c: c.env.update(c.search("b"))),
    Mutation("same prefix, a header found first", lambda c: header(c.ext / "b" / "include" / "v2" / "corpus_ext.h", 30)),
    Mutation("CFLAGS", _set(CFLAGS="-DCORPUS_FLAG=1")),
    Mutation("CC", _set(CC="{ext}/bin/corpus-cc"), kinds=CONFIGURED),  # setuptools reads them every build
    Mutation("LDFLAGS", _set(LDFLAGS="-Wl,--hash-style=sysv"), kinds=CONFIGURED),
    Mutation("CMAKE_ARGS", _set(CMAKE_ARGS="-DCMAKE_C_FLAGS=-DCORPUS_FLAG=4"), kinds=("cmake_c",)),
    Mutation("build requirement", _build_requires, changes=False, kinds=COPIED),
    Mutation("link to a directory retargeted", lambda c: ((c.project / "src" / "sel").unlink(),
                                                          (c.project / "src" / "sel").symlink_to("../variants/two"))),
    Mutation("link added", lambda c: (c.package / "alias.py").symlink_to("extra.py"), kinds=COPIED),
    Mutation("file deleted", lambda c: (c.package / "alias.py").unlink(), kinds=COPIED),
    Mutation("file renamed", _rename, kinds=COPIED),
    Mutation("test requirement by path", lambda c: helper_wheel(c.ext / "corpus_helper-0.1-py3-none-any.whl", 3),
             changes=False, kinds=("setuptools_c",), fails=True),
)


@pytest.mark.parametrize("kind", ["setuptools_c", "cmake_c", "meson_c"])
def test_an_incremental_build_equals_a_fresh_one_over_the_corpus(tmp_path, kind):
    c = make_corpus(kind, tmp_path)
    r, before, _ = c.build("--fresh")  # the kept tree, from nothing
    assert r.returncode == 0 and before, r.stderr[-3000:]
    wrong = []
    print(f"\n{kind}: first build {c.figures[-1]} s", flush=True)
    for m in (m for m in MUTATIONS if kind in m.kinds):
        m.apply(c)
        inc, inc_sha, inc_steps = c.build()
        fresh, fresh_sha, _ = c.build("--fresh", "--work-dir", str(tmp_path / f"fresh{c.runs}"))
        print(f"  {m.name:40} incremental {c.figures[-2]:>5} s, fresh {c.figures[-1]:>5} s", flush=True)
        if m.fails:
            if inc.returncode == 0 or inc_steps.get("verify") != "failed" or fresh.returncode == 0:
                wrong.append(f"{m.name}: verify must run again and fail (incremental {inc_steps.get('verify')}, "
                             f"exit {inc.returncode}; fresh exit {fresh.returncode})")
            continue
        assert inc.returncode == 0 and fresh.returncode == 0, f"{m.name}: {inc.stderr[-2000:]}{fresh.stderr[-2000:]}"
        if inc_sha != fresh_sha:
            wrong.append(f"{m.name}: the incremental wheel differs from the fresh one (steps: {inc_steps})")
            print(f"    {wrong[-1]}", flush=True)
        elif m.changes and inc_sha == before:
            wrong.append(f"{m.name}: the wheel did not change")
        before = inc_sha
    assert not wrong, "\n".join(wrong)
