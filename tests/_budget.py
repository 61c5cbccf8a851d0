"""The suite's budget, printed at the end of a CI run: `python -m tests._budget TIER.xml... [--docs]
[--keep-under GB]`.

Each argument is one tier's JUnit report (pytest --junitxml), named after the tier. It prints each
tier's wall time and counts, the 30 slowest tests of the run, the costliest modules of each tier and the disk the caches hold, so the next
change sees where its time and disk went. With --keep-under, the test inputs only the suite uses (real
torch releases, the wheel corpus, ...) and the build environments no build of the run used (keyed by a
test's loopback index, or a torch no test asks for now) are removed, largest first, until the caches fit;
the build environments the run used are never removed. With --docs it also writes the tiers'
table into docs/contributing.md, between the markers test_suite_budget checks.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "contributing.md"
BEGIN, END = "<!-- tiers: begin (python -m tests._budget --docs) -->", "<!-- tiers: end -->"
SLOWEST = 30
MODULES = 20  # the test modules that take the most time, each tier's own


@dataclass(frozen=True)
class Tier:
    name: str
    seconds: float
    tests: int
    failed: int
    skipped: int
    cases: list[tuple[float, str]]  # (seconds, node id): setup, call and teardown together
    started: float = 0.0  # when the tier started (epoch seconds; 0 where its report does not say)


def read_tier(report: Path) -> Tier:
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = []
    for case in (c for s in suites for c in s.iter("testcase")):
        node = f"{case.get('classname')}::{case.get('name')}"
        cases.append((float(case.get("time") or 0), node))

    def count(key: str) -> int:
        return sum(int(s.get(key) or 0) for s in suites)

    stamps = [datetime.fromisoformat(t).timestamp() for s in suites if (t := s.get("timestamp"))]
    return Tier(report.stem, sum(float(s.get("time") or 0) for s in suites), count("tests"),
                count("failures") + count("errors"), count("skipped"), cases, min(stamps, default=0.0))


def caches() -> dict[str, Path]:
    """Where the suite leaves what it keeps between runs."""
    from wheelci.util.cache import cache_dir

    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {"the tool's cache": cache_dir(), "pip": home / "pip", "uv": home / "uv", "bazel": home / "bazel",
            "docker": Path("/var/lib/docker"), "podman": Path("/var/lib/containers")}


# Inputs only the suite uses, under the tool's cache: each is downloaded again by the next run needing it.
TEST_INPUTS = ("real-torch/*", "per-package", "wheel-corpus", "wheelhouse", "bazel-torch-cpu-deps",
               "bazel-repository-cache", "standin", "devpi-*", "torch-cpu", "torch-cpu-aarch64",
               "envs/torch-2.99.0-*")  # tests/test_releases.py: the environment of a torch re-versioned for a test


def entries(top: Path, *, dirs: bool = True) -> Iterator[os.stat_result]:
    """The lstat of everything under top (its directories too, with dirs), never following a link; an
    entry gone meanwhile is skipped."""
    for where, subdirs, files in os.walk(top):
        for name in (*subdirs, *files) if dirs else files:
            try:
                yield os.lstat(os.path.join(where, name))
            except OSError:
                continue


def freed_by_removing(top: Path) -> int:
    """Bytes removing top gives back: its files stored nowhere else (a hard link elsewhere keeps one)."""
    return sum(st.st_blocks * 512 for st in entries(top, dirs=False) if st.st_nlink == 1)


def unused_envs(cache: Path, since: float) -> list[Path]:
    """The build environments no build of this run used (their marker older than the run's start): one keyed
    by an index that no longer exists (a test's loopback port), or a torch no test asks for any more."""
    from wheelci.util.cache import USED

    return [d for d in cache.glob("envs/*") if d.is_dir() and not d.is_symlink()
            and (d / USED).is_file() and (d / USED).stat().st_mtime < since]


def evict(cache: Path, over: int, since: float = 0.0) -> list[tuple[Path, int]]:
    """Remove test inputs from `cache`, and the build environments this run (started at `since`) did not
    use, the one freeing most first, until `over` bytes are gone (or none is left)."""
    top = cache.resolve()
    for pattern in (*TEST_INPUTS, "envs/*"):  # what an interrupted eviction left aside
        for left in map(Path, glob.glob(str((top / pattern).parent / ".evicted-*"))):
            if not left.is_symlink() and left.resolve().parent.is_relative_to(top):  # never through a link out
                shutil.rmtree(left, ignore_errors=True)
    found = [Path(p) for pattern in TEST_INPUTS for p in glob.glob(str(top / pattern))]
    found += unused_envs(top, since) if since else []
    # a link (or a parent that is one) points out of the cache: not the suite's to remove
    found = [p for p in found if not p.is_symlink() and p.resolve().parent.is_relative_to(top)]
    sized = sorted(((p, freed_by_removing(p)) for p in found), key=lambda t: -t[1])
    gone = []
    for path, size in sized:
        if over <= 0:
            break
        # set aside in one rename first: an eviction cut off halfway never leaves a half input that a
        # later run would take for a whole one
        aside = path.with_name(f".evicted-{path.name}.{os.getpid()}")
        try:
            os.rename(path, aside)
        except OSError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
        gone.append((path, size))
        over -= size
    return gone


def disk_use(paths: dict[str, Path]) -> dict[str, int]:
    """Bytes on disk under each path, a file hard-linked in several places counted once (the first)."""
    seen: set[tuple[int, int]] = set()
    used = {}
    for name, top in paths.items():
        total = 0
        for st in entries(top):
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        used[name] = total
    return used


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def tier_table(tiers: list[Tier]) -> str:
    rows = ["| tier | tests | wall time |", "|---|---:|---:|"]
    rows += [f"| `{t.name}` | {t.tests} | {minutes(t.seconds)} |" for t in tiers]
    return "\n".join(rows)


def by_module(tier: Tier) -> list[tuple[str, tuple[float, int]]]:
    """Each test module's seconds and tests in the tier, the costliest first."""
    totals: dict[str, tuple[float, int]] = {}
    for seconds, node in tier.cases:
        module = node.split("::")[0]
        spent, count = totals.get(module, (0.0, 0))
        totals[module] = (spent + seconds, count + 1)
    return sorted(totals.items(), key=lambda kv: -kv[1][0])


def report(tiers: list[Tier], used: dict[str, int], evicted: Sequence[tuple[Path, int]] = ()) -> str:
    lines = ["", "== the suite's budget =="]
    for t in tiers:
        lines.append(f"{t.name:>10}: {minutes(t.seconds)}, {t.tests} tests ({t.failed} failed, {t.skipped} skipped)")
    lines.append(f"{'all':>10}: {minutes(sum(t.seconds for t in tiers))}")
    lines.append(f"the {SLOWEST} slowest tests (setup included):")
    for seconds, node in sorted((c for t in tiers for c in t.cases), reverse=True)[:SLOWEST]:
        lines.append(f"  {seconds:7.1f} s  {node}")
    for t in tiers:
        lines.append(f"the {MODULES} test modules taking the most of {t.name} (test seconds; a tier runs on every core):")
        lines += [f"  {seconds:7.1f} s  {count:4d} tests  {module}" for module, (seconds, count) in by_module(t)[:MODULES]]
    lines.append("disk the caches hold (a hard-linked file once):")
    for name, size in used.items():
        lines.append(f"  {size / 2**30:6.1f} GB  {name}")
    lines.append(f"  {sum(used.values()) / 2**30:6.1f} GB  in all")
    for path, size in evicted:
        lines.append(f"  removed to keep within the budget: {path} ({size / 2**30:.1f} GB; the next run needing it "
                     "makes it again)")
    return "\n".join(lines)


def write_docs(tiers: list[Tier], doc: Path = DOC) -> None:
    text = doc.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{tier_table(tiers)}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests._budget", description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path, help="one JUnit XML report per tier, named after it")
    ap.add_argument("--docs", action="store_true", help="write the tiers' table into docs/contributing.md")
    ap.add_argument("--keep-under", type=float, metavar="GB", help="remove test inputs until the caches fit")
    args = ap.parse_args(argv)
    tiers = [read_tier(r) for r in args.reports if r.is_file()]
    used, evicted = disk_use(caches()), []
    if args.keep_under is not None and sum(used.values()) > args.keep_under * 2**30:
        since = min((t.started for t in tiers if t.started), default=0.0)
        evicted = evict(caches()["the tool's cache"], sum(used.values()) - int(args.keep_under * 2**30), since)
        used = disk_use(caches())
    print(report(tiers, used, evicted))
    if args.docs:
        write_docs(tiers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
