"""Whether the wheel's runtime requirements can install where it will, found before the compile.

A project's install_requires (what setup() was given, wheelci.compile.probe) or [project] dependencies
may pin a package below any release for the wheel's Python (numpy<1.20 on 3.11): verify would find it
after the whole compile. pip answers the question without installing anything, for the wheel's Python,
platform and architecture: a dry run with --no-deps, binaries first, then sdists (a package with only an
sdist may still build at install: a warning, not a refusal). The torch stack (torch, triton, nvidia-*) is
the torch install's, never downloaded (wheelci.verifyenv), so it is not asked for.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

from wheelci.util import proc
from wheelci.util.secret import redact

TIMEOUT = 120.0
_STACK = re.compile(r"(?i)(torch|triton|nvidia[-_.].*)")
_MISSING = re.compile(r"No matching distribution found for (.+)")


@dataclass(frozen=True)
class Installable:
    refusal: str | None = None  # a requirement no release of which installs on the wheel's Python
    warning: str | None = None  # one that has only an sdist there: it builds at install, or not


def asked(requirements: list[str]) -> list[str]:
    """The requirements pip is asked about: the torch stack left out, markers kept (pip reads them for the
    target Python)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if not _STACK.fullmatch(req.name) and not req.url:
            out.append(text)
    return out


def check(requirements: list[str], python: str, manylinux: str, machine: str) -> Installable:
    """pip's dry-run answer for every requirement on CPython `python` (3.11) and `manylinux` on `machine`."""
    wanted = asked(requirements)
    if not wanted:
        return Installable()
    minor = python.replace(".", "")
    base = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps",
            "--disable-pip-version-check", "--python-version", python, "--implementation", "cp", "--abi", f"cp{minor}",
            "--platform", f"{manylinux}_{machine}"]
    missing = _ask([*base, "--only-binary=:all:", *wanted])
    if missing is None:
        return Installable()
    what = f"CPython {python} on {manylinux} {machine}"
    if _has_sdist(missing):
        return Installable(warning=f"its runtime requirement {missing} has no wheel for {what}, only an sdist: "
                                   "installing the wheel builds it")
    return Installable(refusal=f"its runtime requirement {missing} has no release that installs on {what} "
                               "(pip's answer, before the compile): verify would fail after it")


def _has_sdist(text: str) -> bool:
    """Whether the index (PIP_INDEX_URL, else PyPI) has an sdist of what the requirement allows."""
    import os

    from wheelci.config.fetch import pick, project_files, requirement
    from wheelci.errors import CiError

    req = requirement(text)
    if req is None:
        return True  # not a requirement we can read: no finding of ours
    try:
        files, index = project_files(req.name, os.environ)
        pick(req, files, index)
    except CiError:
        return False
    return True


def _ask(cmd: list[object]) -> str | None:
    """None where pip can resolve it; else the requirement it names as missing (or its last line)."""
    try:
        r = proc.run(cmd, what="asking pip whether the runtime requirements install", check=False,
                     capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None  # no answer is no finding: verify still checks
    if r.returncode == 0:
        return None
    found = _MISSING.findall(r.stderr)
    if found:
        return redact(found[-1].strip())
    if "Could not fetch URL" in r.stderr or "connection" in r.stderr.lower():
        return None  # the index did not answer: verify still checks
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return redact(lines[-1][:200]) if lines else f"exit {r.returncode}"
