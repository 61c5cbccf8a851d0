"""The CI jobs a project needs, as a GitHub Actions matrix (`plan --workflow-matrix`).

It runs on the runner's bare Python before anything is installed: the standard library and the matrix
only, no packaging.
"""

from __future__ import annotations

from wheelci.config import matrix as mx
from wheelci.config.stable import parse_target
from wheelci.errors import CiError


def workflow_matrix(stable_abi: str | None, cuda: list[str] | None = None,
                    variants: bool = False) -> dict[str, list[dict[str, str]]]:
    """The CI jobs a project needs, as a GitHub Actions matrix: one per CUDA version of the matrix for
    classic wheels, one per variant (cpu, and each CUDA major the matrix can build for the target)
    for stable-ABI ones, which serve every later torch. Each row names its engine: a CPU build runs on
    the runner itself, a CUDA one in a container (the runner has no CUDA toolkit).

    `cuda` keeps only the rows it names (CUDA versions of the matrix, or `cpu`), in matrix order; classic
    wheels get a CPU job only when it is named. A name the matrix does not know is bad input, refused
    here before any job starts: a typo must not quietly build nothing, or everything.

    `variants` builds a release's PEP 825 variant set: every job gets --variant (a CUDA job writes its
    variant wheel, the CPU job the plain wheel), and the CPU job is always in, since an installer on a
    machine without a GPU needs the plain wheel."""
    matrix = mx.load()
    if stable_abi is None:
        rows = [("cpu", "cpu", "--cpu")] + [(v, f"cuda{v}", f"--cuda {v}") for v in matrix.versions]
        aliases = {key: key for key, _, _ in rows}
    else:
        target = parse_target(stable_abi)
        majors = []
        for row in matrix.rows:
            major = row.version.split(".")[0]
            if major not in majors and any(tuple(map(int, t.version.split(".")[:2])) >= target for t in row.torch):
                majors.append(major)
        rows = [("cpu", "stable-cpu", f"--cpu --stable-abi {stable_abi}")] + [
            (m, f"stable-cu{m}", f"--cuda {m} --stable-abi {stable_abi}") for m in majors]
        # a variant serves its whole CUDA major: 13 and 13.0 both name stable-cu13
        aliases = {"cpu": "cpu", **{v: v.split(".")[0] for v in matrix.versions if v.split(".")[0] in majors},
                   **{m: m for m in majors}}
    if cuda is None:
        keep = [r for r in rows if stable_abi or r[0] != "cpu"]
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
        keep = [(key, name, f"{args} --variant") for key, name, args in keep]
    return {"include": [{"name": name, "args": args, "engine": "host" if key == "cpu" else "docker"}
                        for key, name, args in keep]}
