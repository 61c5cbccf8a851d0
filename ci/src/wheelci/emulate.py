"""Verify a wheel of another machine architecture: the same checks and tests (wheelci.verify), run by
that architecture's interpreter in its manylinux image, under QEMU where this machine is not one.

The container gets this tool's source (as cibuildwheel's containers do), a directory of the pure-Python
packages verify imports, the torch install made for that architecture (wheelci.compile.crossenv) as the
torch the fresh venv runs over, the wheel and the project (its tests), all read-only.
"""

from __future__ import annotations

import configparser
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wheelci.archs import OCI_PLATFORM
from wheelci.cibw import CONTAINER_TOOL, container_options
from wheelci.config import constraints
from wheelci.engine import Engine, containers_of_this_run
from wheelci.util import log, proc
from wheelci.util.cache import cache_dir
from wheelci.util.cause import cause
from wheelci.util.lock import locked_file
from wheelci.verify import VerifyResult

TOOL_DEPS = ("packaging",)  # what wheelci.verify imports beyond the standard library
_DEPS, _SITE, _WHEELS, _PROJECT = "/opt/cuda-wheel-ci-deps", "/opt/torch-site", "/opt/wheels", "/project"
RUN = """
import json, sys
from pathlib import Path
from dataclasses import asdict
from wheelci.verify import verify_generic
wheel, command, requires = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
r = verify_generic(Path(wheel), Path({site!r}), project_dir=Path({project!r}), test_command=command,
                   test_requires=requires, find_links=[Path(wheel).parent])
print(json.dumps(asdict(r)))
"""


@dataclass(frozen=True)
class Target:
    """Where an emulated verify runs: the engine, the image and its architecture."""

    engine: str
    image: str
    arch: str


def pinned_image(policy: str, arch: str) -> str:
    """A policy name (manylinux_2_28) as cibuildwheel's pinned image of that architecture; anything else is
    an image reference, as cibuildwheel reads it."""
    import cibuildwheel

    cfg = configparser.ConfigParser()
    cfg.read(Path(cibuildwheel.__file__).parent / "resources" / "pinned_docker_images.cfg")
    if arch in cfg and policy in cfg[arch]:
        return cfg[arch][policy].split("#")[0].strip()
    return policy


def tool_deps() -> Path:
    """The pure-Python packages verify needs, for any interpreter (installed once into the cache)."""

    where = cache_dir("verify-tools")
    done = where / ".complete"
    with locked_file(where.with_name(where.name + ".lock"), "the emulated verify's packages"):
        if not done.is_file():
            proc.stream([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade",
                         "--no-compile", "--target", where / "site", "-c", constraints.CONSTRAINTS, *TOOL_DEPS],
                        what="installing the emulated verify's packages")
            done.write_text("\n".join(TOOL_DEPS) + "\n")
    return where / "site"


def verify_in_container(target: Target, wheel: Path, site: Path, *, project_dir: Path, python: str,
                        test_command: str | None, test_requires: Sequence[str], ccache: Path, tools: Path,
                        ca: str | None) -> VerifyResult:
    """wheelci.verify's checks and the project's tests, run in `target`'s image by its own interpreter."""
    create, inner = container_options(Engine(target.engine), None, tools, ccache, ca)
    tag = python.replace(".", "")
    mounts = [f"--volume={tool_deps()}:{_DEPS}:ro", f"--volume={site.resolve()}:{_SITE}:ro",
              f"--volume={wheel.parent.resolve()}:{_WHEELS}:ro", f"--volume={project_dir.resolve()}:{_PROJECT}:ro"]
    env = {**inner, "PYTHONPATH": f"{CONTAINER_TOOL}:{_DEPS}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    script = RUN.format(site=_SITE, project=_PROJECT)
    log.info(f"verifying {wheel.name} in {target.image} ({target.arch}, {target.engine})")
    with containers_of_this_run(target.engine) as label:  # a stopped build leaves no emulated verify running
        cmd = [target.engine, "run", "--rm", label, f"--platform={OCI_PLATFORM[target.arch]}", *create, *mounts,
               *[f"--env={k}={v}" for k, v in env.items()], f"--workdir={_PROJECT}", target.image,
               f"/opt/python/cp{tag}-cp{tag}/bin/python", "-c", script, f"{_WHEELS}/{wheel.name}", test_command or "",
               json.dumps(list(test_requires))]
        r = proc.run(cmd, what=f"verifying {wheel.name} in {target.arch} emulation", check=False, capture_output=True,
                     text=True)
    lines = r.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else None
    except ValueError:
        got = None
    if not isinstance(got, dict) or not isinstance(got.get("checks"), dict):
        why = cause(r.stdout + r.stderr) or "no output"
        return VerifyResult(wheel.name, {"emulated verify": f"FAILED: exit {r.returncode}: {why}"})
    checks = {str(k): v for k, v in got["checks"].items()}
    return VerifyResult(wheel.name, checks, float(got.get("seconds") or 0.0))


def describe(target: Target) -> str:
    return f"{target.arch} under QEMU in {shlex.quote(target.image)} ({target.engine})"
