"""The torch axis of a matrix: which torch releases `--torch` names.

One release (`2.13.0`), `latest`, a range (`>=2.12`, `>=2.12,<2.15`, `2.12-2.15`: both minors whole) or the
newest N minors (`last:4`). A range selects every final release in it, patch releases too: a classic wheel
pins `torch==X.Y.Z` (LibTorch's C++ ABI is not stable across releases), so each one needs a wheel of its
own. Only a single release is read without the index; the others are resolved against the releases the
index lists (wheelci.config.releases), so a torch released tomorrow joins the next run's matrix.
Pure functions; the range syntax is packaging's specifiers, read by packaging.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wheelci.errors import CiError

RELEASE = re.compile(r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})")  # fullmatch: a release, as written
_MINORS = re.compile(r"([0-9]+)\.([0-9]+)\s*-\s*([0-9]+)\.([0-9]+)")  # 2.12-2.15
_LAST = re.compile(r"last:([0-9]{1,2})")
EXAMPLES = "a release such as 2.13.0, latest, a range such as >=2.12 or 2.12-2.15, or last:4"


@dataclass(frozen=True)
class TorchAxis:
    """What --torch asked: `release` (one, as written), else `latest`, `last` (newest N minors) or `spec`
    (a PEP 440 specifier set, a minor range already turned into one)."""

    text: str
    release: str | None = None
    latest: bool = False
    last: int | None = None
    spec: str | None = None

    @property
    def single(self) -> bool:
        """One release, known without reading the index."""
        return self.release is not None

    def select(self, releases: list[str]) -> list[str]:
        """The releases of `releases` (final X.Y.Z) this axis names, oldest first."""
        ordered = sorted(set(releases), key=key)
        if self.release is not None:
            return [self.release]
        if self.latest:
            return ordered[-1:]
        if self.last is not None:
            minors = sorted({minor(v) for v in ordered})[-self.last:]
            return [v for v in ordered if minor(v) in minors]
        from packaging.specifiers import SpecifierSet

        assert self.spec is not None
        spec = SpecifierSet(self.spec)
        return [v for v in ordered if spec.contains(v)]


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def minor(version: str) -> tuple[int, int]:
    major, minor_ = key(version)[:2]
    return major, minor_


def parse(text: str) -> TorchAxis:
    """--torch's value; bad input is one CiError line."""
    word = text.strip()
    if RELEASE.fullmatch(word):
        return TorchAxis(word, release=word)
    if word.lower() == "latest":
        return TorchAxis(word, latest=True)
    if m := _LAST.fullmatch(word.lower()):
        if not 1 <= int(m[1]) <= 24:
            raise CiError(f"--torch {word}: give last:1 to last:24 (the newest N torch minors)")
        return TorchAxis(word, last=int(m[1]))
    if m := _MINORS.fullmatch(word):
        low, high = (int(m[1]), int(m[2])), (int(m[3]), int(m[4]))
        if low > high:
            raise CiError(f"--torch {word}: the range runs from {m[1]}.{m[2]} down to {m[3]}.{m[4]}: give the lower first")
        return TorchAxis(word, spec=f">={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}")
    if word and word[0] in "<>=!~" and len(word) < 200:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            spec = SpecifierSet(word)
        except InvalidSpecifier:
            spec = None
        if spec is not None and not any(s.operator == "===" for s in spec):
            return TorchAxis(word, spec=str(spec))
    shown = word[:40] + ("..." if len(word) > 40 else "")
    raise CiError(f"bad --torch {shown!r} (want {EXAMPLES})")


def within(version: str, bound: str) -> bool:
    """Whether the torch release `version` is inside a project's own torch specifier `bound`."""
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(bound).contains(version)


def project_bound(requires: list[str]) -> str | None:
    """The torch specifier a project's own requirements put on the torch it builds against
    ([build-system] requires and [project] dependencies: `torch>=2.4,<2.14`), or None where they name none."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    bounds = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and req.specifier and req.marker is None:
            bounds.append(str(req.specifier))
    return ",".join(bounds) or None
