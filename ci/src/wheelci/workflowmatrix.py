"""The CI jobs a project needs, as a GitHub Actions matrix (`plan --workflow-matrix`).

It runs on the runner's bare Python before anything is installed: the standard library and the matrix
only, no packaging.
"""

from __future__ import annotations

import re

from wheelci.config import matrix as mx
from wheelci.config.stable import minor_of, newest_torch, parse_target, pick_row
from wheelci.errors import CiError

_TORCH = re.compile(r"\d+\.\d+\.\d+")  # fullmatch: a release, as --torch takes it
_PY = re.compile(r"3\.\d{1,2}")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _label(key: str) -> str:
    return "CPU" if key == "cpu" else f"CUDA {key}"


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


def workflow_matrix(stable_abi: str | None, cuda: list[str] | None = None, variants: bool = False,
                    torch: str | None = None, python: list[str] | None = None,
                    py_api: str = "") -> dict[str, list[dict[str, str]]]:
    """The CI jobs a project needs, as a GitHub Actions matrix: one per CUDA version of the matrix for
    classic wheels, one per variant (cpu, and each CUDA major the matrix can build for the target)
    for stable-ABI ones, which serve every later torch. Each row names its engine: a CPU build runs on
    the runner itself, a CUDA one in a container (the runner has no CUDA toolkit); its kind (cpu or
    cuda: which build variables it gets); and the torch it builds against, in its name too, passed to
    the build as --torch: a CUDA row's default torch is its own, the CPU row's the matrix's, so a
    matrix of several rows may build several torch releases, and each job says which.

    `cuda` keeps only the rows it names (CUDA versions of the matrix, or `cpu`), in matrix order; classic
    wheels get a CPU job only when it is named. A name the matrix does not know is bad input, refused
    here before any job starts: a typo must not quietly build nothing, or everything.

    `torch` builds every row against that release: a row `cuda` names that has no build of it is bad
    input; without `cuda`, the rows that have one are kept (the matrix of that torch).

    `python` (versions such as 3.11): a row per Python where the wheel is tied to one (`py_api`, the
    project's wheel.py-api: "py3" makes one wheel for all, "cp3X" an abi3 one from 3.X on; see
    python_rows), each row passing --python and naming its Python, which its job runs (verify installs
    the wheel with the job's own Python).

    `variants` builds a release's PEP 825 variant set: every job gets --variant (a CUDA job writes its
    variant wheel, the CPU job the plain wheel), and the CPU job is always in, since an installer on a
    machine without a GPU needs the plain wheel."""
    matrix = mx.load()
    if torch is not None:
        if not _TORCH.fullmatch(torch):
            raise CiError(f"bad --torch {torch!r} (want a release such as {matrix.default_torch})")
        try:
            matrix.torch_line(torch)  # a torch line the matrix does not know: one line, here
        except CiError as e:
            raise CiError(f"--torch {torch}: {e}") from None
    pythons = _pythons(python) if python is not None else None
    releases = {t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}
    # (key, name, args, the torch it builds against by default, the torch releases it can build)
    if stable_abi is None:
        rows = [("cpu", "cpu", "--cpu", matrix.default_torch, releases)] + [
            (r.version, f"cuda{r.version}", f"--cuda {r.version}", r.default_torch, {t.version for t in r.torch})
            for r in matrix.rows]
        aliases = {row[0]: row[0] for row in rows}
    else:
        target = parse_target(stable_abi)
        majors = []
        for row in matrix.rows:
            major = row.version.split(".")[0]
            if major not in majors and any(tuple(map(int, t.version.split(".")[:2])) >= target for t in row.torch):
                majors.append(major)
        later = {v for v in releases if minor_of(v) >= target}
        # the CPU variant builds against the matrix's default torch, or its newest when that predates the target
        cpu = matrix.default_torch if matrix.default_torch in later else max(later, key=_key, default=matrix.default_torch)
        rows = [("cpu", "stable-cpu", f"--cpu --stable-abi {stable_abi}", cpu, later)]
        for m in majors:
            built = pick_row(matrix, m, target)  # the variant's build: its major's lowest CUDA, newest torch
            rows.append((m, f"stable-cu{m}", f"--cuda {m} --stable-abi {stable_abi}", newest_torch(built, target),
                         {t.version for t in built.torch} & later))
        # a variant serves its whole CUDA major: 13 and 13.0 both name stable-cu13
        aliases = {"cpu": "cpu", **{v: v.split(".")[0] for v in matrix.versions if v.split(".")[0] in majors},
                   **{m: m for m in majors}}
    if cuda is None:
        keep = [r for r in rows if stable_abi or r[0] != "cpu"]
        if torch is not None:  # the matrix of that torch: the rows that build it
            keep = [r for r in keep if torch in r[4]] or keep
    else:
        choices = f"choose from {', '.join(r[0] for r in rows)}"
        unknown = [c for c in cuda if c.lower() not in aliases]
        if unknown:
            what = f"stable-ABI variant for torch >= {stable_abi}" if stable_abi else "CUDA version"
            raise CiError(f"--cuda {','.join(unknown)}: no such {what} in the matrix ({choices})")
        if not cuda:
            raise CiError(f"--cuda names no job ({choices})")
        wanted = {aliases[c.lower()] for c in cuda}
        keep = [r for r in rows if r[0] in wanted]
    if variants:
        keep = [r for r in rows if r[0] == "cpu"] + [r for r in keep if r[0] != "cpu"]
        keep = [(key, name, f"{args} --variant", default, builds) for key, name, args, default, builds in keep]
    if torch is not None:
        lacking = [key for key, *_, builds in keep if torch not in builds]
        if lacking:
            has = [_label(key) for key, *_, builds in rows if torch in builds]
            where = f"it builds for {', '.join(has)}" if has else "no job of the matrix builds it"
            floor = f" (stable-ABI {stable_abi} wants a torch >= {stable_abi})" if stable_abi else ""
            raise CiError(f"--torch {torch}: the matrix has no {', '.join(map(_label, lacking))} build of it{floor}; "
                          f"{where}")
    out = []
    for key, name, args, default, _ in keep:
        version = torch or default
        row = {"name": f"{name}-torch{version}", "args": f"{args} --torch {version}",
               "engine": "host" if key == "cpu" else "docker", "kind": "cpu" if key == "cpu" else "cuda",
               "torch": version}
        if pythons is None:
            out.append(row)
            continue
        line = matrix.torch_line(version)
        missing = [p for p in pythons if p not in line.python]
        if missing:
            raise CiError(f"--python {', '.join(missing)}: torch {version} has no wheels for Python "
                          f"{', '.join(missing)} (it has {', '.join(line.python)})")
        for p in python_rows(pythons, py_api):
            out.append({**row, "name": f"{row['name']}-py{p}", "args": f"{row['args']} --python {p}", "python": p})
    return {"include": out}
