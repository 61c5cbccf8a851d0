"""The CI jobs a project needs, as a GitHub Actions matrix (`plan --workflow-matrix`).

Against one torch release it runs on the runner's bare Python before anything is installed: the standard
library and the matrix only, no packaging. A torch axis (a range, latest, last:N: wheelci.config.torchaxis)
reads the releases the index lists, with packaging and the HTTP client (torch_matrix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from wheelci.config import matrix as mx
from wheelci.config.stable import minor_of, newest_torch, parse_target, pick_row
from wheelci.config.torchaxis import RELEASE as _TORCH, TorchAxis, key as release_key, within
from wheelci.errors import CiError

if TYPE_CHECKING:
    from wheelci.config.releases import TorchIndex

_PY = re.compile(r"3\.(0|[1-9][0-9]?)")
# GitHub's runner of each architecture: an aarch64 job builds natively on an Arm runner
RUNNERS = {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}
DEFAULT_PYTHON = "3.11"  # what a job without a Python of its own builds with (the workflow's setup-python)
LATEST = "latest"  # the torch of a CUDA version the matrix lists none for: the index's newest, which the build reads


class Job(NamedTuple):
    key: str  # what --cuda names it by: cpu, a CUDA version, or (stable-ABI) a CUDA major
    name: str
    args: str  # wheelci build's arguments, less the torch and the Python (the row's own keys)
    torch: str  # the release it builds against unless told (LATEST where the matrix lists none for it)
    builds: frozenset[str] | None  # the torch releases it can build; None: it lists none, the build reads
                                   # the release --torch names from the index (and refuses a wrong one)

    def can_build(self, torch: str) -> bool:
        return self.builds is None or torch in self.builds

    @property
    def label(self) -> str:
        return "CPU" if self.key == "cpu" else f"CUDA {self.key}"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def python_rows(pythons: list[str], py_api: str) -> list[str]:
    """The Pythons that each need a wheel of their own, of `pythons` (sorted): one for a py3 wheel
    (wheel.py-api "py3": it installs on every Python); for an abi3 one ("cp3X"), one per Python below 3.X
    and one for the lowest from 3.X on, which serves the rest; else one per Python (cp3X-cp3X wheels)."""
    if py_api.startswith("py3"):
        return pythons[:1]
    abi3 = re.fullmatch(r"cp3(\d+)", py_api)
    if abi3:
        below = [p for p in pythons if _key(p)[1] < int(abi3[1])]
        return below + [p for p in pythons if p not in below][:1]
    return list(pythons)


def _pythons(python: list[str]) -> list[str]:
    bad = [p for p in python if not _PY.fullmatch(p)]
    if bad:
        raise CiError(f"bad --python {', '.join(map(repr, bad))} (want versions like 3.10,3.11)")
    if not python:
        raise CiError("--python names no version (want versions like 3.10,3.11)")
    return sorted(set(python), key=_key)


def _check_torch(matrix: mx.Matrix, torch: str) -> None:
    if torch == LATEST:  # which jobs build it is known only once the index is read
        raise CiError(f"--torch latest: the jobs are planned against a release the matrix lists; name one, "
                      f"such as {matrix.default_torch}")
    if not _TORCH.fullmatch(torch):
        raise CiError(f"bad --torch {torch!r} (want a release such as {matrix.default_torch})")
    # a release the matrix does not list is fine: each job's build reads it from the index


def _jobs(matrix: mx.Matrix, stable_abi: str | None) -> tuple[list[Job], dict[str, str]]:
    """Every job the matrix has, and what --cuda may call each (name -> key)."""
    releases = frozenset({t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch})
    if stable_abi is None:
        jobs = [Job("cpu", "cpu", "--cpu", matrix.default_torch, releases)] + [
            Job(r.version, f"cuda{r.version}", f"--cuda {r.version}", r.default_torch or LATEST,
                frozenset(t.version for t in r.torch) or None) for r in matrix.rows]
        return jobs, {job.key: job.key for job in jobs}
    target = parse_target(stable_abi)
    majors = []
    for row in matrix.rows:
        major = row.version.split(".")[0]
        if major not in majors and any(tuple(map(int, t.version.split(".")[:2])) >= target for t in row.torch):
            majors.append(major)
    later = frozenset(v for v in releases if minor_of(v) >= target)
    # the CPU variant builds against the matrix's default torch, or its newest when that predates the target
    cpu = matrix.default_torch if matrix.default_torch in later else max(later, key=_key, default=matrix.default_torch)
    jobs = [Job("cpu", "stable-cpu", f"--cpu --stable-abi {stable_abi}", cpu, later)]
    for m in majors:
        built = pick_row(matrix, m, target)  # the variant's build: its major's lowest CUDA, newest torch
        jobs.append(Job(m, f"stable-cu{m}", f"--cuda {m} --stable-abi {stable_abi}", newest_torch(built, target),
                        frozenset(t.version for t in built.torch) & later))
    # a variant serves its whole CUDA major: 13 and 13.0 both name stable-cu13
    aliases = {"cpu": "cpu", **{v: v.split(".")[0] for v in matrix.versions if v.split(".")[0] in majors},
               **{m: m for m in majors}}
    return jobs, aliases


def workflow_matrix(stable_abi: str | None, cuda: list[str] | None = None, variants: bool = False,
                    torch: str | None = None, python: list[str] | None = None,
                    py_api: str = "", archs: list[str] | None = None) -> dict[str, list[dict[str, str]]]:
    """The CI jobs a project needs, as a GitHub Actions matrix: one per CUDA version of the matrix for
    classic wheels, one per variant (cpu, and each CUDA major the matrix can build for the target)
    for stable-ABI ones, which serve every later torch. Each row names its engine: a CPU build runs on
    the runner itself, a CUDA one in a container (the runner has no CUDA toolkit); its kind (cpu or
    cuda: which build variables it gets); and the torch it builds against (`torch`, which the workflow
    passes as --torch and shows in the job's title): a CUDA row's default torch is its own, the CPU
    row's the matrix's, so a matrix of several rows may build several torch releases, each job saying which;
    a CUDA version the matrix lists no torch for says `latest` (the index's newest, which its build reads
    and refuses when that is not built on it).

    `cuda` keeps only the rows it names (CUDA versions of the matrix, or `cpu`), in matrix order; classic
    wheels get a CPU job only when it is named. A name the matrix does not know is bad input, refused
    here before any job starts: a typo must not quietly build nothing, or everything.

    `torch` builds every row against that release: a row `cuda` names that has no build of it is bad
    input; without `cuda`, the rows that have one are kept (the matrix of that torch).

    `python` (versions such as 3.11): a row per Python where the wheel is tied to one (`py_api`, the
    project's wheel.py-api: "py3" makes one wheel for all, "cp3X" an abi3 one from 3.X on; see
    python_rows), each naming its Python (`python`, and `-pyX.Y` in its name), which its job runs and
    passes as --python (verify installs the wheel with the job's own Python).

    `variants` builds a release's PEP 825 variant set: every job gets --variant (a CUDA job writes its
    variant wheel, the CPU job the plain wheel), and the CPU job is always in, since an installer on a
    machine without a GPU needs the plain wheel.

    `archs` (x86_64, aarch64): each job once per architecture, on GitHub's runner of it (`runner`:
    ubuntu-latest, ubuntu-24.04-arm), an aarch64 one named `-aarch64` and built with --archs aarch64."""
    matrix = mx.load()
    if torch is not None:
        _check_torch(matrix, torch)
        if stable_abi is not None and tuple(map(int, torch.split(".")[:2])) < parse_target(stable_abi):
            raise CiError(f"--torch {torch}: a stable-ABI {stable_abi} build wants a torch >= {stable_abi}")
    pythons = _pythons(python) if python is not None else None
    jobs, aliases = _jobs(matrix, stable_abi)
    listed = torch in {t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}
    if cuda is None:  # every CUDA row with a torch (stable: every variant), or those that list the torch given
        keep = [j for j in jobs if (stable_abi or j.key != "cpu") and j.builds is not None]
        if torch is not None and not listed:
            raise CiError(f"--torch {torch} is not in the matrix: name the CUDA it is built on with --cuda "
                          "(each job's build reads that release from the index)")
        if torch is not None:
            keep = [j for j in keep if j.builds and torch in j.builds] or keep
    else:
        choices = f"choose from {', '.join(j.key for j in jobs)}"
        unknown = [c for c in cuda if c.lower() not in aliases]
        if unknown:
            what = f"stable-ABI variant for torch >= {stable_abi}" if stable_abi else "CUDA version"
            raise CiError(f"--cuda {','.join(unknown)}: no such {what} in the matrix ({choices})")
        if not cuda:
            raise CiError(f"--cuda names no job ({choices})")
        wanted = {aliases[c.lower()] for c in cuda}
        keep = [j for j in jobs if j.key in wanted]
    if variants:
        keep = [j for j in jobs if j.key == "cpu"] + [j for j in keep if j.key != "cpu"]
        keep = [j._replace(args=f"{j.args} --variant") for j in keep]
    if torch is not None:
        # a release the matrix lists: it knows that release's CUDAs; one it does not: each build reads it
        lacking = [j.label for j in keep if j.builds is None or not j.can_build(torch)] if listed else []
        if lacking:
            has = [j.label for j in jobs if j.builds and torch in j.builds]
            where = f"it builds for {', '.join(has)}" if has else "no job of the matrix builds it"
            floor = f" (stable-ABI {stable_abi} wants a torch >= {stable_abi})" if stable_abi else ""
            raise CiError(f"--torch {torch}: the matrix has no {', '.join(lacking)} build of it{floor}; {where}")
        keep = [j._replace(torch=torch) for j in keep]
    arm = [j for j in keep if _arm_image_of(matrix, j, stable_abi)]
    if archs and "aarch64" in archs and cuda is not None and len(arm) < len(keep):
        lacking = [j.label for j in keep if j not in arm]
        raise CiError(f"--archs aarch64: no aarch64 image recipe of ours for {', '.join(lacking)} (the public CUDA "
                      "images of those rows are x86_64 only)")
    return {"include": [_on(row, arch) for arch in archs or ["x86_64"] for job in (arm if arch == "aarch64" else keep)
                        for row in _rows(matrix, job, pythons, py_api)]}


class Expanded(NamedTuple):
    """A torch axis's matrix, and why each release or job it names has no row."""

    jobs: dict[str, list[dict[str, str]]]
    notes: list[str]


