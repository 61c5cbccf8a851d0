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

from wheelci import cli
from wheelci.errors import Finding
from wheelci.util.sizes import PROFILES, format_size, parse_limit

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

    def to_json(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def check_wheel(path: Path | str, limit: int | str | None = "pypi", unpacked_limit: int | str | None = None,
                top: int = TOP) -> CheckResult:
    """Compare a wheel's file size and unpacked size against limits (None: no limit)."""
    from wheelci.wheel.zipread import WheelArchive

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
    from wheelci.wheel.names import WheelName

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
    lines += [f"      {format_size(m.compressed):>10}  {format_size(m.unpacked):>10}  {cli.shown(m.name)}"
              for m in r.largest]
    return "\n".join(lines)


def main(args) -> int:
    parse_limit(args.limit)  # a bad limit is bad input before any wheel is read
    unpacked_limit = parse_limit(args.unpacked_limit)
    results = [check_wheel(w, args.limit, unpacked_limit) for w in args.wheels]
    if args.json:
        cli.emit_json([r.to_json() for r in results])
    else:
        for r in results:
            print(render(r))
    over = [r for r in results if not r.ok]
    if over:
        what = "over the limit" if any(r.problems for r in over) else f"refused by {args.limit}"
        raise Finding(f"{len(over)} of {len(results)} wheel(s) {what}: " + ", ".join(Path(r.wheel).name for r in over))
    return 0


def build_parser() -> cli.Parser:
    p = cli.parser("check", "Check wheel sizes against a publishing limit, reading only "
                   "central directories; over a limit, list the 10 largest members and exit 1.")
    p.add_argument("wheels", metavar="WHEEL", nargs="+", type=Path)
    p.add_argument("--limit", default="pypi", metavar="pypi|github|SIZE",
                   help="largest allowed file size: pypi (100 MiB, default; no local version label either), github "
                        "(2 GiB) or a size like 3GB")
    p.add_argument("--unpacked-limit", metavar="SIZE", help="largest allowed unpacked (installed) size")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
