"""The verify venv: a fresh venv over a torch install, what pip may put into it, and what is laid over it.

The fresh venv sees the cached torch install through a .pth file instead of reinstalling ~3 GB of
torch and CUDA wheels per run: pip still resolves the wheel's Requires-Dist against it (offline, so a
requirement on torch, triton or an nvidia-* wheel that install does not meet fails rather than
downloading something; other dependencies, numpy or scipy, come from the index).

After the wheel is installed and checked, the test requirements (pytest, ...) are laid over it, so the
wheel's install and its import checks never meet them: installed once into a layer kept in the cache,
one per set of requirements, torch install and interpreter (pip asking the index for pytest cost about
4 s a run), held shared while the tests run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence
from urllib.parse import unquote, urlsplit

from wheelci.compile.workdir import linked_files
from wheelci.errors import CiError
from wheelci.util import log, proc
from wheelci.util.atomic import write_text
from wheelci.util.cache import cache_dir, mark_used, read_stamp
from wheelci.util.digest import sha256_file
from wheelci.util.lock import locked_file
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.names import WheelName, normalize
from wheelci.wheel.record import read_record_file
from wheelci.wheel.requirements import plain_install_requirement, read_requirement
from wheelci.wheel.variant import plain_name
from wheelci.wheel.zipread import WheelArchive


def purelib(python: Path) -> str:
    """That interpreter's site-packages."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return proc.run([python, "-c", code], what=f"asking {python} for its site-packages", capture_output=True,
                    text=True).stdout.strip()


def fresh_venv(path: Path, base_site: Path | None = None) -> Path:
    """A new venv at path, optionally layered over another environment's site-packages; returns its python."""
    # pip runs from our own environment against the new interpreter (--python), so the venv needs none.
    proc.run([sys.executable, "-m", "venv", "--without-pip", path], what="creating the verify venv")
    python = path / "bin" / "python"
    if base_site is not None:
        site = purelib(python)
        (Path(site) / "_base_environment.pth").write_text(f"{base_site.resolve()}\n")  # a .pth line is read
        # relative to the site-packages holding it, never to where we were run
    return python


def pip_failure(r: subprocess.CompletedProcess[str]) -> str:
    """A failed pip install as one check: its first error line (what conflicts, what is missing)."""
    reason = [ln for ln in r.stderr.splitlines() if "ERROR" in ln or "error:" in ln] or r.stderr.strip().splitlines()[-1:]
    return f"FAILED: {reason[0].strip() if reason else 'no output'}"


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pip into the verify venv. A constraint from pip's configuration (a machine's cap on torch) is left
    out: verify never resolves torch, it installs over the torch install it is given, and pins that
    install's stack itself where an index is asked (install_fresh)."""
    return proc.run([sys.executable, "-m", "pip", "--python", python, "install", "--disable-pip-version-check",
                     "--no-input", *args], what="installing into the verify venv", check=False,
                    capture_output=True, text=True, env={**os.environ, "PIP_CONSTRAINT": os.devnull})


# torch and what it loads: the torch install verify runs over has these, and pip must never put another
# copy into the verify venv (a classic wheel pinning another torch must fail, not fetch that torch).
_ALWAYS_STACK = {"torch", "triton", "pytorch-triton"}
_STACK_PREFIXES = ("nvidia-", "cuda-")


def torch_stack(site: Path) -> dict[str, str]:
    """Canonical name -> version of the torch install's stack: torch, triton and the nvidia-*/cuda-*
    wheels it holds (pure-Python namesakes it does not hold, nvidia-ml-py, stay ordinary dependencies)."""
    from importlib.metadata import distributions

    stack: dict[str, str] = {}
    for dist in sorted(distributions(path=[str(site)]), key=lambda d: (d.metadata["Name"] or "", d.version or "")):
        name = normalize(dist.metadata["Name"] or "")
        if name and dist.version and (name in _ALWAYS_STACK or name.startswith(_STACK_PREFIXES)):
            stack.setdefault(name, dist.version)
    return stack


def shadowing_stack(site: Path, stack: dict[str, str]) -> list[str]:
    """Packages of the torch stack that pip put into site, over the torch install's own."""
    return [name for name in sorted(torch_stack(site)) if name in stack or name in _ALWAYS_STACK]


def _installable(wheel: Path, tmp: Path) -> Path:
    """A PEP 825 variant wheel as pip installs it: the same bytes under the name without the label
    (pip refuses the label's sixth part; the variant.json inside is metadata pip ignores)."""
    name = WheelName.parse(wheel.name)
    if not name.variant:
        return wheel

    (tmp / "plain").mkdir(exist_ok=True)
    plain = tmp / "plain" / plain_name(name)
    try:
        os.link(wheel, plain)
    except OSError:  # another filesystem
        import shutil
        shutil.copyfile(wheel, plain)
    return plain