def listed(version: str) -> bool:
    """A release the matrix lists (its CUDA rows known without the index)."""
    matrix = mx.load()
    return version in {t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}


def torch_matrix(axis: TorchAxis | None, index: TorchIndex, stable_abi: str | None, cuda: list[str] | None = None,
                 variants: bool = False, python: list[str] | None = None, py_api: str = "",
                 archs: list[str] | None = None, bound: str | None = None,
                 requires_python: str | None = None) -> Expanded:
    """The jobs of every torch release the axis names, as the index lists them: each release crossed with
    the CUDA builds it has (a release the matrix lists: the matrix's rows of it; a newer one: the CUDA its
    index metadata pins, as its build reads it), every release with CPU, then the Pythons its line has,
    the archs, and the project's `bound` (its own torch specifier). A stable-ABI project collapses to one
    job per variant, against the newest release named that the variant builds. A release or CUDA named
    that has no build is a note, not an error: the next release may have it. An axis that leaves no job is
    bad input. No axis (None): each job's own release, or the newest of its row within the bound. A job
    without a Python of its own builds with DEFAULT_PYTHON, or with one its release has and the project's
    `requires_python` allows."""
    matrix = mx.load()
    limits = _Limits(frozenset({t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}),
                     stable_abi, bound)
    chosen, notes = _chosen(axis, sorted(limits.listed | set(index.versions()), key=release_key), limits)
    text = axis.text if axis else "(each job's own)"
    builds = _builds(_asked(matrix, stable_abi, cuda, variants, axis), chosen, axis, limits, matrix, index,
                     named_cuda=cuda is not None, notes=notes)
    if variants and not stable_abi and len({j.torch for j in builds}) > 1:
        raise CiError(f"--torch {text} with --variant: a release's variant wheels name no torch in their file "
                      "names, so one variant set is built against one torch; name one release, or build stable-ABI "
                      "variants (--stable-abi), which serve every later torch")
    pythons = _pythons(python) if python is not None else None
    rows = _job_rows(builds, matrix, limits, index, pythons, py_api, archs, requires_python, notes)
    if not rows:
        raise CiError(f"--torch {text}: no job is left ({'; '.join(notes) or 'nothing builds it'})")
    return Expanded({"include": rows}, list(dict.fromkeys(notes)))


