"""The machine architectures a build targets, in cibuildwheel's words (x86_64, aarch64), and how this
machine reaches each: natively, or under QEMU user emulation registered in binfmt_misc, the way
cibuildwheel builds aarch64 wheels on x86_64 runners (and GitHub's Arm runners build them natively).

Pure but for `machine()` and `emulated()`, which read this machine (the edge, wheelci.engine, calls them).
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from wheelci.errors import CiError

ARCHS = ("x86_64", "aarch64")
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
# what a container engine's --platform calls each
OCI_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
_DEBIAN = {"x86_64": "amd64", "aarch64": "arm64"}


def emulation_hint(arch: str) -> str:
    """How to make this machine run `arch` binaries: Debian's qemu-user-static registers QEMU in binfmt_misc
    with the F flag (so containers use it too); the mount is needed once per boot where nothing mounted it."""
    return (f"register QEMU for it: `apt-get install qemu-user-static binfmt-support` and, as root, `mount -t "
            f"binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc` (or `docker run --privileged --rm tonistiigi/binfmt "
            f"--install {_DEBIAN[arch]}`), or build on an {arch} machine")


def normalize(name: str) -> str:
    name = name.strip().lower()
    return _ALIASES.get(name, name)


def parse(text: str | None) -> list[str]:
    """`--archs aarch64`, `x86_64,aarch64` (or space separated, as CIBW_ARCHS): known names, in the order
    given, once each; `native` is this machine's. Not given: this machine's, as cibuildwheel's default
    (x86_64 on an x86_64 machine)."""
    if text is None:
        return [machine()]
    names = [normalize(n) for n in re.split(r"[,\s]+", text.strip()) if n]
    if not names:
        raise CiError(f"--archs {text[:40]!r} names no architecture (choose from {', '.join(ARCHS)}, native)")
    names = [machine() if n in ("native", "auto") else n for n in names]
    bad = [n for n in names if n not in ARCHS]
    if bad:
        shown = ", ".join(repr(n[:40]) for n in bad[:3])
        raise CiError(f"--archs {shown}: unknown architecture (choose from {', '.join(ARCHS)}, native)")
    return list(dict.fromkeys(names))


def machine() -> str:
    """This machine's architecture, in the same words."""
    return normalize(platform.machine())


def emulated(binfmt: Path = BINFMT) -> tuple[str, ...]:
    """The architectures this kernel runs through a registered, enabled QEMU handler (binfmt_misc) that
    containers can use: its F flag keeps the interpreter open, since a container's filesystem has none."""
    try:
        if (binfmt / "status").read_text(errors="replace").strip() == "disabled":
            return ()
    except OSError:
        pass
    found = []
    for arch in ARCHS:
        try:
            lines = (binfmt / f"qemu-{arch}").read_text(errors="replace").splitlines()
        except OSError:
            continue
        flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
        if lines[:1] == ["enabled"] and "F" in flags:
            found.append(arch)
    return tuple(found)


def of_platform_tag(tag: str) -> str:
    """`manylinux_2_28_aarch64` -> aarch64; a tag naming no architecture of ours -> the tag itself."""
    for arch in ARCHS:
        if tag.endswith(f"_{arch}"):
            return arch
    return tag


def reach(arch: str, native: str, emulates: tuple[str, ...]) -> str | None:
    """How this machine runs `arch` code: "native", "emulated" (QEMU), or None (it cannot)."""
    if arch == native:
        return "native"
    return "emulated" if arch in emulates else None


def gpu_coverage(arch_list: str, gpus: dict[str, str]) -> list[tuple[str, str, str]]:
    """(capability, GPUs, how the arch list serves them) for each listed GPU: its own cubin (or one of its
    major with a lower minor, which the driver runs), PTX of an older arch (compiled by the driver at
    first load), or "not served"."""
    entries = []
    for entry in (e for e in re.split(r"[;, ]+", arch_list.strip()) if e):
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", entry)
        if m:
            entries.append((int(m[1]), int(m[2]), m[3], bool(m[4])))
    out = []
    for cap, names in gpus.items():
        major, minor = (int(x) for x in cap.split("."))
        cubin = [e for e in entries if e[0] == major and e[1] <= minor and (e[2] != "a" or e[1] == minor)]
        ptx = [e for e in entries if e[3] and (e[0], e[1]) <= (major, minor) and not e[2]]
        how = ("cubin " + "/".join(f"sm_{e[0]}{e[1]}{e[2]}" for e in cubin) if cubin
               else f"PTX compute_{ptx[-1][0]}{ptx[-1][1]} (JIT at first load)" if ptx else "not served")
        out.append((cap, names, how))
    return out
