"""A real Bazel for the suite: Debian's bazel-bootstrap (4.2.3) with rules_python in WORKSPACE mode.

The WORKSPACE and BUILD files are docs/bazel.md's own (read from its ```starlark blocks), so what users
copy is what runs here; only the rules_python release, the index URL and the interpreter are substituted.

Bazel fetches rules_python, bazel_skylib, rules_cc, rules_java and remote_coverage_tools from GitHub.
Where GitHub is out of reach, `CI_BAZEL_RULES` (default: `../shared/bazel` beside the checkout) holds
`git archive` tarballs of the same versions; each is unpacked once and handed to Bazel with
`--override_repository`, with a stub for remote_coverage_tools (not used without coverage). Where that
directory is absent, Bazel downloads the same versions itself. rules_python's own pip comes from PyPI
through Bazel's downloader, cached in one repository cache for the whole run.

Every workspace gets its own output root under the test's temporary directory (the same disk; torch's
wheels unpack to ~7 GB there) and is shut down and deleted by `Workspace.close`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from wheelci.util.cache import cache_dir
from tests._servers import doc_blocks
from tests import _proc

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = Path(os.environ.get("CI_BAZEL_RULES") or ROOT.parent / "shared" / "bazel")

# rules_python releases that load on Bazel 4.2.3 (0.26 and later need a newer Bazel): where GitHub
# serves them, and the sha256 of GitHub's archive (the mirror's `git archive` tarballs differ).
RULES_PYTHON = {
    "0.9.0": ("https://github.com/bazelbuild/rules_python/archive/refs/tags/0.9.0.tar.gz",
              "5fa3c738d33acca3b97622a13a741129f67ef43f5fdfcec63b29374cc0574c29"),
    "0.18.1": ("https://github.com/bazelbuild/rules_python/releases/download/0.18.1/rules_python-0.18.1.tar.gz",
               "29a801171f7ca190c543406f9894abf2d483c206e14d6acbd695623662320097"),
}
# The repositories Bazel itself would fetch, by the tarball that stands in for each.
MIRRORED = {
    "rules_cc": "rules_cc-b1c40e1de81913a3c40e5948f78719c28152486d.tar.gz",
    "rules_java": "rules_java-7cf3cefd652008d0a64a419c34c13bdca6c8f178.tar.gz",
    "bazel_skylib": "bazel_skylib-1.3.0.tar.gz",
}
DOC = "docs/bazel.md"  # the page whose files the suite runs
DOC_RULES_PYTHON = "0.18.1"
DOC_INDEX = "https://wheels.example.com/simple"
DOC_PYTHON = "/usr/bin/python3"
TIMEOUT = 1800


def interpreter() -> str:
    """The system Python the page names, else the one this suite's venv was made from."""
    if Path(DOC_PYTHON).exists():
        return DOC_PYTHON
    import sys
    return str(Path(sys.base_prefix) / "bin" / "python3")


def _unpack(archive: Path, dest: Path) -> Path:
    """A tarball's single top directory, unpacked under dest (once)."""
    with tarfile.open(archive) as tf:
        top = {m.name.split("/")[0] for m in tf.getmembers()}
        assert len(top) == 1, f"{archive}: expected one top directory, found {sorted(top)}"
        out = dest / top.pop()
        if not out.is_dir():
            tf.extractall(dest, filter="data")
    return out


def overrides(work: Path, rules_python: str) -> list[str]:
    """--override_repository flags standing in for GitHub, or none where the mirror is absent."""
    if not (RULES_DIR / f"rules_python-{rules_python}.tar.gz").exists():
        return []
    repos = {name: _unpack(RULES_DIR / tar, work) for name, tar in MIRRORED.items()}
    repos["rules_python"] = _unpack(RULES_DIR / f"rules_python-{rules_python}.tar.gz", work)
    stub = work / "remote_coverage_tools"
    stub.mkdir(exist_ok=True)
    (stub / "WORKSPACE").write_text('workspace(name = "remote_coverage_tools")\n')
    (stub / "BUILD").write_text("".join(
        f'sh_binary(name = "{n}", srcs = ["stub.sh"], visibility = ["//visibility:public"])\n'
        for n in ("coverage_report_generator", "lcov_merger")))
    (stub / "stub.sh").write_text("#!/bin/sh\nexit 0\n")
    (stub / "stub.sh").chmod(0o755)
    repos["remote_coverage_tools"] = stub
    return [f"--override_repository={name}={path}" for name, path in sorted(repos.items())]