@dataclass(frozen=True)
class _Limits:
    """What the project can build: the matrix's releases, its stable-ABI floor, its own torch bound."""

    listed: frozenset[str]
    stable_abi: str | None
    bound: str | None

    def why_not(self, version: str) -> str | None:
        if self.stable_abi and minor_of(version) < parse_target(self.stable_abi):
            return f"before the stable-ABI floor {self.stable_abi}"
        if self.bound and not within(version, self.bound):
            return f"outside the project's own torch{self.bound}"
        if self.stable_abi and version not in self.listed:  # a stable build's rows are the matrix's
            return "not in the matrix yet, which a stable-ABI build's rows come from"
        return None


def _chosen(axis: TorchAxis | None, everything: list[str], limits: _Limits) -> tuple[list[str], list[str]]:
    """The releases the axis names that the project can build (latest and last:N count only those: the
    newest minors within its bound), and a note for each kind it names and cannot."""
    named = axis.select(everything) if axis else []
    chosen = ([] if axis is None else [v for v in named if limits.why_not(v) is None] if axis.single
              else axis.select([v for v in everything if limits.why_not(v) is None]))
    reasons: dict[str, list[str]] = {}
    for version in named:
        if (reason := limits.why_not(version)) is not None:
            reasons.setdefault(reason, []).append(version)
    notes = [f"torch {', '.join(versions)}: {reason}: no job" for reason, versions in reasons.items()]
    if axis and not chosen:
        if not named:
            raise CiError(f"--torch {axis.text}: no torch release on the index is in it (there: "
                          f"{everything[0]} to {everything[-1]})")
        raise CiError(f"--torch {axis.text}: no job: {'; '.join(notes)}")
    return chosen, notes


