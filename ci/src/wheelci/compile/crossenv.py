"""A torch install of another machine architecture, made on this one.

A build for aarch64 on an x86_64 machine still reads torch after the compile: the preload's load order
comes from torch's and its CUDA wheels' ELF files, the ABI check from its headers, and the emulated
verify (wheelci.verify_emulated) mounts it as the torch its fresh venv runs over. pip installs binary
wheels of any platform into a directory (--target with --platform), running none of their code, so this
needs no emulation: only the interpreter that runs those wheels later does.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from wheelci.compile.hostenv import BuildEnv, TorchSpec, provenance_key, torch_pip_args
from wheelci.errors import CiError
from wheelci.util import log, proc
from wheelci.util.atomic import write_text
from wheelci.util.cache import cache_dir, mark_used
from wheelci.util.lock import held_for_process, locked_file
from wheelci.wheel.metadata import get_headers

STAMP = ".complete.json"
# the manylinux tags an aarch64 (or x86_64) CPython 3 wheel of torch and the nvidia-* wheels carry
_GLIBC_MINORS = range(17, 40)


def platforms(arch: str) -> list[str]:
    """pip's --platform values for a manylinux machine of this architecture (pip takes each exactly)."""
    return [f"manylinux_2_{m}_{arch}" for m in reversed(_GLIBC_MINORS)] + [f"manylinux2014_{arch}"]


def _torch_facts(site: Path) -> tuple[str, str | None, list[str]]:
    """torch's version, CUDA version and Requires-Dist, read from its files (its code cannot run here)."""
    text = (site / "torch" / "version.py").read_text()
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.M)
    cuda = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*'([^']+)'", text, re.M)
    if version is None:
        raise CiError(f"{site}/torch/version.py names no version")

    (meta,) = site.glob("torch-*.dist-info/METADATA")
    requires = get_headers(meta.read_text(errors="replace"), "Requires-Dist")
    return version[1], cuda[1] if cuda else None, requires


def ensure_cross_env(spec: TorchSpec, arch: str, python: str, find_links: str | None = None) -> BuildEnv:
    """The cached site-packages holding `spec`'s torch for `arch` and CPython `python` (e.g. "3.11"),
    made on first use (locked, stamped last: an interrupted one is made again), held for the rest of this
    process and stamped used, as a build environment is (wheelci.compile.hostenv.held_env)."""

    tag = python.replace(".", "")
    key = _provenance_key(spec, find_links)
    root = cache_dir() / "envs" / (f"torch-{spec.version}-{spec.variant}-py{tag}-{arch}" + (f"-from-{key}" if key else ""))
    for _ in range(3):
        env = _made(root, spec, arch, python, find_links)
        if held_for_process(root, f"the {arch} torch {spec.version}"):
            mark_used(root, measure=False)
            return env
    raise CiError(f"the {arch} torch {root} was removed by other runs three times while this one used it")


def _provenance_key(spec: TorchSpec, find_links: str | None) -> str:
    """The index's key (hostenv.provenance_key), and with a find-links directory the sha256 of each torch
    wheel of this version in it: another wheel of the same name is another environment."""
    key = provenance_key(spec)
    if not find_links:
        return key
    h = hashlib.sha256(key.encode())
    for wheel in sorted(Path(find_links).glob(f"torch-{spec.version}*.whl")):
        h.update(wheel.name.encode() + b"\0")
        with open(wheel, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()[:12]


def _made(root: Path, spec: TorchSpec, arch: str, python: str, find_links: str | None) -> BuildEnv:
    tag = python.replace(".", "")
    site = root / "site"
    with locked_file(root.with_name(root.name + ".lock"), f"the {arch} torch {spec.version}"):
        if not ((root / STAMP).is_file() and (site / "torch" / "version.py").is_file()):
            shutil.rmtree(root, ignore_errors=True)
            args, source = torch_pip_args(spec)
            args = [a for a in args if a != "--isolated"]
            links = ["--find-links", find_links] if find_links else []
            log.info(f"installing torch {spec.version} ({spec.variant}) for {arch} into {site} (from {source})")
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                   "--target", site, "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
                   "--abi", f"cp{tag}", *[f"--platform={p}" for p in platforms(arch)], *links, *args]
            proc.stream(cmd, what=f"installing torch {spec.version} for {arch}")  # its output redacted, as every tool's
            version, cuda, requires = _torch_facts(site)
            if (spec.cuda is None) != (cuda is None) or (spec.cuda and not (cuda or "").startswith(spec.cuda)):
                shutil.rmtree(root, ignore_errors=True)  # not what was asked: never kept for the next run
                raise CiError(f"{source} gave torch {version} for {arch} as a "
                              f"{'CUDA ' + cuda if cuda else 'CPU'} build, not the {spec.variant} build the plan "
                              "names; pass --torch-index-url (or --find-links) with that build")
            write_text(root / STAMP, json.dumps({"version": version, "cuda": cuda, "arch": arch}))
    version, cuda, requires = _torch_facts(site)
    # no interpreter of that machine here: `python` is a path no step of an emulated build runs
    return BuildEnv(root, root / "bin" / "python", site, version, cuda, requires)
