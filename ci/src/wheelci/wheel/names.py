"""Distribution file names: wheels per the binary distribution spec (5 to 7 dash-separated parts),
sdists as `<name>-<version>.tar.gz|.zip`.

A build tag must start with a digit; `triton-2.1.0-0-cp38-...whl` is project `triton`, version
`2.1.0`, build `0` (the parse pip2pi got wrong). A PEP 825 variant wheel adds a last part, its variant
label (`x-1.0-cp311-cp311-manylinux_2_28_x86_64-cu130.whl`): six parts whose third does not start with
a digit (no Python tag does) end in a label, and seven are a build tag and a label, as PEP 825's
grammar reads them. Both kinds are held to the same rules: a valid project
name and a PEP 440 version, so ci.index and ci.upload never list a file that pip would not accept.
Versions are compared as PEP 440 versions (`1.0.0-rc1` is `1.0.0rc1`). Pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

from wheelci.errors import CiError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

# Patterns are used with fullmatch: `$` would also match before a trailing newline.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?")
# PEP 508 project names; legacy sdists keep their dashes in the file name.
_PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# What a version may spell in a file name: packaging alone also accepts surrounding whitespace
# (`Version("1.0\n")`) and a leading `v`, which would land in .dist-info names and generated files.
_VERSION_CHARS = re.compile(r"[0-9][A-Za-z0-9._+!]*")
_TAG = re.compile(r"[A-Za-z0-9_.]+")
_BUILD = re.compile(r"[0-9][A-Za-z0-9_.]*")
VARIANT_LABEL = re.compile(r"[0-9a-z_.]{1,16}")  # PEP 825; fullmatch
SDIST_SUFFIXES = (".tar.gz", ".zip")


def cuda_tag(cuda: str | None, *, major: bool = False) -> str:
    """A build's CUDA as PyTorch spells it in index names and local versions: cpu, cu130 (13.0), or with
    major cu13 (a stable-ABI wheel serves its whole CUDA major)."""
    if cuda is None:
        return "cpu"
    return "cu" + (cuda.split(".")[0] if major else cuda.replace(".", ""))


def normalize(name: str) -> str:
    """The normalized project name (PEP 503), as packaging (pip's own) spells it: every name in ci/
    is compared through this one function."""
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


_LABEL = re.compile(r"[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*")  # fullmatch: `$` passes a trailing newline


def local_version(version: str, label: str) -> str:
    """2.13.0+cpu + abc -> 2.13.0+cpu.abc; 1.0 + abc -> 1.0+abc (PEP 440 local labels)."""
    if not _LABEL.fullmatch(label):
        raise CiError(f"invalid local version label {label!r} (letters, digits and dots only, e.g. internal.1)")
    new = f"{version}.{label}" if "+" in version else f"{version}+{label}"
    if not is_version(new):
        raise CiError(f"invalid local version label {label!r}: {new!r} is not a PEP 440 version")
    return new


def is_version(text: str) -> bool:
    """A valid PEP 440 version as a file name spells it (no whitespace, no `v` prefix)."""
    from packaging.version import InvalidVersion, Version
    if not _VERSION_CHARS.fullmatch(text):
        return False
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def same_version(a: str, b: str) -> bool:
    """Equal as PEP 440 versions: '1.0.0-rc1' and '1.0.0rc1' are one version."""
    from packaging.version import InvalidVersion, Version
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def canonical_version(text: str) -> str:
    """'1.0.0-rc1' -> '1.0.0rc1' (the normal form; an invalid version is returned as it is)."""
    from packaging.version import InvalidVersion, Version
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def sdist_name(filename: str) -> tuple[str, str] | None:
    """(normalized project, version) of an sdist file name, or None when it is not a valid one."""
    for suffix in SDIST_SUFFIXES:
        if filename.endswith(suffix):
            name, sep, version = filename[: -len(suffix)].rpartition("-")
            if sep and _PROJECT.fullmatch(name) and is_version(version):
                return normalize(name), version
    return None


def classify(filename: str) -> tuple[str, str, str] | None:
    """('wheel'|'sdist', project, version), or None for a file that is not a valid distribution name."""
    if filename.endswith(".whl"):
        try:
            w = WheelName.parse(filename)
        except CiError:
            return None
        return ("wheel", w.project, w.version)
    parsed = sdist_name(filename)
    return ("sdist", *parsed) if parsed else None


def find_dist_info(top_dirs: set[str], wheel: "WheelName", filename: str) -> str:
    """The wheel's one .dist-info directory: named for the file's distribution. ci.check, ci.index
    and the wheel tools all use this rule (through ci.wheel.zipread), so they agree on which wheels are
    malformed. A second .dist-info is refused, as pip and uv refuse it: which one holds the metadata
    would be up to each tool."""
    infos = sorted(t for t in top_dirs if t.endswith(".dist-info"))
    want = wheel.dist_info
    match = [t for t in infos if t == want] or [
        t for t in infos if escape(t[: -len(".dist-info")].rsplit("-", 1)[0]).lower()
        == wheel.distribution.lower()]
    if not infos:
        raise CiError(f"no .dist-info directory in {filename}")
    if len(infos) > 1 and match:
        raise CiError(f"{filename}: {len(infos)} .dist-info directories ({', '.join(infos)}): a wheel has "
                      "one (pip and uv refuse this one)")
    if len(match) != 1:
        raise CiError(f"{filename}: expected one .dist-info named like {want}, found {', '.join(infos)}")
    return match[0]


def escape(name: str) -> str:
    """The distribution name as it appears in file and .dist-info names."""
    return re.sub(r"[-_.]+", "_", name)


class _NameChanges(TypedDict, total=False):
    """What WheelName.with_ may change: any of its fields, each with its own type."""

    distribution: str
    version: str
    build: str | None
    python: str
    abi: str
    platform: str
    variant: str | None


@dataclass(frozen=True)
class WheelName:
    distribution: str  # as escaped in the file name
    version: str
    build: str | None
    python: str
    abi: str
    platform: str
    variant: str | None = None  # PEP 825 variant label

    @classmethod
    def parse(cls, filename: str) -> "WheelName":
        if not filename.endswith(".whl"):
            raise CiError(f"not a wheel file name (no .whl suffix): {filename}")
        parts = filename[:-4].split("-")
        variant = None
        if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
            variant = parts.pop()
            if not VARIANT_LABEL.fullmatch(variant):
                raise CiError(f"invalid wheel file name {filename!r}: variant label {variant!r} is not 1-16 "
                              "characters of 0-9, a-z, _ and . (PEP 825)")
        if len(parts) == 5:
            dist, version, py, abi, plat = parts
            build = None
        elif len(parts) == 6:
            dist, version, build, py, abi, plat = parts
            if not build[:1].isdigit():
                raise CiError(f"invalid wheel file name (build tag must start with a digit): {filename}")
        else:
            raise CiError(f"invalid wheel file name (want 5 to 7 dash-separated parts): {filename}")
        if not _NAME.fullmatch(dist) or not all(_TAG.fullmatch(t) for t in (py, abi, plat)) \
                or (build is not None and not _BUILD.fullmatch(build)):
            raise CiError(f"invalid wheel file name: {filename!r}")
        if not is_version(version):
            raise CiError(f"invalid wheel file name {filename!r}: {version!r} is not a PEP 440 version")
        _packaging_agrees("-".join(parts) + ".whl" if variant else filename)  # packaging has no labels yet
        return cls(dist, version, build, py, abi, plat, variant)

    @property
    def project(self) -> str:
        return normalize(self.distribution)

    @property
    def dist_info(self) -> str:
        return f"{self.distribution}-{self.version}.dist-info"

    @property
    def data_dir(self) -> str:
        return f"{self.distribution}-{self.version}.data"

    @property
    def tag(self) -> str:
        return f"{self.python}-{self.abi}-{self.platform}"

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.distribution}-{self.version}{build}-{self.tag}{variant}.whl"

    def with_(self, **changes: Unpack[_NameChanges]) -> "WheelName":
        return replace(self, **changes)


def _packaging_agrees(filename: str) -> None:
    """The file name as pip's own parser (packaging) reads it: refuse what it refuses."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename as e:
        raise CiError(f"invalid wheel file name {filename!r}: {str(e).splitlines()[0]}") from None
