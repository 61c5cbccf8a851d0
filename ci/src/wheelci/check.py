"""Size check against where the wheel must go: `python -m ci.check WHEEL ... --limit pypi|github|SIZE`.

Reads only each wheel's central directory (milliseconds for a 2.5 GB wheel). Over a limit it prints
the 10 largest members, so the fix (split them off, compress device code, drop test binaries) is
obvious, and exits 1. Profiles: pypi = 100 MiB per file (PyPI's default), github = under 2 GiB
(a release asset). Any size works too: `--limit 3GB` for a remote build executor's cap.

The pypi profile is PyPI's whole rule for a file's name too: PyPI refuses a version with a local label
(`0.1.0+pt2.13.0.cu130`: "The use of local versions ... is not allowed"), so a wheel checked against it
with one is refused as well, whatever its size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wheelci.util.output import shown
from wheelci.util.sizes import PROFILES, format_size, parse_limit
from wheelci.wheel.names import WheelName
from wheelci.wheel.zipread import WheelArchive

TOP = 10


@dataclass(frozen=True)
class Largest:
    name: str
    compressed: int
    unpacked: int


@dataclass(frozen=True)
class CheckResult:
    wheel: str
    size: int  # bytes on disk
    unpacked: int  # sum of uncompressed member sizes
    limit: int | None
    unpacked_limit: int | None
    largest: list[Largest] = field(default_factory=list)  # TOP members by compressed size
    problems: list[str] = field(default_factory=list)  # empty when within every size limit
    refused: list[str] = field(default_factory=list)  # what the destination refuses besides its size

    @property
    def ok(self) -> bool:
        return not self.problems and not self.refused

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), ok=self.ok)


def check_wheel(path: Path | str, limit: int | str | None = "pypi", unpacked_limit: int | str | None = None,
                top: int = TOP) -> CheckResult:
    """Compare a wheel's file size and unpacked size against limits (None: no limit)."""

    path = Path(path)
    refused = pypi_refuses(path.name) if isinstance(limit, str) and limit.strip().lower() == "pypi" else []
    limit, unpacked_limit = parse_limit(limit), parse_limit(unpacked_limit)
    with WheelArchive.open(path) as wa:
        size = path.stat().st_size
        unpacked = wa.unpacked_size
        largest = [Largest(m.name, m.csize, m.usize)
                   for m in sorted(wa.files, key=lambda m: (-m.csize, m.name))[:top]]
    problems = []
    if limit is not None and size > limit:
        problems.append(f"{format_size(size)} > limit {format_size(limit)}")
    if unpacked_limit is not None and unpacked > unpacked_limit:
        problems.append(f"unpacked {format_size(unpacked)} > limit {format_size(unpacked_limit)}")
    return CheckResult(str(path), size, unpacked, limit, unpacked_limit, largest, problems, refused)


def pypi_refuses(filename: str) -> list[str]:
    """What PyPI refuses in a wheel's name: a local version label (PEP 440 `+label`)."""

    version = WheelName.parse(filename).version
    if "+" not in version:
        return []
    return [f"version {version} has a local label (+{version.split('+', 1)[1]}), which PyPI refuses: build with "
            "--local-version none for PyPI, or publish the labelled wheels to an index of your own"]


def render(r: CheckResult) -> str:
    name = Path(r.wheel).name
    if r.ok:
        lim = f" (limit {format_size(r.limit)})" if r.limit is not None else ""
        return f"ok    {name}: {format_size(r.size)}{lim}, unpacked {format_size(r.unpacked)}"
    if not r.problems:
        return f"REFUSED {name}: {'; '.join(r.refused)}"
    lines = [f"OVER  {name}: {'; '.join(r.problems + r.refused)}", f"      {len(r.largest)} largest members "
             "(compressed, unpacked):"]
    lines += [f"      {format_size(m.compressed):>10}  {format_size(m.unpacked):>10}  {shown(m.name)}"
              for m in r.largest]
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m wheelci.check` (`python -m ci.check` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.check", run_name="__main__")