def install_fresh(wheel: Path, torch_site: Path, tmp: Path, find_links: Sequence[Path]) -> tuple[Path, str | None]:
    """A fresh venv in tmp over torch_site with the wheel installed: its python, and why the install
    failed (None when it did not). Offline first; a wheel that also needs other packages (numpy,
    scipy) gets those from the package index, with the torch install's stack pinned exactly as it is.
    Either way the venv must end up holding nothing of that stack itself: its torch, triton and CUDA
    wheels are the install's, whatever find-links or an index offered."""
    python = fresh_venv(tmp / "venv", torch_site)
    wheel = _installable(wheel, tmp)
    links = [arg for d in find_links for arg in ("--find-links", str(d))]
    stack = torch_stack(torch_site)
    unmet = _stack_requirements_unmet(wheel, stack)
    if unmet:
        return python, (f"FAILED: requires {', '.join(unmet)}, which the torch install does not meet "
                        "(torch, triton and that install's CUDA wheels are never downloaded here)")
    r = pip_install(python, "--no-index", *links, str(wheel))
    if r.returncode != 0 and _no_distribution_found(r.stderr):
        constraints = tmp / "torch-install-constraints.txt"
        constraints.write_text("".join(f"{name}==={version}\n" for name, version in sorted(stack.items())))
        r = pip_install(python, "--constraint", str(constraints), *links, str(wheel))
    if r.returncode != 0:
        return python, pip_failure(r)
    shadowing = shadowing_stack(Path(purelib(python)), stack)
    if shadowing:
        return python, (f"FAILED: pip put {', '.join(shadowing)} into the verify venv over the torch install's "
                        "(from find-links or an index): the wheel would be tested against another torch stack")
    return python, None


def _stack_requirements_unmet(wheel: Path, stack: dict[str, str]) -> list[str]:
    """The wheel's requirements (for a plain install) on the torch stack that the torch install does not
    meet: torch or triton it lacks, or a version of one of its packages it does not have."""

    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    unmet = []
    for line in requires:
        req = plain_install_requirement(line)
        if req is None:
            continue  # for an extra, or unreadable: pip's own error says it
        name = normalize(req.name)
        if name in stack:
            if not req.specifier.contains(stack[name], prereleases=True):
                unmet.append(line)
        elif name in _ALWAYS_STACK:
            unmet.append(line)
    return unmet


def _no_distribution_found(stderr: str) -> bool:
    """pip failed offline for want of a distribution (not a conflict or a broken wheel)."""
    return "No matching distribution found for " in stderr




# --- the test requirements, installed once ------------------------------------------------------

LAYER_STAMP = ".complete.json"


@dataclass(frozen=True)
class Layer:
    """A cached install of test requirements over one torch install: its site-packages."""

    site: Path


def cacheable(requires: list[str], own: str) -> bool:
    """Requirements by name (`pytest`, `numpy>=1.26`) only, none of them the wheel's own distribution:
    a path or URL names content that can change under the same text, and `pkg[test]` resolves against
    the wheel installed, so such a set is installed into each verify venv instead, every time."""

    parsed = [(text, read_requirement(text)) for text in requires]
    return all(r is not None and r.url is None and normalize(r.name) != normalize(own) and not names_an_archive(text)
               for text, r in parsed)


# pip installs a requirement that ends as an archive does (`helper-0.1-py3-none-any.whl`) from that file,
# though it also reads as a name: it is a path, its content the input
_ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar")


def names_an_archive(text: str) -> bool:
    return text.strip().lower().endswith(_ARCHIVES)


def requirement_files(requires: Sequence[str]) -> dict[str, str]:
    """The requirements given by path (a wheel, an sdist, a project directory, a file: URL; relative to this
    directory, as pip reads them), each by a sha256 of its content: what pip installs from them changes
    with that, not with their text. Requirements by name or by a remote URL are left out."""

    found: dict[str, str] = {}
    for text in requires:
        req = read_requirement(text)
        url = req.url if req is not None else None
        if req is not None and not (url and url.startswith("file:")) and not names_an_archive(text):
            continue
        path = Path(unquote(urlsplit(url).path) if url else text).absolute()
        if path.is_file():
            found[text] = sha256_file(path)
        elif path.is_dir():
            h = hashlib.sha256()
            for rel in linked_files(path):
                if not {".git", "__pycache__"} & set(rel.parts):
                    h.update(f"{rel}\0{sha256_file(path / rel)}\0".encode())
            found[text] = h.hexdigest()
    return found