def _asked(matrix: mx.Matrix, stable_abi: str | None, cuda: list[str] | None, variants: bool,
           axis: TorchAxis | None) -> list[Job]:
    """The jobs --cuda names (every CUDA row where it names none; without an axis, those that list a torch:
    the others' builds read one from the index), each with --variant where asked, CPU always with it."""
    jobs, aliases = _jobs(matrix, stable_abi)
    if cuda is not None:
        unknown = [c for c in cuda if c.lower() not in aliases]
        if unknown or not cuda:
            what = f"stable-ABI variant for torch >= {stable_abi}" if stable_abi else "CUDA version"
            raise CiError(f"--cuda {','.join(unknown)}: no such {what} in the matrix "
                          f"(choose from {', '.join(j.key for j in jobs)})")
        wanted = {aliases[c.lower()] for c in cuda}
    else:
        wanted = {j.key for j in jobs if (stable_abi or j.key != "cpu") and (axis or j.builds is not None)}
    if variants:
        wanted.add("cpu")
    return [j._replace(args=f"{j.args} --variant") if variants else j for j in jobs if j.key in wanted]


def _builds(asked: list[Job], chosen: list[str], axis: TorchAxis | None, limits: _Limits, matrix: mx.Matrix,
            index: TorchIndex, *, named_cuda: bool, notes: list[str]) -> list[Job]:
    """Each job against each release it builds: a stable variant once (it serves every torch from the floor
    on), against the newest release chosen that its row builds, else its row's own; without an axis, each
    job's own release, else the newest of its row within the bound; else every chosen release that has a
    build of the job's CUDA (the matrix's rows, or the CUDA a newer release's metadata pins)."""
    text = axis.text if axis else "(each job's own)"
    builds: list[Job] = []
    if limits.stable_abi:
        for job in asked:
            built = [v for v in chosen if job.can_build(v)]
            if built or limits.why_not(job.torch) is None:
                builds.append(job._replace(torch=built[-1] if built else job.torch))
            else:
                notes.append(f"{job.label}: no release it builds is within --torch {text} and the project's "
                             "own bound: no job")
        return builds
    if axis is None:
        for job in asked:
            inside = sorted((v for v in job.builds or () if limits.why_not(v) is None), key=release_key)
            if job.torch != LATEST and limits.why_not(job.torch) is None:
                builds.append(job)
            elif inside:
                builds.append(job._replace(torch=inside[-1]))
                notes.append(f"{job.label}: torch {inside[-1]}, the newest it builds within the project's own "
                             f"torch{limits.bound} (its default {job.torch} is not)")
            else:
                notes.append(f"{job.label}: no release it builds is within the project's own torch{limits.bound}: no job")
        return builds
    lacking: dict[str, list[str]] = {}
    for version in chosen:
        cudas = ({r.version for r in matrix.rows if r.torch_build(version)} if version in limits.listed
                 else {index.release(version).cuda} - {None})
        have = [j for j in asked if j.key == "cpu" or j.key in cudas]
        for j in asked:
            if j not in have:
                lacking.setdefault(j.label, []).append(version)
        builds += [j._replace(torch=version) for j in have]
    if named_cuda:  # what was named and has no build: said; the rest of the matrix is not asked
        notes += [f"no {label} build of torch {', '.join(versions)}: no job of those" for label, versions in lacking.items()]
    return builds