def doc_files() -> tuple[str, str, str]:
    """The page's WORKSPACE, BUILD.bazel and lock target: its ```starlark blocks calling pip_parse,
    py_test and compile_pip_requirements."""
    blocks = doc_blocks("starlark", DOC)
    (workspace,) = [b for b in blocks if "pip_parse(" in b]
    (build,) = [b for b in blocks if "py_test(" in b]
    (lock,) = [b for b in blocks if "compile_pip_requirements(" in b]
    return workspace, build, lock


def workspace_text(rules_python: str, index_url: str, python: str) -> str:
    text, _, _ = doc_files()
    url, sha = RULES_PYTHON[rules_python]
    doc_url, doc_sha = RULES_PYTHON[DOC_RULES_PYTHON]
    for old, new in ((doc_url, url), (doc_sha, sha),
                     (f'strip_prefix = "rules_python-{DOC_RULES_PYTHON}"', f'strip_prefix = "rules_python-{rules_python}"'),
                     (DOC_INDEX, index_url), (DOC_PYTHON, python)):
        assert old in text, f"{DOC}'s WORKSPACE no longer holds {old!r}"
        text = text.replace(old, new)
    return text


@dataclass
class Workspace:
    """One Bazel workspace: docs/bazel.md's files, a lock, test sources; its own output root."""

    root: Path
    rules_python: str
    flags: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)

    @property
    def user_root(self) -> Path:
        return self.root.parent / (self.root.name + "-bazel")

    def write(self, index_url: str, lock: str, tests: dict[str, tuple[str, list[str]]],
              lock_target: bool = False) -> None:
        """(Re)write WORKSPACE, BUILD.bazel, the lock and the tests: name -> (code, requirements).
        lock_target adds the page's compile_pip_requirements target (`bazel run //:requirements.update`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        python = interpreter()
        (self.root / "WORKSPACE").write_text(workspace_text(self.rules_python, index_url, python))
        _, build, lock_rule = doc_files()
        build = build.replace(DOC_PYTHON, python)
        # The page's BUILD shows one py_test; the suite declares one per test the same way.
        match = re.search(r"^py_test\(.*?^\)\n", build, re.S | re.M)
        assert match and 'requirement("torch")' in match.group(0), f"{DOC}'s BUILD.bazel changed"
        template = match.group(0)
        declared = ""
        for name, (code, requirements) in tests.items():
            deps = ", ".join(f'requirement("{r}")' for r in requirements)
            declared += template.replace("torch_test", name).replace('requirement("torch")', deps)
            (self.root / f"{name}.py").write_text(code)
        build = build.replace(template, declared)
        if lock_target:
            assert DOC_INDEX in lock_rule, f"{DOC}'s compile_pip_requirements block changed"
            build += "\n" + lock_rule.replace(DOC_INDEX, index_url)
        (self.root / "BUILD.bazel").write_text(build)
        (self.root / "requirements_lock.txt").write_text(lock)
        self.tests = list(tests)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.user_root.mkdir(parents=True, exist_ok=True)
        # pip inside rules_python must see this index only: no user or site pip configuration.
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
            env.pop(var, None)
        cmd = ["bazel", f"--output_user_root={self.user_root}", "--max_idle_secs=60", *args]
        if args and args[0] in ("build", "test", "run", "fetch", "query"):
            cmd += [*self.flags, f"--repository_cache={cache_dir('bazel-repository-cache')}"]
        return _proc.run(cmd, cwd=self.root, env=env, capture_output=True, text=True, timeout=TIMEOUT)

    def test(self) -> subprocess.CompletedProcess[str]:
        """`bazel test` of the py_tests written (not the lock's own check, which re-resolves)."""
        return self.run("test", "--test_output=errors", "--nocache_test_results",
                        *(f"//:{name}" for name in self.tests))

    def output_size(self) -> int:
        """Bytes under the output root (what one workspace costs on disk)."""
        r = _proc.run(["du", "-sb", str(self.user_root)], capture_output=True, text=True)
        return int(r.stdout.split()[0]) if r.returncode == 0 else 0

    def close(self) -> None:
        if self.root.is_dir():
            self.run("shutdown")
        # Bazel makes its output tree read-only; make it writable again to delete it.
        _proc.run(["chmod", "-R", "u+w", str(self.user_root)], capture_output=True)
        shutil.rmtree(self.user_root, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
