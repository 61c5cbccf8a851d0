"""A build's own environment: the cached torch environment, shared as a site directory (never copied,
never written), under a venv in the build tree that holds exactly this project's build requirements.

Why: the cached environment is every build's. Installing one project's requirements into it (a
`setuptools<81` here, `>=81` there), or letting a backend pip-install into the running interpreter
(one project upgrades a package torch pins exactly), made each build's environment depend on what was
built before. Here the venv's site-packages comes first on sys.path and the shared one after it (a .pth
that adds it as a site directory, its own .pth files read too), so what the project needs shadows what
is shared; pip, run by the venv's interpreter, sees the shared packages as installed and installs only
what they do not satisfy, into the venv ("not uninstalling ... outside environment" for the rest); and a
backend's own `sys.executable -m pip install` lands in the venv as well. The shared environment is
fingerprinted before the compile and checked after it: one a build changed anyway is marked, and the
next build makes it again (wheelci.compile.hostenv).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from wheelci.compile.hostenv import CHANGED, BuildEnv
from wheelci.errors import CiError, Finding
from wheelci.util import proc
from wheelci.util.atomic import write_text
from wheelci.util.cache import read_stamp
from wheelci.wheel.requirements import read_requirement, requirement_name

OVERLAY = "build-env"  # the work directory's entry (wheelci.util.layout)
MARK = ".wheelci-requires"  # what the venv was made with: the same again is reused as it is
SHARED_PTH = "_wheelci_shared.pth"
# pip for the venv (made without one: the shared environment's pip runs in it, through the site directory)
PIP_SHIM = "#!{python}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
TORCH_PIN = ".wheelci-torch.txt"  # the constraint that keeps the venv's torch the shared one
ASKED = ".wheelci-asked"  # what the frontend found the project asks for beyond its declared requirements


@dataclass(frozen=True)
class Overlay:
    root: Path
    python: Path
    base: BuildEnv
    requires: tuple[str, ...]


def _key(base: BuildEnv, requires: list[str], pins: Path) -> str:
    return json.dumps({"base": str(base.root), "site": str(base.site), "python": str(base.python.resolve()),
                       "torch": base.torch_version, "requires": requires, "pins": pins.read_text()}, sort_keys=True)


def overlay(base: BuildEnv, work_dir: Path, requires: list[str], pins: Path) -> Overlay:
    """The build tree's venv over `base` with `requires` installed under the constraints `pins`: reused
    where it was made for the same base and requirements, else made again from nothing (the same project
    and plan get the same environment, whatever was built before)."""
    root = work_dir / OVERLAY
    python = root / "bin" / "python"
    asked = _asked(root)
    requires = [*requires, *(a for a in asked if a not in requires)]  # what an earlier build found it asks for
    key = _key(base, requires, pins)
    done = Overlay(root, python, base, tuple(requires))
    try:
        if read_stamp(root / MARK, 1 << 20) == key.encode() and python.exists():
            return done
    except OSError:
        pass
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)
    proc.run([base.python, "-m", "venv", "--without-pip", root], what=f"making the build's environment {root}",
             capture_output=True, text=True)
    if asked:
        write_text(root / ASKED, json.dumps(asked))
    for name in ("pip", "pip3", f"pip{base.site.parent.name.removeprefix('python')}"):  # a bare `pip` is this venv's, never the shared one
        write_text(root / "bin" / name, PIP_SHIM.format(python=python))
        (root / "bin" / name).chmod(0o755)
    site = root / base.site.relative_to(base.root)
    # a site directory, not a path line: the shared environment's own .pth files (setuptools' distutils
    # shim, a namespace package's) are read as they are there
    write_text(site / SHARED_PTH, f"import site; site.addsitedir({str(base.site)!r})\n")
    _install(python, requires, pins, base.torch_version)
    write_text(root / MARK, key)
    return done


def _install(python: Path, requires: list[str], pins: Path, torch_version: str) -> None:
    """pip in the venv, under our pins; torch is the shared environment's: a requirement that wants another
    (torchvision==X) is pip's one error, never a second torch in the venv in front of the plan's."""
    torch = python.parent.parent / TORCH_PIN
    write_text(torch, f"torch=={torch_version}\n")
    try:
        proc.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", pins, "-c", torch,
                  *requires], what=f"installing the build requirements {', '.join(requires)}", capture_output=True,
                 text=True)
    except CiError as e:
        raise Finding(str(e)) from None


def _asked(root: Path) -> list[str]:
    try:
        found = json.loads(read_stamp(root / ASKED, 1 << 16))
    except (OSError, ValueError):
        return []
    return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []


def add_asked(own: Overlay, asked: list[str], pins: Path) -> bool:
    """What the build frontend found the project asks for and the environment lacks (a setup_requires),
    installed into the build's own environment and remembered there, so the next build of this tree gets
    it from the start. False where nothing is new (the same lack twice is the project's to fix) or it is
    torch, which only the shared environment gives."""
    have = set(_asked(own.root)) | set(own.requires)
    # what a log line names: a requirement (never a pip option a project could print there), torch left out
    new = [a for a in asked if a not in have and (req := read_requirement(a)) is not None and not req.url
           and requirement_name(a) != "torch"]
    if not new:
        return False
    _install(own.python, new, pins, own.base.torch_version)
    write_text(own.root / ASKED, json.dumps([*_asked(own.root), *new]))
    write_text(own.root / MARK, _key(own.base, [*own.requires, *new], pins))
    return True


def fingerprint(env: BuildEnv) -> str:
    """What an install changes in the shared environment: the names in its site-packages and bin, and each
    distribution's RECORD (an upgrade renames its .dist-info, a reinstall rewrites RECORD). Not directory
    times: importing torch writes its __pycache__."""
    h = hashlib.sha256()
    for folder in (env.site, env.root / "bin"):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            h.update(f"{folder.name}/{name}\n".encode())
            if name.endswith(".dist-info"):
                try:
                    st = os.stat(folder / name / "RECORD", follow_symlinks=False)
                except OSError:
                    continue
                h.update(f"{st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def changed_by_the_build(env: BuildEnv, before: str) -> bool:
    """Whether the compile changed the shared environment after all; if so it is marked, and the next
    build that needs it makes it again."""
    if fingerprint(env) == before:
        return False
    write_text(env.root / CHANGED, "a build changed it (it installed packages while it built)\n")
    return True