def _job_rows(builds: list[Job], matrix: mx.Matrix, limits: _Limits, index: TorchIndex, pythons: list[str] | None,
              py_api: str, archs: list[str] | None, requires_python: str | None, notes: list[str]) -> list[dict[str, str]]:
    """The matrix rows of the builds: per Python (the ones given that the release has; or the job's own,
    DEFAULT_PYTHON or one the release has and requires-python allows) and per architecture."""
    from packaging.specifiers import SpecifierSet

    rp = SpecifierSet(requires_python) if requires_python else None
    rows: list[dict[str, str]] = []
    no_python: dict[str, list[str]] = {}
    own_python: dict[str, list[str]] = {}
    for job in builds:
        line = matrix.torch_line(job.torch) if job.torch in limits.listed else index.release(job.torch).line
        mine: list[str | None] = [None]
        allowed = [p for p in line.python if rp is None or rp.contains(f"{p}.0", prereleases=True)]
        if pythons is None and DEFAULT_PYTHON not in allowed:  # the job's own Python: one the line has
            if not allowed:
                notes.append(f"torch {job.torch} has no wheels for a Python the project allows "
                             f"(requires-python {requires_python}): no {job.name} job")
                continue
            newer = [p for p in allowed if _key(p) > _key(DEFAULT_PYTHON)]
            mine = [newer[0] if newer else allowed[-1]]
            own_python.setdefault(str(mine[0]), []).append(job.torch)
        if pythons is not None:
            for p in (p for p in pythons if p not in line.python):
                no_python.setdefault(p, []).append(job.torch)
            mine = list(python_rows([p for p in pythons if p in line.python], py_api))
        for arch in archs or ["x86_64"]:
            if arch == "aarch64" and not _arm_image_of(matrix, job, limits.stable_abi):
                notes.append(f"{job.label}: no aarch64 image recipe of ours: no aarch64 job")
                continue
            for py in mine:
                row = {"name": job.name, "args": job.args, "engine": "host" if job.key == "cpu" else "docker",
                       "kind": "cpu" if job.key == "cpu" else "cuda", "torch": job.torch}
                if py is not None:
                    row = {**row, "name": f"{job.name}-py{py}", "python": py}
                rows.append(_on(row, arch))
    notes += [f"torch {', '.join(dict.fromkeys(versions))} has no wheels for Python {p}: no job of those"
              for p, versions in no_python.items()]
    notes += [f"torch {', '.join(dict.fromkeys(versions))}: no Python {DEFAULT_PYTHON} wheels, or the project does "
              f"not allow it: its jobs build with Python {p}" for p, versions in own_python.items()]
    return rows


def _arm_image_of(matrix: mx.Matrix, job: Job, stable_abi: str | None) -> bool:
    """Whether an aarch64 build of this job has an image: a CPU one always; a CUDA one where its row has an
    image recipe of ours (the plan builds that recipe on the aarch64 base)."""
    if job.key == "cpu":
        return True
    row = pick_row(matrix, job.key, parse_target(stable_abi)) if stable_abi else matrix.row(job.key)
    return any(i.origin == "ours" for i in row.images)