@contextlib.contextmanager
def requirements_for_tests(python: Path, site: Path, requires: list[str], torch_site: Path,
                           own: str) -> Iterator[str | None]:
    """The test requirements in the venv for the body's duration: the cached layer (held shared, so no
    run remakes it under these tests) for requirements by name, else installed into the venv. Yields
    why they could not be had (a FAILED check), or None."""
    if not requires:
        yield None
    elif not cacheable(requires, own):
        r = pip_install(python, *requires)
        yield None if r.returncode == 0 else pip_failure(r)
    else:
        with held_layer(requires, torch_site) as (layer, failed):
            if layer is not None:
                lay_over(python, site, layer)
            yield failed


@contextlib.contextmanager
def held_layer(requires: list[str], torch_site: Path) -> Iterator[tuple[Layer | None, str | None]]:
    """The layer holding these requirements over this torch install, made where missing or damaged, and
    held shared for the body; or (None, why it cannot be made: pip failed, or would put a torch stack
    package of its own there)."""

    stack = torch_stack(torch_site)
    key = hashlib.sha256(json.dumps({"requires": sorted(requires), "torch": str(torch_site.resolve()), "stack": stack,
                                     "python": [sys.executable, sys.version]}).encode()).hexdigest()[:24]
    root = cache_dir("test-layers", key)
    lock, what = root.with_name(root.name + ".lock"), "the test requirements' layer"
    for _ in range(3):
        with locked_file(lock, what, shared=True):
            layer = _load_layer(root)
            if layer is not None:
                mark_used(root, measure=False)  # the prune's "last used"; a layer never changes
                yield layer, None
                return
        with locked_file(lock, what):
            failed = _make_layer(root, requires, torch_site, stack) if _load_layer(root) is None else None
        if failed is not None:
            yield None, failed
            return
    raise CiError(f"{what} {root} was remade by other runs three times while this one waited for it")


def _make_layer(root: Path, requires: list[str], torch_site: Path, stack: dict[str, str]) -> str | None:
    """The layer at root, stamped last; why not (a FAILED check), with nothing left behind."""

    shutil.rmtree(root, ignore_errors=True)
    log.info(f"installing the test requirements once, for every later verify: {' '.join(requires)}")
    python = fresh_venv(root, torch_site)
    r = pip_install(python, *requires)
    site = Path(purelib(python))
    shadowing = shadowing_stack(site, stack) if r.returncode == 0 else []
    if r.returncode != 0 or shadowing:
        shutil.rmtree(root, ignore_errors=True)
        return pip_failure(r) if r.returncode != 0 else (
            f"FAILED: installing them would put {', '.join(shadowing)} over the torch install's "
            "(the tests would run against another torch stack)")
    dists = sorted(p.name for p in site.glob("*.dist-info"))
    write_text(root / LAYER_STAMP, json.dumps({"site": str(site), "requires": sorted(requires), "dists": dists}))
    return None


def _load_layer(root: Path) -> Layer | None:
    """The layer its stamp describes, or None where it is missing, cut off, or damaged: a distribution
    it installed is gone, or a file one lists in RECORD is gone or another size."""

    try:
        stamp = json.loads(read_stamp(root / LAYER_STAMP, 1 << 20))
        site = Path(stamp["site"])
        if not site.resolve().is_relative_to(root.resolve()):
            return None
        if sorted(p.name for p in site.glob("*.dist-info")) != stamp["dists"]:
            return None
        for name in stamp["dists"]:
            for path, entry in read_record_file(site / name / "RECORD").items():
                size = (site / path).stat().st_size  # OSError: the file is gone
                if entry.size is not None and size != entry.size:
                    return None
    except (OSError, ValueError, KeyError, TypeError, CiError):
        return None
    return Layer(site)


def lay_over(python: Path, site: Path, layer: Layer) -> None:
    """The layer importable in the venv (before the torch install, as if installed there), and its
    console scripts in the venv's bin, run by the venv's interpreter: `pytest` on PATH sees the wheel."""
    from importlib.metadata import distributions

    # sorted before _base_environment.pth; addsitedir also reads the layer's own .pth files
    (site / "_0_test_requirements.pth").write_text(f"import site; site.addsitedir({str(layer.site)!r})\n")
    bin_dir = python.parent
    for dist in distributions(path=[str(layer.site)]):
        for ep in dist.entry_points:
            script = bin_dir / ep.name
            attr = ep.attr.split(".") if ep.attr else []
            if (ep.group != "console_scripts" or "/" in ep.name or ep.name.startswith(".") or script.exists()
                    or not attr or not all(p.isidentifier() for p in [*ep.module.split("."), *attr])):
                continue
            script.write_text(f"#!{python}\nimport sys\nfrom {ep.module} import {attr[0]}\n"
                              f"sys.exit({'.'.join(attr)}())\n")
            script.chmod(0o755)