def on_engine(jobs: dict[str, list[dict[str, str]]], engine: str) -> dict[str, list[dict[str, str]]]:
    """`jobs` with every row built by `engine` (plan --engine: host runs CUDA jobs on the runner too, with
    NVIDIA's nvcc wheels, as a runner without a container engine must) instead of the row's own choice."""
    return {"include": [{**row, "engine": engine} for row in jobs["include"]]}


def _on(row: dict[str, str], arch: str) -> dict[str, str]:
    """A row built on `arch`'s runner."""
    if arch == "x86_64":
        return {**row, "runner": RUNNERS[arch]}
    return {**row, "name": f"{row['name']}-{arch}", "args": f"{row['args']} --archs {arch}", "runner": RUNNERS[arch]}


def _rows(matrix: mx.Matrix, job: Job, pythons: list[str] | None, py_api: str) -> list[dict[str, str]]:
    """The matrix rows of one job: itself, or one per Python that needs a wheel of its own."""
    row = {"name": job.name, "args": job.args, "engine": "host" if job.key == "cpu" else "docker",
           "kind": "cpu" if job.key == "cpu" else "cuda", "torch": job.torch}
    if pythons is None:
        return [row]
    if job.torch not in {t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}:
        # latest, or a release the matrix does not list: known only to the build, which checks its Pythons
        return [{**row, "name": f"{job.name}-py{p}", "python": p} for p in python_rows(pythons, py_api)]
    line = matrix.torch_line(job.torch)
    missing = [p for p in pythons if p not in line.python]
    if missing:
        raise CiError(f"--python {', '.join(missing)}: torch {job.torch} has no wheels for Python "
                      f"{', '.join(missing)} (it has {', '.join(line.python)})")
    return [{**row, "name": f"{job.name}-py{p}", "python": p} for p in python_rows(pythons, py_api)]


def arch_parts(arch_list: str, parts: int) -> list[str]:
    """TORCH_CUDA_ARCH_LIST dealt into at most `parts` lists, in turn (8.0;9.0;10.0 in 2: 8.0;10.0 and 9.0),
    each entry whole (12.0+PTX stays one: its PTX is the compute_120 step the full list takes too)."""
    archs = [a for a in re.split(r"[;\s]+", arch_list.strip()) if a]
    return [";".join(archs[i::parts]) for i in range(min(parts, len(archs)))]


def warm_matrix(jobs: dict[str, list[dict[str, str]]], parts: int, stable_abi: str | None = None,
                arch_list: str | None = None) -> dict[str, list[dict[str, str]]]:
    """The fan-out of `jobs` (workflow_matrix's): each CUDA row's arch list (`whole_arch_list`) dealt into
    `parts` compile-only jobs (`arch_list`, `part`), which fill the remote compile cache for the row's own
    job, which then builds the full list from it; CPU rows have none (an empty list where no CUDA row is left: the workflow then
    runs no fan-out job). `arch_list` (--arch-list, the project's): the list every CUDA job builds instead of
    its row's, checked against each row's nvcc here, before any job starts."""
    if not 2 <= parts <= 16:
        raise CiError(f"--arch-jobs {parts}: give 2 to 16 (1 is the row's own job alone)")
    matrix = mx.load()
    out = []
    for row in jobs["include"]:
        if row["kind"] != "cuda":
            continue
        if row["engine"] != "host":  # a part's build takes --warm-for, which a container build does not
            raise CiError(f"--arch-jobs: the {row['name']} job builds in a container ({row['engine']}), and the "
                          "fan-out's jobs build on the host: run the CUDA jobs there (--engine host; the "
                          "workflow's engine: host)")
        key = re.search(r"--cuda (\S+)", row["args"])
        assert key is not None, row
        cuda = pick_row(matrix, key[1], parse_target(stable_abi)) if stable_abi else matrix.row(key[1])
        wanted = cuda.arch_list
        if arch_list is not None:
            try:
                wanted = mx.check_arch_list(cuda.version, arch_list)
            except CiError as e:
                raise CiError(f"--arch-list {arch_list[:64]!r}: {e}") from None
        split = arch_parts(wanted, parts)
        out += [{**row, "name": f"{row['name']}-arch{i + 1}of{len(split)}", "arch_list": arch,
                 "whole_arch_list": wanted, "part": str(i + 1)} for i, arch in enumerate(split)]
    return {"include": out}
